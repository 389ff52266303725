"""Change rows as a Spark user's stream delivers them: the order of the rows of one commit, and how Spark cut
the stream into micro-batches, never change the result or stop the sink; a bad change row fails its micro-batch
naming the batch, the commit, the table and the row's key, or goes to the dead letters."""

from __future__ import annotations

import pyarrow as pa

from connectors.spark import plain, view_sink

SCHEMA = "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)"
VIEWS = {"by_v": "SELECT v, COUNT(*) AS n FROM t GROUP BY v"}


def changes(*rows) -> pa.Table:
    """Change rows (operation, k, v) of table ``t``."""
    ops, ks, vs = zip(*rows, strict=True)
    return pa.table({"operation": list(ops), "k": pa.array(ks, pa.int32()), "v": list(vs)})


def test_an_insert_and_a_later_update_of_one_key_in_one_micro_batch(tmp_path):
    # no commit column: the micro-batch is one commit, whose rows come in no particular order
    sink = view_sink(SCHEMA, VIEWS, tmp_path / "state", shape=plain(table="t"))
    sink.apply(changes(("insert", 1, "a"), ("update_preimage", 1, "a"), ("update_postimage", 1, "b")), 0)
    assert sink.contents("by_v").to_pylist() == [{"v": "b", "n": 1}]
    sink.apply(changes(("update_postimage", 1, "c"), ("insert", 2, "c"), ("update_preimage", 1, "b")), 1)
    assert sorted(sink.contents("by_v").to_pylist(), key=str) == [{"v": "c", "n": 2}]
    sink.close()
