"""Spark SQL's semantics: a query parsed in Spark's dialect, rewritten into one with PostgreSQL's semantics that
computes the same values, its types known from the tables'.

The engine and the translator stay PostgreSQL's; what Spark SQL answers differently is made explicit in the
tree, so that the query, written back as PostgreSQL (as a view's text is kept), means Spark's answer:

- ``/`` of integers or doubles is division in DOUBLE PRECISION; of decimals, Spark's result type DECIMAL(p, s)
  and its rounding (half up), as ``CAST(ROUND(a / b, s) AS DECIMAL(p, s))``; ``div`` is integer division.
- ``AVG`` of DECIMAL(p, s) is DECIMAL(p + 4, s + 4), rounded half up: ``CAST(ROUND(SUM(x) / COUNT(x), s + 4)
  AS DECIMAL(p + 4, s + 4))``. SUM keeps its values; its type, DECIMAL(p + 10, s), is the view's output type.
- ``round`` of a DOUBLE rounds its shortest decimal half up (away from zero): ``ROUND(x, 0)``, where
  PostgreSQL's ``ROUND(x)`` rounds half to even. ``concat`` and ``||`` are NULL when an argument is, and write
  a BOOLEAN as ``true``: ``||`` of the values cast to text (PostgreSQL's CONCAT skips NULLs and writes ``t``).
  A DOUBLE written as text is refused (Java writes ``2.0`` and ``1.0E20``).
- ORDER BY items without NULLS FIRST/LAST get Spark's default (NULLs first ascending, last descending).
- CAST is ANSI's (an error where a value does not convert), ``1e3`` is a DOUBLE, names are case-insensitive.
- ``timestamp`` values are instants (held in UTC); EXTRACT, hour() and its kin, and CAST to DATE, STRING or
  TIMESTAMP_NTZ read them in the session time zone (``(ts AT TIME ZONE 'UTC') AT TIME ZONE 'zone'``), and
  timestamp constants are read in it. ``timestamp_ntz`` values are wall times, read as they are.

What would need more than 18 decimal digits, or a wall time turned back into an instant outside UTC, is refused
with an error naming the construct. Spark types are tracked beside the rewrite (``SparkType``), for decimal
precision and for the output schema a view hands back to Spark.

    >>> stmt = sqlglot.parse_one("SELECT a div 2 AS q FROM t ORDER BY q LIMIT 1", read="spark")
    >>> to_postgres(stmt, {"t": {"a": SparkType("int")}}, Spark()).sql("postgres")
    'SELECT t.a / 2 AS q FROM t AS t ORDER BY q NULLS FIRST LIMIT 1'
"""

from __future__ import annotations

import datetime as dt
import decimal
import zoneinfo
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.schema import MappingSchema

from sql.errors import SqlError, error_at
from sql.translate import _locate as locate

__all__ = ["Spark", "SparkType", "to_postgres", "schema_types", "relations_of"]

T = exp.DataType.Type


@dataclass(frozen=True)
class SparkType:
    """A Spark SQL type: ``kind`` is byte, short, int, long, double, decimal (``p``, ``s``), string, boolean,
    date, timestamp (an instant), timestamp_ntz (a wall time), null, or unknown (what this module does not
    type, which no rewrite depends on). ``literal`` marks an integer constant, which Spark widens to a decimal
    of just its digits."""

    kind: str
    p: int = 0
    s: int = 0
    literal: bool = False

    @property
    def integral(self) -> bool:
        return self.kind in _DIGITS

    @property
    def numeric(self) -> bool:
        return self.integral or self.kind in ("double", "decimal")

    def as_decimal(self) -> SparkType:
        """This integral or decimal type as the decimal Spark widens it to."""
        if self.kind == "decimal":
            return self
        return SparkType("decimal", self.p if self.literal else _DIGITS[self.kind], 0)

    def __str__(self) -> str:
        return f"DECIMAL({self.p},{self.s})" if self.kind == "decimal" else self.kind.upper()


_DIGITS = {"byte": 3, "short": 5, "int": 10, "long": 20}
UNKNOWN = SparkType("unknown")
DOUBLE = SparkType("double")
LONG = SparkType("long")
BOOLEAN = SparkType("boolean")
STRING = SparkType("string")
MAX_DIGITS = 18  # what ivm holds


@dataclass
class Spark:
    """The Spark dialect of statements: ``time_zone`` is the session's (``spark.sql.session.timeZone``);
    ``tables`` the Spark types of the tables' columns (``schema_types``); ``views`` those of the views created
    so far, filled as they are."""

    time_zone: str = "UTC"
    tables: dict[str, dict[str, SparkType]] = field(default_factory=dict)
    views: dict[str, dict[str, SparkType]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            zoneinfo.ZoneInfo(self.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as err:
            raise SqlError(f"time zone {self.time_zone!r} not recognized") from err


def spark_type(dtype: exp.DataType) -> SparkType:
    """The Spark type of a sqlglot data type (as PostgreSQL's or Spark's dialect reads it)."""
    t = dtype.this
    simple = {
        T.TINYINT: "byte",
        T.SMALLINT: "short",
        T.INT: "int",
        T.BIGINT: "long",
        T.DOUBLE: "double",
        T.FLOAT: "double",
        T.TEXT: "string",
        T.VARCHAR: "string",
        T.CHAR: "string",
        T.BOOLEAN: "boolean",
        T.DATE: "date",
        T.TIMESTAMP: "timestamp_ntz",
        T.TIMESTAMPNTZ: "timestamp_ntz",
        T.TIMESTAMPTZ: "timestamp",
        T.TIMESTAMPLTZ: "timestamp",
    }
    if t in simple:
        return SparkType(simple[t])
    if t == T.DECIMAL:
        params = [int(p.this.this if isinstance(p, exp.DataTypeParam) else p.this) for p in dtype.expressions]
        return SparkType("decimal", *(params + [10, 0][len(params) :]))
    return UNKNOWN


def schema_types(schema: str) -> tuple[str, dict[str, dict[str, SparkType]]]:
    """The CREATE TABLE statements of ``schema`` (PostgreSQL) for the engine, and the Spark type of every
    column: ``TIMESTAMP WITH TIME ZONE`` (Spark's ``timestamp``, an instant) is held as a TIMESTAMP in UTC,
    ``TIMESTAMP`` is Spark's ``timestamp_ntz``; integer widths are kept for Spark's decimal widening."""
    try:
        statements = [s for s in sqlglot.parse(schema, read="postgres") if s is not None]
    except SqlglotError:
        return schema, {}  # the engine reports the syntax error
    types: dict[str, dict[str, SparkType]] = {}
    for stmt in statements:
        if not (isinstance(stmt, exp.Create) and isinstance(stmt.this, exp.Schema)):
            continue
        cols = types.setdefault(stmt.this.this.name.lower(), {})
        for c in stmt.this.expressions:
            if isinstance(c, exp.ColumnDef) and isinstance(c.args.get("kind"), exp.DataType):
                cols[c.name if c.this.quoted else c.name.lower()] = spark_type(c.args["kind"])
                if c.args["kind"].this in (T.TIMESTAMPTZ, T.TIMESTAMPLTZ):
                    c.set("kind", exp.DataType.build("TIMESTAMP"))
    return ";\n".join(s.sql("postgres") for s in statements), types


def to_postgres(
    stmt: exp.Expression, relations: dict[str, dict[str, SparkType]], spark: Spark
) -> exp.Expression:
    """``stmt`` (parsed in Spark's dialect, names folded) as a statement of PostgreSQL's semantics computing
    what Spark SQL computes; ``relations`` gives the Spark types of the columns of every table and view. A
    CREATE VIEW records its columns' Spark types in ``spark.views``."""
    if isinstance(stmt, exp.Create) and (stmt.args.get("kind") or "").upper() == "VIEW":
        query, types = _query(stmt.expression, relations, spark)
        stmt.set("expression", query)
        spark.views[stmt.this.name] = types
        return stmt
    if isinstance(stmt, exp.Query):
        return _query(stmt, relations, spark)[0]
    raise error_at(stmt, "only queries and CREATE VIEW are read in Spark's dialect", unsupported=True)


def _query(query: exp.Expression, relations, spark: Spark) -> tuple[exp.Expression, dict[str, SparkType]]:
    for node in list(query.find_all(exp.TryCast)):
        if node.args.get("safe"):
            raise error_at(node, "TRY_CAST is not supported", unsupported=True)
        node.replace(exp.Cast(this=node.this, to=node.args["to"]))
    for node in query.find_all(exp.RegexpReplace):  # Java's patterns, every match replaced, $1 for a group
        raise error_at(node, "regexp_replace() is not supported in Spark's dialect", unsupported=True)
    schema = {
        r: {c: _sqlglot_type(t) for c, t in cols.items()}
        for r, cols in relations.items()
        if cols  # sqlglot needs a type for each column: unknown ones are read as text, which nothing relies on
    }
    original = query.copy()
    try:
        query = qualify(
            query,
            schema=MappingSchema(schema, dialect="spark", normalize=False),
            dialect="spark",
            validate_qualify_columns=True,
            quote_identifiers=False,
            identify=False,
        )
    except OptimizeError as err:  # an unknown or ambiguous column: no rewrite may guess
        raise locate(original, str(err)) from err
    except (SqlglotError, KeyError, ValueError, TypeError, AssertionError) as err:
        raise error_at(original, f"the query cannot be resolved: {err}") from err
    typer = _Typer(query, relations, spark)
    edits = typer.plan()
    selects = query.selects if isinstance(query, exp.Query) else []
    types = {s.alias_or_name: typer.types.get(id(s.unalias()), UNKNOWN) for s in selects}
    for node, edit in edits:
        new = edit(node)
        if new is not node:
            node.replace(new)
    return query, types


def relations_of(catalog, spark: Spark) -> dict[str, dict[str, SparkType]]:
    """The Spark types of the columns of every table and view of ``catalog``: as ``spark`` knows them, or
    else as the engine holds them (integers as BIGINT, timestamps as TIMESTAMP_NTZ)."""
    out = {}
    for name, rel in [*catalog.tables.items(), *catalog.views.items()]:
        known = spark.tables.get(name) or spark.views.get(name) or {}
        out[name] = {c.name: known.get(c.name) or _from_engine(c.type) for c in rel.columns}
    return out


def _from_engine(t) -> SparkType:
    if t.kind == "decimal":
        return SparkType("decimal", t.precision, t.scale)
    if t.kind == "int":
        return SparkType({16: "short", 32: "int"}.get(t.precision, "long"))
    kinds = {
        "float": "double",
        "text": "string",
        "bool": "boolean",
        "timestamp": "timestamp_ntz",
    }
    return SparkType(kinds.get(t.kind, t.kind))


def _sqlglot_type(t: SparkType) -> str:
    return {
        "byte": "TINYINT",
        "short": "SMALLINT",
        "int": "INT",
        "long": "BIGINT",
        "double": "DOUBLE",
        "decimal": f"DECIMAL({t.p},{t.s})",
        "boolean": "BOOLEAN",
        "date": "DATE",
        "timestamp": "TIMESTAMP",
        "timestamp_ntz": "TIMESTAMP_NTZ",
    }.get(t.kind, "STRING")


def _bounded(p: int, s: int) -> SparkType:
    return SparkType("decimal", min(p, 38), min(s, 38))


def _adjusted(p: int, s: int) -> SparkType:
    """Spark's DecimalType.adjustPrecisionScale: beyond 38 digits the scale gives way, down to 6."""
    if p <= 38:
        return SparkType("decimal", p, s)
    whole = p - s
    return SparkType("decimal", 38, max(38 - whole, min(s, 6)))


def _wider(types: list[SparkType]) -> SparkType:
    """The type Spark finds for CASE, COALESCE and set operations: the widest number, else the first type."""
    real = [t for t in types if t.kind not in ("null", "unknown")]
    if not real:
        return types[0] if types else UNKNOWN
    if all(t.numeric for t in real):
        if any(t.kind == "double" for t in real):
            return DOUBLE
        if any(t.kind == "decimal" for t in real):
            decs = [t.as_decimal() for t in real]
            s = max(d.s for d in decs)
            return _bounded(max(d.p - d.s for d in decs) + s, s)
        return max(real, key=lambda t: _DIGITS[t.kind])
    return real[0]


_EXTRACTS = {
    exp.Year: "YEAR",
    exp.Quarter: "QUARTER",
    exp.Month: "MONTH",
    exp.Day: "DAY",
    exp.DayOfMonth: "DAY",
    exp.Hour: "HOUR",
    exp.Minute: "MINUTE",
}
_DOUBLE = exp.DataType.build("DOUBLE PRECISION", dialect="postgres")
_TEXT = exp.DataType.build("TEXT", dialect="postgres")
_DOUBLE_AS_TEXT = (
    "a DOUBLE written as text is not supported in Spark SQL (Spark writes it as Java's Double.toString does, "
    "2.0 and 1.0E20, where PostgreSQL writes 2 and 1e+20): CAST it to a DECIMAL first"
)


class _Typer:
    """The Spark type of each expression of a qualified query, and the edits that give it Spark's meaning."""

    def __init__(self, query: exp.Expression, relations, spark: Spark) -> None:
        self.query = query
        self.relations = relations
        self.spark = spark
        self.zone = zoneinfo.ZoneInfo(spark.time_zone)
        self.utc = spark.time_zone in ("UTC", "Etc/UTC", "GMT", "Z", "+00:00")
        self.types: dict[int, SparkType] = {}
        self.scope_of: dict[int, Scope] = {}
        self.scopes: list[Scope] = []
        self.edits: list[tuple[exp.Expression, object]] = []

    def plan(self) -> list:
        """The edits, innermost first (each builds on its arguments as already edited)."""
        try:
            self.scopes = list(traverse_scope(self.query))
        except (OptimizeError, SqlglotError, RecursionError):
            self.scopes = []
        for scope in self.scopes:
            for col in scope.columns:
                self.scope_of[id(col)] = scope
        order = list(self.query.walk())  # pre-order: every node before its arguments
        for node in order:
            if isinstance(node, exp.Expression):
                self.type_of(node)
        position = {id(n): i for i, n in enumerate(order)}
        return sorted(self.edits, key=lambda e: -position.get(id(e[0]), 0))

    # -- types ----------------------------------------------------------------------------------------------
    def type_of(self, node: exp.Expression) -> SparkType:
        key = id(node)
        if key not in self.types:
            self.types[key] = UNKNOWN  # a cycle (a recursive query) types as unknown
            self.types[key] = self._type(node)
        return self.types[key]

    def _type(self, node: exp.Expression) -> SparkType:
        if isinstance(node, (exp.Paren, exp.Alias)):
            return self.type_of(node.this)
        if isinstance(node, exp.Literal):
            return self._literal(node)
        if isinstance(node, exp.Null):
            return SparkType("null")
        if isinstance(node, exp.Boolean):
            return BOOLEAN
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Cast):
            return self._cast(node)
        if isinstance(node, exp.Neg):
            return self.type_of(node.this)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Mod)):
            return self._arith(node)
        if isinstance(node, exp.Div):
            return self._div(node)
        if isinstance(node, exp.IntDiv):
            return self._int_div(node)
        if isinstance(node, (exp.Predicate, exp.Connector, exp.Not, exp.Exists, exp.Is)):
            self._compared(node)
            return BOOLEAN
        if isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least)):
            return _wider([self.type_of(a) for a in [node.this, *node.expressions]])
        if isinstance(node, exp.Case):
            values = [self.type_of(i.args["true"]) for i in node.args.get("ifs") or []]
            if node.args.get("default") is not None:
                values.append(self.type_of(node.args["default"]))
            return _wider(values)
        if isinstance(node, exp.If):
            return _wider([self.type_of(node.args["true"]), self.type_of(node.args.get("false") or exp.Null())])
        if isinstance(node, exp.Nullif):
            return self.type_of(node.this)
        if isinstance(node, exp.Count):
            return LONG
        if isinstance(node, exp.Sum):
            t = self.type_of(node.this)
            return _bounded(t.p + 10, t.s) if t.kind == "decimal" else LONG if t.integral else t
        if isinstance(node, exp.Avg):
            return self._avg(node)
        if isinstance(node, (exp.Min, exp.Max)):
            return self.type_of(node.this)
        if isinstance(node, exp.Extract):
            return self._extract(node)
        if type(node) in _EXTRACTS:
            return self._extract_function(node)
        if isinstance(node, exp.TimestampTrunc):
            return self._trunc(node)
        if isinstance(node, exp.Subquery):
            inner = node.this
            return self.type_of(inner.selects[0]) if isinstance(inner, exp.Query) and inner.selects else UNKNOWN
        if isinstance(node, exp.Abs):
            return self.type_of(node.this)
        if isinstance(node, exp.Round):
            return self._round(node)
        if isinstance(node, (exp.DPipe, exp.Concat, exp.ConcatWs)):
            return self._concat(node)
        if isinstance(node, (exp.Upper, exp.Lower, exp.Substring, exp.Trim)):
            return STRING
        if isinstance(node, exp.Distinct):
            return self.type_of(node.expressions[0]) if node.expressions else UNKNOWN
        return UNKNOWN

    def _literal(self, node: exp.Literal) -> SparkType:
        if node.is_string:
            return STRING
        text = node.this
        if text.isdigit():
            n = int(text)
            kind = "int" if n < 2**31 else "long" if n < 2**63 else "decimal"
            if kind == "decimal":
                return SparkType("decimal", len(text), 0)
            return SparkType(kind, len(text.lstrip("0")) or 1, 0, literal=True)
        if "e" in text.lower():  # a number with an exponent is a DOUBLE in Spark SQL, NUMERIC in PostgreSQL
            self._edit(node, lambda n: exp.Cast(this=n.copy(), to=_DOUBLE.copy()))
            return DOUBLE
        _, digits, exponent = decimal.Decimal(text).as_tuple()
        scale = max(-exponent, 0)
        return SparkType("decimal", max(len(digits), scale), scale)

    def _column(self, node: exp.Column) -> SparkType:
        scope = self.scope_of.get(id(node))
        while scope is not None:
            source = scope.sources.get(node.table) if node.table else None
            if node.table and source is None:
                scope = scope.parent
                continue
            if source is None:  # an output name (ORDER BY): the SELECT's own expression
                select = scope.expression
                for s in getattr(select, "selects", []):
                    if s.alias_or_name == node.name:
                        return self.type_of(s)
                return UNKNOWN
            if isinstance(source, exp.Table):
                return self.relations.get(source.name, {}).get(node.name, UNKNOWN)
            query = source.expression
            while isinstance(query, exp.SetOperation):
                query = query.left
            for s in getattr(query, "selects", []):
                if s.alias_or_name == node.name:
                    return self.type_of(s)
            return UNKNOWN
        return UNKNOWN

    def _cast(self, node: exp.Cast) -> SparkType:
        to = node.args["to"]
        t = spark_type(to)
        x = node.this
        src = self.type_of(x)
        if to.this == T.DECIMAL and not to.expressions:
            node.set("to", exp.DataType.build("DECIMAL(10, 0)"))
        elif to.this == T.TINYINT:
            node.set("to", exp.DataType.build("SMALLINT"))
        if t.kind == "timestamp":
            if (
                isinstance(x, exp.Literal) and x.is_string
            ):  # a timestamp constant, read in the session time zone
                self._edit(node, lambda n: self._instant(n, x.this))
                return t
            if src.kind not in ("timestamp", "null", "unknown") and not self.utc:
                raise error_at(node, f"CAST of {src} to TIMESTAMP (an instant) {self._outside_utc()}", True)
            self._edit(node, lambda n: _retyped(n, "TIMESTAMP"))
        elif t.kind == "timestamp_ntz":
            if src.kind == "timestamp":
                self._edit(node, lambda n: self._local(n.this))
            else:
                self._edit(node, lambda n: _retyped(n, "TIMESTAMP"))
        elif src.kind == "timestamp" and t.kind in ("date", "string"):
            self._edit(node, lambda n: exp.Cast(this=self._local(n.this), to=n.args["to"].copy()))
        if t.kind == "string" and src.kind == "double":
            raise error_at(node, _DOUBLE_AS_TEXT, unsupported=True)
        return t

    def _arith(self, node: exp.Expression) -> SparkType:
        a, b = self.type_of(node.this), self.type_of(node.expression)
        kinds = {a.kind, b.kind}
        if kinds & {"timestamp", "timestamp_ntz", "date"}:
            return self._datetime_arith(node, a, b)
        if not (a.numeric or a.kind == "null") or not (b.numeric or b.kind == "null"):
            return UNKNOWN
        if "double" in kinds:
            return DOUBLE
        if "decimal" not in kinds:
            real = [t for t in (a, b) if t.integral]
            return max(real, key=lambda t: _DIGITS[t.kind]) if real else SparkType("int")
        if "null" in kinds:
            return a if a.kind == "decimal" else b
        x, y = a.as_decimal(), b.as_decimal()
        if isinstance(node, exp.Mul):
            p, s = x.p + y.p + 1, x.s + y.s
            t = _adjusted(p, s)
        elif isinstance(node, exp.Mod):
            s = max(x.s, y.s)
            return _bounded(min(x.p - x.s, y.p - y.s) + s, s)
        else:
            s = max(x.s, y.s)
            p = max(x.p - x.s, y.p - y.s) + s + 1
            t = _adjusted(p, s)
        if t.s != s:
            raise error_at(
                node,
                f"Spark SQL rounds this result of {x} and {y} to {t}, beyond the 18 digits ivm holds: CAST the "
                "operands to narrower DECIMALs or to DOUBLE",
                unsupported=True,
            )
        return t

    def _datetime_arith(self, node: exp.Expression, a: SparkType, b: SparkType) -> SparkType:
        t = a if a.kind in ("timestamp", "timestamp_ntz", "date") else b
        if t.kind == "timestamp" and not self.utc:
            for side in (node.this, node.expression):
                unit = side.unit.name.upper() if isinstance(side, exp.Interval) and side.unit else ""
                text = side.this.name.upper() if isinstance(side, exp.Interval) else ""
                if any(u in unit or u in text for u in ("YEAR", "MONTH")):
                    raise error_at(
                        node, f"a TIMESTAMP plus or minus years or months {self._outside_utc()}", True
                    )
        intervals = [side for side in (node.this, node.expression) if isinstance(side, exp.Interval)]
        if t.kind == "date" and intervals:
            said = " ".join(
                f"{side.this.name if side.this is not None else ''} {side.unit.name if side.unit else ''}"
                for side in intervals
            ).upper()
            if not any(u in said for u in ("HOUR", "MINUTE", "SECOND")):
                # Spark's date plus days, months or years is a DATE; PostgreSQL's the TIMESTAMP of its midnight
                self._edit(
                    node, lambda n: exp.Cast(this=exp.Paren(this=n.copy()), to=exp.DataType.build("DATE"))
                )
            else:  # a TIMESTAMP, an instant: from the date's midnight in the session time zone
                if not self.utc:
                    raise error_at(node, f"a DATE plus or minus hours {self._outside_utc()}", True)
                return SparkType("timestamp")
        return t

    def _div(self, node: exp.Div) -> SparkType:
        a, b = self.type_of(node.this), self.type_of(node.expression)
        if not (a.numeric or a.kind == "null") or not (b.numeric or b.kind == "null"):
            return UNKNOWN
        if "decimal" not in (a.kind, b.kind) or "double" in (a.kind, b.kind):
            self._edit(node, _double_division)
            return DOUBLE
        x, y = a.as_decimal() if a.kind != "null" else b, b.as_decimal() if b.kind != "null" else a
        scale = max(6, x.s + y.p + 1)
        t = _adjusted(x.p - x.s + y.s + scale, scale)
        if t.p > MAX_DIGITS:
            raise error_at(
                node,
                f"this division of {x} by {y} gives {t} in Spark SQL, wider than the 18 digits ivm holds: CAST "
                "an operand to DOUBLE, or to a narrower DECIMAL",
                unsupported=True,
            )
        self._edit(node, lambda n: _rounded(_div(n.this, n.expression), t))
        return t

    def _int_div(self, node: exp.IntDiv) -> SparkType:
        a, b = self.type_of(node.this), self.type_of(node.expression)
        if not ((a.integral or a.kind == "null") and (b.integral or b.kind == "null")):
            raise error_at(node, f"div of {a} and {b} is not supported (only of integers)", unsupported=True)
        self._edit(node, lambda n: _div(n.this, n.expression))
        return LONG

    def _avg(self, node: exp.Avg) -> SparkType:
        arg = node.this
        t = self.type_of(arg)
        if t.kind != "decimal":
            return DOUBLE if t.numeric else UNKNOWN
        out = _bounded(t.p + 4, t.s + 4)
        if out.p > MAX_DIGITS:
            raise error_at(
                node,
                f"AVG of {t} is {out} in Spark SQL, wider than the 18 digits ivm holds: CAST its argument to "
                f"DOUBLE, or to a DECIMAL of at most {MAX_DIGITS - 4} digits",
                unsupported=True,
            )
        if isinstance(arg, exp.Distinct):
            return out  # the translator refuses AVG(DISTINCT ...)

        def average(n: exp.Avg) -> exp.Expression:
            x = n.this
            total = exp.Sum(this=x.copy())
            count = exp.Count(this=x.copy())
            return _rounded(_div(total, count), out)

        self._edit(node, average)
        return out

    def _extract(self, node: exp.Extract) -> SparkType:
        x = self.type_of(node.expression)
        if x.kind == "timestamp":
            self._edit(node, lambda n: exp.Extract(this=n.this, expression=self._local(n.expression)))
        field_ = node.this.name.upper()
        return SparkType("decimal", 8, 6) if field_ == "SECOND" else SparkType("int")

    def _extract_function(self, node: exp.Expression) -> SparkType:
        x = self.type_of(node.this)
        unit = _EXTRACTS[type(node)]
        local = x.kind == "timestamp"

        def extract(n: exp.Expression) -> exp.Expression:
            arg = self._local(n.this) if local else n.this
            return exp.Extract(this=exp.var(unit), expression=arg)

        self._edit(node, extract)
        return SparkType("int")

    def _trunc(self, node: exp.TimestampTrunc) -> SparkType:
        x = self.type_of(node.this)
        if x.kind == "timestamp" and not self.utc:
            raise error_at(node, f"date_trunc of a TIMESTAMP (an instant) {self._outside_utc()}", True)
        if x.kind == "date":  # PostgreSQL's is a TIMESTAMP WITH TIME ZONE, Spark's an instant held as TIMESTAMP
            self._edit(node, lambda n: exp.Cast(this=n.copy(), to=exp.DataType.build("TIMESTAMP")))
        return x if x.kind != "date" else SparkType("timestamp")

    def _compared(self, node: exp.Expression) -> None:
        """A text constant compared with a TIMESTAMP is read in the session time zone; a TIMESTAMP (an
        instant) compared with a wall time (DATE, TIMESTAMP_NTZ) outside UTC is refused."""
        sides = [a for a in (node.args.get("this"), node.args.get("expression"), node.args.get("low"))]
        sides += [node.args.get("high"), *(node.args.get("expressions") or [])]
        sides = [s for s in sides if isinstance(s, exp.Expression)]
        types = [self.type_of(s) for s in sides]
        if not any(t.kind == "timestamp" for t in types) or isinstance(node, (exp.Connector, exp.Not)):
            return
        for side, t in zip(sides, types, strict=True):
            if isinstance(side, exp.Literal) and side.is_string:
                self._edit(side, lambda n: self._instant(n, n.this))
            elif t.kind in ("date", "timestamp_ntz") and not self.utc:
                raise error_at(
                    node, f"comparing a TIMESTAMP (an instant) with a {t} {self._outside_utc()}", True
                )

    # -- edits ----------------------------------------------------------------------------------------------
    def _concat(self, node: exp.DPipe | exp.Concat | exp.ConcatWs) -> SparkType:
        """Spark's ``concat`` and ``||`` are NULL when any argument is (PostgreSQL's CONCAT skips NULLs) and
        write every other value as CAST writes it (a truth value ``true``, where PostgreSQL's CONCAT writes
        ``t``): both become ``||`` of the values cast to text. ``concat_ws`` skips NULLs as PostgreSQL's does;
        its values are cast to text the same way."""
        args = [node.this, node.expression] if isinstance(node, exp.DPipe) else list(node.expressions)
        kinds = [self.type_of(a).kind for a in args]
        if not args:
            return STRING
        if "double" in kinds:
            raise error_at(args[kinds.index("double")], _DOUBLE_AS_TEXT, unsupported=True)

        def edit(n: exp.Expression) -> exp.Expression:
            now = [n.this, n.expression] if isinstance(n, exp.DPipe) else list(n.expressions)
            parts = []
            for a, kind in zip(now, kinds, strict=True):
                if kind == "timestamp":
                    a = self._local(a.copy())
                plain = kind in ("string", "null")
                parts.append(a.copy() if plain else exp.Cast(this=a.copy(), to=_TEXT.copy()))
            if isinstance(n, exp.ConcatWs):
                return exp.ConcatWs(expressions=parts)
            out = parts[0]
            for p in parts[1:]:
                out = exp.DPipe(this=out, expression=p, safe=True)
            return exp.Paren(this=out)

        self._edit(node, edit)
        return STRING

    def _round(self, node: exp.Round) -> SparkType:
        """Spark rounds a DOUBLE half up (away from zero), where PostgreSQL's ROUND(double precision) rounds
        half to even: ``ROUND(x)`` becomes ``ROUND(x, 0)``, which rounds a double half away from zero."""
        t = self.type_of(node.this)
        if t.kind != "double":
            return UNKNOWN
        if node.args.get("decimals") is None:
            self._edit(node, lambda n: exp.Round(this=n.this.copy(), decimals=exp.Literal.number(0)))
        return DOUBLE

    def _edit(self, node: exp.Expression, edit) -> None:
        self.edits.append((node, edit))

    def _local(self, x: exp.Expression) -> exp.Expression:
        """The wall time in the session time zone of the instant ``x`` (a TIMESTAMP held in UTC)."""
        if self.utc:
            return x
        utc = exp.AtTimeZone(this=exp.Paren(this=x), zone=exp.Literal.string("UTC"))
        return exp.Paren(
            this=exp.AtTimeZone(this=exp.Paren(this=utc), zone=exp.Literal.string(self.spark.time_zone))
        )

    def _instant(self, node: exp.Expression, text: str) -> exp.Expression:
        """The timestamp constant ``text`` read in the session time zone, as the TIMESTAMP of its instant (in
        UTC)."""
        try:
            wall = dt.datetime.fromisoformat(text.strip())
        except ValueError as err:
            raise error_at(node, f"invalid TIMESTAMP literal {text!r}") from err
        if wall.tzinfo is None:
            wall = wall.replace(tzinfo=self.zone)  # fold 0: the earlier of two, a gap's time moved on, as Spark
        utc = wall.astimezone(dt.UTC).replace(tzinfo=None)
        return exp.Cast(this=exp.Literal.string(utc.isoformat(sep=" ")), to=exp.DataType.build("TIMESTAMP"))

    def _outside_utc(self) -> str:
        return (
            f"in session time zone {self.spark.time_zone!r} is not supported (a wall time would have to be "
            "turned back into an instant); it is in UTC"
        )


def _retyped(node: exp.Cast, to: str) -> exp.Cast:
    return exp.Cast(this=node.this, to=exp.DataType.build(to))


def _div(a: exp.Expression, b: exp.Expression) -> exp.Div:
    """``a / b`` as PostgreSQL divides (``typed``: by the operands' types, integers truncating)."""
    return exp.Div(this=a, expression=b, typed=True)


def _double_division(n: exp.Div) -> exp.Expression:
    return _div(exp.Cast(this=n.this, to=_DOUBLE.copy()), exp.Cast(this=n.expression, to=_DOUBLE.copy()))


def _rounded(division: exp.Div, t: SparkType) -> exp.Expression:
    """``CAST(ROUND(a / b, s) AS DECIMAL(p, s))``: the exact quotient, rounded half up as Spark rounds."""
    rounded = exp.Round(this=division, decimals=exp.Literal.number(t.s))
    return exp.Cast(this=rounded, to=exp.DataType.build(f"DECIMAL({t.p}, {t.s})"))
