"""The engine's allocator settings: applied once per process on glibc, left alone when the process asks."""

import os
import platform
import subprocess
import sys

import pytest

PROBE = "import ivm; ivm.Engine(); from ivm.allocator import tune_allocator; print(tune_allocator())"


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
