"""The interactive shell, driven through standard input (in this process and as ``ivm``) and through a
pseudo-terminal (prompts, line editing, history, Ctrl-C)."""

import contextlib
import io
import os
import pty
import select
import subprocess
import sys
import time

from ivm.cli.session import Session
from ivm.cli.shell import Shell


def shell(text: str) -> tuple[str, str]:
    """Feed ``text`` to a non-interactive shell; returns what it printed and its errors."""
    out, err = io.StringIO(), io.StringIO()
    Shell(Session(out=out, err=err), io.StringIO(text), interactive=False).loop()
    return out.getvalue(), err.getvalue()


SETUP = """
CREATE TABLE o (ok INTEGER PRIMARY KEY, ck INTEGER, total DECIMAL(10,2));
CREATE TABLE c (ck INTEGER PRIMARY KEY, name TEXT);
INSERT INTO c VALUES (1, 'ann'), (2, 'bob');
INSERT INTO o VALUES (1, 1, 1.50), (2, 1, 2.25), (3, 2, 3.00);
"""


def test_statements_span_lines_and_results_are_aligned_tables():
    out, err = shell(SETUP + "SELECT name,\n  ck\nFROM c\nORDER BY ck DESC;\n")
    assert err == ""
    assert " name | ck\n------+----\n bob  |  2\n ann  |  1\n(2 rows)\n" in out


def test_error_then_recovery():
    out, err = shell(SETUP + "SELECT nme FROM c;\nSELECT COUNT(*) AS n FROM c;\n")
    assert "ERROR: column 'nme' does not exist\nSELECT nme FROM c\n       ^\n" in err
    assert " n\n---\n 2\n(1 row)" in out  # the shell went on


def test_backslash_d_lists_relations_and_describes_a_view():
    q = "SELECT c.name, SUM(o.total) AS t FROM c JOIN o ON c.ck = o.ck GROUP BY c.name;\n"
    out, err = shell(
        SETUP
        + f"CREATE VIEW per_c AS {q}"
        + f"CREATE VIEW per_c2 AS {q}"
        + "CREATE INDEX o_by_ck ON o (ck);\n"
        + "\\d\n\\d per_c\n\\d o_by_ck\n\\d nothing\n"
    )
    listing = out.split("view per_c\n")[0]
    lines = {line.split("|")[0].strip(): [x.strip() for x in line.split("|")] for line in listing.splitlines()}
    assert lines["c"][1:3] == ["table", "2"]
    assert lines["o"][1:3] == ["table", "3"]
    assert lines["per_c"][1:3] == ["view", "2"]
    assert lines["o_by_ck"][1] == "index"
    assert "(5 rows)" in out
    # per_c built the join's arrangements and its grouped result; per_c2, the same query, reads that result
    arr = out.split("arrangements:")[1].split("index o_by_ck")[0]
    rows = [[x.strip() for x in line.split("|")] for line in arr.splitlines()[2:] if "|" in line]
    assert ["c", "ck", "reused", "c", ""] in rows
    assert any(r[2] == "built" and r[3] == "per_c" and r[4] == "per_c2" for r in rows)
    assert "index o_by_ck on o (ck)" in out
    assert "relation 'nothing' does not exist" in err


def test_explain_marks_reused_arrangement():
    out, _ = shell(
        SETUP + "CREATE INDEX o_by_ck ON o (ck);\nEXPLAIN SELECT ck, SUM(total) FROM o GROUP BY ck;\n"
    )
    # a sum keeps a running state per group: nothing is arranged for it
    assert "Aggregate group=[g0] aggs=[sum(g1)] (running state per group)\n    Project ck AS g0" in out
    assert "ArrangeBy" not in out
    out, _ = shell(SETUP + "EXPLAIN SELECT c.name, o.total FROM c JOIN o ON c.ck = o.ck;\n")
    assert "ArrangeBy key=[ck] (reused)\n" in out  # c by its primary key
    assert "    Scan c" in out


def test_subscribe_prints_diffs_of_a_following_insert():
    out, err = shell(
        SETUP
        + "CREATE VIEW per_c AS SELECT ck, SUM(total) AS s FROM o GROUP BY ck;\n"
        + "SUBSCRIBE TO per_c;\n"
        + "INSERT INTO o VALUES (4, 2, 1.00);\n"
        + "\\unsubscribe\n"
        + "INSERT INTO o VALUES (5, 2, 1.00);\n"
    )
    assert err == ""
    after_insert = out.split("SUBSCRIBE TO per_c\n")[1].split("INSERT 0 1\n", 1)[1]
    assert after_insert.startswith(
        " time | diff | ck |  s\n"
        "------+------+----+------\n"
        "    3 |   -1 |  2 | 3.00\n"
        "    3 |    1 |  2 | 4.00\n"
        "(2 changes to per_c)\n"
        "subscription to per_c ended\n"
        "INSERT 0 1\n"
    )


def test_quit_stops_reading_and_end_of_input_runs_the_last_statement():
    out, _ = shell(SETUP + "\\q\nINSERT INTO c VALUES (3, 'cy');\n")
    assert out.count("INSERT") == 2
    out, _ = shell(SETUP + "SELECT COUNT(*) AS n FROM c")
    assert " n\n---\n 2\n(1 row)" in out


def test_timing_and_help():
    out, _ = shell(SETUP + "\\timing\nSELECT COUNT(*) AS n FROM c;\n\\timing off\n\\?\n")
    assert "Timing is on." in out and "Time: " in out and "Timing is off." in out
    assert "\\d NAME" in out


def test_ivm_command_reads_standard_input():
    env = dict(os.environ, IVM_HISTORY=os.devnull)
    p = subprocess.run(
        [sys.executable, "-m", "ivm.cli"],
        input=SETUP + "SELECT name FROM c ORDER BY name;\nSELEC;\nSELECT ck FROM c ORDER BY ck;\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0
    assert " name\n------\n ann\n bob\n(2 rows)" in p.stdout
    assert " ck\n----\n  1\n  2\n(2 rows)" in p.stdout
    assert p.stderr.startswith("ERROR: ") and "SELEC\n^" in p.stderr
    assert "in-memory" not in p.stdout  # the banner is for terminals only


class Terminal:
    """``ivm`` on a pseudo-terminal: write keystrokes, wait until the screen shows some text."""

    def __init__(self, tmp_path):
        env = dict(os.environ, IVM_HISTORY=str(tmp_path / "history"), TERM="dumb")
        self.pid, self.master = pty.fork()  # the child's controlling terminal: Ctrl-C sends it SIGINT
        if self.pid == 0:
            os.execve(sys.executable, [sys.executable, "-m", "ivm.cli"], env)
        self.seen = ""

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def expect(self, text: str, deadline: float = 60.0) -> str:
        """Read until ``text`` has appeared after what was consumed; returns everything up to it."""
        end = time.monotonic() + deadline
        while text not in self.seen:
            left = end - time.monotonic()
            assert left > 0, f"{text!r} never appeared; screen: {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace").replace("\r\n", "\n")
                except OSError:
                    break
        assert text in self.seen, f"{text!r} never appeared; screen: {self.seen!r}"
        before, _, self.seen = self.seen.partition(text)
        return before + text

    def interrupt(self, text: str) -> None:
        """Press Ctrl-C until ``text`` appears. A SIGINT landing between readline's prompt and its wait for
        input is only noticed with the next key, so the key is pressed again while nothing has happened."""
        for _ in range(30):
            self.send("\x03")
            try:
                self.expect(text, deadline=2.0)
                return
            except AssertionError:
                continue
        self.expect(text)

    def close(self) -> int:
        """Wait for the shell to end (it was told to quit); returns its exit status."""
        with contextlib.suppress(OSError):
            while os.read(self.master, 4096):  # drain until the child closes the terminal
                pass
        _, status = os.waitpid(self.pid, 0)
        os.close(self.master)
        return os.waitstatus_to_exitcode(status)


def test_terminal_prompts_ctrl_c_and_history(tmp_path):
    t = Terminal(tmp_path)
    done = False
    try:
        t.expect("in-memory database; nothing is saved")
        t.expect("ivm> ")
        t.send("CREATE TABLE r (k INTEGER PRIMARY KEY, v INTEGER);\n")
        t.expect("CREATE TABLE\nivm> ")
        t.send("CREATE VIEW s AS\n")
        t.expect("...> ")  # the statement goes on
        t.send("SELECT SUM(v) AS total FROM r;\n")
        t.expect("CREATE VIEW\nivm> ")
        t.send("SELECT nope FROM r;\n")
        t.expect("       ^\nivm> ")
        t.send("SELECT oops")
        t.expect("oops")
        t.interrupt("ivm> ")  # Ctrl-C discards the statement being typed
        t.send("SUBSCRIBE TO s;\n")
        t.expect("SUBSCRIBE TO s\n")
        t.expect("ivm> ")
        t.send("INSERT INTO r VALUES (1, 41), (2, 1);\n")
        t.expect("(2 changes to s)\nivm> ")
        t.interrupt("subscription to s ended\nivm> ")  # at an empty prompt: ends the subscription
        t.send("SELECT total FROM s;\n")
        t.expect("    42\n(1 row)\nivm> ")
        t.send("\\q\n")
        assert t.close() == 0
        done = True
    finally:
        if not done:
            os.kill(t.pid, 9)
    history = (tmp_path / "history").read_text()
    assert "CREATE VIEW s AS SELECT SUM(v) AS total FROM r;" in history  # one entry per statement
