"""``python -m connectors.bench postgres --json`` prints the end-to-end figures: the backlog drained
after a load (saturation), the load and the sidecar together, and the paced latency."""

from __future__ import annotations

import json

from connectors.bench import main


def test_bench_json(dsn, capsys):
    assert main(["postgres", "--json", "--dsn", dsn, "--seconds", "1", "--threads", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source_changes"] > 0 and out["changes_per_s_live"] > 0
    assert out["backlog_changes"] > 0 and out["changes_per_s"] > 0  # the backlog drained after the load
    assert 0 < out["latency_p50_ms"] <= out["latency_p99_ms"]
