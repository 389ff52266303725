"""The 22 TPC-H queries in one engine arrange each (collection, key) once, and share what they can (read from
the engine and from their EXPLAIN golden files)."""

import collections

import ivm
from sql.logical import Project, Scan, unnamed
from tests.golden import read_golden
from tests.tpch.test_tpch_explain import GOLDEN
from tpch import SCHEMA
from tpch.queries import QUERIES, query


def test_each_collection_and_key_is_arranged_once():
    db = ivm.connect()
    db.execute(SCHEMA)
    for q in QUERIES:
        db.execute(f"CREATE VIEW {q} AS {query(q)}")
    built = collections.Counter()
    reused = collections.Counter()
    for st in db.views.values():
        for plan, key, how in st.used:
            if how != "running":
                (built if how == "built" else reused)[(plan, key)] += 1
    # nothing is built twice: a second use of the same (collection, key), under any column names, is a reuse
    assert max(collections.Counter((unnamed(p), k) for p, k in built.elements()).values()) == 1
    # and the engine holds one trace per registered arrangement (shared ones counted once); the one trace
    # registered twice is a grouped view's result, which is its aggregate's own arrangement by the group
    by_trace = collections.defaultdict(list)
    for (plan, _key), e in db.registry.entries.items():
        by_trace[id(e.arranged.trace)].append(plan)
    twice = [plans for plans in by_trace.values() if len(plans) > 1]
    assert twice and all(len(p) == 2 for p in twice)
    assert all({type(p).__name__ for p in plans} == {"Scan", "Aggregate"} for plans in twice)
    assert all(next(p for p in plans if isinstance(p, Scan)).table in QUERIES for plans in twice)

    # tables' primary-key arrangements serve the joins of many queries, as their EXPLAIN golden files show
    def joins_reusing(table, key):
        found = 0
        for q in QUERIES:
            lines = [line.strip() for line in read_golden(GOLDEN / f"{q}.txt")]
            found += sum(
                a == f"ArrangeBy key=[{key}] (reused)" and b == f"Scan {table}"
                for a, b in zip(lines, lines[1:], strict=False)
            )
        return found

    assert joins_reusing("orders", "o_orderkey") >= 3
    assert joins_reusing("supplier", "s_suppkey") >= 5
    assert joins_reusing("nation", "n_nationkey") >= 5
    assert joins_reusing("customer", "c_custkey") >= 5
    # every scan of lineitem reads its own arrangement (by its primary key); arranged by another key, the wide
    # table is first narrowed to the columns the view reads (see planner.prune), never arranged whole again
    lineitem = sum(n for (p, k), n in reused.items() if isinstance(p, Scan) and p.table == "lineitem")
    assert lineitem >= 10 and {k for (p, k) in reused if isinstance(p, Scan) and p.table == "lineitem"} == {
        (0, 3)
    }
    assert not [k for (p, k) in built if isinstance(p, Scan) and p.table == "lineitem" and k != (0, 3)]
    narrowed = [
        p for (p, k) in built if isinstance(p, Project) and getattr(p.input, "table", None) == "lineitem"
    ]
    assert narrowed and all(len(p.columns) <= 6 for p in narrowed)
