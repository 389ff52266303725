"""Change rows of a micro-batch split into source commits, per table deletions and insertions; wrong change
rows are refused with a message naming what is wrong."""

import pyarrow as pa
import pytest

from connectors.spark import delta_cdf, plain
from connectors.spark._changes import split_commits
from sql.errors import SqlError

TABLES = {"a": ["k", "v"], "b": ["x"]}


def test_delta_cdf_rows_split_by_commit_in_order_with_updates_as_delete_and_insert():
    data = pa.table(
        {
            "k": [1, 2, 1, 1, None, 3],
            "v": ["p", "q", "p", "r", None, "s"],
            "x": [None, None, None, None, 10, None],
            "table": ["a", "a", "a", "a", "b", "a"],
            "_change_type": ["insert", "insert", "update_preimage", "update_postimage", "insert", "delete"],
            "_commit_version": [7, 7, 9, 9, 9, 8],
        }
    )
    values, commits = split_commits(data, delta_cdf(), TABLES, batch_id=0)
    assert values.to_pylist() == [7, 8, 9]
    first, second, third = commits
    assert first.value.as_py() == 7 and not first.deletes
    assert first.inserts["a"].to_pydict() == {"k": [1, 2], "v": ["p", "q"]}
    assert second.deletes["a"].to_pydict() == {"k": [3], "v": ["s"]} and not second.inserts
    assert third.deletes["a"].to_pydict() == {"k": [1], "v": ["p"]}
    assert third.inserts["a"].to_pydict() == {"k": [1], "v": ["r"]}
    assert third.inserts["b"].to_pydict() == {"x": [10]}


def test_plain_rows_without_commit_column_are_one_commit_numbered_by_batch_id():
    data = pa.table({"op": ["insert", "delete"], "x": [1, 2]})
    values, commits = split_commits(data, plain(operation="op", table="b"), TABLES, batch_id=41)
    assert values.to_pylist() == [41]
    assert commits[0].inserts["b"].to_pydict() == {"x": [1]}
    assert commits[0].deletes["b"].to_pydict() == {"x": [2]}


def test_a_commit_is_its_net_effect_whatever_the_order_of_its_rows():
    # key 1 inserted as 'a', updated to 'b', then to 'c'; key 2 inserted and deleted; rows in shuffled order
    ops = ["update_postimage", "insert", "update_preimage", "delete", "update_postimage", "insert"]
    data = pa.table(
        {
            "op": [*ops, "update_preimage"],
            "k": [1, 1, 1, 2, 1, 2, 1],
            "v": ["b", "a", "a", "z", "c", "z", "b"],
        }
    )
    _, commits = split_commits(data, plain(operation="op", table="a"), TABLES, batch_id=3)
    assert not commits[0].deletes  # the commit's net effect: row (1, 'c') is new, nothing else changed
    assert commits[0].inserts["a"].to_pydict() == {"k": [1], "v": ["c"]}


def test_a_row_inserted_twice_in_a_commit_is_inserted_twice():
    data = pa.table({"op": ["insert", "insert", "delete", "insert"], "x": [5, 5, 6, 6]})
    _, commits = split_commits(data, plain(operation="op", table="b"), TABLES, batch_id=0)
    assert commits[0].inserts["b"].to_pydict() == {"x": [5, 5]} and not commits[0].deletes


def test_empty_micro_batch_has_no_commits():
    data = pa.table({"operation": pa.array([], pa.string()), "table": pa.array([], pa.string())})
    values, commits = split_commits(data, plain(), TABLES, batch_id=0)
    assert len(values) == 0 and commits == []


@pytest.mark.parametrize(
    "data, shape, message",
    [
        (pa.table({"k": [1], "v": ["a"], "table": ["a"]}), plain(), "lack the column 'operation'"),
        (
            pa.table({"operation": ["upsert"], "table": ["a"], "k": [1], "v": ["a"]}),
            plain(),
            "unknown operation 'upsert' in column 'operation'",
        ),
        (
            pa.table({"operation": ["insert", None], "table": ["a", "a"], "k": [1, 2], "v": ["a", "b"]}),
            plain(),
            "unknown operation None",
        ),
        (
            pa.table({"operation": ["insert"], "table": ["zz"], "k": [1], "v": ["a"]}),
            plain(),
            "name table 'zz', which does not exist",
        ),
        (
            pa.table({"operation": ["insert"], "table": ["a"], "k": [1]}),
            plain(),
            "change rows of table 'a' lack its column(s) 'v'",
        ),
        (
            pa.table(
                {
                    "operation": ["insert"],
                    "table": ["a"],
                    "k": [1],
                    "v": ["a"],
                    "c": pa.array([None], pa.int64()),
                }
            ),
            plain(commit="c"),
            "NULL in the commit column 'c'",
        ),
        (
            pa.table({"operation": ["insert"], "k": [1], "v": ["a"]}),
            plain(table="nope"),
            "'nope' does not exist",
        ),
        (
            pa.table({"operation": [1], "table": ["a"], "k": [1], "v": ["a"]}),
            plain(),
            "must hold strings, not int64",
        ),
    ],
)
def test_wrong_change_rows_are_refused_with_a_clear_message(data, shape, message):
    with pytest.raises(SqlError) as err:
        split_commits(data, shape, TABLES, batch_id=0)
    assert message in str(err.value)
