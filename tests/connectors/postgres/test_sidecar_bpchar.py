"""A source column of PostgreSQL's ``bpchar`` without a length (``CREATE TABLE t (c bpchar)``): each value keeps
its own trailing spaces, which PostgreSQL shows (in results, CONCAT, LIKE) and ignores everywhere else (in
comparisons, grouping, DISTINCT, joins, keys and length()). ivm holds character(n) values without their
padding and shows them padded to n, and varchar and text values with spaces that count: none of its types
behaves so (``sql.chars``), so a view reading such a column is refused at start, naming the column, instead of
answering inexactly. The table's other columns, and the column as the primary key the sidecar follows rows by,
stay exact through the stream.
"""

from __future__ import annotations

import re

import psycopg
import pytest

from connectors.postgres._types import BPCHAR, UnsupportedType, pg_type
from tests.connectors.postgres.test_sidecar_cases import MARKER, MARKER_VIEW, _sync_and_compare, running
from tests.connectors.postgres.test_sidecar_types import _start_error

DDL = (
    MARKER
    + """
CREATE TABLE b (id integer PRIMARY KEY, c bpchar, c3 char(3), n integer);
CREATE TABLE bk (c bpchar PRIMARY KEY, n integer);
INSERT INTO b VALUES (1, 'a', 'a', 1), (2, 'a  ', 'a  ', 2), (3, 'b ', 'b', 3), (4, ' b', ' b', 4),
  (5, '', '', 5), (6, '  ', NULL, 6), (7, NULL, 'c', 7);
INSERT INTO bk VALUES ('a', 1), ('b  ', 2), (' c', 3);
"""
)

# views that group by, compare and show the column: each refused, naming it
READING = {
    "grouped": "SELECT c, count(*) AS n FROM b GROUP BY c",
    "compared": "SELECT id FROM b WHERE c = 'a '",
    "shown": "SELECT id, c FROM b",
    "measured": "SELECT id, length(c) AS len FROM b",
    "joined": "SELECT b.id, bk.n FROM b JOIN bk ON b.c = bk.c",
}

# views of the same tables that read none of it: exact
OTHERS = {
    "char_grouped": "SELECT c3, count(*) AS n, sum(n) AS total FROM b GROUP BY c3",
    "char_compared": "SELECT id, c3 FROM b WHERE c3 = 'a ' OR c3 LIKE ' %'",
    "by_key": "SELECT n FROM bk",
    "total": "SELECT count(*) AS rows, sum(n) AS total FROM bk",
}
VIEWS = MARKER_VIEW + "".join(f"CREATE MATERIALIZED VIEW {v} AS {q};\n" for v, q in OTHERS.items())

STREAM = [
    "INSERT INTO b VALUES (8, 'z   ', 'z', 8); UPDATE b SET c = 'a    ', c3 = 'x ' WHERE id = 1",
    "UPDATE bk SET n = 20 WHERE c = 'b'",  # the key compared without its trailing spaces
    "DELETE FROM bk WHERE c = 'a   '",
    "INSERT INTO bk VALUES ('a ', 10), ('d  ', 4)",
    "UPDATE bk SET c = 'e' WHERE c = ' c'",  # a key that changes
    "DELETE FROM b WHERE c = 'a'",
]


def test_postgresql_shows_the_spaces_and_compares_without_them(dsn):
    """What a mapping would have to reproduce (and why none does): PostgreSQL's own answers."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(DDL)
        rows = c.execute("SELECT id, c, concat('[', c, ']'), length(c), c = 'a', c LIKE 'a' FROM b ORDER BY id")
        assert rows.fetchall()[:3] == [
            (1, "a", "[a]", 1, True, True),
            (2, "a  ", "[a  ]", 1, True, False),
            (3, "b ", "[b ]", 1, False, False),
        ]
        groups = c.execute("SELECT count(*) FROM b WHERE c IS NOT NULL GROUP BY c ORDER BY 1").fetchall()
        assert groups == [(1,), (1,), (2,), (2,)]  # 'a' with 'a  ', '' with '  '
        shown = c.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attname = 'c'")
        assert {r[0] for r in shown.fetchall()} >= {"bpchar"}


def test_a_bpchar_without_a_length_has_no_engine_type():
    with pytest.raises(UnsupportedType, match="without a length"):
        pg_type(BPCHAR, -1, "bpchar")
    assert pg_type(BPCHAR, 4 + 4, "character(4)").sql == "CHAR(4)"
    assert pg_type(BPCHAR, 1 + 4, "character(1)").sql == "CHAR(1)"


@pytest.mark.parametrize("view", list(READING))
def test_a_view_reading_the_column_is_refused_naming_it(dsn, view):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(DDL)
    error = _start_error(dsn, f"CREATE MATERIALIZED VIEW {view} AS {READING[view]}")
    assert re.search(rf"view '{view}' reads column public\.bk?\.c of type bpchar", error), error
    assert "without a length" in error and "leave the column out of the view" in error, error


def test_the_other_columns_and_the_column_as_a_key_stay_exact(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(DDL)
        with running(dsn, VIEWS):
            _sync_and_compare(dsn, VIEWS)
            for stmt in STREAM:
                c.execute(stmt)
                _sync_and_compare(dsn, VIEWS)
        assert c.execute("SELECT count(*) FROM ivm.by_key").fetchone() == (4,)
