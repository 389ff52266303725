"""A throwaway local Postgres cluster (``wal_level=logical``, loopback only), for tests and the benchmark.

``initdb``, ``pg_ctl`` and ``postgres`` must be on PATH. Postgres refuses to run as root, so when the current
user is root the server runs as the ``postgres`` OS user (its data directory then belongs to that user).
"""

from __future__ import annotations

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

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
