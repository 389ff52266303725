"""``ivm demo`` (what ``make demo`` runs) at a tiny scale factor: data generated from scratch, every query
maintained and shown, the summary printed and the final check against DuckDB passed."""

import io
import os
import subprocess
import sys

from ivm.cli.demo import run_reachability, run_tpch
from tpch.queries import QUERIES


def test_demo_runs_every_query_and_checks_against_duckdb(tmp_path):
    env = dict(os.environ, IVM_TPCH_CACHE=str(tmp_path))  # as from a fresh clone: nothing cached
    p = subprocess.run(
        [sys.executable, "-m", "ivm.cli", "demo", "--sf", "0.01", "--batches", "2", "--orders", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "Traceback" not in p.stderr and "ERROR" not in out
    table = out.split("summary:")[0]
    for q in QUERIES:
        assert f"\n {q}   |" in table, q
    assert "[##############################] 4/4 one order" in out
    assert "one refresh batch (~" in out and "one single-order transaction (~" in out
    assert "memory: " in out and "process RSS" in out
    assert "check: all 22 views equal DuckDB's result on the final data" in out
    assert "\x1b[" not in out  # not a terminal: plain lines


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_demo_redraws_its_table_on_a_terminal():
    out = _Terminal()
    assert run_tpch(0.01, 2, ["q01", "q06"], out, orders=2) == 0
    text = out.getvalue()
    assert text.count("\x1b[") >= 4  # the progress and the table are redrawn in place
    assert text.count(" q06   |") >= 4
    assert "check: all 2 views equal DuckDB's result on the final data" in text


def test_reachability_demonstration_still_available(capsys):
    assert run_reachability(nodes=200, edges=400, updates=200) == 0
    assert "result equals a recomputation from scratch: True" in capsys.readouterr().out
