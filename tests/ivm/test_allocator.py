"""The allocator settings the commands ask for: applied once per process on glibc, left alone when the process
asks; never by creating an engine."""

import os
import platform
import subprocess
import sys

import pytest

PROBE = "from ivm.engine.allocator import tune_allocator; print(tune_allocator())"


def _run(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "IVM_TUNE_MALLOC"))}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the settings are glibc's")
def test_applied_by_default_on_glibc():
    assert _run() == "True"


def test_left_alone_when_asked():
    assert _run(IVM_TUNE_MALLOC="0") == "False"
    assert _run(MALLOC_ARENA_MAX="2") == "False"


def test_not_applied_by_creating_an_engine():
    """A library user's process keeps its own settings: only the commands and benchmarks ask."""
    probe = "import ivm, ivm.engine.allocator as a; ivm.connect().execute('SELECT 1'); print(a._applied)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
