"""REGEXP_REPLACE as PostgreSQL computes it: random patterns of the shapes ivm takes (characters, classes and
bracket expressions quantified greedily, groups, anchors) against a throwaway PostgreSQL's answers (in a
database of the C locale, as ivm's text is) on texts with NULLs, duplicates, newlines and letters beyond ASCII,
with and without the g and i flags and with group references in the replacement; views following random
transactions; and the refusals, with their messages and positions."""

from __future__ import annotations

import random
import shutil

import pytest

import ivm
from ivm.errors import DataError, NotSupportedError, ProgrammingError
from tests.pg import comparable, error_at, literal, postgres, views_follow

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT, c CHAR(12))"
TEXTS = ["abcabc", "aab", "xAxbx", "", "ba\nab", "Ünïcödé ab", "555-1234 999", "  pad  ", "aaaa", "b", None]

ATOMS = ["a", "b", "x", "A", ".", "[ab]", "[^a]", "\\d", "\\s", "\\w", "[[:alpha:]]", "\\.", "ü", "-"]
QUANTIFIERS = ["", "", "", "?", "*", "+", "{2}", "{1,2}", "{0,3}", "{2,}"]
REPLACEMENTS = ["X", "", "<\\&>", "\\1", "[\\2\\1]", "\\\\", "\\q", "\\0", "\\9"]


def _pattern(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        piece = rng.choice(ATOMS) + rng.choice(QUANTIFIERS)
        if rng.random() < 0.25:
            piece = f"({piece})"
        parts.append(piece)
    if rng.random() < 0.15:
        parts.insert(0, "^")
    if rng.random() < 0.15:
        parts.append("$")
    return "".join(parts)


def _required(pattern: str) -> bool:
    """Whether ivm takes ``pattern`` with the g flag (it needs at least one character)."""
    try:
        from sql.patterns import replace_regex

        replace_regex(pattern, False, True)
        return True
    except ivm.Error:
        return False


@pytest.fixture(scope="module")
def pg():
    for conn in postgres(c_locale=True):
        conn.execute(TABLE)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, s, s) for i, s in enumerate(TEXTS)])
        yield conn


@pytest.fixture(scope="module")
def db():
    db = ivm.connect()
    db.execute(TABLE)
    db.cursor().executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, s, s) for i, s in enumerate(TEXTS)])
    return db


def test_random_patterns_replace_as_in_postgresql(pg, db):
    rng = random.Random(5)
    tried = 0
    while tried < 250:
        pattern = _pattern(rng)
        flags = rng.choice(["", "g", "i", "gi", "ig", "ic"])
        if "g" in flags and not _required(pattern):
            continue
        new = rng.choice(REPLACEMENTS)
        column = rng.choice(["s", "s", "c"])
        sql = f"SELECT id, regexp_replace({column}, {literal(pattern)}, {literal(new)}, '{flags}') FROM t"
        want = sorted(pg.execute(sql).fetchall())
        assert sorted(db.execute(sql).fetchall()) == want, sql
        tried += 1


VIEWS = [
    "SELECT id, regexp_replace(s, '[ab]+', '_', 'g') AS r FROM t",
    "SELECT id, regexp_replace(s, '(a)(b?)', '\\2\\1') FROM t",
    "SELECT regexp_replace(s, '\\s+', ' ', 'g') AS r, count(*) FROM t GROUP BY 1",
    "SELECT id FROM t WHERE regexp_replace(c, 'A', '', 'gi') = 'b'",
    "SELECT id, length(regexp_replace(s, '^.', '')) FROM t WHERE id > 2",
]


def _transaction(rng: random.Random) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 3)):
        key = rng.randint(0, 15)
        text = literal(rng.choice(TEXTS))
        kind = rng.random()
        if kind < 0.4:
            out.append(f"INSERT INTO t VALUES ({key}, {text}, {text}) ON CONFLICT (id) DO NOTHING")
        elif kind < 0.6:
            out.append(f"DELETE FROM t WHERE id = {key}")
        else:
            out.append(f"UPDATE t SET s = {text}, c = {text} WHERE id = {key}")
    return out


def test_views_follow_their_table_as_postgresql_answers(pg):
    rng = random.Random(3)
    db = ivm.connect()
    db.execute(TABLE)
    db.cursor().executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, s, s) for i, s in enumerate(TEXTS)])
    views_follow(pg, db, VIEWS, lambda: _transaction(rng), comparable, steps=20)


@pytest.mark.parametrize(
    ("sql", "error", "words", "at"),
    [
        ("SELECT regexp_replace(s, 'a|b', 'x') FROM t", NotSupportedError, "alternation (|)", "'a|b'"),
        ("SELECT regexp_replace(s, '(ab)+', 'x') FROM t", NotSupportedError, "a quantified group", "'(ab)+'"),
        ("SELECT regexp_replace(s, 'a+?', 'x') FROM t", NotSupportedError, "non-greedy quantifiers", "'a+?'"),
        ("SELECT regexp_replace(s, '\\yab', 'x') FROM t", NotSupportedError, "(word boundaries)", "'\\yab'"),
        ("SELECT regexp_replace(s, '(a)\\1', 'x') FROM t", NotSupportedError, "back references", "'(a)\\1'"),
        (
            "SELECT regexp_replace(s, 'a*', 'x', 'g') FROM t",
            NotSupportedError,
            "the g flag and a pattern that matches empty text",
            "'a*'",
        ),
        (
            "SELECT regexp_replace(s, 'a', 'x', 'gz') FROM t",
            DataError,
            'invalid regular expression option: "z"',
            "'gz'",
        ),
        (
            "SELECT regexp_replace(s, 'a', 'x', 'x') FROM t",
            NotSupportedError,
            "flag 'x' is not supported",
            "'x')",
        ),
        ("SELECT regexp_replace(s, 'a', 'x', 2) FROM t", NotSupportedError, "a start or an occurrence", "2"),
        ("SELECT regexp_replace(s, s, 'x') FROM t", NotSupportedError, "needs a constant text here", "s, 'x'"),
        ("SELECT regexp_replace(id, 'a', 'x') FROM t", ProgrammingError, "needs text, got INTEGER", "regexp_"),
        ("SELECT regexp_replace(s, 'a(', 'x') FROM t", DataError, "parentheses () not balanced", "'a('"),
    ],
)
def test_refusals_say_what_and_where(sql, error, words, at):
    db = ivm.connect()
    db.execute(TABLE)
    error_at(db, sql, error, words, at)
