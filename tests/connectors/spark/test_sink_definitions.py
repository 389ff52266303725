"""What a sink accepts as views and change rows (Arrow micro-batches, no Spark): view names in any case, kept
as the user spelled them; views in any order, created after those they read; change rows with columns no
table has, refused unless ignored. Each refusal names what is wrong."""

import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.spark import DiffsTo, ParquetContents, delta_cdf, plain, view_sink
from connectors.spark._views import creation_order, reads
from sql.errors import SqlError
from tests.connectors.spark.test_sink import SCHEMA, SHAPE, change_rows, rows

ORDER = pa.table({"o_key": [1, 2, 3], "cust": [7, 7, 8], "total": pa.array([decimal.Decimal("5.00")] * 3)})
ORDER = ORDER.append_column("note", pa.array(["a", "b", "c"]))


def collect():
    got = {}
    return got, DiffsTo(lambda view, diffs, batch_id: got.setdefault(view, []).append(diffs), arrow=True)


def test_view_names_in_any_case_keep_their_spelling(tmp_path):
    views = {
        "ByCust": "SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust",
        "Repeat": "SELECT cust FROM BYCUST WHERE n > 1",  # reads ByCust in another case
    }
    got, diffs_to = collect()
    outputs = [diffs_to, ParquetContents("bycust", tmp_path / "by_cust.parquet")]  # any case here too
    sink = view_sink(SCHEMA, views, tmp_path / "state", shape=SHAPE, outputs=outputs)
    diffs = sink.apply(change_rows("orders", "insert", 1, ORDER), 0)
    assert set(diffs) == set(got) == {"ByCust", "Repeat"}
    assert sorted(rows(sink.contents("ByCust"))) == [(7, 2), (8, 1)]
    assert rows(sink.contents("repeat")) == [(7,)]
    assert pq.read_schema(tmp_path / "by_cust.parquet").metadata[b"ivm.view"] == b"ByCust"
    sink.close()
    sink = view_sink(SCHEMA, views, tmp_path / "state", shape=SHAPE, outputs=outputs)  # a restart
    assert sink.apply(change_rows("orders", "delete", 2, ORDER.slice(0, 1)), 1)["ByCust"].num_rows == 2
    sink.close()


@pytest.mark.parametrize(
    "views, message",
    [
        (
            {"ByCust": "SELECT cust FROM orders", "bycust": "SELECT cust FROM orders"},
            "views 'ByCust' and 'bycust' differ only in case",
        ),
        ({"by cust": "SELECT cust FROM orders"}, "view name 'by cust' is not a SQL identifier"),
        ({"2nd": "SELECT cust FROM orders"}, "view name '2nd' is not a SQL identifier"),
        ({"select": "SELECT cust FROM orders"}, "view name 'select' is not a SQL identifier"),
        ({"v": "SELECT missing FROM orders"}, "view 'v': column 'missing' does not exist"),
    ],
)
def test_wrong_view_names_are_refused_naming_them(tmp_path, views, message):
    with pytest.raises(SqlError, match=message):
        view_sink(SCHEMA, views, tmp_path / "state")
    assert not (tmp_path / "state").exists()


def test_views_may_come_before_the_views_they_read(tmp_path):
    views = {
        "top": "SELECT cust FROM by_cust WHERE n > 1",
        # a CTE named like a view is not that view: no dependency (else a cycle with "twice")
        "once": "WITH twice AS (SELECT cust FROM orders) SELECT DISTINCT cust FROM twice",
        "by_cust": "SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust",
        "twice": "SELECT cust FROM once UNION ALL SELECT cust FROM top",
    }
    assert creation_order(views) == ["by_cust", "top", "once", "twice"]
    sink = view_sink(SCHEMA, views, tmp_path / "state", shape=SHAPE)
    sink.apply(change_rows("orders", "insert", 1, ORDER), 0)
    assert sorted(rows(sink.contents("twice"))) == [(7,), (7,), (8,)]
    sink.close()


def test_views_reading_each_other_in_a_cycle_are_refused():
    views = {
        "a": "SELECT cust FROM b",
        "b": "SELECT cust FROM orders WHERE cust IN (SELECT cust FROM c)",
        "c": "SELECT cust FROM a",
        "d": "SELECT cust FROM orders",
    }
    with pytest.raises(SqlError, match="views read each other in a cycle: a -> b -> c -> a"):
        creation_order(views)
    with pytest.raises(SqlError, match="cycle: s -> s"):
        creation_order({"s": "SELECT cust FROM s"})


def test_reads_finds_tables_in_subqueries_and_not_ctes():
    sql = """WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3)
             SELECT * FROM r JOIN "Orders" o ON true WHERE EXISTS (SELECT 1 FROM c WHERE c.k = o.k)"""
    assert reads(sql) == {"orders", "c"}
    assert reads("SELECT FROM WHERE") == set()  # not parsed: the engine says what is wrong


def test_undeclared_columns_are_refused_unless_ignored(tmp_path):
    batch = change_rows("orders", "insert", 1, ORDER)
    batch = batch.append_column("ingested_at", pa.array([1, 2, 3])).append_column("src", pa.array(["x"] * 3))
    sink = view_sink(SCHEMA, {"n": "SELECT COUNT(*) AS n FROM orders"}, tmp_path / "s1", shape=SHAPE)
    with pytest.raises(SqlError, match=r"carry column\(s\) 'ingested_at', 'src'.*ignore_columns"):
        sink.apply(batch, 0)
    sink.close()
    ignoring = view_sink(
        SCHEMA,
        {"n": "SELECT COUNT(*) AS n FROM orders"},
        tmp_path / "s2",
        shape=SHAPE,
        ignore_columns=["ingested_at", "src"],
    )
    ignoring.apply(batch, 0)
    assert rows(ignoring.contents("n")) == [(3,)]
    ignoring.close()
    # one table's stream: another table's column is not the table's
    one = view_sink(SCHEMA, {"r": "SELECT * FROM customers"}, tmp_path / "s3", shape=plain(table="customers"))
    customers = pa.table({"operation": ["insert"], "c_key": [1], "region": ["x"], "cust": [7]})
    with pytest.raises(SqlError, match=r"carry column\(s\) 'cust'"):
        one.apply(customers, 0)
    one.close()


def test_delta_change_feed_timestamps_are_ignored_without_being_told(tmp_path):
    n = ORDER.num_rows
    batch = ORDER.append_column("_change_type", pa.array(["insert"] * n))
    batch = batch.append_column("_commit_version", pa.array([4] * n, pa.int64()))
    batch = batch.append_column("_commit_timestamp", pa.array([1_700_000_000_000_000] * n, pa.timestamp("us")))
    views = {"n": "SELECT COUNT(*) AS n FROM orders"}
    sink = view_sink(SCHEMA, views, tmp_path / "state", shape=delta_cdf(table="orders"))
    sink.apply(batch, 0)
    assert rows(sink.contents("n")) == [(3,)]
    sink.close()
    guessed = view_sink(SCHEMA, views, tmp_path / "s2")  # the shape found from the columns
    guessed.apply(batch.append_column("table", pa.array(["orders"] * n)), 0)
    assert rows(guessed.contents("n")) == [(3,)]
    guessed.close()
