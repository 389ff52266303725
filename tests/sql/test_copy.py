"""``ivm.db.copying.read_copy`` against a real PostgreSQL: the same table, options and file bytes go to
PostgreSQL's ``COPY ... FROM STDIN`` and to ``read_copy``; both must hold the same rows, or both must fail
on the same file line and column with PostgreSQL's message. Parquet, options PostgreSQL lacks and file
errors are checked on ivm's side alone."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot

from ivm.db.arrow import arrow_type
from ivm.db.copying import read_copy
from ivm.errors import DataError, NotSupportedError, OperationalError, ProgrammingError
from sql.catalog import Table
from sql.logical import Column
from sql.types import from_sqlglot
from tests.pg import postgres

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")


@pytest.fixture(scope="module")
def pg():
    yield from postgres()


def _table(ddl: str) -> Table:
    create = sqlglot.parse_one(f"CREATE TABLE t ({ddl})", dialect="postgres")
    cols = [Column(d.name, from_sqlglot(d.args["kind"])) for d in create.this.expressions]
    return Table("t", tuple(cols))


_created: dict[int, str] = {}


def _pg_copy(conn, ddl: str, opts: str, data: bytes, columns: str = ""):
    """PostgreSQL's rows after the COPY, or its error."""
    if _created.get(id(conn)) == ddl:
        conn.execute("DELETE FROM t")
    else:
        conn.execute("DROP TABLE IF EXISTS t")
        conn.execute(f"CREATE TABLE t ({ddl})")
        _created[id(conn)] = ddl
    try:
        with conn.cursor().copy(f"COPY t {columns} FROM STDIN {opts}") as cp:
            cp.write(data)
    except psycopg.Error as err:
        return err
    names = columns.strip("()") or ", ".join(c.name for c in _table(ddl).columns)
    return conn.execute(f"SELECT {names} FROM t").fetchall()


def _ivm_copy(
    tmp_path, ddl: str, opts: str, data: bytes, columns: str = "", name: str = "data.txt"
) -> pa.Table:
    path = tmp_path / name
    path.write_bytes(data)
    stmt = sqlglot.parse_one(f"COPY t {columns} FROM '{path}' {opts}", dialect="postgres")
    return read_copy(stmt, _table(ddl))


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _agree(pg, tmp_path, ddl: str, opts: str, data: bytes, columns: str = "", expected=None) -> list[tuple]:
    """Both load the file; the rows are the same, value for value and type for type."""
    expected = _pg_copy(pg, ddl, opts, data, columns) if expected is None else expected
    assert not isinstance(expected, Exception), f"PostgreSQL refused it: {expected}"
    got = _ivm_copy(tmp_path, ddl, opts, data, columns)
    table = _table(ddl)
    order = columns.strip("()").replace(" ", "").split(",") if columns else [c.name for c in table.columns]
    wanted = [next(c for c in table.columns if c.name == n) for n in order]
    assert got.schema.names == [c.name for c in wanted]
    assert got.schema.types == [arrow_type(c.type) for c in wanted]
    rows = [tuple(r.values()) for r in got.to_pylist()]
    assert len(rows) == len(expected), (rows, expected)
    for mine, theirs in zip(rows, expected, strict=True):
        assert all(_same(a, b) for a, b in zip(mine, theirs, strict=True)), (mine, theirs)
    return rows


def _both_fail(pg, tmp_path, ddl: str, opts: str, data: bytes, columns: str = "", expected=None) -> DataError:
    """Both refuse the file: ivm with a DataError naming PostgreSQL's line and column, then its message."""
    expected = _pg_copy(pg, ddl, opts, data, columns) if expected is None else expected
    assert isinstance(expected, psycopg.Error), f"PostgreSQL loaded it: {expected}"
    where = re.match(r"COPY t, line \d+(, column \w+)?", expected.diag.context or "")
    assert where is not None, expected.diag.context
    with pytest.raises(DataError) as info:
        _ivm_copy(tmp_path, ddl, opts, data, columns)
    assert str(info.value).startswith(f"{where.group(0)}: {expected.diag.message_primary}")
    return info.value


CSV = "(FORMAT csv)"
TEXT2 = "a text, b text"

AGREE = [
    ("text looks like numbers", TEXT2, "", b"007\t1e3\n 5 \t-0\n+1\t0x1F\n"),
    ("csv text looks like numbers", TEXT2, CSV, b'007,1e3\n" 5 ",00.10\n'),
    (
        "exact decimals",
        "a numeric(18,8), b numeric(5,2)",
        CSV,
        b"1234567890.12345678,999.994\n-0.000000005,-0.005\n  12.5  ,1.5e1\n1e-8,.5\n0.000000004999,5.\n"
        b"-1234567890.123456785,0\n",
    ),
    ("integers", "a bigint, b bigint", "", b"9223372036854775807\t-9223372036854775808\n +42 \t-007\n"),
    ("csv nulls", TEXT2, CSV, b'a,\n,""\n"",b\n'),
    ("csv custom null", TEXT2, "(FORMAT csv, NULL 'NA')", b'NA,"NA"\n,NAx\n'),
    ("text nulls", TEXT2, "", b"\\N\t\\\\N\n\tN\n"),
    ("text empty null", TEXT2, "(NULL '')", b"\tb\na\t\n"),
    ("text custom null", TEXT2, "(NULL 'x')", b"x\t\\x\n"),
    ("csv doubled quotes", TEXT2, CSV, b'"a""b",""""\n"x,y","""q"""\n'),
    ("csv quotes inside a field", TEXT2, CSV, b'ab"c,d"e,f\n "a" ,b\n'),
    ("csv escape", TEXT2, "(FORMAT csv, ESCAPE '\\')", b'"a\\"b\\\\c\\d",x\n"\\\\",\\y\n'),
    ("csv quote", TEXT2, "(FORMAT csv, QUOTE '''')", b"'a,b','it''s'\n"),
    ("csv delimiter", TEXT2, "(FORMAT csv, DELIMITER '|')", b'a|"b|c"\n'),
    ("csv tab delimiter", TEXT2, "(FORMAT csv, DELIMITER E'\\t')", b'a\t"b\tc"\n'),
    ("text delimiter", TEXT2, "(DELIMITER '|')", b"a|b\nc\\|d|e\n"),
    ("text delimiter consumed by hex", "a text", "(DELIMITER 'A')", b"\\x4A5\n"),
    ("text escapes", TEXT2, "", b"\\t\\n\\r\\b\\f\\v\\\\\\q\t\\101\\x41\\x4g\\xg\\0101\n"),
    ("text backslash newline", TEXT2, "", b"a\\\nb\tc\\\r\n"),
    ("text escaped utf8", TEXT2, "", b"\\xc3\\xa9\t\\303\\251\n"),
    ("csv header", TEXT2, "(FORMAT csv, HEADER)", b"x,y\na,b\n"),
    ("csv header true", TEXT2, "WITH (FORMAT csv, HEADER true)", b"x\na,b\n"),
    ("csv header on", TEXT2, "(FORMAT csv, HEADER ON)", b"x\na,b\n"),
    ("csv header 1", TEXT2, "(FORMAT csv, HEADER 1)", b"x\na,b\n"),
    ("csv header false", TEXT2, "(FORMAT csv, HEADER false)", b"x,y\na,b\n"),
    ("csv header 0", TEXT2, "(FORMAT csv, HEADER 0)", b"x,y\n"),
    ("csv header match", TEXT2, "(FORMAT csv, HEADER match)", b'a,"b"\nx,y\n'),
    ("text header match", TEXT2, "(HEADER match)", b"\\x61\tb\nx\ty\n"),
    ("header only", TEXT2, "(FORMAT csv, HEADER)", b"a,b"),
    ("header of a multi-line record", TEXT2, "(FORMAT csv, HEADER)", b'"x\ny",z\na,b\n'),
    ("csv quoted newlines", "a bigint, b text", CSV, b'1,"x\ny"\n2,"p\r\nq"\n3,""\n'),
    ("crlf", TEXT2, CSV, b'a,b\r\n"c\r\nd",e\r\n'),
    ("cr", TEXT2, "", b"a\tb\rc\td\r"),
    ("no final newline", TEXT2, "", b"a\tb\nc\td"),
    ("empty file", TEXT2, CSV, b""),
    ("empty lines", "a text", "", b"a\n\n\nb\n"),
    ("csv empty line is null", "a bigint", CSV, b"1\n\n"),
    ("text end marker", TEXT2, "", b"a\tb\n\\.\nnot\tread\n"),
    ("text end marker after data", TEXT2, "", b"a\tb\nc\td\\.\nnot\tread\n"),
    ("csv end marker", TEXT2, CSV, b"a,b\n\\.\nnot,read\n"),
    ("csv end marker is data", TEXT2, CSV, b'\\.x,b\n"\\.",c\n'),
    ("csv end marker crlf", TEXT2, CSV, b"a,b\r\n\\.\r\nnot,read\r\n"),
    ("booleans", "a boolean, b boolean, c boolean", CSV, b" TrU ,of,1\nf,YES,n\nt,false,0\non,off,\n"),
    (
        "dates",
        "a date, b date",
        CSV,
        b"2024-01-02,20240229\n 2024-1-2 ,epoch\n0001-01-01,9999-12-31\n2024-01-02 03:04,\n",
    ),
    (
        "timestamps",
        "a timestamp, b timestamp",
        CSV,
        b"2024-01-02 03:04:05.123456,2024-01-02T03:04\n2024-01-02,2024-01-02 24:00:00\n"
        b"2024-01-02 23:59:59.9999995,2024-01-02 03:04:05+02\n"
        b"2024-01-02 03:04:05.0000015,2024-01-02 03:04:05 Z\n"
        b"1969-12-31 23:59:59.999999,2024-12-31 23:59:60\n",
    ),
    (
        "floats",
        "a double precision, b double precision",
        CSV,
        b"NaN,Infinity\n-Infinity,inf\n 1.5 ,-0\n1e-310,1.7976931348623157e308\n0x1.8p1,.5\n0.1,nan\n",
    ),
    ("unicode", TEXT2, CSV, '"é,ü","€😀"\nΩ,"日本"\n'.encode()),
    ("unicode text format", TEXT2, "", "é\tü€😀\n".encode()),
    ("column list", "a bigint, b text", "", b"x\t1\ny\t2\n", "(b, a)"),
    ("column subset", "a bigint, b text", CSV, b"x\n", "(b)"),
    ("column list header match", "a bigint, b text", "(FORMAT csv, HEADER match)", b"b,a\nx,1\n", "(b, a)"),
    ("old style csv header", TEXT2, "CSV HEADER", b"x\na,b\n"),
    ("encoding utf8", TEXT2, "(FORMAT csv, ENCODING 'utf-8')", b"a,b\n"),
    ("unicode delimiter escape", TEXT2, "(DELIMITER U&'\\0009')", b"a\tb\n"),
]


@pytest.mark.parametrize(
    ("ddl", "opts", "data", "columns"),
    [c[1:] + (("",) * (5 - len(c))) for c in AGREE],
    ids=[c[0] for c in AGREE],
)
def test_same_rows_as_postgres(pg, tmp_path, ddl, opts, data, columns):
    _agree(pg, tmp_path, ddl, opts, data, columns)


def test_text_keeps_its_bytes_and_decimals_their_digits(pg, tmp_path):
    rows = _agree(
        pg, tmp_path, "a text, price numeric(18,8)", CSV, b"007,1234567890.12345678\n1e3,0.00000001\n"
    )
    assert rows == [("007", decimal.Decimal("1234567890.12345678")), ("1e3", decimal.Decimal("0.00000001"))]


FAIL = [
    (
        "bad numeric",
        "name text, price numeric(10,2)",
        "(FORMAT csv, HEADER)",
        b"name,price\nx,1.5\ny,abc\n",
        "",
    ),
    ("numeric overflow", "a numeric(5,2)", "", b"1\n999.995\n", ""),
    ("numeric infinity", "a numeric(5,2)", "", b"-inf\n", ""),
    ("numeric huge exponent", "a numeric(5,2)", "", b"1e2147483647\n", ""),
    ("numeric lone point", "a numeric(5,2)", "", b".\n", ""),
    ("bigint out of range", "a bigint", "", b"1\n9223372036854775808\n", ""),
    ("bigint overflow before junk", "a bigint", "", b"99999999999999999999x\n", ""),
    ("bigint empty", "a bigint", "", b"\n", ""),
    ("bigint junk", "a bigint", CSV, b"1\n2 x\n", ""),
    ("csv quoted empty is not null", "a bigint", CSV, b'1\n""\n', ""),
    ("boolean", "a boolean", "", b"t\no\n", ""),
    ("date syntax", "a date", "", b"2024-01-02\nyesterday-ish\n", ""),
    ("date out of range", "a date", "", b"2023-02-29\n", ""),
    ("date year zero", "a date", "", b"0000-01-01\n", ""),
    ("timestamp hour", "a timestamp", "", b"2024-01-02 25:00:00\n", ""),
    ("timestamp after 24:00", "a timestamp", "", b"2024-01-02 24:00:00.000001\n", ""),
    ("timestamp zone", "a timestamp", "", b"2024-01-02 03:04:05-16\n", ""),
    ("timestamp range", "a timestamp", "", b"294277-01-01\n", ""),
    ("float syntax", "a double precision", "", b"1e\n", ""),
    ("float overflow", "a double precision", "", b"1e400\n", ""),
    ("float underflow", "a double precision", "", b"1e-400\n", ""),
    ("extra data", "a bigint, b bigint", "", b"1\t2\n3\t4\n5\t6\n7\t8\t9\n", ""),
    ("missing data", "a bigint, b bigint", CSV, b"1,2\n3\n", ""),
    ("empty line missing data", "a bigint, b bigint", CSV, b"1,2\n\n", ""),
    ("bad value before missing data", "a bigint, b bigint", "", b"1\t2\nx\n", ""),
    ("bad value before extra data", "a bigint, b bigint", "", b"1\tx\n1\t2\t3\n", ""),
    ("extra data before bad value", "a bigint, b bigint", "", b"1\t2\t3\nx\t1\n", ""),
    ("first column first", "a bigint, b bigint", "", b"1\tx\ny\t2\n", ""),
    ("later column same line", "a bigint, b bigint", "", b"1\t2\n3\tx\n", ""),
    ("line counts quoted newlines", "a bigint, b text", CSV, b'1,"x\ny"\n2,"p\nq"\nzz,w\n', ""),
    ("first record newlines not counted", "a bigint, b text", CSV, b'1,"x\ny"\nzz,w\n', ""),
    ("crlf quoted newlines", "a bigint, b text", CSV, b'1,"x\r\ny"\r\n2,"p\r\nq"\r\nzz,w\r\n', ""),
    ("unterminated quote", "a bigint, b text", CSV, b'1,a\n2,"p\nq\n', ""),
    ("unterminated quote in header", TEXT2, "(FORMAT csv, HEADER match)", b'a,"b\nx,y\n', ""),
    ("invalid utf8", TEXT2, "", b"a\tb\nc\xc3\x28\td\n", ""),
    ("invalid utf8 in quoted field", TEXT2, CSV, b'a,b\n"x\ny",c\n"z\xff",d\n', ""),
    ("zero byte", TEXT2, "", b"a\x00b\tc\n", ""),
    ("escaped invalid utf8", TEXT2, "", b"a\tb\n\\xff\tc\n", ""),
    ("escaped zero byte", TEXT2, "", b"a\\0\tb\n", ""),
    ("carriage return in lf file", TEXT2, "", b"a\tb\nc\td\r\n", ""),
    ("newline in crlf file", TEXT2, CSV, b"a,b\r\nc,d\n", ""),
    ("newline in cr file", TEXT2, "", b"a\tb\rc\td\n", ""),
    ("end marker corrupt", TEXT2, "", b"a\tb\nc\\.x\n", ""),
    ("end marker at eof", TEXT2, "", b"a\tb\n\\.", ""),
    ("end marker newline style", TEXT2, "", b"a\tb\r\n\\.\n", ""),
    ("csv end marker newline style", TEXT2, CSV, b"a,b\n\\.\r\n", ""),
    ("header mismatch", TEXT2, "(FORMAT csv, HEADER match)", b"a,c\nx,y\n", ""),
    ("header field count", TEXT2, "(FORMAT csv, HEADER match)", b"a\nx,y\n", ""),
    ("header null", TEXT2, "(HEADER match)", b"a\t\\N\nx\ty\n", ""),
    ("header match of an empty file", TEXT2, "(FORMAT csv, HEADER match)", b"", ""),
    ("error after header counts it", "a bigint", "(HEADER)", b"a\n1\nx\n", ""),
]


@pytest.mark.parametrize(("ddl", "opts", "data", "columns"), [c[1:] for c in FAIL], ids=[c[0] for c in FAIL])
def test_same_errors_as_postgres(pg, tmp_path, ddl, opts, data, columns):
    _both_fail(pg, tmp_path, ddl, opts, data, columns)


def test_error_message_names_line_and_column(pg, tmp_path):
    err = _both_fail(
        pg, tmp_path, "name text, price numeric(10,2)", "(FORMAT csv, HEADER)", b"n,p\na,1\nb,abc\n"
    )
    assert err.message == 'COPY t, line 3, column price: invalid input syntax for type numeric: "abc"'
    err = _both_fail(pg, tmp_path, "a bigint, b bigint", "", b"1\t2\n3\t4\n5\t6\n7\t8\t9\n")
    assert err.message == "COPY t, line 4: extra data after last expected column"
    err = _both_fail(pg, tmp_path, "a bigint, b bigint", "", b"1\n")
    assert err.message == 'COPY t, line 1: missing data for column "b"'


OPTION_ERRORS = [
    "(FORMAT csv, FORMAT csv)",
    "(FORMAT 'CSV')",
    "(FORMAT xml)",
    "(QUOTE '\"')",
    "(ESCAPE 'x')",
    "(DELIMITER 'ab')",
    "(DELIMITER E'\\n')",
    "(DELIMITER 'a')",
    "(DELIMITER '.')",
    "(DELIMITER '\\')",
    "(DELIMITER 'é')",
    "(FORMAT csv, DELIMITER '\"')",
    "(FORMAT csv, QUOTE 'ab')",
    "(FORMAT csv, ESCAPE '')",
    "(NULL E'a\\nb')",
    "(NULL 'a\tb')",
    "(FORMAT csv, NULL 'a\"b')",
    "(HEADER 2)",
    "(HEADER 'maybe')",
    "(HEADER 1.0)",
    "(HEADER '1')",
    "(NULL 'x', NULL 'y')",
    "(HEADER, HEADER false)",
    "(ENCODING 'nope')",
    "(FOO 1)",
    "(NULL)",
    "(DELIMITER)",
]


@pytest.mark.parametrize("opts", OPTION_ERRORS)
def test_options_postgres_rejects(pg, tmp_path, opts):
    expected = _pg_copy(pg, TEXT2, opts, b"")
    assert isinstance(expected, psycopg.Error)
    with pytest.raises(ProgrammingError) as info:
        _ivm_copy(tmp_path, TEXT2, opts, b"")
    assert info.value.message == expected.diag.message_primary


@pytest.mark.parametrize(
    ("opts", "named"),
    [
        ("(FREEZE)", "FREEZE"),
        ("(FORMAT csv, FORCE_NOT_NULL (a))", "FORCE_NOT_NULL"),
        ("(FORMAT csv, FORCE_NULL (a))", "FORCE_NULL"),
        ("(FORMAT csv, FORCE_QUOTE *)", "FORCE_QUOTE"),
        ("(DEFAULT 'x')", "DEFAULT"),
        ("(ON_ERROR ignore)", "ON_ERROR"),
        ("(FORMAT binary)", "binary"),
        ("(ENCODING 'latin1')", "latin1"),
    ],
)
def test_options_ivm_does_not_implement(tmp_path, opts, named):
    with pytest.raises(NotSupportedError, match=named):
        _ivm_copy(tmp_path, TEXT2, opts, b"")


@pytest.mark.parametrize(
    "sql",
    ["COPY t FROM STDIN", "COPY t TO '/tmp/x.csv'", "COPY t FROM PROGRAM 'cat x'"],
)
def test_statements_ivm_does_not_implement(sql):
    with pytest.raises(NotSupportedError):
        read_copy(sqlglot.parse_one(sql, dialect="postgres"), _table(TEXT2))


def test_unknown_and_repeated_columns():
    table = _table(TEXT2)
    with pytest.raises(ProgrammingError, match='column "z" of relation "t" does not exist'):
        read_copy(sqlglot.parse_one("COPY t (a, z) FROM 'x'", dialect="postgres"), table)
    with pytest.raises(ProgrammingError, match='column "a" specified more than once'):
        read_copy(sqlglot.parse_one("COPY t (a, A) FROM 'x'", dialect="postgres"), table)


def test_values_ivm_cannot_hold(tmp_path):
    with pytest.raises(NotSupportedError, match="line 2, column a: NaN"):
        _ivm_copy(tmp_path, "a numeric(5,2)", "", b"1\nNaN\n")
    with pytest.raises(NotSupportedError, match='line 1, column a: date "infinity"'):
        _ivm_copy(tmp_path, "a date", "", b"infinity\n")
    with pytest.raises(NotSupportedError, match="beyond the range ivm holds"):
        _ivm_copy(tmp_path, "a timestamp", "", b"294276-12-31\n")


def test_unreadable_file_names_it(tmp_path):
    missing = tmp_path / "missing.csv"
    with pytest.raises(OperationalError, match=re.escape(f'could not open file "{missing}"')):
        read_copy(sqlglot.parse_one(f"COPY t FROM '{missing}'", dialect="postgres"), _table(TEXT2))
    with pytest.raises(OperationalError, match=re.escape(f'"{tmp_path}"')):
        read_copy(
            sqlglot.parse_one(f"COPY t FROM '{tmp_path}' (FORMAT csv)", dialect="postgres"), _table(TEXT2)
        )
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(OperationalError, match="bad.parquet"):
        read_copy(
            sqlglot.parse_one(f"COPY t FROM '{tmp_path / 'bad.parquet'}'", dialect="postgres"), _table(TEXT2)
        )


def test_format_follows_the_file_name(tmp_path):
    data = b'a,"b,c"\n'
    assert _ivm_copy(tmp_path, TEXT2, "", data, name="x.csv").to_pylist() == [{"a": "a", "b": "b,c"}]
    with pytest.raises(DataError, match="missing data"):
        _ivm_copy(tmp_path, TEXT2, "", data, name="x.txt")
    pq.write_table(pa.table({"b": ["y"], "a": ["x"]}), tmp_path / "x.parquet")
    got = read_copy(
        sqlglot.parse_one(f"COPY t FROM '{tmp_path / 'x.parquet'}'", dialect="postgres"), _table(TEXT2)
    )
    assert got.to_pylist() == [{"a": "x", "b": "y"}]


def _parquet(tmp_path, ddl: str, data: pa.Table, columns: str = "", opts: str = "") -> pa.Table:
    path = tmp_path / "data.pq"
    pq.write_table(data, path)
    stmt = sqlglot.parse_one(f"COPY t {columns} FROM '{path}' (FORMAT parquet{opts})", dialect="postgres")
    return read_copy(stmt, _table(ddl))


def test_parquet_casts_exactly(tmp_path):
    data = pa.table(
        {
            "d": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 123456)], pa.timestamp("ns")),
            "a": pa.array([7], pa.int32()),
            "b": pa.array([decimal.Decimal("1.5")], pa.decimal128(5, 1)),
            "c": pa.array(["007"]).dictionary_encode(),
        }
    )
    got = _parquet(tmp_path, "a bigint, b numeric(10,2), c text, d timestamp, e double precision", data)
    assert got.schema.types == [pa.int64(), pa.decimal128(10, 2), pa.string(), pa.timestamp("us"), pa.float64()]
    assert got.to_pylist() == [
        {
            "a": 7,
            "b": decimal.Decimal("1.50"),
            "c": "007",
            "d": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
            "e": None,
        }
    ]
    assert _parquet(tmp_path, "a bigint, c text", data, "(c, a)").schema.names == ["c", "a"]


@pytest.mark.parametrize(
    ("ddl", "column", "message"),
    [
        ("a bigint", pa.array([1.0, 2.5]), "row 2, column a: 2.5"),
        ("a double precision", pa.array([1, 2**53 + 1]), "row 2, column a: 9007199254740993"),
        (
            "a numeric(10,2)",
            pa.array([decimal.Decimal("1.555")], pa.decimal128(6, 3)),
            "row 1, column a: 1.555",
        ),
        ("a numeric(4,2)", pa.array([decimal.Decimal("123.5")], pa.decimal128(4, 1)), "row 1, column a: 123.5"),
        ("a timestamp", pa.array([1704164645123456789], pa.timestamp("ns")), "row 1, column a"),
        ("a timestamp", pa.array([1], pa.timestamp("s", tz="UTC")), "Parquet type timestamp"),
        ("a text", pa.array([1]), "Parquet type int64 cannot be loaded as TEXT"),
    ],
)
def test_parquet_refuses_changing_values(tmp_path, ddl, column, message):
    with pytest.raises(DataError, match=re.escape(message)):
        _parquet(tmp_path, ddl, pa.table({"a": column}))


def test_parquet_columns_by_name(tmp_path):
    got = _parquet(tmp_path, "a bigint, b text", pa.table({"a": [1]}))
    assert got.to_pylist() == [{"a": 1, "b": None}]
    with pytest.raises(DataError, match='column "z", which t does not have'):
        _parquet(tmp_path, "a bigint", pa.table({"a": [1], "z": [2]}))
    with pytest.raises(DataError, match='column "b" is not in the Parquet file'):
        _parquet(tmp_path, "a bigint, b text", pa.table({"a": [1]}), "(a, b)")
    with pytest.raises(ProgrammingError, match="HEADER"):
        _parquet(tmp_path, "a bigint", pa.table({"a": [1]}), opts=", HEADER")


def test_many_rows_find_the_first_bad_one(pg, tmp_path):
    good = b"".join(b'%d,"v%d\nw",%d.5,t\n' % (i, i, i) for i in range(20000))
    ddl = "a bigint, b text, c numeric(12,2), d boolean"
    rows = _agree(pg, tmp_path, ddl, CSV, good)
    assert rows[-1] == (19999, "v19999\nw", decimal.Decimal("19999.50"), True)
    err = _both_fail(pg, tmp_path, ddl, CSV, good + b'1,"x\ny",2,maybe\n3,y,z,t\n')
    assert err.message.startswith("COPY t, line 40001, column d:")


FUZZ_PIECES = [b"A", b"\\x4", b"a", b"1", b",", b'"', b"\\", b"\n", b"\r", b".", b"\t", b"N", b" ", b"x", b"7"]
FUZZ_PIECES += [b"\r\n", "\u00e9".encode(), b"\\N", b"\\.", b'""']
FUZZ_CONFIGS = [
    (TEXT2, ""),
    (TEXT2, CSV),
    (TEXT2, "(FORMAT csv, ESCAPE '\\')"),
    (TEXT2, "(FORMAT csv, HEADER match)"),
    (TEXT2, "(HEADER)"),
    (TEXT2, "(FORMAT csv, HEADER)"),
    ("a bigint, b text", ""),
    ("a bigint, b text", CSV),
    ("a text", "(FORMAT csv, NULL 'N')"),
    (TEXT2, "(DELIMITER 'A')"),
    (TEXT2, "(FORMAT csv, QUOTE 'x', ESCAPE '1')"),
]


def test_random_files_load_as_in_postgres(pg, tmp_path):
    """Short files of the bytes that matter to the line and field splitting (quotes, escapes, delimiters,
    line ends, end markers, multibyte text), from a fixed seed: same rows or same error as PostgreSQL."""
    rng = random.Random(15)
    for _ in range(300):
        ddl, opts = rng.choice(FUZZ_CONFIGS)
        data = b"".join(rng.choice(FUZZ_PIECES) for _ in range(rng.randint(0, 14)))
        expected = _pg_copy(pg, ddl, opts, data)
        if isinstance(expected, psycopg.Error):
            _both_fail(pg, tmp_path, ddl, opts, data, expected=expected)
        else:
            _agree(pg, tmp_path, ddl, opts, data, expected=expected)


def test_result_types_follow_arrow_type(tmp_path):
    ddl = "a bigint, b numeric(18,8), c double precision, d text, e date, f timestamp, g boolean"
    got = _ivm_copy(tmp_path, ddl, CSV, b"1,2,3,x,2024-01-02,2024-01-02 03:04:05,t\n,,,,,,\n")
    assert got.schema.types == [arrow_type(c.type) for c in _table(ddl).columns]
    assert got.to_pylist()[1] == dict.fromkeys("abcdefg")
