"""A throwaway local Postgres cluster (``wal_level=logical``, loopback only), for tests and the benchmark.

``initdb``, ``pg_ctl`` and ``postgres`` must be on PATH. Postgres refuses to run as root, so when the current
user is root the server runs as the ``postgres`` OS user (its data directory then belongs to that user).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["LocalCluster"]


class LocalCluster:
    """Start with ``start()`` (or as a context manager); ``dsn`` connects as superuser ``postgres``."""

    def __init__(self, port: int | None = None, settings: dict[str, str] | None = None) -> None:
        self.port = port or _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ivm-pg-"))
        self.data = self.dir / "data"
        self.settings = {
            "wal_level": "logical",
            "max_replication_slots": "20",
            "max_wal_senders": "20",
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.dir}'",
            "fsync": "off",
            "full_page_writes": "off",
            "max_connections": "100",
            **(settings or {}),
        }
        self.running = False

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, args: list[str]) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:
            args = ["runuser", "-u", "postgres", "--", *args]
        return subprocess.run(args, capture_output=True, text=True)

    def start(self) -> LocalCluster:
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        r = self._run(["initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        if r.returncode:
            raise RuntimeError(f"initdb failed: {r.stderr.strip()}")
        with open(self.data / "postgresql.conf", "a") as f:
            for k, v in self.settings.items():
                f.write(f"{k} = {v}\n")
        r = self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "start"])
        if r.returncode:
            log = (self.dir / "log").read_text() if (self.dir / "log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {r.stderr.strip()} {log[-2000:]}")
        self.running = True
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if self.running:
            self._run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"])
            self.running = False
        shutil.rmtree(self.dir, ignore_errors=True)

    @contextlib.contextmanager
    def database(self, name: str, timezone: str | None = None):
        """A new empty database (with ``timezone`` as its default TimeZone); its DSN for the ``with`` block,
        after which it is dropped together with its replication slots."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            c.execute(f"CREATE DATABASE {name}")
            if timezone:
                c.execute(f"ALTER DATABASE {name} SET TimeZone = '{timezone}'")
        try:
            yield self.dsn.replace("dbname=postgres", f"dbname={name}")
        finally:
            with psycopg.connect(self.dsn, autocommit=True) as c:
                for (slot,) in c.execute(
                    "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
                ).fetchall():
                    c.execute(
                        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                        "WHERE slot_name = %s AND active_pid IS NOT NULL",
                        (slot,),
                    )
                    deadline = time.monotonic() + 30
                    while True:
                        try:
                            c.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                            break
                        except psycopg.errors.ObjectInUse:
                            if time.monotonic() > deadline:
                                raise
                            time.sleep(0.05)
                c.execute(f"DROP DATABASE {name} WITH (FORCE)")

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
