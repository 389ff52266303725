"""Text as users write it, against a real PostgreSQL (a database of the C locale, as ivm's text is): ``E'...'``
strings with escapes, dollar-quoted strings, LIKE and ILIKE with ESCAPE, POSIX regular expressions (``~``,
``~*``, ``!~``, ``!~*``), and string constants where a number is expected. Each is compared as a one-shot
query and, where a view may hold it, as a view maintained through inserts, updates and deletes with NULLs;
what ivm cannot do is refused by name and position."""

from __future__ import annotations

import decimal

import psycopg
import pytest

import ivm
from ivm.errors import DataError, NotSupportedError
from tests.pg import postgres

TABLE = "CREATE TABLE tx (id INTEGER PRIMARY KEY, s TEXT, c CHAR(6), n INTEGER, v DECIMAL(6,2))"
TEXTS = [
    "abc", "ABC", "a\nb", "a\tb", "a\x0bb", "axb", "cat scat cats", "colour color", "xxx", "ab12 cd", "A1_b",
    "é É", "ÉCOLE école", "price: 3.50$", "a]b", "a-b", "", " ", "under_score", "50% off", "back\\slash",
    "a!%b", "it's", None,
]  # fmt: skip
ROWS = [
    (i, t, (t or "")[:6] if t is not None else None, i - 5, decimal.Decimal(i) / 4) for i, t in enumerate(TEXTS)
]
CHANGES = [
    ("INSERT INTO tx VALUES (%s, %s, %s, %s, %s)", (100, "Cat\nscan 42", "ab", 1, decimal.Decimal("1.25"))),
    ("UPDATE tx SET s = %s WHERE id IN (0, 7)", ("under 100% ÉCOLE",)),
    ("UPDATE tx SET s = NULL, c = NULL WHERE id = 6", ()),
    ("DELETE FROM tx WHERE id IN (2, 3, 20)", ()),
    ("INSERT INTO tx VALUES (%s, %s, %s, %s, %s)", (101, None, None, None, None)),
]

# conditions and values whose answers are PostgreSQL's
SAME = [
    # LIKE and ILIKE, with and without ESCAPE
    "s LIKE 'a%'",
    "s LIKE '%!%%' ESCAPE '!'",
    "s LIKE 'a!%b' ESCAPE '!'",
    "s LIKE 'a!!%' ESCAPE '!'",
    "s NOT LIKE '%\\%%'",
    "s LIKE '%\\\\%'",
    "s LIKE '%\\\\%' ESCAPE ''",
    "s LIKE '50%' ESCAPE ''",
    "s LIKE 'a_b' ESCAPE '_'",
    "s LIKE '%$_%' ESCAPE '$'",
    "s ILIKE 'A%' ESCAPE '#'",
    "s NOT ILIKE '%É%' ESCAPE '!'",
    "s ILIKE '%école%'",
    "c LIKE 'abc%'",
    "c LIKE 'abc   '",
    "c ILIKE 'ABC%' ESCAPE '!'",
    # regular expressions
    "s ~ '^a'",
    "s ~ 'c$'",
    "s ~ 'a.b'",
    "s ~ 'a[^x]b'",
    "s ~ '\\d+'",
    "s ~ '\\s'",
    "s ~ '\\w+\\W'",
    "s ~ '\\y(cat)\\y'",
    "s ~ '\\Yat'",
    "s ~ '[[:alpha:]]+[[:digit:]]'",
    "s ~ 'colou?r'",
    "s ~ 'x{2,3}'",
    "s ~ '(ab|cd)+'",
    "s ~ '(?:ab)*c'",
    "s ~ 'a*?b'",
    "s ~ '\\.'",
    "s ~ '[]a]'",
    "s ~ '[^]a]'",
    "s ~ '[a-]'",
    "s ~ '\\$'",
    "s ~ '^$'",
    "s ~ '[[:punct:]]'",
    "s ~ '\\Aab'",
    "s ~ 'c\\Z'",
    "s ~ '\\x41'",
    "s ~ '\\u00e9'",
    "s ~ 'é'",
    "s ~ '[\\d.]+'",
    "s ~ '\\\\'",
    "s ~ '\\t'",
    "s !~ 'a'",
    "s ~* 'ABC'",
    "s ~* '[a-c]'",
    "s ~* 'É'",
    "s ~* 'School'",
    "s !~* 'COLOU?R'",
    "c ~ 'c$'",
    "s ~ NULL",
    "CASE WHEN s ~ '^[0-9]+$' THEN 'digits' WHEN s ~* '^a' THEN 'a' ELSE 'other' END",
    # E'...' and dollar-quoted strings
    "s = E'a\\nb'",
    "s = E'a\\tb' OR s = E'a\\x0bb'",
    "s = E'it\\'s' AND s = $$it's$$",
    "s || E'\\x41\\101\\u00e9\\303\\251' || $q$ $$x$$ $q$",
    "s LIKE $$%'%$$",
    "s ~ $re$\\d$re$",
    # string constants where a number is expected
    "n = '3'",
    "n IN ('3', ' -2 ', '+1')",
    "n + '10'",
    "COALESCE(n, '0')",
    "n BETWEEN '0' AND '5'",
    "v = '1.25'",
    "v = '1.250'",
    "v > '1.251'",
    "CASE WHEN n > 0 THEN n ELSE '-1' END",
    # CONCAT_WS (NULLs left out with their separators; CHAR(n) padded; truth values written t/f) and REPEAT
    "concat_ws(',', s, n, NULL, v, c)",
    "concat_ws('', s, s)",
    "concat_ws(' | ', n > 0, NULL)",
    "concat_ws(NULL, s)",
    "repeat(s, 2)",
    "repeat(c, 3) || '|'",
    "repeat(s, 0)",
    "repeat(s, -1)",
    # OVERLAY and TRANSLATE
    "overlay(s placing 'XY' from 2)",
    "overlay(s placing '' from 3 for 1)",
    "overlay(c placing '-' from 2 for -1)",
    "overlay(s placing 'é' from 10 for 2)",
    "translate(s, 'abc', 'bAé')",
    "translate(s, 'aa ', 'x')",
    "translate(c, 'ab', '')",
    "translate(s, '', 'x')",
    "translate(s, 'éÉ', 'eE')",
]

CONSTANTS = [
    "SELECT E'a\\tb', E'\\x41\\101', E'\\u00e9\\U0001F600', E'\\303\\251', E'it''s \\'quoted\\'', "
    "E'\\q\\\\', E'\\v', E'\\b\\f\\r'",
    "SELECT $$it's$$, $tag$a$$b$tag$, $a$ b $a$, $$$$, $_x$\\n$_x$",
    "SELECT 'abc' LIKE 'a\\%' ESCAPE '', 'a%c' LIKE 'a\\%c', 'A_C' ILIKE 'a#_c' ESCAPE '#'",
    "SELECT 1 WHERE 5 IN ('5', '6')",
    "SELECT 1 + '1', 2.5 * '2.25', '7' > 6",
    "SELECT overlay('Txxxxas' placing 'hom' from 2 for 4), translate('abcab', 'ab', 'ba'), "
    "translate('x', NULL, 'y'), overlay('abc' placing NULL from 1), overlay('abc' placing 'x' from 2 for NULL)",
]

ERRORS = [  # (statement, PostgreSQL's message)
    ("SELECT s LIKE 'a!' ESCAPE '!' FROM tx", "LIKE pattern must not end with escape character"),
    ("SELECT s LIKE 'a\\' FROM tx", "LIKE pattern must not end with escape character"),
    ("SELECT s LIKE 'a' ESCAPE '!!' FROM tx", "invalid escape string"),
    ("SELECT s ~ 'x{256}' FROM tx", "invalid regular expression: invalid repetition count(s)"),
    ("SELECT s ~ '(' FROM tx", "invalid regular expression: parentheses () not balanced"),
    ("SELECT s ~ 'a**' FROM tx", "invalid regular expression: quantifier operand invalid"),
    ("SELECT s ~ '[z-a]' FROM tx", "invalid regular expression: invalid character range"),
    ("SELECT s ~ '\\q' FROM tx", "invalid regular expression: invalid escape \\ sequence"),
    ("SELECT s ~ '[[:foo:]]' FROM tx", "invalid regular expression: invalid character class"),
    ("SELECT s ~ '[a' FROM tx", "invalid regular expression: brackets [] not balanced"),
    ("SELECT E'\\u12'", "invalid Unicode escape"),
    ("SELECT E'\\303'", 'invalid byte sequence for encoding "UTF8": 0xc3'),
    ("SELECT id FROM tx WHERE n = 'x'", 'invalid input syntax for type integer: "x"'),
    ("SELECT id FROM tx WHERE n = '1.5'", 'invalid input syntax for type integer: "1.5"'),
    ("SELECT id FROM tx WHERE n = '3000000000'", 'value "3000000000" is out of range for type integer'),
    ("SELECT id FROM tx WHERE v = 'abc'", 'invalid input syntax for type numeric: "abc"'),
    ("INSERT INTO tx (id, n) VALUES (200, 'x')", 'invalid input syntax for type integer: "x"'),
    ("SELECT n ~ 'a' FROM tx", "operator does not exist: integer ~ unknown"),
    ("SELECT n LIKE 'a' FROM tx", "operator does not exist: integer ~~ unknown"),
]

REFUSED = [  # (statement, words of the message, the text the error points at)
    ("SELECT s ~ '(a)\\1' FROM tx", "back references (\\1) is not supported", "'(a)\\1'"),
    ("SELECT s ~ 'a(?=b)' FROM tx", "lookahead and lookbehind constraints", "'a(?=b)'"),
    ("SELECT s ~ 'a(?!b)' FROM tx", "lookahead and lookbehind constraints", "'a(?!b)'"),
    ("SELECT s ~ '(?<=a)b' FROM tx", "lookahead and lookbehind constraints", "'(?<=a)b'"),
    ("SELECT s ~ '\\mcat' FROM tx", "\\m (the start or end of a word)", "'\\mcat'"),
    ("SELECT s ~ '[[:<:]]cat' FROM tx", "word boundaries", "'[[:<:]]cat'"),
    ("SELECT s ~ '[[.a.]]' FROM tx", "collating elements", "'[[.a.]]'"),
    ("SELECT s ~ '(?i)a' FROM tx", "embedded options", "'(?i)a'"),
    ("SELECT s ~ '***:a' FROM tx", "a director", "'***:a'"),
    ("SELECT s ~ '\\cA' FROM tx", "\\c (control characters)", "'\\cA'"),
    (
        "SELECT s ~* '[[:upper:]]' FROM tx",
        "[:upper:] and [:lower:] in a case-insensitive match",
        "'[[:upper:]]'",
    ),
    ("SELECT s ~* '[0-z]' FROM tx", "a range around letters in a case-insensitive match", "'[0-z]'"),
    ("SELECT s ~ s FROM tx", "~ needs a constant pattern", "s FROM"),
    ("SELECT s SIMILAR TO 'a%' FROM tx", "SIMILAR TO is not supported", "s SIMILAR TO 'a%'"),
    ("SELECT id FROM tx WHERE v = 'NaN'", "the numeric value 'NaN' is not supported", "'NaN'"),
]


@pytest.fixture(scope="module")
def pg():
    for conn in postgres(c_locale=True):
        conn.execute(TABLE)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO tx VALUES (%s, %s, %s, %s, %s)", ROWS)
        yield conn


def _ivm() -> ivm.Connection:
    db = ivm.connect()
    db.execute(TABLE)
    db.cursor().executemany("INSERT INTO tx VALUES (%s, %s, %s, %s, %s)", ROWS)
    return db


@pytest.fixture(scope="module")
def db():
    return _ivm()


def test_one_shot_queries_answer_as_postgresql(pg, db):
    wrong = []
    for sql in [f"SELECT id, {expr} FROM tx ORDER BY id" for expr in SAME] + CONSTANTS:
        want = pg.execute(sql).fetchall()
        try:
            got = db.execute(sql).fetchall()
        except ivm.Error as err:
            got = [f"{type(err).__name__}: {err}"]
        if got != want:
            wrong.append(f"{sql}:\n ivm {got}\n  pg {want}")
    assert not wrong, "\n".join(wrong)


def test_views_stay_postgresql_s_answer_through_changes(pg):
    db = _ivm()
    views = {f"v{i}": f"SELECT id, {expr} AS x FROM tx" for i, expr in enumerate(SAME)}
    views["matching"] = (
        "SELECT s ~* '^[a-c]' AS m, COUNT(*) AS k FROM tx WHERE s !~ '\\d' GROUP BY s ~* '^[a-c]'"
    )
    for name, sql in views.items():
        db.execute(f"CREATE VIEW {name} AS {sql}")
    pg.execute("BEGIN")
    try:
        for change, params in [(None, ()), *CHANGES]:
            if change is not None:
                db.execute(change, params)
                pg.execute(change, params)
            for name, sql in views.items():
                want = sorted(pg.execute(sql).fetchall(), key=repr)
                got = sorted(db.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
                assert got == want, f"after {change!r}, {sql}:\n ivm {got}\n  pg {want}"
    finally:
        pg.execute("ROLLBACK")


@pytest.mark.parametrize(("sql", "message"), ERRORS, ids=[s[:50] for s, _ in ERRORS])
def test_errors_are_postgresql_s(pg, db, sql, message):
    pg.execute("BEGIN")
    try:
        with pytest.raises(psycopg.Error) as theirs:
            pg.execute(sql)
    finally:
        pg.execute("ROLLBACK")
    assert message in str(theirs.value), str(theirs.value)  # the message checked here is PostgreSQL's own
    with pytest.raises(ivm.Error) as ours:
        db.execute(sql)
    assert message in ours.value.message
    if "LIKE" not in sql and "~" not in sql:  # those are positioned at their construct, see below
        assert ours.value.line == 1 and ours.value.col is not None


@pytest.mark.parametrize(("sql", "words", "at"), REFUSED, ids=[r[0][:50] for r in REFUSED])
def test_refusals_name_the_construct_and_its_place(db, sql, words, at):
    with pytest.raises(NotSupportedError) as err:
        db.execute(f"CREATE VIEW w AS {sql}")
    assert words in err.value.message, err.value.message
    start = len("CREATE VIEW w AS ") + sql.index(at) + 1
    assert err.value.line == 1 and start <= err.value.col < start + len(at), (err.value.col, start)
    assert "w" not in db.views


def test_overlay_from_below_one_is_an_error_of_the_texts_it_reads(pg, db):
    """As PostgreSQL's: an error where a text is read, none over NULLs alone."""
    for sql in (
        "SELECT overlay(s placing 'x' from 0) FROM tx",
        "SELECT overlay(s placing 'x' from -1 for 3) FROM tx",
    ):
        with pytest.raises(psycopg.errors.SubstringError):
            pg.execute(sql)
        with pytest.raises(DataError, match="negative substring length not allowed"):
            db.execute(sql)
        nulls = f"{sql} WHERE s IS NULL"
        assert db.execute(nulls).fetchall() == pg.execute(nulls).fetchall() == [(None,)]


def test_a_bad_quoted_number_points_at_itself(db):
    with pytest.raises(DataError) as err:
        db.execute("SELECT id FROM tx WHERE n = 'x'")
    assert (err.value.line, err.value.col) == (1, 29)
    with pytest.raises(DataError) as err:
        db.execute("INSERT INTO tx (id, n) VALUES (300,\n 'y')")
    assert (err.value.line, err.value.col) == (2, 2)
    conn = ivm.connect()
    conn.execute("CREATE TABLE q (k INTEGER, v DECIMAL(6,2))")
    conn.execute("INSERT INTO q (k, v) VALUES ('12', '1.25')")
    conn.execute("UPDATE q SET k = '13' WHERE k = '12'")
    assert conn.execute("SELECT k, v FROM q WHERE v = '1.250'").fetchall() == [(13, decimal.Decimal("1.25"))]


def test_strings_survive_a_restart_of_a_durable_database(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE t (s TEXT)")
    db.execute("CREATE VIEW odd AS SELECT s FROM t WHERE s = E'a\\nb' OR s LIKE $$%'%$$ OR s ~ '^\\d+$'")
    db.execute("INSERT INTO t VALUES (E'a\\nb'), ('it''s'), ('123'), ('x')")
    before = sorted(db.execute("SELECT * FROM odd").fetchall())
    db.close()
    db = ivm.connect(path)
    assert sorted(db.execute("SELECT * FROM odd").fetchall()) == before == [("123",), ("a\nb",), ("it's",)]
    db.execute("INSERT INTO t VALUES ('42')")
    assert ("42",) in db.execute("SELECT * FROM odd").fetchall()
    db.close()
