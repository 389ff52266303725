"""-0.0 through the sidecar: a source double holding -0 reaches the target as -0, and a SUM whose values are
all -0 is written -0 (AVG of them 0), through changes that move a group between only -0 and a mix. The target
is compared with PostgreSQL's own answer as text, where -0 and 0 differ."""

from __future__ import annotations

import psycopg

from connectors.postgres.workload import bump_marker, wait_for_marker
from tests.connectors.postgres.test_sidecar_cases import MARKER, MARKER_VIEW, running

DDL = MARKER + "CREATE TABLE z (id integer PRIMARY KEY, g integer, x double precision);"
VIEWS = (
    MARKER_VIEW
    + "CREATE MATERIALIZED VIEW sums AS SELECT g, sum(x) AS s, avg(x) AS a FROM z GROUP BY g;\n"
    + "CREATE MATERIALIZED VIEW vals AS SELECT id, x FROM z;\n"
)
# each view's target, and PostgreSQL's answer, as text
TARGET = {"sums": "SELECT g, s::text, a::text FROM ivm.sums", "vals": "SELECT id, x::text FROM ivm.vals"}
SOURCE = {"sums": "SELECT g, sum(x)::text, avg(x)::text FROM z GROUP BY g", "vals": "SELECT id, x::text FROM z"}
STEPS = [
    "INSERT INTO z VALUES (1, 1, '-0'), (2, 1, '-0'), (3, 2, 0), (4, 2, '-0'), (5, 3, NULL)",
    "DELETE FROM z WHERE id = 3",  # group 2: only -0
    "INSERT INTO z VALUES (6, 2, 0)",
    "UPDATE z SET x = '-0' WHERE id = 6",  # a change of sign alone
    "UPDATE z SET x = 0 WHERE id = 1",
    "BEGIN; UPDATE z SET x = '-0' WHERE id = 1; INSERT INTO z VALUES (7, 3, '-0'); COMMIT",
]


def test_negative_zeros_reach_their_targets(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(DDL)
        with running(dsn, VIEWS):
            for step in STEPS:
                c.execute(step)
                wait_for_marker(dsn, bump_marker(dsn), timeout=60)
                for view, query in SOURCE.items():
                    got = sorted(c.execute(TARGET[view]).fetchall(), key=repr)
                    assert got == sorted(c.execute(query).fetchall(), key=repr), (step, view)
        assert ("1", "-0", "0") in {tuple(map(str, r)) for r in c.execute(TARGET["sums"]).fetchall()}
