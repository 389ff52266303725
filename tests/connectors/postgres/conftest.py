"""A Postgres cluster (wal_level=logical, loopback only) for the session, and a new database per test."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectors.postgres.cluster import LocalCluster

_names = itertools.count()


@pytest.fixture(scope="session")
def cluster():
    with LocalCluster() as c:
        yield c


@pytest.fixture
def dsn(cluster):
    """A new empty database on the session's cluster."""
    with cluster.database(f"t{next(_names)}") as d:
        yield d


class SidecarProcess:
    """``python -m connectors.postgres.sidecar`` as a child process, its log in a file."""

    def __init__(self, tmp: Path, dsn: str, views: str, *extra: str) -> None:
        self.views = tmp / "views.sql"
        self.views.write_text(views)
        self.log = tmp / "sidecar.log"
        self.args = [
            sys.executable,
            "-m",
            "connectors.postgres.sidecar",
            "--source",
            dsn,
            "--views",
            str(self.views),
        ]
        self.args += list(extra)
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    def start(self) -> SidecarProcess:
        f = open(self.log, "a")  # noqa: SIM115 - the child keeps it open
        f.write(f"--- run {self.runs}\n")
        f.flush()
        self.runs += 1
        self.proc = subprocess.Popen(self.args, stdout=f, stderr=subprocess.STDOUT, cwd=os.getcwd())
        f.close()
        return self

    def text(self) -> str:
        return self.log.read_text()

    def wait_log(self, needle: str, count: int = 1, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.text().count(needle) < count:
            if self.proc.poll() is not None:
                raise AssertionError(f"sidecar exited ({self.proc.returncode}):\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {needle!r} in the sidecar log:\n{self.text()[-3000:]}")
            time.sleep(0.02)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def terminate(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@pytest.fixture
def sidecar_process(tmp_path, dsn):
    procs = []

    def make(views: str, *extra: str) -> SidecarProcess:
        p = SidecarProcess(tmp_path, dsn, views, *extra)
        procs.append(p)
        return p

    yield make
    for p in procs:
        if p.proc is not None and p.proc.poll() is None:
            p.kill()
