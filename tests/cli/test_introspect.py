"""Read-only introspection for ``\\d``: relations with row counts and sizes, a view's arrangements and who
shares them, and the engine's time per dataflow."""

import pytest

import ivm
from sql.errors import SqlError


@pytest.fixture()
def db():
    d = ivm.connect()
    d.execute("CREATE TABLE o (ok INTEGER PRIMARY KEY, ck INTEGER, total INTEGER)")
    d.execute("CREATE TABLE c (ck INTEGER PRIMARY KEY, name TEXT)")
    d.execute("INSERT INTO c VALUES (1, 'ann'), (2, 'bob'), (3, 'cy')")
    d.execute("INSERT INTO o VALUES (1, 1, 5), (2, 1, 7), (3, 2, 1), (4, 3, 2)")
    return d


JOIN = "SELECT c.name, SUM(o.total) AS t FROM c JOIN o ON c.ck = o.ck GROUP BY c.name"


def test_relations_count_rows_and_stored_sizes(db):
    db.execute(f"CREATE VIEW a AS {JOIN}")
    db.execute("CREATE INDEX o_by_ck ON o (ck)")
    db.execute("DELETE FROM o WHERE ok = 4")
    rels = {r.name: r for r in db.relations()}
    assert [(r.name, r.kind) for r in db.relations()] == [
        ("c", "table"),
        ("o", "table"),
        ("a", "view"),
        ("o_by_ck", "index"),
    ]
    assert rels["c"].rows == 3 and rels["o"].rows == 3 and rels["a"].rows == 2
    assert rels["o_by_ck"].rows is None
    # o: four inserted rows and one deletion, not yet compacted away or already cancelled
    assert rels["o"].updates >= 3 and rels["o"].bytes > 0
    assert rels["a"].arrangements == 2  # o by ck; the grouped result, which is the view's own
    assert sum(r.updates for r in rels.values()) == db.engine.stored_updates()


def test_arrangements_say_built_reused_and_shared(db):
    db.execute(f"CREATE VIEW a AS {JOIN}")
    db.execute(f"CREATE VIEW b AS {JOIN.replace('SUM', 'MAX')}")
    db.execute(f"CREATE VIEW a2 AS {JOIN}")  # the same query as a: reads a's grouped result as it is
    db.execute(f"CREATE VIEW a3 AS {JOIN.replace('SUM', 'AVG')}")
    a, b, a2, a3 = (db.arrangements(v) for v in ("a", "b", "a2", "a3"))
    assert [(x.how, x.built_by) for x in a2[:-1]] == [("reused", "a")]
    assert ("c", ("ck",), "reused", "c") in [(x.collection, x.key, x.how, x.built_by) for x in a]
    o_by_ck = next(x for x in a if x.collection == "o" and x.key == ("ck",))
    assert (o_by_ck.how, o_by_ck.built_by) == ("built", "a")
    # a sum keeps a running total per group: a arranges its grouped rows nowhere; b's maximum needs them
    # arranged, and a3's average, coming later, reads that arrangement rather than the rows as they flow
    assert not any(x.collection.startswith("Project") for x in a)
    grouped_input = next(x for x in b if x.collection.startswith("Project"))
    assert (grouped_input.how, grouped_input.built_by, grouped_input.shared_with) == ("built", "b", ("a3",))
    assert (grouped_input.collection, "reused") in [(x.collection, x.how) for x in a3]
    assert a[-1].collection == "a" and a[-1].how == "built"  # its own result, last
    assert [x.how for x in b][-2:] == ["built", "built"]  # its grouped result and its own
    with pytest.raises(SqlError, match="view 'nope' does not exist"):
        db.arrangements("nope")


def test_engine_accumulates_step_time_per_dataflow(db):
    db.execute(f"CREATE VIEW a AS {JOIN}")
    before = dict(db.engine.step_seconds)
    db.execute("INSERT INTO o VALUES (9, 2, 3)")
    after = db.engine.step_seconds
    assert after["a"] > before["a"] and after["tables"] > before["tables"]
    db.execute("DROP VIEW a")
    assert "a" not in db.engine.step_seconds  # a dropped dataflow leaves no entry behind
    db.execute("SELECT name FROM c")
    assert set(db.engine.step_seconds) == {"tables"}  # nor do the dataflows of one-off queries
