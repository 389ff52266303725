"""Change rows as a Spark user's stream delivers them: the order of the rows of one commit, and how Spark cut
the stream into micro-batches, never change the result or stop the sink; a bad change row fails its micro-batch
naming the batch, the commit, the table and the row's key, or goes to the dead letters."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.spark import ParquetContents, delta_cdf, plain, view_sink
from sql.errors import SqlError

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


def delta_rows(*rows) -> pa.Table:
    """Delta change feed rows (change type, commit version, k, v) of table ``t``."""
    ops, versions, ks, vs = zip(*rows, strict=True)
    return pa.table(
        {
            "_change_type": list(ops),
            "_commit_version": pa.array(versions, pa.int64()),
            "k": pa.array(ks, pa.int32()),
            "v": list(vs),
        }
    )


def contents(sink) -> list:
    return sorted((r["v"], r["n"]) for r in sink.contents("by_v").to_pylist())


def test_a_commit_cut_across_micro_batches_post_image_first_is_held_until_whole(tmp_path):
    shape = delta_cdf(table="t")
    sink = view_sink(SCHEMA, VIEWS, tmp_path / "state", shape=shape)
    sink.apply(delta_rows(("insert", 1, 1, "a")), 0)
    # commit 2 updates key 1, and Spark's cut leaves its pre-image for the next micro-batch
    sink.apply(delta_rows(("insert", 2, 2, "x"), ("update_postimage", 2, 1, "b")), 1)
    assert contents(sink) == [("a", 1)]  # nothing of commit 2 is visible: it is held
    sink.close()
    sink = view_sink(SCHEMA, VIEWS, tmp_path / "state", shape=shape)  # the held part survives a restart
    assert sink.apply(delta_rows(("insert", 2, 2, "x"), ("update_postimage", 2, 1, "b")), 1) is None
    diffs = sink.apply(delta_rows(("update_preimage", 2, 1, "a"), ("insert", 3, 3, "c")), 2)
    assert contents(sink) == [("b", 1), ("c", 1), ("x", 1)]
    assert sorted(diffs["by_v"].to_pylist(), key=str) == sorted(
        [
            {"v": "a", "n": 1, "time": 2, "diff": -1},
            {"v": "b", "n": 1, "time": 2, "diff": 1},
            {"v": "x", "n": 1, "time": 2, "diff": 1},
            {"v": "c", "n": 1, "time": 3, "diff": 1},
        ],
        key=str,
    )
    sink.close()
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["db", "definition.json"]


def test_a_stream_that_cuts_commits_holds_the_last_commit_of_each_micro_batch(tmp_path):
    shape = plain(table="t", commit="lsn", whole_commits=False)
    sink = view_sink(SCHEMA, VIEWS, tmp_path / "state", shape=shape)
    one = changes(("insert", 1, "a"), ("insert", 2, "a")).append_column("lsn", pa.array([1, 2], pa.int64()))
    sink.apply(one, 0)
    assert contents(sink) == [("a", 1)]  # commit 2 may go on in the next micro-batch
    two = changes(("insert", 3, "b"), ("insert", 4, "c")).append_column("lsn", pa.array([2, 3], pa.int64()))
    sink.apply(two, 1)
    assert contents(sink) == [("a", 2), ("b", 1)]
    with pytest.raises(SqlError, match="whole_commits=False needs a commit column"):
        plain(table="t", whole_commits=False)


def test_a_bad_row_names_micro_batch_commit_table_and_key(tmp_path):
    sink = view_sink(SCHEMA, VIEWS, tmp_path / "state", shape=delta_cdf(table="t"))
    sink.apply(delta_rows(("insert", 1, 1, "a")), 0)
    bad = pa.table(
        {
            "_change_type": ["insert", "insert", "insert"],
            "_commit_version": pa.array([2, 2, 3], pa.int64()),
            "k": pa.array([2, 2**40, 5], pa.int64()),
            "v": ["b", "c", "d"],
        }
    )
    match = r"micro-batch 1, commit 2, table 't', row \(k=1099511627776\) inserted: integer out of range"
    with pytest.raises(SqlError, match=match):
        sink.apply(bad, 1)
    gone = delta_rows(("delete", 2, 7, "q"), ("insert", 3, 5, "d"))
    with pytest.raises(
        SqlError, match=r"micro-batch 1, commit 2, table 't': a deleted row is not in table 't' \(k=7\)"
    ):
        sink.apply(gone, 1)
    assert contents(sink) == [("a", 1)]


def test_dead_letters_take_the_commits_that_cannot_be_applied(tmp_path):
    sink = view_sink(
        SCHEMA, VIEWS, tmp_path / "state", shape=delta_cdf(table="t"), dead_letters=tmp_path / "dead"
    )
    sink.apply(delta_rows(("insert", 1, 1, "a")), 0)
    sink.apply(delta_rows(("insert", 2, 2, "b"), ("delete", 3, 7, "q"), ("insert", 4, 4, "c")), 1)
    assert contents(sink) == [("a", 1), ("b", 1), ("c", 1)]  # commits 2 and 4 applied, 3 set aside
    dead = pq.read_table(tmp_path / "dead" / "batch-000000000001.parquet").to_pylist()
    assert len(dead) == 1 and dead[0]["k"] == 7 and dead[0]["_commit_version"] == 3
    assert dead[0]["_ivm_batch_id"] == 1 and "a deleted row is not in table 't' (k=7)" in dead[0]["_ivm_error"]


def test_a_view_in_error_does_not_stop_the_stream_and_recovers_when_the_row_leaves(tmp_path):
    views = {**VIEWS, "ratio": "SELECT k, 100 / (k - 3) AS x FROM t"}
    out = tmp_path / "ratio.parquet"
    sink = view_sink(
        SCHEMA, views, tmp_path / "state", shape=delta_cdf(table="t"), outputs=[ParquetContents("ratio", out)]
    )
    sink.apply(delta_rows(("insert", 1, 1, "a")), 0)
    sink.apply(delta_rows(("insert", 2, 3, "b")), 1)  # 100 / 0 for k = 3
    assert "division by zero" in sink.view_errors()["ratio"]
    assert contents(sink) == [("a", 1), ("b", 1)]  # the other views go on
    assert pq.read_table(out).to_pylist() == [{"k": 1, "x": -50}]  # the last contents computed whole
    sink.apply(delta_rows(("delete", 3, 3, "b"), ("insert", 3, 4, "c")), 2)
    assert sink.view_errors() == {}
    assert sorted(pq.read_table(out).to_pylist(), key=str) == [{"k": 1, "x": -50}, {"k": 4, "x": 100}]
