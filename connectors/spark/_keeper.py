"""A process per executor that keeps the shards between micro-batches, outliving Spark's Python workers.

Spark stops the Python workers of an executor once it has started or released none for a minute (a fixed
constant of its ``PythonWorkerFactory``), and the shards a worker kept go with it: micro-batches more than a
minute apart would each load the newest checkpoint and replay the batches after it. So a task does not run the
shards in its worker: it hands its job and its rows to the executor's keeper, a Python process of its own (a
session of its own, so that stopping the worker does not stop it), which runs the task in a thread and answers
with the task's report. The first task on an executor starts the keeper; later ones find it by its Unix socket,
in a private folder named after the state path and the executor's address.

A keeper releases the shards of a state once no task of it has come for a minute and for three times the
longest gap between its tasks yet (a stream triggered every ten minutes keeps them from its second gap on; one
that stopped frees the memory), or at once when the state records a later batch than theirs (its tasks ran on
other executors); it ends a minute after it holds none, or when the executor's Python daemon (the parent of
the worker that started it) is gone. A task whose worker dies mid-way is
run to its end by the keeper, whose report is then lost: its stage fails, and the driver runs it again. A keeper
that dies mid-way fails the tasks it was running the same way, and the next task starts another.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Client, Connection, Listener

__all__ = ["run_kept"]

_SOCKET, _KEY, _LOCK = "socket", "key", "lock"
_START_S = 60.0  # how long a new keeper may take to listen
_IDLE_S = 60.0  # how long a keeper that holds no shards waits for a task before it ends


def run_kept(job, task: int, address: str, rows: list) -> bytes:
    """Run ``job``'s task ``task`` (on the executor at ``address``) over ``rows`` in the executor's keeper,
    started if there is none; the task's report."""
    conn = _connect(_folder(job.state, address))
    try:
        conn.send_bytes(pickle.dumps((job, task, address, rows), protocol=pickle.HIGHEST_PROTOCOL))
        try:
            done, said = pickle.loads(conn.recv_bytes())
        except EOFError:
            raise RuntimeError("the shards' keeper stopped while it ran the task") from None
    finally:
        conn.close()
    if not done:
        raise RuntimeError(f"the task failed in the shards' keeper:\n{said}")
    return said


def _folder(state: str, address: str) -> str:
    """The keeper's folder for the shards of ``state`` on the executor at ``address`` (a Unix socket's path
    must stay short)."""
    name = hashlib.sha256(f"{state}\0{address}".encode()).hexdigest()[:20]
    return os.path.join(tempfile.gettempdir(), f"ivm-keepers-{os.getuid()}", name)


def _connect(folder: str) -> Connection:
    found = _try(folder)
    while found is None:
        found = _start(folder)
    return found


def _start(folder: str) -> Connection | None:
    """Start the keeper of ``folder`` unless another task did: a connection to it, or None if the folder
    was removed meanwhile by a keeper ending (try again)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    with _locked(folder) as lock:
        if lock is None:
            return None
        found = _try(folder)
        if found is not None:
            return found
        for name in (_SOCKET, _KEY):  # a keeper that died left them
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, name))
        fd = os.open(os.path.join(folder, _KEY), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        with open(os.path.join(folder, "log"), "ab") as log:
            subprocess.Popen(
                [sys.executable, "-c", _MAIN, folder, str(os.getppid())],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + _START_S
        while time.monotonic() < deadline:
            found = _try(folder)
            if found is not None:
                return found
            time.sleep(0.02)
    raise RuntimeError(f"the shards' keeper did not start in {_START_S:.0f} s (see {folder}/log)")


@contextlib.contextmanager
def _locked(folder: str):
    """``folder``'s lock, held (one task starts the keeper, the others wait for it; a keeper ending removes
    the folder), or None if the folder is gone."""
    path = os.path.join(folder, _LOCK)
    try:
        f = open(path, "a")  # noqa: SIM115 (held for the ``with`` block of the caller)
    except FileNotFoundError:
        yield None
        return
    try:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            same = False
        yield f if same else None
    finally:
        f.close()


def _try(folder: str) -> Connection | None:
    """A connection to the keeper of ``folder``, or None if it is not listening."""
    try:
        with open(os.path.join(folder, _KEY), "rb") as f:
            key = f.read()
        return Client(os.path.join(folder, _SOCKET), "AF_UNIX", authkey=key)
    except (FileNotFoundError, ConnectionRefusedError, EOFError):
        return None


class _Keeper:
    """The keeper's loop: a thread per task; ends when ``parent`` is gone or after ``_IDLE_S`` idle."""

    def __init__(self, folder: str, parent: int) -> None:
        self.folder, self.parent = folder, parent
        self.busy, self.last = 0, time.monotonic()
        self.lock = threading.Lock()

    def serve(self) -> None:
        with open(os.path.join(self.folder, _KEY), "rb") as f:
            key = f.read()
        path = os.path.join(self.folder, _SOCKET)
        listener = Listener(path, "AF_UNIX", authkey=key)
        threading.Thread(target=self._watch, daemon=True).start()
        while True:
            try:
                conn = listener.accept()
            except Exception:  # a peer that failed the handshake
                continue
            with self.lock:
                self.busy += 1
            threading.Thread(target=self._task, args=(conn,), daemon=True).start()

    def _task(self, conn: Connection) -> None:
        try:
            message = conn.recv_bytes()
            try:
                job, task, address, rows = pickle.loads(message)
                answer = (True, job.run_here(task, address, rows))
            except Exception:
                answer = (False, traceback.format_exc())
            with contextlib.suppress(OSError):  # (the worker is gone: Spark runs the stage again)
                conn.send_bytes(pickle.dumps(answer))
        except EOFError:
            pass
        finally:
            conn.close()
            with self.lock:
                self.busy -= 1
                self.last = time.monotonic()

    def _watch(self) -> None:
        from connectors.spark.distributed import release_idle

        while True:
            time.sleep(5.0)
            holding = release_idle()
            with self.lock:
                idle = not self.busy and not holding and time.monotonic() - self.last > _IDLE_S
            if idle or not _alive(self.parent):
                with _locked(self.folder):
                    shutil.rmtree(self.folder, ignore_errors=True)
                os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(folder: str, parent: int) -> None:
    """The keeper process's main: serve the tasks of ``folder`` while process ``parent`` lives."""
    _Keeper(folder, parent).serve()


_MAIN = "import sys; from connectors.spark._keeper import serve; serve(sys.argv[1], int(sys.argv[2]))"
