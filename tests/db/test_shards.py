"""A database in N shards stepping together (``ivm.db.shards``) gives the embedded engine's results exactly,
for any N: random change streams through recursive views (closure, shortest paths with MIN, components) and
grouped, joined, outer-joined, distinct, ranked and subquery views over text, compared after every batch."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ivm
from ivm.db.shards import Shards
from ivm.db.storage import Versions
from tests.sql.test_recursive import MUTUAL, SCHEMA, SIZES, STANDARD, TABLES, _cols, _row, mutual_sql

TEXT_SCHEMA = [
    "CREATE TABLE item (id INTEGER PRIMARY KEY, grp TEXT, price DOUBLE PRECISION, qty INTEGER)",
    "CREATE TABLE tag (item_id INTEGER, label TEXT)",
]
TEXT_VIEWS = {
    "by_grp": "SELECT grp, COUNT(*) AS n, SUM(qty) AS q, MIN(price) AS lo, MAX(grp) AS g FROM item "
    "GROUP BY grp",
    "tagged": "SELECT t.label, i.grp, COUNT(*) AS n FROM item i JOIN tag t ON t.item_id = i.id "
    "GROUP BY t.label, i.grp",
    "untagged": "SELECT i.id, i.grp, t.label FROM item i LEFT JOIN tag t ON t.item_id = i.id",
    "labels": "SELECT DISTINCT label FROM tag",
    "top3": "SELECT id, price FROM item ORDER BY price DESC, id LIMIT 3",
    "total": "SELECT COUNT(*) AS n, SUM(qty) AS q FROM item",
    "with_tag": "SELECT id FROM item WHERE EXISTS (SELECT 1 FROM tag WHERE tag.item_id = item.id)",
    "upper_grp": "SELECT UPPER(grp) AS g, COUNT(*) AS n FROM item WHERE grp LIKE 'g%' GROUP BY UPPER(grp)",
}
GROUPS = ["g1", "g2", "G3", "x", "", None]
LABELS = ["red", "blue", "green", "blue "]


class Both:
    """The same changes made to an embedded database and to one of ``shards`` shards."""

    def __init__(self, shards: int) -> None:
        self.one = ivm.connect()
        self.many = Shards(shards)

    def execute(self, sql: str) -> None:
        self.one.execute(sql)
        self.many.execute(sql)

    def change(self, table: str, cols: list[str], inserts: list[tuple], deletes: list[tuple]) -> None:
        for data, insert in ((deletes, False), (inserts, True)):
            if not data:
                continue
            t = pa.table({c: [r[i] for r in data] for i, c in enumerate(cols)}, schema=self._schema(table))
            if insert:
                self.one.insert_arrow(table, t)
                self.many.insert_arrow(table, t)
            else:
                self.one.delete_arrow(table, t)
                self.many.delete_arrow(table, t)

    def _schema(self, table: str) -> pa.Schema:
        return self.one.execute(f"SELECT * FROM {table} LIMIT 0").fetch_arrow().schema

    def same(self, views) -> None:
        for name in views:
            want = _rows(self.one.execute(f"SELECT * FROM {name}").fetch_arrow())
            got = _rows(self.many.contents(name))
            assert got == want, (name, got, want)


def _rows(t: pa.Table) -> list:
    return sorted(map(repr, zip(*[t.column(i).to_pylist() for i in range(t.num_columns)], strict=True)))


def script(seed: int, batches: int) -> Iterator[tuple]:
    """A random stream of operations over the recursive and text views: ``("execute", sql)``, ``("change",
    table, columns, inserts, deletes)`` and ``("check", views)`` after each batch."""
    rng = random.Random(seed)
    for s in SCHEMA + TEXT_SCHEMA:
        yield "execute", s
    for name, sql in STANDARD.items():
        yield "execute", f"CREATE MATERIALIZED VIEW {name} AS {sql}"
    for name, (defs, final) in MUTUAL.items():
        yield "execute", f"CREATE MATERIALIZED VIEW {name} AS {mutual_sql(defs, final)}"
    for name, sql in TEXT_VIEWS.items():
        yield "execute", f"CREATE MATERIALIZED VIEW {name} AS {sql}"
    views = [*STANDARD, *MUTUAL, *TEXT_VIEWS]
    state: dict[str, list[tuple]] = {t: [] for t in [*TABLES, "item", "tag"]}
    next_id = 0
    for batch in range(batches):
        for t in TABLES if batch == 0 else rng.sample(TABLES, 4):
            inserts = [_row(rng, t) for _ in range(SIZES[t] if batch == 0 else rng.randrange(1, 4))]
            deletes = rng.sample(state[t], min(len(state[t]), rng.randrange(0, 4)))
            for r in deletes:
                state[t].remove(r)
            state[t].extend(inserts)
            yield "change", t, _cols(t), inserts, deletes
        items = []
        for _ in range(rng.randrange(1, 8)):
            next_id += 1
            items.append((next_id, rng.choice(GROUPS), round(rng.uniform(0, 100), 2), rng.randrange(-3, 9)))
        gone = rng.sample(state["item"], min(len(state["item"]), rng.randrange(0, 3)))
        tags = [(rng.choice([r[0] for r in state["item"] + items]), rng.choice(LABELS)) for _ in range(3)]
        untag = rng.sample(state["tag"], min(len(state["tag"]), rng.randrange(0, 3)))
        for r in gone:
            state["item"].remove(r)
        for r in untag:
            state["tag"].remove(r)
        state["item"] += items
        state["tag"] += tags
        yield "change", "item", ["id", "grp", "price", "qty"], items, gone
        yield "change", "tag", ["item_id", "label"], tags, untag
        if batch % 3 == 2:  # a change every shard makes to the rows it holds
            yield "execute", "UPDATE item SET qty = qty + 1 WHERE grp = 'g1'"
            yield "execute", "DELETE FROM e WHERE src = dst"
            state["item"] = [(i, g, p, q + 1) if g == "g1" else (i, g, p, q) for i, g, p, q in state["item"]]
            state["e"] = [(a, b) for a, b in state["e"] if a is None or a != b]
        yield "check", views


def apply(db, op: tuple, schema) -> None:
    """Make operation ``op`` of ``script`` (other than a check) on ``db`` (a connection or ``Shards``);
    ``schema(table)`` is the Arrow schema of a table's rows."""
    if op[0] == "execute":
        db.execute(op[1])
        return
    _, table, cols, inserts, deletes = op
    for data, write in ((deletes, db.delete_arrow), (inserts, db.insert_arrow)):
        if data:
            write(table, pa.table({c: [r[i] for r in data] for i, c in enumerate(cols)}, schema=schema(table)))


def run(shards: int, seed: int, batches: int) -> None:
    both = Both(shards)
    for op in script(seed, batches):
        if op[0] == "check":
            both.same(op[1])
        elif op[0] == "execute":
            both.execute(op[1])
        else:
            both.change(*op[1:])


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_sharded_views_equal_the_embedded_engine(shards):
    run(shards, seed=shards, batches=6)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(shards=st.integers(1, 8), seed=st.integers(0, 10**6))
def test_any_shard_count_gives_the_same_views(shards, seed):
    run(shards, seed, batches=4)


def test_shards_checkpointed_by_step_load_the_newest_recorded_one(tmp_path):
    """Each shard's state saved as numbered checkpoints (``Versions``, no log): new shards load the newest
    numbered at most the last recorded step, checkpoints of later steps are deleted, and the loaded shards go
    on exactly as the ones that never stopped."""
    both = Both(3)
    steps: list[list[tuple]] = [[]]  # the operations of each step, a check ending it
    for op in script(11, 6):
        steps[-1].append(op)
        if op[0] == "check":
            steps.append([])

    def run_step(dbs, step: int) -> None:
        for op in steps[step]:
            if op[0] == "check":
                both.same(op[1])
            else:
                for db in dbs:
                    apply(db, op, both._schema)

    def versions() -> list[Versions]:
        return [Versions(str(tmp_path / f"{i}")) for i in range(3)]

    saving = versions()
    run_step([both.one, both.many], 0)
    run_step([both.one, both.many], 1)
    both.many.save(saving, 1)
    run_step([both.one, both.many], 2)
    both.many.save(saving, 2)  # a step that is not recorded: a restart goes back to step 1
    assert [v.numbers() for v in saving] == [[1, 2]] * 3
    both.many = Shards(3)
    assert both.many.load(versions(), at_most=1) == 1
    assert [v.numbers() for v in saving] == [[1]] * 3
    run_step([both.many], 2)
    for step in range(3, len(steps)):
        run_step([both.one, both.many], step)
    assert Shards(2).load([Versions(str(tmp_path / f"none{i}")) for i in range(2)], at_most=5) is None


def test_shards_whose_newest_checkpoints_differ_are_refused(tmp_path):
    db = Shards(2)
    db.execute("CREATE TABLE t (k INT PRIMARY KEY)")
    db.save([Versions(str(tmp_path / f"{i}")) for i in range(2)], 4)
    with pytest.raises(ivm.OperationalError, match="newest checkpoints are of different steps"):
        Shards(2).load([Versions(str(tmp_path / "0")), Versions(str(tmp_path / "other"))], at_most=4)


def test_a_change_one_shard_rejects_is_rolled_back_in_every_shard():
    both = Both(3)
    both.execute("CREATE TABLE k (id INTEGER PRIMARY KEY, s TEXT)")
    both.execute("CREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS n FROM k")
    rows = pa.table({"id": pa.array(range(10), pa.int32()), "s": [str(i) for i in range(10)]})
    both.many.insert_arrow("k", rows)
    again = pa.table({"id": pa.array([100, 101, 102, 5], pa.int32()), "s": ["a", "b", "c", "dup"]})
    with pytest.raises(ivm.IntegrityError, match="duplicate key"):
        both.many.insert_arrow("k", again)
    assert both.many.contents("n").to_pylist() == [{"n": 10}]
    assert sorted(both.many.contents("k").column("id").to_pylist()) == list(range(10))


def test_the_rows_are_spread_over_the_shards_by_key():
    many = Shards(4)
    many.execute("CREATE TABLE k (id INTEGER PRIMARY KEY, s TEXT)")
    many.execute("CREATE MATERIALIZED VIEW by_s AS SELECT s, COUNT(*) AS n FROM k GROUP BY s")
    rows = pa.table({"id": pa.array(range(400), pa.int32()), "s": [f"s{i % 40}" for i in range(400)]})
    many.insert_arrow("k", rows)
    held = [db.tables["k"].arranged.trace for db in many.shards]
    sizes = [len(t) for t in held]
    assert sum(sizes) == 400 and all(40 <= n <= 160 for n in sizes), sizes
    groups = [len(db.views["by_s"].arranged.trace) for db in many.shards]
    assert sum(groups) == 40 and max(groups) < 40, groups


def test_a_view_in_error_in_one_shard_is_made_in_none():
    many = Shards(3)
    many.execute("CREATE TABLE k (id INTEGER PRIMARY KEY, s TEXT)")
    rows = pa.table({"id": pa.array(range(30), pa.int32()), "s": [str(i) for i in range(29)] + ["x"]})
    many.insert_arrow("k", rows)
    with pytest.raises(ivm.DataError, match='invalid input syntax for type integer: "x"'):
        many.execute("CREATE MATERIALIZED VIEW bad AS SELECT id, CAST(s AS INTEGER) AS n FROM k")
    assert all("bad" not in db.views for db in many.shards)
    many.execute("DELETE FROM k WHERE s = 'x'")
    many.execute("CREATE MATERIALIZED VIEW bad AS SELECT id, CAST(s AS INTEGER) AS n FROM k")
    assert sorted(many.contents("bad").column("n").to_pylist()) == list(range(29))


def test_booleans_with_nulls_cross_between_shards():
    both = Both(3)
    both.execute("CREATE TABLE f (id INT PRIMARY KEY, ok BOOLEAN, n INT)")
    both.execute("CREATE MATERIALIZED VIEW by_ok AS SELECT ok, count(*) AS c, sum(n) AS s FROM f GROUP BY ok")
    both.execute("CREATE MATERIALIZED VIEW outside AS SELECT id FROM f WHERE n NOT IN (SELECT id FROM f)")
    rows = [(i, [True, False, None][i % 3], i % 5 if i % 4 else None) for i in range(30)]
    both.change("f", ["id", "ok", "n"], rows, [])
    both.change("f", ["id", "ok", "n"], [], rows[:7])
    both.same(["by_ok", "outside"])


def _calls(many: Shards, change) -> dict[str, int]:
    """The collective calls the shards make (by kind) while ``change()`` runs."""
    counted = {"gather": 0, "exchange": 0}
    group, real = many.group, many.group._all

    def counting(local, value, combine):
        if local == 0:
            counted[combine.__name__.strip("_")] += 1
        return real(local, value, combine)

    group._all = counting
    try:
        change()
    finally:
        group._all = real
    return counted


def test_dataflows_a_change_does_not_reach_cost_the_shards_no_collective_call():
    calls = []
    for idle in (1, 40):
        many = Shards(2)
        many.execute("CREATE TABLE a (id INT PRIMARY KEY, g INT)")
        many.execute("CREATE TABLE b (id INT PRIMARY KEY, g INT)")
        many.execute("CREATE MATERIALIZED VIEW by_g AS SELECT g, count(*) AS n FROM a GROUP BY g")
        for i in range(idle):
            many.execute(
                f"CREATE MATERIALIZED VIEW b{i} AS SELECT g, sum(id) AS s FROM b WHERE g > {i} GROUP BY g"
            )
        rows = pa.table(
            {"id": pa.array(range(20), pa.int32()), "g": pa.array([i % 3 for i in range(20)], pa.int32())}
        )
        calls.append(_calls(many, lambda: many.insert_arrow("a", rows)))  # noqa: B023
        assert sorted(many.contents("by_g").to_pylist(), key=lambda r: r["g"]) == [
            {"g": 0, "n": 7},
            {"g": 1, "n": 7},
            {"g": 2, "n": 6},
        ]
    assert calls[0] == calls[1], calls
    assert calls[0]["exchange"] >= 1, calls
