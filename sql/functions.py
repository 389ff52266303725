"""SQL functions of numbers and of text: sqlglot calls to typed logical expressions (PostgreSQL's semantics).

Numbers: ABS, SIGN, ROUND (half away from zero, to a constant number of decimal places; ``ROUND(a / b, n)``
of exact numbers, one of them a decimal, divides exactly and rounds once, as NUMERIC does; ROUND of a DOUBLE
PRECISION alone rounds half to even, as PostgreSQL's does), FLOOR, CEIL,
TRUNC, GREATEST and LEAST (NULL only when every argument is); SQRT, CBRT, EXP, LN, LOG (base 10, or
``LOG(b, x)``) and POWER in DOUBLE PRECISION, with PostgreSQL's errors for the values they have none for.
Integers go in as DOUBLE PRECISION, as PostgreSQL resolves these functions for them; NUMERIC values too,
which PostgreSQL computes in NUMERIC instead (as it does AVG and division).

Text: LENGTH, UPPER, LOWER, TRIM/LTRIM/RTRIM/BTRIM, SUBSTRING, LEFT, RIGHT, REPLACE, POSITION/STRPOS,
STARTS_WITH, REVERSE, LPAD/RPAD, SPLIT_PART, REPEAT, OVERLAY, TRANSLATE, REGEXP_REPLACE (see ``sql.patterns``),
and CONCAT and
CONCAT_WS (which skip NULLs and write other types as text, CHAR(n) padded). A CHAR(n) argument is otherwise
read without its trailing spaces, as PostgreSQL converts it to text. Arguments other than the text or number a
function works on must be constants: the function then runs once per distinct string of a batch.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from sql.chars import shown
from sql.errors import DataError, error_at
from sql.logical import Call, Const, Expr
from sql.patterns import replace_regex, replacement
from sql.types import BOOL, FLOAT, INTEGER, TEXT, SqlType, decimal_type

__all__ = ["translate_function", "as_text"]

Translate = Callable[[exp.Expression], Expr]


def translate_function(node: exp.Expression, translate: Translate) -> Expr | None:
    """The expression of function call ``node`` (its arguments through ``translate``), or None when ``node``
    is not one of the functions here."""
    fn = _NUMERIC.get(type(node)) or _TEXT.get(type(node))
    if fn is None:
        return None
    out = fn(node, translate)
    if isinstance(out, Call) and out.op not in _SKIPPING_NULLS and any(_is_null(a) for a in out.args):
        return Const(None, out.type)  # NULL in, NULL out
    return out


_SKIPPING_NULLS = ("greatest", "least", "concat_all", "concat_ws")


# -- numbers ---------------------------------------------------------------------------------------------


def _number(node: exp.Expression, translate: Translate) -> Expr:
    x = translate(node.this)
    if not (x.type.numeric or _is_null(x)):
        raise error_at(node, f"{_name(node)} needs a number, got {x.type}")
    return x


def _abs_sign(node: exp.Expression, translate: Translate) -> Expr:
    x = _number(node, translate)
    if isinstance(node, exp.Sign) and x.type.kind == "int":
        x = _double(node, x)  # PostgreSQL's SIGN of an integer is SIGN(DOUBLE PRECISION)
    return Call(node.key.lower(), (x,), x.type)


def _double(node: exp.Expression, x: Expr) -> Expr:
    """A number (or NULL) as DOUBLE PRECISION."""
    from sql.scalar import coerce

    return coerce(node, x, FLOAT)


def _float_function(op: str):
    """A function of one DOUBLE PRECISION argument (SQRT, CBRT, EXP, LN, one-argument LOG)."""

    def translate_one(node: exp.Expression, translate: Translate) -> Expr:
        x = _number(node, translate)
        if isinstance(node, exp.Log) and node.expression is not None:
            return _log(node, translate)
        return Call(op, (_double(node, x),), FLOAT)

    return translate_one


def _log(node: exp.Log, translate: Translate) -> Expr:
    """``LOG(b, x)``: PostgreSQL has it for NUMERIC only (no DOUBLE PRECISION argument); computed in DOUBLE
    PRECISION."""
    b, x = translate(node.this), translate(node.expression)
    for a in (b, x):
        if not (a.type.numeric or _is_null(a)):
            raise error_at(node, f"LOG needs numbers, got {a.type}")
        if a.type.kind == "float":
            what = f"log({_pg_type(b.type)}, {_pg_type(x.type)})"
            raise error_at(node, f"function {what} does not exist (CAST the arguments to NUMERIC)")
    return Call("log", (_double(node, b), _double(node, x)), FLOAT)


def _pg_type(t: SqlType) -> str:
    """A type as PostgreSQL's messages name it."""
    return "double precision" if t.kind == "float" else str(t).lower()


def _power(node: exp.Pow, translate: Translate) -> Expr:
    a, b = translate(node.this), translate(node.expression)
    for v in (a, b):
        if not (v.type.numeric or _is_null(v)):
            raise error_at(node, f"POWER needs numbers, got {v.type}")
    return Call("power", (_double(node, a), _double(node, b)), FLOAT)


def _trunc(node: exp.Trunc, translate: Translate) -> Expr:
    """TRUNC toward zero: of DOUBLE PRECISION (and integers) as DOUBLE PRECISION; of NUMERIC (and integers,
    with a number of places) to that many places, as NUMERIC."""
    x = _number(node, translate)
    given = node.args.get("decimals")
    t = x.type
    if given is None:
        if t.kind != "decimal":
            return Call("trunc", (_double(node, x),), FLOAT, 0)
        places = 0
    else:
        if t.kind == "float":
            what = f"trunc({_pg_type(t)}, integer)"
            raise error_at(node, f"function {what} does not exist (CAST the first argument to NUMERIC)")
        places = _int_arg(node, given, None)
    if t.kind == "int":
        from sql.scalar import cast_to

        if places >= 0:  # the integer itself, with that many zero places
            return cast_to(node, x, decimal_type(18, min(places, 17)))
        return Call("trunc", (x,), decimal_type(18, 0), places)
    if places >= t.scale:
        from sql.scalar import cast_to

        return cast_to(node, x, decimal_type(min(t.precision - t.scale + places, 18), min(places, 17)))
    return Call(
        "trunc", (x,), decimal_type(max(t.precision - t.scale + max(places, 0), 1), max(places, 0)), places
    )


def _round(node: exp.Round, translate: Translate) -> Expr:
    places = _int_arg(node, node.args.get("decimals"), 0)
    quotient = _exact_quotient(node, translate, places)
    if quotient is not None:
        return quotient
    x = _number(node, translate)
    t = x.type
    if t.kind == "decimal":
        if places >= t.scale:
            return x
        t = decimal_type(min(t.precision + 1, 18), max(places, 0))
    elif t.kind == "int":  # as PostgreSQL: ROUND(DOUBLE PRECISION), or to places as NUMERIC
        if node.args.get("decimals") is None:
            return _double(node, x)
        if places >= 0:
            from sql.scalar import cast_to

            return cast_to(node, x, decimal_type(18, min(places, 17)))
        t = decimal_type(18, 0)
    elif node.args.get("decimals") is None:  # ROUND(DOUBLE PRECISION): half to even (PostgreSQL's rint)
        places = None
    return Call("round", (x,), t, places)


def _exact_quotient(node: exp.Round, translate: Translate, places: int) -> Expr | None:
    """``ROUND(a / b, places)`` of an integer or decimal ``a`` and ``b``, one of them a decimal, as the exact
    quotient rounded half away from zero to ``places`` (PostgreSQL divides NUMERIC values, which a double would
    not be); None for any other ROUND."""
    inner = node.this
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if not isinstance(inner, exp.Div) or places < 0:
        return None
    a, b = translate(inner.this), translate(inner.expression)
    kinds = {a.type.kind, b.type.kind}
    if not kinds <= {"int", "decimal"} or "decimal" not in kinds:
        return None
    t = decimal_type(18, places)
    if _is_null(a) or _is_null(b):
        return Const(None, t)
    return Call("div_round", (a, b), t, (_scale(a.type), _scale(b.type)))


def _scale(t: SqlType) -> int:
    return t.scale if t.kind == "decimal" else 0


def _floor_ceil(node: exp.Expression, translate: Translate) -> Expr:
    x = _number(node, translate)
    t = x.type
    if t.kind == "int":
        return _double(node, x)  # PostgreSQL's FLOOR and CEIL of an integer are of DOUBLE PRECISION
    if t.kind == "decimal":
        if t.scale == 0:
            return x
        t = decimal_type(min(t.precision - t.scale + 1, 18), 0)
    return Call(node.key.lower(), (x,), t)


def _extreme(node: exp.Expression, translate: Translate) -> Expr:
    from sql.scalar import coerce, result_type

    args = [translate(a) for a in [node.this, *node.expressions]]
    t = result_type(node, node.key.upper(), args)
    return Call(node.key.lower(), tuple(coerce(node, a, t) for a in args), t)


_NUMERIC = {
    exp.Abs: _abs_sign,
    exp.Sign: _abs_sign,
    exp.Round: _round,
    exp.Floor: _floor_ceil,
    exp.Ceil: _floor_ceil,
    exp.Trunc: _trunc,
    exp.Sqrt: _float_function("sqrt"),
    exp.Cbrt: _float_function("cbrt"),
    exp.Exp: _float_function("exp"),
    exp.Ln: _float_function("ln"),
    exp.Log: _float_function("log10"),
    exp.Pow: _power,
    exp.Greatest: _extreme,
    exp.Least: _extreme,
}


# -- text ------------------------------------------------------------------------------------------------


def _text(node: exp.Expression, x: Expr) -> Expr:
    if x.type.kind != "text" and not _is_null(x):
        raise error_at(node, f"{_name(node)} needs text, got {x.type}")
    return x


def _unary_text(op: str, out: SqlType = TEXT):
    def translate_one(node: exp.Expression, translate: Translate) -> Expr:
        return Call(op, (_text(node, translate(node.this)),), out)

    return translate_one


def _trim(node: exp.Trim, translate: Translate) -> Expr:
    x = _text(node, translate(node.this))
    chars = _str_arg(node, node.args.get("expression"), " ")
    if chars is None:
        return Const(None, TEXT)
    side = str(node.args.get("position") or "BOTH").upper()
    if side not in ("BOTH", "LEADING", "TRAILING"):
        raise error_at(node, f"TRIM({side} ...) is not supported", unsupported=True)
    return Call("trim", (x,), TEXT, (side, chars))


def _substring(node: exp.Substring, translate: Translate) -> Expr:
    x = _text(node, translate(node.this))
    start = _int_arg(node, node.args.get("start"), 1)
    given = node.args.get("length")
    length = None if given is None else _int_arg(node, given, None)
    if length is not None and length < 0:
        raise error_at(node, "negative substring length not allowed")
    return Call("substring", (x,), TEXT, (start, length))


def _left_right(node: exp.Expression, translate: Translate) -> Expr:
    x = _text(node, translate(node.this))
    return Call(node.key.lower(), (x,), TEXT, _int_arg(node, node.expression, None))


def _replace(node: exp.Replace, translate: Translate) -> Expr:
    x = _text(node, translate(node.this))
    old = _str_arg(node, node.expression, None)
    new = _str_arg(node, node.args.get("replacement"), None)
    if old is None or new is None:
        return Const(None, TEXT)
    return Call("replace", (x,), TEXT, (old, new))


_REGEX_OPTIONS = frozenset("bceginmnpqstwx")  # PostgreSQL's; of them ivm takes c, g, i, s and t


def _regexp_replace(node: exp.RegexpReplace, translate: Translate) -> Expr:
    """REGEXP_REPLACE(text, pattern, replacement [, flags]) with flags ``g`` (every match, else the first),
    ``i`` and ``c`` (case, the last one given wins), ``s`` and ``t`` (the defaults), over the patterns whose
    matches RE2 finds as PostgreSQL does (``sql.patterns.replace_regex``)."""
    for arg in ("position", "occurrence"):
        if node.args.get(arg) is not None:
            what = "REGEXP_REPLACE with a start or an occurrence is not supported"
            raise error_at(node.args[arg], what, unsupported=True)
    x = _text(node, translate(node.this))
    pattern = _str_arg(node, node.expression, None)
    new = _str_arg(node, node.args.get("replacement"), None)
    flags = _str_arg(node, node.args.get("modifiers"), "")
    if pattern is None or new is None or flags is None:
        return Const(None, TEXT)
    where = node.args.get("modifiers") or node
    insensitive = False
    for flag in flags:
        if flag not in _REGEX_OPTIONS:
            raise error_at(where, f'invalid regular expression option: "{flag}"', cls=DataError)
        if flag not in "cgist":
            raise error_at(where, f"REGEXP_REPLACE's flag {flag!r} is not supported", unsupported=True)
        if flag in "ci":
            insensitive = flag == "i"
    every = "g" in flags
    regex, groups = replace_regex(pattern, insensitive, every, node.expression)
    return Call("regexp_replace", (x,), TEXT, (regex, replacement(new, groups), every))


def _position(node: exp.StrPosition, translate: Translate) -> Expr:
    if node.args.get("position") is not None or node.args.get("occurrence") is not None:
        raise error_at(node, "POSITION with a starting position is not supported", unsupported=True)
    x = _text(node, translate(node.this))
    sub = _str_arg(node, node.args.get("substr"), None)
    return Const(None, INTEGER) if sub is None else Call("position", (x,), INTEGER, sub)


def _starts_with(node: exp.StartsWith, translate: Translate) -> Expr:
    x = _text(node, translate(node.this))
    prefix = _str_arg(node, node.expression, None)
    return Const(None, BOOL) if prefix is None else Call("starts_with", (x,), BOOL, prefix)


def _pad(node: exp.Pad, translate: Translate) -> Expr:
    x = _text(node, translate(node.this))
    width = _int_arg(node, node.expression, None)
    fill = _str_arg(node, node.args.get("fill_pattern"), " ")
    if fill is None:
        return Const(None, TEXT)
    return Call("pad", (x,), TEXT, (width, fill, bool(node.args.get("is_left"))))


def _split_part(node: exp.SplitPart, translate: Translate) -> Expr:
    x = _text(node, translate(node.this))
    sep = _str_arg(node, node.args.get("delimiter"), None)
    index = _int_arg(node, node.args.get("part_index"), None)
    if index == 0:
        raise error_at(node, "field position must not be zero")
    return Const(None, TEXT) if sep is None else Call("split_part", (x,), TEXT, (sep, index))


def _concat(node: exp.Concat, translate: Translate) -> Expr:
    args = tuple(shown(_written(translate(a))) for a in node.expressions)  # CHAR(n) padded, as written out
    if not args:
        raise error_at(node, "CONCAT needs at least one argument")
    return Call("concat_all", args, TEXT)


def _concat_ws(node: exp.ConcatWs, translate: Translate) -> Expr:
    """CONCAT_WS(separator, ...): the arguments other than NULL joined by a constant separator (NULL when the
    separator is)."""
    if len(node.expressions) < 2:
        raise error_at(node, "CONCAT_WS needs a separator and a value to join")
    sep = _str_arg(node, node.expressions[0], None)
    if sep is None:
        return Const(None, TEXT)
    args = tuple(shown(_written(translate(a))) for a in node.expressions[1:])
    return Call("concat_ws", args, TEXT, sep)


def _overlay(node: exp.Overlay, translate: Translate) -> Expr:
    """OVERLAY(text PLACING new FROM start [FOR count]): the first ``start - 1`` characters, ``new``, then
    the characters from ``start + count`` on (``count`` the length of ``new`` unless given)."""
    x = _text(node, translate(node.this))
    new = _str_arg(node, node.expression, None)
    given = node.args.get("for_")
    if new is None or isinstance(node.args.get("from_"), exp.Null) or isinstance(given, exp.Null):
        return Const(None, TEXT)
    start = _int_arg(node, node.args.get("from_"), None)
    count = len(new) if given is None else _int_arg(node, given, None)
    return Call("overlay", (x,), TEXT, (new, start, count))


def _translate(node: exp.Translate, translate: Translate) -> Expr:
    """TRANSLATE(text, from, to): each character of ``from`` (its first place) replaced by the one at the same
    place of ``to``, or taken out where ``to`` is shorter."""
    x = _text(node, translate(node.this))
    old = _str_arg(node, node.args.get("from_"), None)
    new = _str_arg(node, node.args.get("to"), None)
    if old is None or new is None:
        return Const(None, TEXT)
    mapping = {}
    for i, ch in enumerate(old):
        mapping.setdefault(ch, new[i] if i < len(new) else "")
    return Call("translate", (x,), TEXT, tuple(mapping.items()))


def _repeat(node: exp.Repeat, translate: Translate) -> Expr:
    x = _text(node, translate(node.this))
    return Call("repeat", (x,), TEXT, max(_int_arg(node, node.args.get("times"), None), 0))


def _written(x: Expr) -> Expr:
    """An argument of CONCAT as text: as ``as_text``, but a truth value as PostgreSQL writes it out (``t`` or
    ``f``, where CAST and || write ``true`` or ``false``)."""
    if x.type.kind != "bool" or _is_null(x):
        return as_text(x)
    truth = (x, Call("not", (x,), BOOL), Const("t", TEXT), Const("f", TEXT), Const(None, TEXT))
    return Call("case", truth, TEXT)


def as_text(x: Expr) -> Expr:
    """A value as text for CONCAT and || (numbers, dates and truth values written as CAST writes them)."""
    if x.type.kind == "text":
        return x
    if _is_null(x):
        return Const(None, TEXT)
    return Call("to_text", (x,), TEXT, x.type)


_TEXT = {
    exp.Length: _unary_text("length", INTEGER),
    exp.Upper: _unary_text("upper"),
    exp.Lower: _unary_text("lower"),
    exp.Reverse: _unary_text("reverse"),
    exp.Trim: _trim,
    exp.Substring: _substring,
    exp.Left: _left_right,
    exp.Right: _left_right,
    exp.Replace: _replace,
    exp.RegexpReplace: _regexp_replace,
    exp.StrPosition: _position,
    exp.StartsWith: _starts_with,
    exp.Pad: _pad,
    exp.SplitPart: _split_part,
    exp.Concat: _concat,
    exp.ConcatWs: _concat_ws,
    exp.Repeat: _repeat,
    exp.Overlay: _overlay,
    exp.Translate: _translate,
}


# -- constant arguments ----------------------------------------------------------------------------------


def _int_arg(node: exp.Expression, arg: exp.Expression | None, default: int | None) -> int:
    if arg is None and default is not None:
        return default
    value = arg.this if isinstance(arg, exp.Neg) else arg
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return -int(value.this) if isinstance(arg, exp.Neg) else int(value.this)
    where = arg if arg is not None else node
    raise error_at(where, f"{_name(node)} needs a constant integer here", unsupported=True)


def _str_arg(node: exp.Expression, arg: exp.Expression | None, default: str | None) -> str | None:
    """A constant text argument (None for NULL, which makes the call NULL)."""
    if arg is None:
        return default
    if isinstance(arg, exp.Null):
        return None
    if isinstance(arg, exp.Literal) and arg.is_string:
        return arg.this
    raise error_at(arg, f"{_name(node)} needs a constant text here", unsupported=True)


def _is_null(e: Expr) -> bool:
    return isinstance(e, Const) and e.value is None


def _name(node: exp.Expression) -> str:
    names = {"strposition": "POSITION", "pad": "LPAD/RPAD", "ceil": "CEIL", "concatws": "CONCAT_WS"}
    names["regexpreplace"] = "REGEXP_REPLACE"
    return names.get(node.key, node.key.upper())
