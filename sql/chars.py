"""CHAR(n): PostgreSQL's blank-padded strings, held without their padding and shown with it.

PostgreSQL stores a ``character(n)`` value padded with spaces to n characters, but almost everything it does
with one ignores the padding: comparisons (with another CHAR, with VARCHAR, with a string constant), hashing,
grouping and joins strip trailing spaces first, and so do LENGTH, ``||``, the text functions and every
conversion to TEXT or VARCHAR. ivm therefore holds a CHAR(n) value without its trailing spaces (a column's
values are stripped on the way in, see ``sql.types.Domain``) and its type, ``char_type(n)``, carries n. The
padding comes back where PostgreSQL lets it show:

- output: every result handed out (``fetchall``, ``fetch_arrow``, views read, subscriptions, the shell, the
  sidecar's targets, the Spark sink) is padded to n with spaces, vectorized, in ``ivm.db.arrow`` and
  ``planner.values`` (``padded``);
- LIKE and ILIKE match the padded value (``'ab'::char(5) LIKE 'ab'`` is false), and CONCAT writes it.

Types follow PostgreSQL's. A column reference, GROUP BY key, DISTINCT, subquery, view or WITH query keeps
CHAR(n). CASE, COALESCE, GREATEST, LEAST and set operations take their first input's type that is not a
string constant or NULL (CASE reads its ELSE first), as PostgreSQL's ``select_common_type`` does, since TEXT,
VARCHAR and ``character`` each convert to the others implicitly:

- first TEXT or VARCHAR: the result is that type, and CHAR values in it are stripped (as PostgreSQL converts
  them), which is how they are held: exact. A VARCHAR(n) keeps its length only when every other input is a
  VARCHAR(n) of the same n (COALESCE's NULLs dropped, as for CHAR); a string constant, a NULL or a string of
  another type makes it VARCHAR without a length, as PostgreSQL's ``select_common_typmod`` does;
- first CHAR(n): the result is PostgreSQL's ``character`` (bpchar). When every other input is CHAR(n) of the
  same n, it keeps the length; with a NULL among them (in COALESCE the planner drops NULLs first) it loses the
  length but every value is still a CHAR(n) value, padded to n: ``char_type(n, declared=False)``, shown as
  BPCHAR, exact. So is MIN or MAX of a CHAR(n) column, which PostgreSQL also types without a length.

What remains is refused by name (``NotSupportedError``), never answered differently: a CHAR(n) first, mixed
with a CHAR(m) of another length, a TEXT or VARCHAR value, or a string constant. PostgreSQL's result is then a
``character`` without a length whose values keep their own trailing spaces ('ab   ' from a CHAR(5) beside 'x'
from the constant, or a VARCHAR's 'xy ' kept whole), which ivm, holding CHAR values stripped, cannot show; a
CAST of the CHAR operand to TEXT or VARCHAR (or of all of them to one CHAR(n)) says what is meant. The same
holds for NULLIF of a VARCHAR or a string constant with a CHAR, for CAST to ``bpchar`` of anything but a CHAR,
and for CREATE TABLE AS of a column of ``character`` without a length.

Comparisons resolve as PostgreSQL's operators do: CHAR with CHAR, with VARCHAR or with a string constant
compares without trailing spaces (the other side's are stripped too); CHAR with TEXT compares as TEXT, the CHAR
value stripped. A string constant is untyped until context types it, as PostgreSQL's ``unknown`` literals are:
``'ab '`` beside a CHAR is read as one, ``'ab '::text`` is TEXT.

    >>> from sql.types import TEXT
    >>> common_string_type(None, "COALESCE", [char_type(5), char_type(5)], [False, False])
    SqlType(kind='text', precision=5, scale=0, length=0)
    >>> common_string_type(None, "UNION", [TEXT, char_type(5)], [False, False])
    SqlType(kind='text', precision=0, scale=0, length=0)
    >>> from sql.types import varchar_type
    >>> str(common_string_type(None, "CASE", [varchar_type(5), NULL], [False, False]))
    'VARCHAR'

"""

from __future__ import annotations

from sqlglot import exp

from sql.errors import error_at
from sql.logical import Call, ColRef, Const, Expr
from sql.types import TEXT, VARCHAR, SqlType, char_type

__all__ = [
    "untyped",
    "common_string_type",
    "comparable",
    "retype",
    "shown",
    "nullif_type",
    "NULL",
]

NULL = "NULL"  # what a bare NULL among the inputs of ``common_string_type`` is called


def untyped(e: Expr) -> bool:
    """Whether ``e`` is a string constant not yet typed by context (PostgreSQL's ``unknown`` literal): a
    constant of type TEXT exactly (an explicit CAST to TEXT is not a constant, see ``retype``)."""
    return isinstance(e, Const) and isinstance(e.value, str) and e.type == TEXT


def _name(t: SqlType, literal: bool) -> str:
    return "a string constant" if literal else str(t)


def common_string_type(
    node: exp.Expression | None,
    what: str,
    types: list[SqlType | str],
    literals: list[bool],
    nulls_dropped: bool = False,
) -> SqlType:
    """The type of ``what`` (CASE, COALESCE, UNION, ...) combining string values of ``types`` in PostgreSQL's
    order (NULL for a bare NULL; ``literals`` marks string constants), as the module docstring says; refused by
    name where PostgreSQL's answer is a ``character`` without a length whose values ivm cannot show.
    ``nulls_dropped``: NULLs do not count (COALESCE, whose NULL arguments PostgreSQL's planner removes)."""
    typed = [t for t, lit in zip(types, literals, strict=True) if t != NULL and not lit]
    if not typed:
        return TEXT
    first = typed[0]
    assert isinstance(first, SqlType)
    if first.length:
        alike = all(
            (t == NULL and nulls_dropped) or (t == first and not lit)
            for t, lit in zip(types, literals, strict=True)
        )
        return first if alike else VARCHAR
    if not first.pad:
        return first
    n = first.pad
    for t, lit in zip(types, literals, strict=True):
        if t == NULL:
            continue
        if lit or t.pad != n:
            raise error_at(
                node,
                f"{what} of {first} and {_name(t, lit)} is not supported: in PostgreSQL its value is a "
                "character without a length (bpchar) that keeps each input's own trailing spaces, which ivm "
                f"does not hold; CAST the {first} value to TEXT or VARCHAR (or every value to one CHAR(n))",
                unsupported=True,
            )
    declared = all(t.scale == 0 for t in typed) and (nulls_dropped or NULL not in types)
    return char_type(n, declared)


def nullif_type(node: exp.Expression, a: Expr, b: Expr) -> SqlType:
    """The type of NULLIF(a, b): ``a``'s, converted as the equality PostgreSQL picks converts it (to TEXT where
    a CHAR meets TEXT, and a VARCHAR always, whose equality is TEXT's; a VARCHAR or a string constant meeting a
    CHAR becomes a ``character`` without a length, refused as in ``common_string_type``)."""
    ta, tb = a.type, b.type
    if ta.kind != "text" or tb.kind != "text":
        return ta
    if ta.pad and tb == TEXT and not untyped(b):
        return TEXT
    if not ta.pad and tb.pad and (ta.varchar or untyped(a)):
        common_string_type(node, "NULLIF", [tb, ta], [False, untyped(a)])  # refuses
    return ta if ta.pad else TEXT


def comparable(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """Two string operands as PostgreSQL compares them: a CHAR with a CHAR, a VARCHAR or a string constant
    without trailing spaces (a CHAR is held so; the other side's are stripped here), a CHAR with TEXT as text,
    and other strings as they are."""
    if a.type.pad and not b.type.pad:
        return a, _stripped(b)
    if b.type.pad and not a.type.pad:
        return _stripped(a), b
    return a, b


def _stripped(e: Expr) -> Expr:
    """A VARCHAR or a string constant compared with a CHAR, without trailing spaces; TEXT as it is."""
    if isinstance(e, Const) and isinstance(e.value, str) and (untyped(e) or e.type.varchar):
        return Const(e.value.rstrip(" "), e.type)
    if e.type.varchar:
        return Call("trim", (e,), e.type, ("TRAILING", " "))
    return e


def retype(e: Expr, t: SqlType) -> Expr:
    """A string ``e`` as a value of string type ``t`` held the same way: a CHAR value as TEXT or VARCHAR is its
    held value (PostgreSQL strips the padding converting it), and a value retyped as CHAR(n) has its trailing
    spaces dropped where it is a constant (a column's values are dropped by its domain, a CAST's by
    ``clip_text``). A string constant retyped as TEXT is no longer untyped (see ``untyped``)."""
    if e.type == t and not untyped(e):
        return e
    if isinstance(e, Const) and not (t == TEXT and isinstance(e.value, str)):
        value = e.value.rstrip(" ") if t.pad and isinstance(e.value, str) else e.value
        return Const(value, t)
    if isinstance(e, ColRef):
        return ColRef(e.index, t)
    return Call("to_type", (e,), t, e.type)


def shown(e: Expr) -> Expr:
    """A string value as PostgreSQL writes it out: a CHAR padded to its length with spaces (what CONCAT
    joins), TEXT as it is."""
    if not e.type.pad:
        return e
    return Call("pad", (retype(e, TEXT),), TEXT, (e.type.pad, " ", False))
