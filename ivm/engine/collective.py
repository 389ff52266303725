"""Collectives among processes over sockets: how shards in several processes step together.

A ``ShardGroup`` whose shards are spread over processes makes two kinds of collective call, in the same order
in every process: ``all_gather`` (a small message from every process: what each shard would run next, the
rounds of a loop) and ``all_to_all`` (the updates exchanged at the end of a stage, one message per
destination process). A micro-batch makes hundreds of them, so each must cost a round trip, not a scheduler's
poll: ``SocketCollective`` connects every pair of processes, and each call sends every message straight to
the process it is for. Connections are authenticated with a key the processes share
(``multiprocessing.connection``); the only thing the host provides is a way to tell every process where the
others listen (``publish``, one call when the collective starts).

``Rendezvous`` is such a ``publish`` that needs nothing of the host but a process every other can reach (a
Spark driver): the processes of one run meet there under the run's token, and a run that failed is retired
before another starts, so a process left over from it never meets the next run's processes.
"""

from __future__ import annotations

import os
import pickle
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener

__all__ = ["SocketCollective", "Rendezvous", "Meeting"]


def _no_delay(conn: Connection) -> Connection:
    """``conn`` with Nagle's algorithm off. A message over 16 KiB is written in two parts (its length, then
    its bytes), and the second would otherwise wait for the peer's delayed acknowledgement of the first: about
    40 ms per collective call, measured, for messages of 16 to about 64 KiB."""
    dup = socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM)
    try:
        dup.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    finally:
        dup.close()
    return conn


class SocketCollective:
    """Process ``index`` of ``count``; ``publish(text)`` gives every process's text (in process order), and is
    how the processes' addresses reach one another; ``host`` is the address this process listens on
    (``listener``, when it listens already: its address is then published).

    Every pair of processes has a connection of its own (the higher connects to the lower), and each call
    sends every message straight to the process it is for: no process relays the others' traffic, so what one
    process sends and receives per call grows with its own messages, not with the number of processes."""

    def __init__(
        self,
        index: int,
        count: int,
        publish: Callable[[str], list[str]],
        authkey: bytes,
        host: str = "127.0.0.1",
        listener: Listener | None = None,
    ) -> None:
        if not 0 <= index < count:
            raise ValueError(f"process {index} is not one of 0 .. {count - 1}")
        self.index = index
        self.count = count
        self._peers: list[Connection | None] = [None] * count  # a connection to every other process
        if count == 1:
            if listener is not None:
                listener.close()
            publish("")
            return
        if listener is None:
            listener = Listener((host, 0), authkey=authkey)
        said = publish(f"{host} {listener.address[1]}")
        try:
            for q in range(index):  # (each lower process is accepting by now: it connects only lower still)
                address, port = said[q].split()
                conn = _no_delay(Client((address, int(port)), authkey=authkey))
                conn.send_bytes(pickle.dumps(index))
                self._peers[q] = conn
            for _ in range(count - 1 - index):
                conn = _no_delay(listener.accept())
                self._peers[pickle.loads(conn.recv_bytes())] = conn
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()

    def all_gather(self, message: bytes) -> list[bytes]:
        return self.all_to_all([message] * self.count)

    def all_to_all(self, outgoing: list[bytes]) -> list[bytes]:
        if self.count == 1:
            return list(outgoing)
        others = [q for q in range(self.count) if q != self.index]
        if max(len(outgoing[q]) for q in others) <= _INLINE:  # fits the sockets' buffers: cannot block
            for q in others:
                self._peers[q].send_bytes(outgoing[q])
            sender = None
        else:  # sent while receiving, so that two processes sending each other much never wait on each other
            failed: list[BaseException] = []
            sender = threading.Thread(target=self._send, args=(outgoing, others, failed))
            sender.start()
        came = list(outgoing)
        try:
            for q in others:
                came[q] = self._peers[q].recv_bytes()
        finally:
            if sender is not None:
                sender.join()
        if sender is not None and failed:
            raise failed[0]
        return came

    def _send(self, outgoing: list[bytes], others: list[int], failed: list[BaseException]) -> None:
        try:
            for q in others:
                self._peers[q].send_bytes(outgoing[q])
        except BaseException as err:
            failed.append(err)

    def close(self) -> None:
        for conn in self._peers:
            if conn is not None:
                conn.close()
        self._peers = [None] * self.count


_INLINE = 32 * 1024  # a message this size goes out at once: loopback and LAN send buffers are larger


class Rendezvous:
    """Where the ``count`` processes of a run tell one another their texts, in one round trip each: a listener
    (in a thread of this process) on ``host``. ``open(count)`` starts a run and gives its token; a process
    joins with ``Meeting(address, authkey, token, index)``, whose ``publish`` is a ``SocketCollective``'s.
    Each process stays connected until it is through, so ``retire`` can wait for a failed run's processes to be
    gone before the next starts; a process of a retired run is refused."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.authkey = os.urandom(16)
        self._listener = Listener((host, 0), authkey=self.authkey)
        self.address: tuple[str, int] = self._listener.address
        self._lock = threading.Condition()
        self._runs: dict[str, _Run] = {}
        self._closed = False
        threading.Thread(target=self._accept, name="ivm-rendezvous", daemon=True).start()

    def open(self, count: int) -> str:
        """A new run of ``count`` processes: its token."""
        token = os.urandom(8).hex()
        with self._lock:
            self._runs[token] = _Run(count)
        return token

    def retire(self, token: str, wait: float = 0.0) -> bool:
        """End run ``token``: a process joining it later is refused. Waits up to ``wait`` seconds for the
        processes that joined it to be gone; returns whether they are."""
        deadline = time.monotonic() + wait
        with self._lock:
            run = self._runs.get(token)
            if run is None:
                return True
            run.retired = True
            self._lock.notify_all()
            while run.connected and time.monotonic() < deadline:
                self._lock.wait(deadline - time.monotonic())
            gone = not run.connected
            if gone:
                self._runs.pop(token, None)
            return gone

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except Exception:  # a client that failed the handshake, or the listener closed
                if self._closed:
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            try:
                token, index, text = pickle.loads(conn.recv_bytes())
            except (OSError, EOFError):
                return
            with self._lock:
                run = self._runs.get(token)
                if run is None or run.retired or index in run.texts or not 0 <= index < run.count:
                    refused = "retired" if run is None or run.retired else f"process {index} twice or unknown"
                    conn.send_bytes(pickle.dumps(RuntimeError(f"run {token} refused a process: {refused}")))
                    return
                run.texts[index] = text
                run.connected += 1
                self._lock.notify_all()
                while len(run.texts) < run.count and not run.retired and not self._closed:
                    self._lock.wait()
                answer = (
                    [run.texts[i] for i in range(run.count)]
                    if len(run.texts) == run.count
                    else RuntimeError(f"run {token} was retired before all its processes came")
                )
            try:
                conn.send_bytes(pickle.dumps(answer))
                conn.recv_bytes()  # until the process is through (it closes the connection)
            except (OSError, EOFError):
                pass
            finally:
                with self._lock:
                    run.connected -= 1
                    if run.retired and not run.connected:
                        self._runs.pop(token, None)
                    self._lock.notify_all()


class _Run:
    def __init__(self, count: int) -> None:
        self.count = count
        self.texts: dict[int, str] = {}
        self.connected = 0
        self.retired = False


class Meeting:
    """Process ``index``'s part in run ``token`` of the ``Rendezvous`` at ``address``: ``publish`` (once) gives
    every process's text; ``close`` when the process is through with the run."""

    def __init__(self, address: tuple[str, int], authkey: bytes, token: str, index: int) -> None:
        self.token, self.index = token, index
        self._conn = Client(tuple(address), authkey=authkey)

    def publish(self, text: str) -> list[str]:
        self._conn.send_bytes(pickle.dumps((self.token, self.index, text)))
        answer = pickle.loads(self._conn.recv_bytes())
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        self._conn.close()
