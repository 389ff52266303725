"""``ivm run`` on the scripts in ``scripts/``: output (stdout and stderr as one stream) and exit status equal
the ``.out`` file beside each script. The first line of a script gives the command line (``-- ivm run ...``).

Set ``IVM_UPDATE_EXPECTED=1`` to rewrite the expected files after a deliberate change of output.
"""

import contextlib
import io
import os
import shlex
from pathlib import Path

import pytest

from ivm.cli import main

SCRIPTS = Path(__file__).parent / "scripts"


def run(args: list[str]) -> tuple[int, str]:
    """``ivm`` with ``args`` in this process: exit status and everything it printed, in order."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        status = main(args)
    return status, buf.getvalue()


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.sql")))
def test_script_output(script, monkeypatch):
    monkeypatch.chdir(SCRIPTS)
    first = (SCRIPTS / script).read_text().split("\n", 1)[0]
    assert first.startswith("-- ivm run"), "the first line gives the command"
    args = shlex.split(first.removeprefix("-- ivm "))
    status, out = run([*args, script])
    got = out + f"(exit status {status})\n"
    expected = SCRIPTS / script.replace(".sql", ".out")
    if os.environ.get("IVM_UPDATE_EXPECTED"):
        expected.write_text(got)
    assert got == expected.read_text()
