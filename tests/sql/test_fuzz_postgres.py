"""Differential fuzz test: random scripts run on ivm and on a real PostgreSQL must agree statement by statement.

Each script creates 2-3 small tables (integers, DECIMAL, TEXT, VARCHAR(n), BOOLEAN, DATE, DOUBLE PRECISION with
PRIMARY KEY, NOT NULL, UNIQUE, CHECK and DEFAULT), views over them, and then writes (INSERT VALUES / SELECT /
DEFAULT VALUES, UPDATE, DELETE), queries, transactions with errors inside, multi-statement strings, syntax
errors and references to missing tables and columns. After every statement:

1. ivm raised nothing but ``ivm.Error`` subclasses;
2. it failed in ivm iff it failed in PostgreSQL, unless ivm raised ``NotSupportedError`` (SQL it does not
   implement). Outside a transaction block such a statement must have changed nothing in ivm and PostgreSQL
   skips it too. Inside one, any error of ivm aborts the transaction, as any error does in PostgreSQL: there
   PostgreSQL runs a statement that fails (``SELECT 1/0``) instead, so that its transaction is aborted too;
3. a rejected statement left every table and view in ivm as it was (outside a transaction block; inside one,
   what a failed statement did shows when the block ends, as check 4);
4. outside a transaction, every table and view holds the same multiset of rows on both sides, and a query's
   result is the same (in order where the query orders by all its columns).

PostgreSQL's side: one database per script (C collation), autocommit, the script's own BEGIN/COMMIT/ROLLBACK;
materialized views become plain views (always current, as ivm's are outside transactions); PRIMARY KEY and
UNIQUE are DEFERRABLE INITIALLY IMMEDIATE there, so that they are checked at the end of each statement as the
SQL standard says (PostgreSQL's immediate checks would fail ``SET k = k + 1`` depending on row order).

What ivm documents as its own differences is kept out, by what the generator writes, never by looking away
from a result:

a. arithmetic on INTEGER and SMALLINT whose result leaves their range (ivm computes it in 64 bits where
   PostgreSQL raises 22003): such arithmetic is written over ``CAST(x AS BIGINT)`` or only reaches small
   values (a CASE lets them through); assigning a result to a column still checks the column's range;
b. SUM and AVG over DOUBLE PRECISION after large values were deleted or updated (ivm's running sums of
   doubles drift): a DOUBLE PRECISION column either holds small values of few decimals (|v| <= 1e6) and may be
   summed, or may hold large ones (1e10, 1e308) and is never summed;
c. a statement reading an arrangement that a view in error built may report that view's error (ivm reports
   errors through shared arrangements): a DataError that names a view "is in error" which the statement does
   not read, directly or through other views, where PostgreSQL succeeds, is allowed only while that view is
   in error (``Connection.view_errors``); PostgreSQL then undoes the statement (it ran in a transaction block
   of its own) or, inside the script's transaction block, aborts it as ivm did;
d. PostgreSQL converts constants when it plans a statement, so that a constant its column cannot hold fails
   even where no row is written (an UPDATE matching no row, INSERT ... SELECT of no rows) and LIMIT 0 never
   evaluates its query: UPDATE and INSERT ... SELECT assign only constants the column can hold (INSERT ...
   VALUES tries the others) and LIMIT is at least 1;
e. sums and decimal arithmetic beyond 64 bits or 18 digits: no SUM/AVG or decimal arithmetic over BIGINT and
   DECIMAL(p >= 16) columns;
f. a view whose rows cannot be computed when it is created: ivm refuses to create it with a DataError;
   PostgreSQL creates it and fails reading it: then the PostgreSQL view is dropped again and both go on.
g. inside a transaction block ivm reads views as of the last commit: views are read outside blocks only.

Whether ivm's PEP 249 class matches PostgreSQL's SQLSTATE class (23 IntegrityError, 22 DataError, 42
ProgrammingError, 25P02 InternalError) is collected, not asserted: the module emits one warning summarising
the mismatches (and writes it to ``IVM_FUZZ_REPORT`` when set).

``IVM_FUZZ_SEED`` (first seed, default 0), ``IVM_FUZZ_SCRIPTS`` (scripts, default 48) and
``IVM_FUZZ_STATEMENTS`` (random statements per script, default 110) widen the search.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import itertools
import math
import os
import random
import re
import warnings
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import ivm
from connectors.postgres.cluster import LocalCluster

FIRST_SEED = int(os.environ.get("IVM_FUZZ_SEED", "0"))
SCRIPTS = int(os.environ.get("IVM_FUZZ_SCRIPTS", "48"))
STATEMENTS = int(os.environ.get("IVM_FUZZ_STATEMENTS", "110"))

_databases = itertools.count()
CLASS_MISMATCHES: dict[tuple[str, str], list] = {}  # (expected class, ivm class) -> [count, example]


# -- PostgreSQL ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    with LocalCluster() as c:
        yield c
    _class_report()


@pytest.fixture
def pg(cluster):
    """An autocommit connection to a new database with byte-order (C) text comparison."""
    name = f"fuzz{os.getpid()}_{next(_databases)}"
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
    conn = psycopg.connect(cluster.dsn.replace("dbname=postgres", f"dbname={name}"), autocommit=True)
    yield conn
    conn.close()
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _class_report() -> None:
    if not CLASS_MISMATCHES:
        return
    lines = ["ivm's PEP 249 error classes against PostgreSQL's SQLSTATE classes (soft check):"]
    for (want, got), (n, sqlstate, stmt, msg) in sorted(CLASS_MISMATCHES.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"  {n:5d}x expected {want} (SQLSTATE {sqlstate}), ivm raised {got}: {stmt!r} -> {msg}")
    text = "\n".join(lines)
    if os.environ.get("IVM_FUZZ_REPORT"):
        with open(os.environ["IVM_FUZZ_REPORT"], "w") as f:
            f.write(text + "\n")
    warnings.warn(text, stacklevel=1)


# -- schema ------------------------------------------------------------------------------------------------
@dataclass
class Col:
    name: str
    sqltype: str  # as declared
    kind: str  # int, dec, float, text, bool, date
    lo: int = 0  # integer range
    hi: int = 0
    p: int = 0  # DECIMAL(p, s)
    s: int = 0
    n: int | None = None  # VARCHAR(n)
    not_null: bool = False
    unique: bool = False
    default: str | None = None
    check: str | None = None
    big: bool = False  # DOUBLE PRECISION that may hold large values (and is never summed)

    @property
    def wide(self) -> bool:
        """BIGINT or DECIMAL(p >= 16): sums and decimal arithmetic over it may pass 64 bits, which ivm
        documents it does not compute (PostgreSQL's NUMERIC does); the generator keeps them to what both do."""
        return self.sqltype == "BIGINT" or (self.kind == "dec" and self.p >= 16)

    @property
    def narrow(self) -> bool:
        """INTEGER or SMALLINT: ivm computes their arithmetic in 64 bits where PostgreSQL raises 22003 when a
        result leaves their range (documented), so the generator does that arithmetic in BIGINT."""
        return self.sqltype in ("INTEGER", "SMALLINT")

    @property
    def summable(self) -> bool:
        """Whether SUM and AVG of the column are within what ivm computes as PostgreSQL does: no sums beyond
        64 bits (wide columns) and no running sums of doubles that large values made drift (big columns)."""
        return self.kind in ("int", "dec", "float") and not self.wide and not self.big


@dataclass
class TableDef:
    name: str
    cols: list[Col]
    pk: list[str] = field(default_factory=list)
    pk_inline: bool = False  # PRIMARY KEY written on the column
    uniques: list[list[str]] = field(default_factory=list)  # table-level UNIQUE (...)
    checks: list[str] = field(default_factory=list)  # table-level CHECK (...)

    def col(self, name: str) -> Col:
        return next(c for c in self.cols if c.name == name)

    def ddl(self, pg: bool) -> str:
        deferrable = " DEFERRABLE INITIALLY IMMEDIATE" if pg else ""
        parts = []
        for c in self.cols:
            d = f"{c.name} {c.sqltype}"
            if self.pk_inline and self.pk == [c.name]:
                d += f" PRIMARY KEY{deferrable}"
            if c.not_null:
                d += " NOT NULL"
            if c.unique:
                d += f" UNIQUE{deferrable}"
            if c.default is not None:
                d += f" DEFAULT {c.default}"
            if c.check is not None:
                d += f" CHECK ({c.check})"
            parts.append(d)
        if self.pk and not self.pk_inline:
            parts.append(f"PRIMARY KEY ({', '.join(self.pk)}){deferrable}")
        for u in self.uniques:
            parts.append(f"UNIQUE ({', '.join(u)}){deferrable}")
        for ch in self.checks:
            parts.append(f"CHECK ({ch})")
        return f"CREATE TABLE {self.name} ({', '.join(parts)})"


@dataclass
class Stmt:
    ivm_sql: str
    pg_sql: str
    query: bool = False  # compare the result rows
    ordered: bool = False  # ORDER BY covers every output column: compare in order

    def __post_init__(self) -> None:
        self.pg_sql = self.pg_sql or self.ivm_sql

    @staticmethod
    def same(sql: str, query: bool = False, ordered: bool = False) -> Stmt:
        return Stmt(sql, sql, query, ordered)


BEGINS = ["BEGIN", "BEGIN", "START TRANSACTION", "begin;", "BEGIN TRANSACTION", "BEGIN WORK"]
COMMITS = ["COMMIT", "COMMIT", "END", "commit;", "COMMIT WORK", " COMMIT ; "]
ROLLBACKS = ["ROLLBACK", "ROLLBACK", "rollback;", "ROLLBACK WORK", "ABORT"]
TEXTS = ["'a'", "'b'", "'ab'", "'abc'", "'abcd'", "''", "'x y'", "'it''s'", "'Zz'", "'ab '", "'abc  '", "'B'"]
FLOATS = ["0", "1.5", "-2.25", "0.1", "3", "2.5", "-0.5", "12.5", "-0.25", "7.75"]  # small, few decimals
BIG_FLOATS = ["1e10", "-1e-5", "123456789.125", "-3e15"]  # only in columns never summed


class Gen:
    """A random script: a schema, then statements; what it emits depends on the seed only."""

    short_rows = 0.03  # how often a VALUES row of INSERT without a column list is cut short

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.tables: list[TableDef] = []
        self.views: list[tuple[str, list[str]]] = []  # name, output kinds
        self.in_tx = False
        self.tx_left = 0

    # schema ---------------------------------------------------------------------------------------------
    def column(self, name: str, first: bool) -> Col:
        r = self.r
        pick = r.choice(["INTEGER", "SMALLINT", "BIGINT"]) if first else None
        if pick is None:
            pick = r.choice(
                ["INTEGER", "SMALLINT", "BIGINT", "DECIMAL", "TEXT", "VARCHAR", "BOOLEAN", "DATE", "DOUBLE"]
            )
        if pick == "INTEGER":
            c = Col(name, "INTEGER", "int", lo=-(2**31), hi=2**31 - 1)
        elif pick == "SMALLINT":
            c = Col(name, "SMALLINT", "int", lo=-(2**15), hi=2**15 - 1)
        elif pick == "BIGINT":
            c = Col(name, "BIGINT", "int", lo=-(2**63), hi=2**63 - 1)
        elif pick == "DECIMAL":
            p = r.choice([3, 5, 9, 12, 18])
            s = r.randint(0, min(p, 4))
            c = Col(name, f"DECIMAL({p},{s})", "dec", p=p, s=s)
        elif pick == "TEXT":
            c = Col(name, "TEXT", "text")
        elif pick == "VARCHAR":
            n = r.randint(1, 4)
            c = Col(name, f"VARCHAR({n})", "text", n=n)
        elif pick == "BOOLEAN":
            c = Col(name, "BOOLEAN", "bool")
        elif pick == "DATE":
            c = Col(name, "DATE", "date")
        else:
            c = Col(name, "DOUBLE PRECISION", "float", big=r.random() < 0.5)
        c.not_null = r.random() < 0.25
        if r.random() < 0.15 and c.kind != "bool":
            c.unique = True
        if r.random() < 0.25:
            c.default = self.valid_value(c)
        if r.random() < 0.2 and c.kind in ("int", "dec", "float", "text", "date"):
            c.check = f"{c.name} {r.choice(['>', '>=', '<', '<>'])} {self.valid_value(c)}"
        return c

    def table(self, name: str) -> TableDef:
        r = self.r
        ncols = r.randint(2, 5)
        cols = [self.column(f"{name}{chr(ord('a') + i)}", i == 0) for i in range(ncols)]
        t = TableDef(name, cols)
        pick = r.random()
        if pick < 0.45:
            t.pk, t.pk_inline = [cols[0].name], r.random() < 0.6
        elif pick < 0.7:
            keyable = [c.name for c in cols if c.kind != "float"]
            t.pk = r.sample(keyable, min(len(keyable), 2))
        for c in cols:
            if c.name in t.pk:
                c.unique = False
        if r.random() < 0.2 and ncols >= 3:
            t.uniques.append([cols[1].name, cols[2].name])
        if r.random() < 0.2:
            same = [(a, b) for a in cols for b in cols if a.name < b.name and a.kind == b.kind]
            if same:
                a, b = r.choice(same)
                t.checks.append(f"{a.name} {r.choice(['<=', '<>', '>'])} {b.name}")
        return t

    # values ---------------------------------------------------------------------------------------------
    def valid_value(self, c: Col) -> str:
        r = self.r
        if c.kind == "int":
            return str(r.randint(-3, 12))
        if c.kind == "dec":
            top = min(10 ** (c.p - c.s) - 1, 50)
            v = decimal.Decimal(r.randint(-top * 10**c.s, top * 10**c.s)).scaleb(-c.s)
            return str(v)
        if c.kind == "float":
            return r.choice(FLOATS + BIG_FLOATS if c.big else FLOATS)
        if c.kind == "text":
            choices = [t for t in TEXTS if c.n is None or len(t) - 2 - t.count("''") <= c.n]
            return r.choice(choices)
        if c.kind == "bool":
            return r.choice(["TRUE", "FALSE"])
        return (
            f"DATE '2024-01-{r.randint(1, 9):02d}'" if r.random() < 0.5 else f"'2024-01-{r.randint(1, 9):02d}'"
        )

    def value(self, c: Col, planned: bool = False) -> str:
        """A literal for ``c``: mostly valid, sometimes NULL, out of range, too long or of another type. With
        ``planned``, only one PostgreSQL can convert to ``c``'s type: it converts constants when it plans the
        statement, so that one the column cannot hold fails even when no row is written (an UPDATE matching no
        row, INSERT ... SELECT of no rows), where ivm, converting the rows written, does not (documented)."""
        r = self.r
        x = r.random()
        if x < 0.07:
            return "NULL"
        if x > 0.94:
            v = self.edge_value(c)
            return v if not planned or self.converts(c, v) else self.valid_value(c)
        return self.valid_value(c)

    @staticmethod
    def converts(c: Col, v: str) -> bool:
        """Whether PostgreSQL converts the literal ``v`` (one of ``edge_value``'s) to ``c``'s type."""
        if c.kind == "int" and re.fullmatch(r"-?\d+", v):
            return c.lo <= int(v) <= c.hi
        if c.kind == "dec" and v[0] != "'":
            q = decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-c.s), rounding=decimal.ROUND_HALF_UP)
            return abs(q) < 10 ** (c.p - c.s)
        if c.kind == "text" and c.n is not None:
            return len(v[1:-1].replace("''", "'").rstrip(" ")) <= c.n  # VARCHAR(n) drops extra blanks
        if c.kind == "date":
            return "02-30" not in v
        return True

    def edge_value(self, c: Col) -> str:
        r = self.r
        if c.kind == "int":
            return r.choice(
                [str(c.lo), str(c.hi), str(c.lo - 1), str(c.hi + 1), str(c.hi * 2 + 1), "2.5", "-1.5", "'7'"]
            )
        if c.kind == "dec":
            top = decimal.Decimal(10 ** (c.p - c.s)) - decimal.Decimal(1).scaleb(-c.s)
            half = decimal.Decimal(5).scaleb(-c.s - 1)
            return r.choice(
                [str(top), str(-top), str(top + decimal.Decimal(1).scaleb(-c.s)), str(top + half),
                 str(top + half / 2), "1.23456", "-0.005", "7"]
            )  # fmt: skip
        if c.kind == "float" and c.big:
            return r.choice(["1e308", "-1e-300", "123456789.125", "'1.5'", "5"])
        if c.kind == "float":
            return r.choice(["'1.5'", "5", "1e3", "'-2.5'"])
        if c.kind == "text":
            return r.choice(["'abcdef'", "'abcde'", "'ab   '", "'abcd '", "'    '", "'a%b'"])
        if c.kind == "bool":
            return r.choice(["'true'", "'f'", "1"])
        return r.choice(["'2024-02-30'", "'2024-02-29'", "DATE '1999-12-31'", "'0001-01-01'", "'9999-12-31'"])

    # expressions ----------------------------------------------------------------------------------------
    def expr(self, c: Col, alias: str = "") -> str:
        """An expression of ``c``'s kind over ``c`` (qualified by ``alias``)."""
        r = self.r
        n = f"{alias}{c.name}"
        k = c.kind
        x = r.random()
        if x < 0.4:
            return n
        if k == "int":
            # +, -, * and ABS of INTEGER, unary minus and ABS of SMALLINT (PostgreSQL adds an INTEGER literal to
            # a SMALLINT in 32 bits) may leave the column's range: done in BIGINT, or on small values only
            m = f"CAST({n} AS BIGINT)" if c.narrow else n
            a = m if c.sqltype == "INTEGER" else n
            return r.choice(
                [f"{a} + {r.randint(1, 3)}", f"{a} - 1", f"{a} * {r.randint(2, 3)}", f"ABS({m})",
                 f"COALESCE({n}, {r.randint(0, 5)})", f"CASE WHEN {n} > 3 THEN {n} ELSE {r.randint(0, 9)} END",
                 f"-{m}", f"{n} % 3", f"{n} / 2", f"NULLIF({n}, 0)", f"GREATEST({n}, NULL, 0)",
                 f"LEAST({n}, 5)", f"SIGN({n})",
                 f"CASE WHEN {n} BETWEEN -1000 AND 1000 THEN {r.choice(['-', 'ABS'])}({n}) * 3 + 1 END"]
            )  # fmt: skip
        if k == "dec" and c.wide:
            return r.choice([f"COALESCE({n}, 0)", f"ABS({n})", f"-{n}"])
        if k == "dec":
            return r.choice(
                [f"{n} + 1.5", f"{n} * 2", f"ROUND({n}, 1)", f"COALESCE({n}, 0)", f"{n} - 0.25", f"{n} / 2",
                 f"{n} * 0.5", f"ABS({n})", f"FLOOR({n})", f"CEIL({n})", f"{n} % 2", f"ROUND({n})"]
            )  # fmt: skip
        if k == "float":
            return r.choice([f"{n} * 2", f"{n} + 0.5", f"COALESCE({n}, 1.5)", f"ABS({n})", f"{n} / 4"])
        if k == "text":
            return r.choice(
                [f"{n} || 'x'", f"UPPER({n})", f"LOWER({n})", f"SUBSTRING({n}, 1, 2)", f"COALESCE({n}, 'z')",
                 f"TRIM({n})", f"LEFT({n}, 1)", f"REPLACE({n}, 'a', 'b')", f"LPAD({n}, 4, '*')",
                 f"RPAD({n}, 3)", f"REVERSE({n})", f"SPLIT_PART({n}, ' ', 1)", f"CONCAT({n}, 'q')",
                 f"RIGHT({n}, 2)", f"NULLIF({n}, '')",
                 f"CASE {n} WHEN 'a' THEN 'A' WHEN 'b' THEN NULL ELSE {n} END"]
            )  # fmt: skip
        if k == "bool":
            return r.choice([f"NOT {n}", f"COALESCE({n}, FALSE)", f"({n} IS TRUE)", f"({n} IS NOT FALSE)"])
        return r.choice(
            [n, f"COALESCE({n}, DATE '2024-01-01')", f"GREATEST({n}, DATE '2024-01-03')", f"{n} + 1",
             f"LEAST({n}, DATE '2024-01-04')"]
        )  # fmt: skip

    def item(self, c: Col, alias: str = "") -> tuple[str, str]:
        """A select-list expression over ``c`` and its kind, which may differ from ``c``'s."""
        r = self.r
        n = f"{alias}{c.name}"
        if r.random() < 0.8:
            return self.expr(c, alias), c.kind
        k = c.kind
        if k == "int" and c.wide:
            return r.choice([(f"CAST({n} AS TEXT)", "text"), (f"CAST({n} AS DOUBLE PRECISION)", "float")])
        if k == "int":
            return r.choice([(f"CAST({n} AS TEXT)", "text"), (f"{n} * 1.5", "dec"), (f"{n} / 3.0", "dec")])
        if k == "dec" and c.wide:
            return r.choice([(f"CAST({n} AS TEXT)", "text"), (f"CAST({n} AS DOUBLE PRECISION)", "float")])
        if k == "dec":
            return r.choice(
                [(f"CAST({n} AS INTEGER)", "int"), (f"CAST({n} AS TEXT)", "text"), (f"{n} / 3", "dec")]
            )
        if k == "float":
            return r.choice([(f"CAST({n} AS DECIMAL(12,2))", "dec"), (f"CAST({n} AS BIGINT)", "int")])
        if k == "text":
            return r.choice(
                [(f"LENGTH({n})", "int"), (f"POSITION('b' IN {n})", "int"), (f"STRPOS({n}, 'c')", "int"),
                 (f"{n} ILIKE 'A%'", "bool"), (f"STARTS_WITH({n}, 'a')", "bool")]
            )  # fmt: skip
        if k == "bool":
            return r.choice([(f"CAST({n} AS TEXT)", "text"), (f"CASE WHEN {n} THEN 1 ELSE 0 END", "int")])
        return r.choice(
            [(f"EXTRACT({r.choice(['YEAR', 'MONTH', 'DAY', 'DOW', 'DOY', 'QUARTER'])} FROM {n})", "int"),
             (f"{n} - DATE '2024-01-01'", "int"), (f"CAST({n} AS TEXT)", "text")]
        )  # fmt: skip

    def pred(self, t: TableDef, alias: str = "", depth: int = 0) -> str:
        r = self.r
        c = r.choice(t.cols)
        n = f"{alias}{c.name}"
        x = r.random()
        if depth < 2 and x < 0.15:
            return (
                f"({self.pred(t, alias, depth + 1)} {r.choice(['AND', 'OR'])} {self.pred(t, alias, depth + 1)})"
            )
        if depth < 2 and x < 0.2:
            return f"NOT ({self.pred(t, alias, depth + 1)})"
        if x < 0.3:
            return f"{n} IS {r.choice(['', 'NOT '])}NULL"
        if c.kind == "bool":
            return r.choice(
                [n, f"NOT {n}", f"{n} = {self.valid_value(c)}", f"{n} IS {r.choice(['', 'NOT '])}TRUE"]
            )
        if c.kind == "text" and x < 0.45:
            op = r.choice(["LIKE", "NOT LIKE", "ILIKE"])
            return f"{n} {op} '{r.choice(['a%', '%b%', '_b%', 'x%', '%', 'A%', '%!%%'])}'"
        if x < 0.35:
            return f"{n} IS {r.choice(['', 'NOT '])}DISTINCT FROM {self.valid_value(c)}"
        if x < 0.5:
            items = ", ".join(self.valid_value(c) for _ in range(r.randint(1, 3)))
            return f"{n} {r.choice(['', 'NOT '])}IN ({items})"
        if x < 0.58:
            a, b = self.valid_value(c), self.valid_value(c)
            return f"{n} BETWEEN {a} AND {b}"
        same = [o for o in t.cols if o.kind == c.kind and o is not c]
        if same and x < 0.7:
            return f"{n} {r.choice(['=', '<>', '<', '>='])} {alias}{r.choice(same).name}"
        return f"{n} {r.choice(['=', '<>', '<', '<=', '>', '>='])} {self.valid_value(c)}"

    # statements -----------------------------------------------------------------------------------------
    def insert_values(self, t: TableDef) -> str:
        r = self.r
        x = r.random()
        if x < 0.05:
            return f"INSERT INTO {t.name} DEFAULT VALUES"
        if x < 0.55:
            cols = t.cols
            head = ""
        else:
            cols = r.sample(t.cols, r.randint(1, len(t.cols)))
            head = f" ({', '.join(c.name for c in cols)})"
        rows = []
        for _ in range(r.choice([1, 1, 2, 3, 4])):
            vals = [("DEFAULT" if r.random() < 0.04 else self.value(c)) for c in cols]
            if not head and r.random() < self.short_rows:
                vals = vals[: r.randint(1, len(vals))]  # fewer values than columns: the rest are defaults
            rows.append(f"({', '.join(vals)})")
        return f"INSERT INTO {t.name}{head} VALUES {', '.join(rows)}"

    def insert_select(self, t: TableDef, views_ok: bool) -> str:
        r = self.r
        src = r.choice(self.tables)
        target = r.sample(t.cols, r.randint(1, len(t.cols)))
        alias = ""
        exprs = []
        for c in target:
            small = c.kind == "float" and not c.big  # a summed double takes no large values (nor integers)
            same = [s for s in src.cols if s.kind == c.kind and not (small and s.big)]
            near = [
                s for s in src.cols if s.kind in ("int", "dec", "float") and c.kind in ("int", "dec", "float")
            ]
            if same and r.random() < 0.75:
                exprs.append(self.expr(r.choice(same), alias))
            elif near and not small and r.random() < 0.6:
                exprs.append(r.choice(near).name)
            else:
                exprs.append(self.value(c, planned=True))
        where = f" WHERE {self.pred(src)}" if r.random() < 0.6 else ""
        frm = src.name
        if views_ok and self.views and r.random() < 0.15:
            # from a view: its columns are c1..cn of known kinds
            vname, kinds = r.choice(self.views)
            exprs = []
            for c in target:
                ok = c.kind != "float" or c.big
                same = [f"c{i + 1}" for i, k in enumerate(kinds) if k == c.kind and ok]
                exprs.append(r.choice(same) if same else self.value(c, planned=True))
            frm, where = vname, ""
        distinct = "DISTINCT " if r.random() < 0.1 else ""
        return (
            f"INSERT INTO {t.name} ({', '.join(c.name for c in target)}) "
            f"SELECT {distinct}{', '.join(exprs)} FROM {frm}{where}"
        )

    def update(self, t: TableDef) -> str:
        r = self.r
        key = t.col(t.pk[0]) if t.pk else None
        if key is not None and key.kind == "int" and r.random() < 0.08:
            # exchange two keys (or shift them all): PRIMARY KEY holds at the end of the statement
            a, b = r.randint(-3, 12), r.randint(-3, 12)
            if r.random() < 0.5:
                return f"UPDATE {t.name} SET {key.name} = {key.name} + 1"
            return (
                f"UPDATE {t.name} SET {key.name} = CASE WHEN {key.name} = {a} THEN {b} ELSE {a} END "
                f"WHERE {key.name} IN ({a}, {b})"
            )
        sets = []
        for c in r.sample(t.cols, r.randint(1, min(2, len(t.cols)))):
            x = r.random()
            if x < 0.45:
                v = self.expr(c)
            elif x < 0.55:
                v = "NULL"
            elif x < 0.6:
                v = "DEFAULT"
            else:
                v = self.value(c, planned=True)
            sets.append(f"{c.name} = {v}")
        where = f" WHERE {self.pred(t)}" if r.random() < 0.8 else ""
        return f"UPDATE {t.name} SET {', '.join(sets)}{where}"

    def delete(self, t: TableDef) -> str:
        r = self.r
        if r.random() < 0.1:
            other = r.choice(self.tables)
            a, b = r.choice(t.cols), [c for c in other.cols if c.kind == "int"]
            if a.kind == "int" and b:
                return f"DELETE FROM {t.name} WHERE {a.name} IN (SELECT {r.choice(b).name} FROM {other.name})"
        where = f" WHERE {self.pred(t)}" if r.random() < 0.9 else ""
        return f"DELETE FROM {t.name}{where}"

    def write(self, views_ok: bool) -> str:
        r = self.r
        t = r.choice(self.tables)
        x = r.random()
        if x < 0.45:
            return self.insert_values(t)
        if x < 0.55:
            return self.insert_select(t, views_ok)
        if x < 0.8:
            return self.update(t)
        return self.delete(t)

    def simple_select(self, t: TableDef, kinds: list[str] | None = None) -> tuple[str, list[str]]:
        """SELECT of a few expressions of ``t`` (of ``kinds`` when given), aliased c1..cn."""
        r = self.r
        if kinds is None:
            cols = r.sample(t.cols, r.randint(1, min(3, len(t.cols))))
        else:
            cols = []
            for k in kinds:
                same = [c for c in t.cols if c.kind == k]
                if not same:
                    return "", []
                cols.append(r.choice(same))
        pairs = [self.item(c) for c in cols] if kinds is None else [(self.expr(c), c.kind) for c in cols]
        self.last_items = ", ".join(f"{e} AS c{i + 1}" for i, (e, _) in enumerate(pairs))
        where = f" WHERE {self.pred(t)}" if r.random() < 0.5 else ""
        return f"SELECT {self.last_items} FROM {t.name}{where}", [k for _, k in pairs]

    def query(self, views_ok: bool) -> tuple[str, list[str], bool]:
        """A query, the kinds of its columns, and whether it ends in ORDER BY (every column) LIMIT."""
        r = self.r
        t = r.choice(self.tables)
        x = r.random()
        distinct = "DISTINCT " if r.random() < 0.15 else ""
        if x < 0.22:
            sql, kinds = self.simple_select(t)
            sql = sql.replace("SELECT ", f"SELECT {distinct}", 1)
        elif x < 0.42:
            u = r.choice(self.tables)
            ka = [c for c in t.cols if c.kind == "int"]
            kb = [c for c in u.cols if c.kind == "int"]
            join = r.choice(["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN"])
            on = "" if join == "CROSS JOIN" else f" ON x.{r.choice(ka).name} = y.{r.choice(kb).name}"
            if on and r.random() < 0.2:
                on += f" AND {self.pred(u, 'y.')}"
            picks = [("x.", c) for c in r.sample(t.cols, min(2, len(t.cols)))]
            picks += [("y.", c) for c in r.sample(u.cols, min(2, len(u.cols)))]
            pairs = [self.item(c, a) for a, c in picks]
            items = ", ".join(f"{e} AS c{i + 1}" for i, (e, _) in enumerate(pairs))
            where = f" WHERE {self.pred(t, 'x.')}" if r.random() < 0.4 else ""
            sql = f"SELECT {distinct}{items} FROM {t.name} x {join} {u.name} y{on}{where}"
            kinds = [k for _, k in pairs]
        elif x < 0.64:
            g = r.choice(t.cols)
            aggs, kinds = [], []
            for _ in range(r.randint(1, 3)):
                c = r.choice(t.cols)
                y = r.random()
                if y < 0.3:
                    aggs.append("COUNT(*)")
                    kinds.append("int")
                elif y < 0.55 and c.summable:
                    aggs.append(f"SUM({c.name})")
                    kinds.append("dec" if c.kind != "float" else "float")
                elif y < 0.6:
                    aggs.append(f"COUNT(DISTINCT {c.name})")
                    kinds.append("int")
                elif y < 0.65 and c.summable:
                    aggs.append(f"AVG({c.name})")
                    kinds.append("float")
                elif c.kind != "bool":
                    aggs.append(f"{r.choice(['MIN', 'MAX'])}({c.name})")
                    kinds.append(c.kind)
                else:
                    aggs.append(f"COUNT({c.name})")
                    kinds.append("int")
            where = f" WHERE {self.pred(t)}" if r.random() < 0.4 else ""
            if r.random() < 0.2:
                items = ", ".join(f"{a} AS c{i + 1}" for i, a in enumerate(aggs))
                sql = f"SELECT {items} FROM {t.name}{where}"
            else:
                items = ", ".join(f"{a} AS c{i + 2}" for i, a in enumerate(aggs))
                having = f" HAVING COUNT(*) > {r.randint(0, 2)}" if r.random() < 0.2 else ""
                sql = f"SELECT {g.name} AS c1, {items} FROM {t.name}{where} GROUP BY {g.name}{having}"
                kinds = [g.kind, *kinds]
        elif x < 0.78:
            a, kinds = self.simple_select(t)
            u = r.choice(self.tables)
            b, _ = self.simple_select(u, kinds)
            if not b:
                b, _ = self.simple_select(t, kinds)
            op = r.choice(["UNION", "UNION ALL", "EXCEPT", "EXCEPT ALL", "INTERSECT", "INTERSECT ALL"])
            sql = f"{a} {op} {b}"
        elif x < 0.92:
            u = r.choice(self.tables)
            ka = [c for c in t.cols if c.kind == "int"]
            kb = [c for c in u.cols if c.kind == "int"]
            a, b = r.choice(ka), r.choice(kb)
            y = r.random()
            if y < 0.3:
                cond = (
                    f"{a.name} {r.choice(['', 'NOT '])}IN (SELECT {b.name} FROM {u.name} WHERE {self.pred(u)})"
                )
            elif y < 0.6:
                cond = (
                    f"{r.choice(['', 'NOT '])}EXISTS (SELECT 1 FROM {u.name} s "
                    f"WHERE s.{b.name} = {t.name}.{a.name})"
                )
            elif y < 0.9:
                agg = r.choice(["MAX", "MIN"])
                cond = f"{a.name} {r.choice(['<', '>=', '='])} (SELECT {agg}({b.name}) FROM {u.name})"
            else:  # a scalar subquery that may return several rows: an error in PostgreSQL if it does
                cond = f"{a.name} = (SELECT {b.name} FROM {u.name} WHERE {self.pred(u)})"
            _, kinds = self.simple_select(t)
            items = self.last_items
            if r.random() < 0.3:
                items += f", (SELECT COUNT(*) FROM {u.name} z WHERE z.{b.name} = {t.name}.{a.name}) AS cz"
                kinds = [*kinds, "int"]
            sql = f"SELECT {items} FROM {t.name} WHERE {cond}"
        elif x < 0.96 and views_ok and self.views:
            sql, kinds = self.over_view()
        else:  # a common table expression
            inner, kinds = self.simple_select(t)
            if r.random() < 0.5:
                sql = f"WITH w AS ({inner}) SELECT c1 AS c1, COUNT(*) AS c2 FROM w GROUP BY c1"
                kinds = [kinds[0], "int"]
            else:
                cols = ", ".join(f"c{i + 1}" for i in range(len(kinds)))
                sql = f"WITH w AS ({inner}) SELECT DISTINCT {cols} FROM w WHERE c1 IS NOT NULL"
        limited = False
        if r.random() < 0.2:
            order = ", ".join(f"{i + 1} {r.choice(['', 'DESC'])}".strip() for i in range(len(kinds)))
            sql += f" ORDER BY {order} LIMIT {r.randint(1, 4)}"
            if r.random() < 0.3:
                sql += f" OFFSET {r.randint(1, 2)}"
            limited = True
        return sql, kinds, limited

    def over_view(self) -> tuple[str, list[str]]:
        """A query over a view: all of it, filtered, grouped, or joined with a table."""
        r = self.r
        vname, kinds = r.choice(self.views)
        x = r.random()
        if x < 0.4:
            return f"SELECT * FROM {vname}" + (" WHERE c1 IS NOT NULL" if r.random() < 0.5 else ""), kinds
        if x < 0.7:
            return f"SELECT c1 AS c1, COUNT(*) AS c2 FROM {vname} GROUP BY c1", [kinds[0], "int"]
        t = r.choice(self.tables)
        same = [c for c in t.cols if c.kind == kinds[0]]
        if not same:
            return f"SELECT DISTINCT c1 AS c1 FROM {vname}", kinds[:1]
        c = r.choice(same)
        join = r.choice(["JOIN", "LEFT JOIN"])
        return (
            f"SELECT v.c1 AS c1, t.{c.name} AS c2 FROM {vname} v {join} {t.name} t ON v.c1 = t.{c.name}",
            [kinds[0], c.kind],
        )

    def broken(self) -> str:
        """A statement PostgreSQL rejects: bad syntax, a missing table or column, an ambiguous name."""
        r = self.r
        t = r.choice(self.tables)
        a, b = t.cols[0].name, t.cols[-1].name
        u = r.choice(self.tables)
        return r.choice(
            [
                f"SELEC * FROM {t.name}",
                f"INSERT INTO {t.name} VALUES (1,",
                f"SELECT * FROM {t.name} WHERE",
                f"UPDATE {t.name} SET = 1",
                f"DELETE {t.name} WHERE {a} = 1",
                f"SELECT {a} {b} c FROM {t.name}",
                f"SELECT * FROM {t.name} GROUP BY",
                f"SELECT ({a} FROM {t.name}",
                f"INSERT INTO {t.name} ({a}) VALUES (1, 2)",
                f"INSERT INTO {t.name} VALUES ({', '.join(['1'] * (len(t.cols) + 1))})",
                "SELECT * FROM nosuch",
                "INSERT INTO nosuch VALUES (1)",
                "DELETE FROM nosuch",
                f"UPDATE {t.name} SET nosuch = 1",
                f"DELETE FROM {t.name} WHERE nosuch = 1",
                f"SELECT nosuch FROM {t.name}",
                f"INSERT INTO {t.name} (nosuch) VALUES (1)",
                f"SELECT {a}, COUNT(*) FROM {t.name} GROUP BY {b}"
                if a != b
                else f"SELECT {a} FROM {t.name} x, y",
                f"SELECT {u.cols[0].name} FROM {t.name} JOIN {u.name} ON TRUE" if t is not u else "SELECT 1 +",
                f"UPDATE {t.name} SET {a} = 1 WHERE nosuch IS NULL",
                f"SELECT * FROM {t.name} WHERE {a} = 'not a number'" if t.cols[0].kind == "int" else "SELECT",
                f"INSERT INTO {t.name} ({a}, {a}) VALUES (1, 2)",
                f"UPDATE {t.name} SET {b} = NULL, {b} = NULL",
                f"SELECT x.{a} FROM {t.name} x JOIN {u.name} x ON TRUE",
                f"SELECT {a} FROM {t.name} ORDER BY 2",
                f"SELECT * FROM {t.name} ORDER BY {len(t.cols) + 1}",
                "SELECT * FROM nosuch ORDER BY 1",
                f"SELECT SUM(COUNT(*)) FROM {t.name}",
                f"CREATE TABLE {t.name} (x INTEGER)",
                "CREATE TABLE tz (x INTEGER, x INTEGER)",
                "CREATE TABLE tz (x INTEGER PRIMARY KEY, y INTEGER PRIMARY KEY)",
                "CREATE TABLE tz (x INTEGER, PRIMARY KEY (y))",
                f"CREATE VIEW {t.name} AS SELECT 1 AS c1",
                "CREATE VIEW vz AS SELECT * FROM nosuch",
                f"SELECT {a} FROM {t.name} WHERE {a} IN (SELECT {a}, {b} FROM {t.name})",
                f"SELECT {a} FROM {t.name} UNION SELECT {a}, {b} FROM {t.name}",
                f"INSERT INTO {t.name} ({a}) SELECT {a}, {a} FROM {t.name}",
                f"DELETE FROM {t.name} WHERE COUNT(*) > 1",
                f"UPDATE {t.name} SET {a} = (SELECT {a} FROM {t.name})",
            ]
        )

    # a script --------------------------------------------------------------------------------------------
    def script(self, n: int):
        """Yields Stmt; ``n`` random statements after the schema."""
        r = self.r
        for i in range(r.randint(2, 3)):
            t = self.table(f"t{i}")
            self.tables.append(t)
            yield Stmt(t.ddl(False), t.ddl(True))
        for t in self.tables:
            for _ in range(2):
                yield Stmt.same(self.insert_values(t))
        for _ in range(n):
            yield from self.one()
        if self.in_tx:
            yield Stmt.same(r.choice(["COMMIT", "ROLLBACK"]))

    def one(self):
        r = self.r
        if self.in_tx:
            self.tx_left -= 1
            if self.tx_left <= 0:
                self.in_tx = False
                yield Stmt.same(r.choice([*COMMITS, *COMMITS, *ROLLBACKS]))
                return
        x = r.random()
        views_ok = not self.in_tx
        if not self.in_tx and x < 0.08:
            self.in_tx, self.tx_left = True, r.randint(2, 7)
            yield Stmt.same(r.choice(BEGINS))
        elif x < 0.09:
            # stray, which PostgreSQL only warns of: BEGIN inside a block, COMMIT or ROLLBACK outside one (not
            # BEGIN there: it would open a block the generator does not know of, where it would read views,
            # which ivm reads as of the last commit inside a block, as documented)
            yield Stmt.same(r.choice(BEGINS if self.in_tx else [*COMMITS, *ROLLBACKS]))
        elif not self.in_tx and x < 0.14 and len(self.views) < 5:
            sql, kinds, limited = self.query(views_ok=True)
            name = f"v{len(self.views)}"
            self.views.append((name, kinds))
            mat = "MATERIALIZED " if r.random() < 0.5 else ""
            yield Stmt(f"CREATE {mat}VIEW {name} AS {sql}", f"CREATE VIEW {name} AS {sql}")
        elif not self.in_tx and x < 0.15:
            if self.views and r.random() < 0.8:
                yield Stmt.same(f"DROP VIEW {r.choice(self.views)[0]}")
            else:
                yield Stmt.same(f"DROP TABLE {r.choice(self.tables).name}")
        elif x < 0.2:
            yield Stmt.same(self.broken())
        elif x < 0.27:
            parts = [self.write(views_ok=False) for _ in range(r.randint(2, 3))]
            yield Stmt.same("; ".join(parts))
        elif x < 0.5:
            sql, kinds, limited = self.query(views_ok)
            yield Stmt.same(self.surface(sql), query=True, ordered=limited)
        else:
            yield Stmt.same(self.surface(self.write(views_ok)))

    def surface(self, sql: str) -> str:
        """The statement as people also write it: with a semicolon, a comment, extra blanks."""
        x = self.r.random()
        if x < 0.03:
            return sql + ";"
        if x < 0.05:
            return f"/* c */ {sql}"
        if x < 0.07:
            return f"{sql} -- c"
        if x < 0.08:
            return f"\n  {sql} ;\n"
        return sql


# -- comparison ----------------------------------------------------------------------------------------------
def _norm(v):
    if v is None:
        return ("0",)
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, float):
        return ("n", float(f"{v:.8g}") if math.isfinite(v) else v)
    if isinstance(v, (int, decimal.Decimal)):
        return ("n", float(f"{float(v):.8g}"))
    if isinstance(v, (dt.date, str)):
        return ("s", type(v).__name__, str(v))
    return ("z", repr(v))


def _eq(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    num = (int, float, decimal.Decimal)
    if isinstance(a, num) and isinstance(b, num):
        if isinstance(a, float) or isinstance(b, float):
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        return decimal.Decimal(a) == decimal.Decimal(b)
    return type(a) is type(b) and a == b


def _row_eq(x, y) -> bool:
    return len(x) == len(y) and all(_eq(a, b) for a, b in zip(x, y, strict=True))


def _order_key(v):
    """``v`` exactly, but a float to 9 significant digits (two computations of one double may differ)."""
    if isinstance(v, bool) or v is None:
        return (type(v).__name__, v)
    if isinstance(v, float):
        return ("n", float(f"{v:.9g}") if math.isfinite(v) else v)
    if isinstance(v, (int, decimal.Decimal)):
        return ("n", decimal.Decimal(v).normalize())
    return (type(v).__name__, v)


def same_rows(got: list, want: list, ordered: bool = False) -> bool:
    """Whether two results hold the same rows (floats to 1e-9 relative), with the same multiplicities; with
    ``ordered`` also in the same order (up to floats that differ in their last digits)."""
    if len(got) != len(want):
        return False
    if ordered:
        if all(_row_eq(x, y) for x, y in zip(got, want, strict=True)):
            return True
        keys = [tuple(map(_order_key, row)) for row in got] == [tuple(map(_order_key, row)) for row in want]
        return keys and same_rows(got, want)

    def key(row):
        return tuple(_norm(v) for v in row)

    g, w = sorted(got, key=key), sorted(want, key=key)
    if all(_row_eq(x, y) for x, y in zip(g, w, strict=True)):
        return True
    left = list(w)  # rounding put near-equal floats on different sides of a key: match greedily
    for row in g:
        hit = next((i for i, other in enumerate(left) if _row_eq(row, other)), None)
        if hit is None:
            return False
        left.pop(hit)
    return True


def _show(rows, ordered: bool = False) -> str:
    if rows is not None and not ordered:
        rows = sorted(rows, key=lambda row: tuple(_norm(v) for v in row))
    text = repr(rows)
    return text if len(text) < 1500 else text[:1500] + "..."


EXPECTED_CLASS = {"23": ivm.IntegrityError, "22": ivm.DataError, "42": ivm.ProgrammingError}


CONTROL = ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT")  # transaction control statements
DDL = re.compile(r"\s*(CREATE|DROP)\s+(?:MATERIALIZED\s+)?(?:TABLE|VIEW)\s+(\w+)", re.IGNORECASE)


class Mismatch(AssertionError):
    """A discrepancy: ``kind`` names its class, the message holds the script that shows it."""

    def __init__(self, kind: str, detail: str, log: list[str]) -> None:
        self.kind = kind
        self.detail = detail
        self.log = list(log)
        shown = log if len(log) <= 60 else [*log[:6], "...", *log[-50:]]
        super().__init__(
            f"{kind}\n{detail}\nscript (ivm side, one execute() per line; a line starting with '--' is a "
            "statement ivm refused as not supported, which PostgreSQL skipped, or a note on what PostgreSQL "
            "ran instead):\n  " + "\n  ".join(shown)
        )


class Differ:
    """Runs statements on an ivm connection and a PostgreSQL connection and checks them after each."""

    def __init__(self, pg: psycopg.Connection) -> None:
        self.db = ivm.connect()
        self.pg = pg
        self.cur = pg.cursor()
        self.relations: list[str] = []
        self.view_sql: dict[str, str] = {}  # a view's CREATE statement, to know what it reads
        self.log: list[str] = []
        self.snapshot: dict[str, object] = {}
        self.statements = 0

    def fail(self, kind: str, detail: str):
        raise Mismatch(kind, detail, self.log)

    def status(self) -> TransactionStatus:
        return self.pg.info.transaction_status

    def ivm_read(self, sql: str):
        try:
            self.db.execute(sql)
            return self.db.fetchall()
        except ivm.Error as e:
            return e
        except Exception as e:  # noqa: BLE001 - anything but ivm.Error is the defect reported
            self.fail("non-ivm exception", f"{type(e).__name__}: {e} reading {sql!r}")

    def pg_read(self, sql: str):
        try:
            self.cur.execute(sql)
            return self.cur.fetchall()
        except psycopg.Error as e:
            return e

    def ivm_state(self) -> dict[str, object]:
        return {name: self.ivm_read(f"SELECT * FROM {name}") for name in self.relations}

    def run(self, st: Stmt) -> None:
        self.statements += 1
        before = self.status()
        self.log.append(st.ivm_sql)
        ivm_err = None
        ivm_rows = None
        try:
            self.db.execute(st.ivm_sql)
            ivm_rows = self.db.fetchall() if st.query else None
        except ivm.Error as e:
            ivm_err = e
        except Exception as e:  # noqa: BLE001
            self.fail("non-ivm exception", f"{type(e).__name__}: {e}")
        if isinstance(ivm_err, ivm.NotSupportedError):
            self.log[-1] = f"-- {st.ivm_sql}  [ivm: NotSupportedError: {ivm_err}]"
            self.refused(before)
            return
        ddl = DDL.match(st.ivm_sql)
        other = self.other_view_in_error(st.ivm_sql, ddl, ivm_err)
        pg_err = None
        pg_rows = None
        alone = other is not None and before == TransactionStatus.IDLE
        if alone:  # in a transaction block of its own, to be undone should PostgreSQL succeed
            self.cur.execute("BEGIN")
        try:
            self.cur.execute(st.pg_sql)
            if st.query:
                pg_rows = self.cur.fetchall()
        except psycopg.Error as e:
            pg_err = e
        done = self.cur.statusmessage
        if alone:
            self.cur.execute("ROLLBACK")
        after = self.status()
        if other is not None and pg_err is None:
            pg_err = self.over_reported(other, before, ivm_err, done)
        if ivm_err is not None and pg_err is None and self.uncomputable_view(ddl, ivm_err):
            pg_err = ivm_err  # as documented: a view that fails when created is not created
        if ivm_err is not None and pg_err is None:
            self.fail(
                "ivm rejects what PostgreSQL accepts",
                f"ivm: {type(ivm_err).__name__}: {ivm_err}\nPostgreSQL: ok ({done})",
            )
        if ivm_err is None and pg_err is not None:
            self.fail(
                "ivm accepts what PostgreSQL rejects",
                f"PostgreSQL: {pg_err.sqlstate} {type(pg_err).__name__}: {pg_err}\nivm: ok",
            )
        if ivm_err is not None and pg_err is not ivm_err:
            self.log[-1] += f"  -- fails: {type(ivm_err).__name__} / {pg_err.sqlstate}"
            _soft_class_check(st.ivm_sql, ivm_err, pg_err)
        if st.query and ivm_err is None and not same_rows(ivm_rows, pg_rows, st.ordered):
            self.fail(
                "query result differs",
                f"ivm:        {_show(ivm_rows, st.ordered)}\nPostgreSQL: {_show(pg_rows, st.ordered)}",
            )
        if ivm_err is None and ddl and ddl[1].upper() == "CREATE":
            self.relations.append(ddl[2])
            if re.search(r"\bVIEW\b", st.ivm_sql[: ddl.end()], re.IGNORECASE):
                self.view_sql[ddl[2]] = st.ivm_sql
        elif ivm_err is None and ddl and ddl[2] in self.relations:
            self.relations.remove(ddl[2])
            self.view_sql.pop(ddl[2], None)
        if after == TransactionStatus.IDLE:
            state = self.ivm_state()
            if ivm_err is not None and before == TransactionStatus.IDLE:
                self.compare_states("a rejected statement changed ivm", self.snapshot, state, "before", "after")
            self.compare_states(
                "table or view differs", state, {n: self.pg_read(f"SELECT * FROM {n}") for n in self.relations}
            )
            self.snapshot = state

    def uncomputable_view(self, ddl: re.Match | None, err: Exception) -> bool:
        """Whether ivm refused a CREATE VIEW because a row's value cannot be computed (a DataError: README,
        "a view that fails when created is not created") where PostgreSQL created it but cannot read it either
        (SQLSTATE class 22); then PostgreSQL drops it again so that both go on without it."""
        if not (ddl and ddl[1].upper() == "CREATE" and isinstance(err, ivm.DataError)):
            return False
        if self.status() != TransactionStatus.IDLE:
            return False
        read = self.pg_read(f"SELECT * FROM {ddl[2]}")
        if not (isinstance(read, psycopg.Error) and (read.sqlstate or "").startswith("22")):
            return False
        self.cur.execute(f"DROP VIEW {ddl[2]}")
        self.log[-1] += f"  -- ivm: {err}; PostgreSQL cannot read it ({read.sqlstate}) and drops it"
        return True

    def refused(self, before: TransactionStatus) -> None:
        """NotSupportedError. Outside a transaction block ivm must be as it was, and PostgreSQL skips the
        statement. Inside one, the error aborts ivm's transaction as any error does; PostgreSQL's is aborted
        by a statement that fails, and what both hold shows when the block ends (check 4)."""
        if before == TransactionStatus.IDLE:
            self.compare_states(
                "NotSupportedError changed ivm", self.snapshot, self.ivm_state(), "before", "after"
            )
        elif before == TransactionStatus.INTRANS:
            self.abort_pg("ivm's transaction is aborted by its error")

    def abort_pg(self, why: str) -> None:
        """Aborts PostgreSQL's transaction block, as an error in ivm aborted ivm's."""
        with contextlib.suppress(psycopg.Error):
            self.cur.execute("SELECT 1/0")
        assert self.status() == TransactionStatus.INERROR
        self.log.append(f"-- (PostgreSQL: SELECT 1/0: {why})")

    def reads(self, sql: str) -> set[str]:
        """The views ``sql`` reads, directly or through other views."""
        out: set[str] = set()
        todo = [sql]
        while todo:
            for word in re.findall(r"\w+", todo.pop()):
                if word in self.view_sql and word not in out:
                    out.add(word)
                    todo.append(self.view_sql[word])
        return out

    def other_view_in_error(self, sql: str, ddl: re.Match | None, err: Exception | None) -> str | None:
        """The view a DataError of ivm says "is in error" when the statement does not read it: ivm may report
        the error of a view whose arrangements the statement reads (documented)."""
        if not isinstance(err, ivm.DataError):
            return None
        m = re.search(r"\bview '(\w+)' is in error", str(err))
        if m is None or m[1] in self.reads(sql) or (ddl and ddl[2] == m[1]):
            return None
        if sql.strip().rstrip(";").strip().split(" ")[0].upper() in CONTROL:
            return None
        return m[1]

    def over_reported(self, view: str, before: TransactionStatus, err: ivm.Error, done: str | None):
        """PostgreSQL succeeded where ivm reported the error of ``view``, which the statement does not read:
        allowed while that view is in error (PostgreSQL's statement was undone, or its transaction block is
        aborted here as ivm's is)."""
        if view not in self.db.view_errors():
            self.fail(
                "ivm rejects what PostgreSQL accepts (naming a view in error that is not)",
                f"ivm: {type(err).__name__}: {err}\nPostgreSQL: ok ({done})\n"
                f"ivm's views in error: {self.db.view_errors()}",
            )
        if before == TransactionStatus.IDLE:
            self.log[-1] += f"  -- ivm: {err}; allowed while {view} is in error (PostgreSQL undid it)"
        else:
            self.log[-1] += f"  -- ivm: {err}; allowed while {view} is in error"
            self.abort_pg(f"ivm reported {view}'s error and aborted its transaction")
        return err

    def compare_states(self, kind: str, got: dict, want: dict, a: str = "ivm", b: str = "PostgreSQL") -> None:
        for name in got:
            g, w = got[name], want.get(name)
            if isinstance(g, Exception) or isinstance(w, Exception):
                if isinstance(g, Exception) != isinstance(w, Exception):
                    self.fail(
                        f"{kind}: reading {name} fails on one side only",
                        f"{a}: {_show_err(g)}\n{b}: {_show_err(w)}",
                    )
                continue
            if not same_rows(g, w):
                self.fail(f"{kind}: {name}", f"{a + ':':11} {_show(g)}\n{b + ':':11} {_show(w)}")


def _show_err(v) -> str:
    if isinstance(v, Exception):
        return f"{type(v).__name__}: {v}"
    return _show(v)


def _soft_class_check(sql: str, ivm_err: Exception, pg_err: psycopg.Error) -> None:
    state = pg_err.sqlstate or ""
    want = ivm.InternalError if state == "25P02" else EXPECTED_CLASS.get(state[:2])
    if want is None or isinstance(ivm_err, want):
        return
    key = (want.__name__, type(ivm_err).__name__)
    entry = CLASS_MISMATCHES.setdefault(key, [0, state, sql, str(ivm_err)])
    entry[0] += 1


def run_script(pg: psycopg.Connection, seed: int, statements: int = STATEMENTS) -> Differ:
    d = Differ(pg)
    for st in Gen(seed).script(statements):
        d.run(st)
    return d


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + SCRIPTS))
def test_fuzz_against_postgres(pg, seed):
    run_script(pg, seed)
