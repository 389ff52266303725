"""Scalar expressions: sqlglot expression trees to typed logical expressions, with SQL's typing rules.

Numbers: integer op integer stays integer (division truncates, as in PostgreSQL); decimals keep exact scaled
integers for + - * (the result scale is the larger scale, or the sum of scales for *); anything with a float,
and any division involving a decimal, is double precision. Comparisons bring both sides to one representation
first.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable

from sqlglot import exp

from sql import chars, datetimes, patterns
from sql.allow import sql_name
from sql.errors import DataError, UnsupportedError, error_at
from sql.functions import as_text, translate_function
from sql.logical import Call, Const, Expr
from sql.types import (
    BOOL,
    FLOAT,
    INT,
    INTEGER,
    INTERVAL,
    TEXT,
    TIMESTAMP,
    TIMESTAMPTZ,
    Domain,
    SqlType,
    char_type,
    decimal_type,
    domain_of,
    format_text,
    from_sqlglot,
    interval_value,
    parse_text,
    sql_value,
    unsupported_type,
)

__all__ = [
    "AGGREGATES",
    "aggregate_type",
    "and_parts",
    "translate_scalar",
    "Resolver",
    "coerce",
    "cast_to",
    "assigned",
    "common_type",
    "result_type",
    "compare",
    "arithmetic",
    "boolean",
    "NULL_TYPE",
]

Resolver = Callable[[exp.Expression], Expr | None]
NULL_TYPE = SqlType("int", 0, -1)  # the type of a bare NULL until context gives it one

_SYMBOLS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.Neg: "-"}
_ARITH = {exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul", exp.Div: "div", exp.Mod: "mod"}
_CMP = {exp.EQ: "eq", exp.NEQ: "ne", exp.LT: "lt", exp.LTE: "le", exp.GT: "gt", exp.GTE: "ge"}


# the aggregate calls of SQL supported (EVERY is read as BOOL_AND, see ``sql.translate``)
AGGREGATES = (
    exp.Count,
    exp.Sum,
    exp.Avg,
    exp.Min,
    exp.Max,
    exp.LogicalAnd,
    exp.LogicalOr,
    exp.GroupConcat,
    exp.ArrayAgg,
    exp.Stddev,
    exp.StddevSamp,
    exp.StddevPop,
    exp.Variance,
    exp.VariancePop,
)
SPREADS = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")  # the variances and standard deviations


def and_parts(cond: exp.Expression) -> list[exp.Expression]:
    """The conditions AND-ed together in ``cond`` (through parentheses)."""
    if isinstance(cond, exp.Paren):
        return and_parts(cond.this)
    if isinstance(cond, exp.And):
        return and_parts(cond.this) + and_parts(cond.expression)
    return [cond]


def is_null_const(e: Expr) -> bool:
    return isinstance(e, Const) and e.value is None


def aggregate_type(node: exp.Expression, func: str, e: Expr) -> SqlType:
    """The type of aggregate ``func`` (count, sum, avg, min, max, the ``SPREADS``) of ``e``, as PostgreSQL
    types it (in ivm's types: AVG, the variances and standard deviations are DOUBLE PRECISION, SUM of decimals
    DECIMAL(18, s))."""
    t = e.type
    if func == "count":
        return INT
    if func in ("sum", "avg", *SPREADS) and t.kind == "interval":
        raise error_at(node, f"{func.upper()} of intervals is not supported", unsupported=True)
    if func in ("sum", "avg", *SPREADS) and not t.numeric:
        raise error_at(node, f"{func.upper()} needs numbers, got {t}")
    if func in ("avg", *SPREADS):
        return FLOAT
    if func == "sum" and t.kind == "decimal":
        return decimal_type(18, t.scale)
    if func == "sum" and t.kind == "int":
        return INT  # BIGINT for every width, as PostgreSQL's SUM of SMALLINT and INTEGER
    if t.pad:
        return char_type(t.pad, declared=False)  # PostgreSQL's MIN and MAX of CHAR(n) are bpchar
    if t.varchar:
        return TEXT  # and of VARCHAR, TEXT's
    return t


def translate_scalar(node: exp.Expression, resolve: Resolver) -> Expr:
    """The logical expression of ``node``; ``resolve`` maps columns (and other nodes it knows, such as
    aggregates or GROUP BY expressions) to expressions, returning None for nodes it does not handle."""
    out = _translate(node, resolve)
    if isinstance(out, Call) and any(datetimes.unjustified(a) for a in out.args):
        raise value_refused(node)
    return out


def value_refused(node: exp.Expression):
    """The error for an interval constant used as a value that an interval column cannot hold."""
    at = next((n for n in node.walk() if isinstance(n, exp.Interval)), node)
    return error_at(
        at,
        f"{sql_name(at)} as a value is not supported: an interval value has no months and a time of day "
        "under 24 hours, as timestamp - timestamp gives (add the constant to a date or timestamp, or compare "
        "with it)",
        unsupported=True,
    )


def _translate(node: exp.Expression, resolve: Resolver) -> Expr:
    known = resolve(node)
    if known is not None:
        return known
    if node.args.get("negate") and isinstance(node, (exp.Like, exp.ILike, exp.Is, exp.In, exp.Between)):
        positive = node.copy()
        positive.set("negate", False)
        return Call("not", (boolean(node, translate_scalar(positive, resolve)),), BOOL)
    if isinstance(node, exp.Paren):
        return translate_scalar(node.this, resolve)
    if isinstance(node, exp.Column):
        raise error_at(node, f"column {node.sql()!r} does not exist")
    if isinstance(node, exp.Literal):
        return _literal(node)
    if isinstance(node, exp.Null):
        return Const(None, NULL_TYPE)
    if isinstance(node, exp.Boolean):
        return Const(bool(node.this), BOOL)
    if isinstance(node, exp.Neg):
        inner = translate_scalar(node.this, resolve)
        if isinstance(inner, Const) and inner.value is not None and inner.type.numeric:
            return Const(-inner.value, inner.type)
        if inner.type.kind == "interval":
            if isinstance(inner, Const):
                return Const(
                    None if inner.value is None else tuple(-v for v in interval_value(inner.value)), INTERVAL
                )
            return Call("neg", (inner,), INTERVAL)
        _need_numeric(node, inner)
        return Call("neg", (inner,), inner.type)
    for cls, op in _ARITH.items():
        if isinstance(node, cls):
            return arithmetic(
                node, op, translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
            )
    for cls, op in _CMP.items():
        if isinstance(node, cls):
            return compare(
                node, op, translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
            )
    if isinstance(node, (exp.And, exp.Or)):
        a = boolean(node.this, translate_scalar(node.this, resolve))
        b = boolean(node.expression, translate_scalar(node.expression, resolve))
        return Call("and" if isinstance(node, exp.And) else "or", (a, b), BOOL)
    if isinstance(node, exp.Not):
        return Call("not", (boolean(node.this, translate_scalar(node.this, resolve)),), BOOL)
    if isinstance(node, exp.Is):
        x = translate_scalar(node.this, resolve)
        if isinstance(node.expression, exp.Boolean):  # IS TRUE, IS FALSE: never NULL
            x = boolean(node, x)
            return Call("is_true" if node.expression.this else "is_false", (x,), BOOL)
        if not isinstance(node.expression, exp.Null):
            raise error_at(node, f"IS {node.expression.sql()} is not supported", unsupported=True)
        return Call("is_null", (x,), BOOL)
    if isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ)):
        a, b = translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
        return _not_distinct(node, a, b)
    if isinstance(node, exp.Between):
        x = translate_scalar(node.this, resolve)
        lo = compare(node, "ge", x, translate_scalar(node.args["low"], resolve))
        hi = compare(node, "le", x, translate_scalar(node.args["high"], resolve))
        return Call("and", (lo, hi), BOOL)
    if isinstance(node, exp.In):
        if node.args.get("query") is not None:
            what = "this IN (subquery) (correlated over an aggregate, or not in WHERE or HAVING)"
            raise error_at(node, f"{what} is not supported", unsupported=True)
        x = translate_scalar(node.this, resolve)
        out: Expr | None = None
        for item in node.expressions:
            c = compare(item, "eq", x, translate_scalar(item, resolve))
            out = c if out is None else Call("or", (out, c), BOOL)
        return out
    if isinstance(node, (exp.Like, exp.ILike, exp.Escape, exp.RegexpLike, exp.RegexpILike)):
        return patterns.translate_match(node, resolve)
    if isinstance(node, exp.Case):
        return _case(node, resolve)
    if isinstance(node, exp.Coalesce):
        args = [translate_scalar(a, resolve) for a in [node.this, *node.expressions]]
        t = result_type(node, "COALESCE", args, nulls_dropped=True)
        return Call("coalesce", tuple(coerce(node, a, t) for a in args), t)
    if isinstance(node, exp.Nullif):
        a, b = translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
        t = chars.nullif_type(node, a, b)
        return Call("nullif", (coerce(node, a, t), compare(node, "eq", a, b)), t)
    if isinstance(node, exp.Cast):
        return cast(node, translate_scalar(node.this, resolve))
    if isinstance(node, exp.Interval):
        return datetimes.interval_constant(node)
    if isinstance(node, exp.Extract):
        return datetimes.extract(node, node.this.name, translate_scalar(node.expression, resolve))
    if isinstance(node, exp.AtTimeZone):
        return datetimes.at_time_zone(node, translate_scalar(node.this, resolve))
    if isinstance(node, exp.TimestampTrunc):
        return datetimes.date_trunc(node, translate_scalar(node.this, resolve))
    if type(node) in datetimes.TIME_FUNCTIONS:
        return datetimes.current_time(node)
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in datetimes.BY_NAME:
        return datetimes.call_by_name(node, lambda a: translate_scalar(a, resolve))
    if isinstance(node, exp.DPipe):
        a, b = translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
        if a.type.kind != "text" and b.type.kind != "text":
            raise error_at(node, f"|| needs text, got {a.type} and {b.type} (CAST one of them)", True)
        # the other side is written as text, as PostgreSQL does
        return Call("concat", (as_text(a), as_text(b)), TEXT)
    out = translate_function(node, lambda a: translate_scalar(a, resolve))
    if out is not None:
        return out
    if isinstance(node, (exp.ArrayAgg, exp.ArrayAny, exp.Any)):  # how a correlated IN was decorrelated
        what = "a correlated IN subquery, or a correlated scalar subquery that is not an aggregate,"
        raise error_at(node, f"{what} is not supported", unsupported=True)
    if isinstance(node, exp.Subquery):
        raise error_at(node, "a subquery here (in the SELECT list, or in a function) is not supported", True)
    if isinstance(node, exp.Exists):
        raise error_at(node, "EXISTS here (a value, in HAVING, or in another subquery) is not supported", True)
    raise error_at(node, f"{sql_name(node)} is not supported", unsupported=True)


def _literal(node: exp.Literal, at: exp.Expression | None = None) -> Const:
    if node.is_string:
        return Const(node.this, TEXT)
    at = node if at is None else at
    text = node.this
    if re.fullmatch(r"\d+", text) and int(text) < 2**63:  # INTEGER when it fits, as in PostgreSQL
        return Const(int(text), INTEGER if int(text) < 2**31 else INT)
    try:
        d = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise error_at(at, f"invalid number {text!r}") from None
    # a constant with a point or an exponent is NUMERIC, as in PostgreSQL: exact, in as many digits as it has
    _, digits, exponent = d.as_tuple()
    scale = max(-exponent, 0)
    width = max(len(digits) + max(exponent, 0), scale + 1)
    if width > 18:
        raise error_at(at, f"the numeric constant {text} has more than the 18 digits ivm holds", True)
    t = decimal_type(width, scale)
    return Const(sql_value(d, t), t)


def _need_numeric(node: exp.Expression, *args: Expr) -> None:
    for a in args:
        if not (a.type.numeric or is_null_const(a)):
            op = _SYMBOLS.get(type(node), node.key.upper())
            raise error_at(node, f"operator {op} needs numbers, got {a.type}")


def coerce(node: exp.Expression, e: Expr, t: SqlType) -> Expr:
    """``e`` in type ``t`` (integers to decimals or floats, decimals to other scales or floats, a string as
    another string type held the same way: see ``sql.chars.retype``)."""
    if e.type == t:
        return e
    if is_null_const(e):
        return Const(None, t)
    s = e.type
    if s.kind == "text" and t.kind == "text":
        return chars.retype(e, t)
    if chars.untyped(e) and t != NULL_TYPE:  # a string constant takes the type it meets, as PostgreSQL's
        return read_unknown(node, e.value, t)
    if s.kind in ("date", "timestamp") and t.kind == "timestamp":
        return datetimes.as_timestamp(e, t)
    if isinstance(e, Const):
        if s.kind == "int" and t.kind == "decimal":
            if abs(e.value) * 10**t.scale >= 2**63:  # beyond what the engine's 64-bit decimals hold
                what = f"the constant {e.value} as {t} has more than the 18 digits ivm holds"
                raise error_at(node, what, True)
            return Const(decimal.Decimal(e.value), t)
        if s.kind == "decimal" and t.kind == "decimal" and t.scale >= s.scale:
            return Const(e.value, t)
        if s.kind in ("int", "decimal") and t.kind == "float":
            return Const(float(e.value), t)
    if s.kind == "int" and t.kind == "int" and s.bits <= t.bits:
        return Const(e.value, t) if isinstance(e, Const) else Call("to_type", (e,), t, s)
    if (s.kind, t.kind) in (("int", "decimal"), ("decimal", "decimal"), ("int", "float"), ("decimal", "float")):
        return Call("to_type", (e,), t, s)
    raise error_at(node, f"cannot use {s} as {t}")


def common_type(node: exp.Expression, types: list[SqlType]) -> SqlType:
    real = [t for t in types if t != NULL_TYPE]
    if not real:
        return INT
    kinds = {t.kind for t in real}
    if kinds == {"int"}:
        return max(real, key=lambda t: t.bits)
    if kinds <= {"date", "timestamp"} and "timestamp" in kinds:  # a date is its midnight; UTC beside a zone
        return TIMESTAMPTZ if any(t.tz for t in real) else TIMESTAMP
    if kinds == {"text"}:
        return chars.common_string_type(node, "this expression", list(real), [False] * len(real))
    if len(kinds) == 1 and kinds != {"decimal"}:
        return real[0]
    if kinds <= {"int", "decimal", "float"}:
        if "float" in kinds:
            return FLOAT
        scale = max(t.scale for t in real if t.kind == "decimal")
        return decimal_type(18, scale)
    raise error_at(node, "incompatible types: " + ", ".join(sorted(str(t) for t in real)))


def result_type(node: exp.Expression, what: str, values: list[Expr], nulls_dropped: bool = False) -> SqlType:
    """The type of ``what`` (CASE, COALESCE, GREATEST, LEAST) whose value is one of ``values`` (in
    PostgreSQL's order of resolution: CASE's ELSE first): their common type, strings as ``sql.chars`` says."""
    known = [v for v in values if not chars.untyped(v)]
    if any(v.type.kind != "text" and v.type != NULL_TYPE for v in known):
        values = known  # string constants are read as the type of the others, as PostgreSQL resolves them
    types = [v.type for v in values]
    if {t.kind for t in types if t != NULL_TYPE} == {"text"}:
        marks = [chars.NULL if t == NULL_TYPE else t for t in types]
        literals = [chars.untyped(v) for v in values]
        return chars.common_string_type(node, what, marks, literals, nulls_dropped)
    return common_type(node, types)


def arithmetic(node: exp.Expression, op: str, a: Expr, b: Expr) -> Expr:
    a, b = _unknown_operand(node, op, a, b), _unknown_operand(node, op, b, a, right=True)
    if {a.type.kind, b.type.kind} & {"date", "timestamp", "interval"}:
        return datetimes.arithmetic(node, op, a, b)
    _need_numeric(node, a, b)
    kinds = {a.type.kind, b.type.kind}
    if is_null_const(a) or is_null_const(b):
        t = common_type(node, [a.type, b.type])
        return Const(None, FLOAT if op == "div" and t.kind == "decimal" else t)
    if "float" in kinds or (op == "div" and "decimal" in kinds):
        return Call(op, (coerce(node, a, FLOAT), coerce(node, b, FLOAT)), FLOAT)
    if kinds == {"int"}:  # in the wider operand's width, as PostgreSQL's int2/int4/int8 operators
        t = common_type(node, [a.type, b.type])
        return Call(op, (coerce(node, a, t), coerce(node, b, t)), t)
    if op == "mul":
        sa = a.type.scale if a.type.kind == "decimal" else 0
        sb = b.type.scale if b.type.kind == "decimal" else 0
        return Call("mul", (a, b), decimal_type(18, sa + sb))
    t = common_type(node, [a.type, b.type])
    return Call(op, (coerce(node, a, t), coerce(node, b, t)), t)


def compare(node: exp.Expression, op: str, a: Expr, b: Expr) -> Expr:
    a, b = _typed_literal(node, a, b.type), _typed_literal(node, b, a.type)
    if a.type.kind == "interval" or b.type.kind == "interval":
        a, b = datetimes.comparable_interval(a), datetimes.comparable_interval(b)
    ta, tb = a.type, b.type
    if ta.kind == "text" or tb.kind == "text":
        if not ({ta.kind, tb.kind} <= {"text"} or is_null_const(a) or is_null_const(b)):
            raise error_at(node, f"cannot compare {ta} with {tb}")
        a, b = chars.comparable(a, b)
        return Call(op, tuple(x if x.type.kind == "text" else Const(None, TEXT) for x in (a, b)), BOOL)
    if ta == tb or is_null_const(a) or is_null_const(b):
        t = tb if ta == NULL_TYPE else ta
        return Call(op, (coerce(node, a, t), coerce(node, b, t)), BOOL)
    if {ta.kind, tb.kind} <= {"date", "timestamp"}:  # a date is its midnight; a TIMESTAMP is in UTC
        return _compare_times(op, a, b)
    if {ta.kind, tb.kind} & {"date", "timestamp", "bool", "interval"}:
        raise error_at(node, f"cannot compare {ta} with {tb}")
    t = common_type(node, [ta, tb])
    return Call(op, (coerce(node, a, t), coerce(node, b, t)), BOOL)


def _compare_times(op: str, a: Expr, b: Expr) -> Expr:
    """A comparison of dates and timestamps of different types: in TIMESTAMP (WITH TIME ZONE when either
    is), a date as its midnight; a date column with a timestamp constant at midnight compares as dates."""
    for x, y in ((a, b), (b, a)):
        if x.type.kind == "date" and isinstance(y, Const) and y.value is not None:
            v = y.value.astimezone(dt.UTC).replace(tzinfo=None) if y.type.tz else y.value
            if v.time() == dt.time():
                day = Const(v.date(), x.type)
                return Call(op, (x, day) if x is a else (day, x), BOOL)
    t = TIMESTAMPTZ if a.type.tz or b.type.tz else TIMESTAMP
    return Call(op, (datetimes.as_timestamp(a, t), datetimes.as_timestamp(b, t)), BOOL)


def _typed_literal(node: exp.Expression, e: Expr, other: SqlType) -> Expr:
    """A string constant compared with a value of another type, read as that type (PostgreSQL's unknown
    literal); an error naming the text, at the constant, when it is not one."""
    if not chars.untyped(e) or other.kind == "text" or other == NULL_TYPE:
        return e
    return read_unknown(node, e.value, other)


def _unknown_operand(node: exp.Expression, op: str, e: Expr, other: Expr, right: bool = False) -> Expr:
    """A string constant beside an arithmetic operator, read as PostgreSQL resolves it: as the other
    operand's type when the operator takes two of it (numbers; ``timestamp - timestamp``, ``date - date``),
    else as an interval beside a timestamp (``ts + '1 day'``)."""
    if not chars.untyped(e) or other.type.kind == "text" or other.type == NULL_TYPE or chars.untyped(other):
        return e
    k = other.type.kind
    if other.type.numeric or (op == "sub" and k in ("date", "timestamp")) or k == "interval":
        return read_unknown(node, e.value, other.type)
    if k == "timestamp":
        return read_unknown(node, e.value, INTERVAL)
    sign = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}[op]
    sides = f"{other.type.pg_name} {sign} unknown" if right else f"unknown {sign} {other.type.pg_name}"
    raise error_at(_literal_node(node, e.value), f"operator is not unique: {sides}")


def read_unknown(node: exp.Expression, text: str, t: SqlType) -> Const:
    """A string constant read as type ``t``, as PostgreSQL reads an ``unknown`` literal where a value of
    ``t`` is expected: an integer in ``t``'s width, a decimal exactly as written, a date, a timestamp (WITH
    TIME ZONE at its offset), an interval; DataError at the constant when the text is not one."""
    at = _literal_node(node, text)
    if t.kind == "interval":
        return datetimes.interval_from_text(at, text)
    try:
        if t.kind == "decimal":
            d = decimal.Decimal(text.strip())
            if not d.is_finite():
                what = f"the numeric value {text!r} is not supported (ivm's decimals are finite)"
                raise error_at(at, what, unsupported=True)
            return _literal(exp.Literal.number(str(d)), at)  # exactly as written, as PostgreSQL's numeric
        value = parse_text(text, t)
    except UnsupportedError as err:
        raise error_at(at, err.message, unsupported=True) from None
    except (ValueError, decimal.InvalidOperation):
        raise error_at(at, f'invalid input syntax for type {t.pg_name}: "{text}"', cls=DataError) from None
    if t.kind == "int" and t.bits < 64 and not -(2 ** (t.bits - 1)) <= value < 2 ** (t.bits - 1):
        raise error_at(at, f'value "{text}" is out of range for type {t.pg_name}', cls=DataError)
    return Const(value, t)


def _literal_node(node: exp.Expression, text: str) -> exp.Expression:
    """The string constant ``text`` within ``node``, to point at it (``node`` itself when not found)."""
    for n in node.walk():
        if isinstance(n, exp.Literal) and n.is_string and n.this == text:
            return n
    return node


def boolean(node: exp.Expression, e: Expr) -> Expr:
    if e.type.kind != "bool" and not is_null_const(e):
        raise error_at(node, f"argument of {node.key.upper()} must be boolean, not {e.type}")
    return e if e.type == BOOL else Const(None, BOOL)


def _not_distinct(node: exp.Expression, a: Expr, b: Expr) -> Expr:
    """``a IS NOT DISTINCT FROM b`` (or ``IS DISTINCT FROM``): equality with NULL equal to NULL, never NULL."""
    a_null, b_null = Call("is_null", (a,), BOOL), Call("is_null", (b,), BOOL)
    known = Call("and", (Call("not", (a_null,), BOOL), Call("not", (b_null,), BOOL)), BOOL)
    same = Call("and", (compare(node, "eq", a, b), known), BOOL)  # FALSE, not NULL, when one side is NULL
    out = Call("or", (same, Call("and", (a_null, b_null), BOOL)), BOOL)
    return out if isinstance(node, exp.NullSafeEQ) else Call("not", (out,), BOOL)


def _case(node: exp.Case, resolve: Resolver) -> Expr:
    if node.this is not None:
        base = translate_scalar(node.this, resolve)
        conds = [compare(i, "eq", base, translate_scalar(i.this, resolve)) for i in node.args["ifs"]]
    else:
        conds = [boolean(i.this, translate_scalar(i.this, resolve)) for i in node.args["ifs"]]
    values = [translate_scalar(i.args["true"], resolve) for i in node.args["ifs"]]
    default = node.args.get("default")
    values.append(translate_scalar(default, resolve) if default is not None else Const(None, NULL_TYPE))
    t = result_type(node, "CASE", [values[-1], *values[:-1]])  # PostgreSQL resolves the ELSE value first
    values = [coerce(node, v, t) for v in values]
    return Call("case", tuple(conds) + tuple(values), t)


def cast(node: exp.Cast, e: Expr) -> Expr:
    if node.to.this == exp.DataType.Type.BPCHAR and not node.to.expressions:
        if not e.type.pad:  # a string of another type would keep its trailing spaces
            raise error_at(
                node,
                f"CAST of {e.type} to bpchar (character without a length) is not supported: its values keep "
                "their trailing spaces, which ivm does not hold; CAST to CHAR(n), VARCHAR or TEXT",
                unsupported=True,
            )
        return chars.retype(e, char_type(e.type.pad, declared=False))
    if node.to.this == exp.DataType.Type.INTERVAL and not node.to.expressions:
        t = INTERVAL
    else:
        t = from_sqlglot(node.to)
    if t is None:
        raise error_at(node, unsupported_type(node.to), unsupported=True)
    return in_domain(cast_to(node, e, t), domain_of(node.to))


def in_domain(e: Expr, domain: Domain | None) -> Expr:
    """A value cast to a declared type narrower than its engine type: an integer checked against the range of
    SMALLINT or INTEGER, text cut to the length of VARCHAR(n) or CHAR(n) (CHAR's trailing spaces dropped)."""
    if domain is None:
        return e
    if domain.low is not None:
        if isinstance(e, Const) and e.value is not None and not domain.low <= e.value <= domain.high:
            raise DataError(f"{domain.name} out of range: {e.value}")
        return Call("fit_int", (e,), e.type, (domain.name, domain.low, domain.high))
    if domain.length is not None:
        return Call("clip_text", (e,), e.type, (domain.length, domain.padded))
    return e


def assigned(node: exp.Expression, e: Expr, t: SqlType, column: str) -> Expr:
    """``e`` as the value of a column of type ``t`` (UPDATE's SET, INSERT ... SELECT): numbers converted as
    CAST converts them (rounded to the column's scale, an error when too wide for it), a date as a timestamp
    and back; other types must match."""
    if e.type == NULL_TYPE:  # an untyped NULL, as a constant or a column of a query
        return Const(None, t)
    if e.type == t or is_null_const(e) or e.type.kind == t.kind == "text":
        return coerce(node, e, t)  # a string is cut or refused by the column's domain
    if isinstance(e, Const) and e.type.kind == "text" and t.kind != "text":
        return cast_to(node, e, t)  # a string constant is read as the column's type, as PostgreSQL does
    kinds = {e.type.kind, t.kind}
    if (e.type.numeric and t.numeric) or kinds in ({"date", "timestamp"}, {"timestamp"}):
        return cast_to(node, e, t)
    raise error_at(node, f"column {column!r} is of type {t} but the value is of type {e.type}")


def cast_to(node: exp.Expression, e: Expr, t: SqlType) -> Expr:
    """``CAST(e AS t)``."""
    if isinstance(e, Const) and e.type.kind == "text" and e.value is not None and t.kind != "text":
        if t.kind == "interval":
            return datetimes.interval_from_text(node, e.value)
        try:
            return Const(parse_text(e.value, t), t)
        except UnsupportedError as err:
            raise error_at(node, err.message, unsupported=True) from err
        except ValueError as err:
            raise error_at(node, str(err), cls=DataError) from err
    if e.type == t and not chars.untyped(e):
        return e
    if is_null_const(e):
        return Const(None, t)
    if e.type.kind == t.kind == "text":  # CHAR(n) is cut by the domain ``cast`` adds
        return chars.retype(e, t)
    if e.type.kind in ("date", "timestamp") and t.kind == "timestamp":
        return datetimes.as_timestamp(e, t)  # in UTC, the session's time zone
    if (e.type.kind, t.kind) == ("timestamp", "date"):
        if isinstance(e, Const):
            v = e.value.astimezone(dt.UTC) if e.type.tz else e.value
            return Const(v.date(), t)
        return Call("ts_to_date", (e,), t)
    if t.kind == "text" and e.type.kind != "text":
        if datetimes.unjustified(e):
            return Const(format_text(e.value, e.type), t)
        return Call("to_text", (e,), t, e.type)
    if e.type.kind == "text" and t.kind == "interval":
        raise error_at(node, "CAST of text to INTERVAL is supported for constants only", unsupported=True)
    if e.type.kind == "text":
        return Call("from_text", (e,), t)
    if e.type.numeric and t.numeric:
        if t.kind == "int" and e.type.kind != "int":
            return Call("to_int", (e,), t, e.type)
        if t.kind == "int":  # a narrower width: ``in_domain`` or the column's domain checks the range
            return Const(e.value, t) if isinstance(e, Const) else Call("to_type", (e,), t, e.type)
        if t.kind == "decimal" and e.type.kind == "float":
            out = Call("float_to_decimal", (e,), t)
        elif t.kind == "decimal" and e.type.kind == "decimal" and t.scale < e.type.scale:
            out = Call("round_decimal", (e,), t, e.type)
        else:
            out = coerce(node, e, t)
        if t.kind == "decimal" and not _fits(e.type, t):
            out = Call("fit_decimal", (out,), t)  # a value too wide for the type is an error, not a wrong value
        return out
    if (e.type, t) == (INTEGER, BOOL):  # PostgreSQL's one cast between numbers and truth values, both ways
        return compare(node, "ne", e, Const(0, INTEGER))
    if (e.type, t) == (BOOL, INTEGER):
        ones = (e, Call("not", (e,), BOOL), Const(1, INTEGER), Const(0, INTEGER), Const(None, INTEGER))
        return Call("case", ones, INTEGER)
    raise error_at(node, f"CAST from {e.type} to {t} is not supported", unsupported=True)


def _fits(src: SqlType, t: SqlType) -> bool:
    """Whether every value of numeric type ``src`` fits in decimal type ``t`` (as many digits before the
    point at least)."""
    if src.kind == "decimal":
        return src.precision - src.scale <= t.precision - t.scale
    return False
