"""The ``ivm`` command line: dispatch, databases by name, ``ivm run`` reading stdin, missing files, and a
subscribing script that follows changes until interrupted."""

import contextlib
import io
import os
import select
import signal
import subprocess
import sys
import time

from ivm.cli import COMMANDS, main


def run(args: list[str], stdin: str = "") -> tuple[int, str]:
    buf = io.StringIO()
    old = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            status = main(args)
    finally:
        sys.stdin = old
    return status, buf.getvalue()


def test_help_lists_every_command():
    status, out = run(["--help"])
    assert status == 0
    for name in ("shell", "run", "demo", "bench", "sidecar"):
        assert f"  {name} " in out
    assert COMMANDS["sidecar"][0] == "connectors.postgres.sidecar"


def test_a_database_directory_keeps_what_the_shell_and_scripts_did(tmp_path):
    where = str(tmp_path / "mydb")
    status, out = run([where], "CREATE TABLE t (a INTEGER);\nINSERT INTO t VALUES (1), (2);\n")
    assert status == 0
    script = tmp_path / "more.sql"
    script.write_text("CREATE VIEW s AS SELECT sum(a) AS total FROM t;\nINSERT INTO t VALUES (3);\n")
    status, out = run(["run", "--database", where, str(script)])
    assert status == 0, out
    status, out = run([where], "SELECT total FROM s;\n")
    assert status == 0 and " 6\n" in out
    (tmp_path / "mydb" / "data").rename(tmp_path / "elsewhere")
    status, out = run([where], "SELECT 1;\n")
    assert status == 2 and f"cannot open database {where!r}" in out and "cannot read" in out
    status, out = run(["script.sql"])
    assert status == 2 and "to run a script: ivm run script.sql" in out


def test_run_reads_stdin_and_reports_unreadable_files(tmp_path):
    script = "CREATE TABLE t (a INTEGER);\nINSERT INTO t VALUES (1);\nSELECT a FROM t;\n"
    status, out = run(["run", "-"], script)
    assert status == 0 and out.endswith(" a\n---\n 1\n(1 row)\n")
    status, out = run(["run", str(tmp_path / "absent.sql")])
    assert status == 1 and "ERROR: cannot read" in out
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT * FROM nowhere;\n")
    good = tmp_path / "good.sql"
    good.write_text("CREATE TABLE t (a INTEGER);\n")
    status, out = run(["run", str(bad), str(good)])
    assert status == 1 and "CREATE TABLE" not in out  # stopped at the first error
    status, out = run(["run", "--keep-going", str(bad), str(good)])
    assert status == 1 and "CREATE TABLE" in out  # ran everything, failed at the end


def test_subscribing_script_follows_until_interrupted(tmp_path):
    script = tmp_path / "follow.sql"
    script.write_text(
        "CREATE TABLE t (a INTEGER);\nCREATE VIEW n AS SELECT a, COUNT(*) AS n FROM t GROUP BY a;\n"
        "INSERT INTO t VALUES (1);\nSUBSCRIBE TO n;\nINSERT INTO t VALUES (1), (2);\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "ivm.cli", "run", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        seen = ""
        deadline = time.monotonic() + 60
        while "Ctrl-C to stop" not in seen:  # the script is done; the subscription goes on
            assert time.monotonic() < deadline, seen
            if select.select([p.stdout], [], [], 1)[0]:
                seen += os.read(p.stdout.fileno(), 4096).decode()
        assert p.poll() is None
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    out = seen + rest
    assert p.returncode == 0
    assert "    2 |   -1 | 1 | 1\n    2 |    1 | 1 | 2\n    2 |    1 | 2 | 1\n(3 changes to n)" in out
    assert out.rstrip().endswith("subscription to n ended")
