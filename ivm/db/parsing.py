"""SQL text into the statements the database runs: parsing, the allow-list check, and parameters.

``parse`` turns a string (with its parameters bound to its placeholders) into sqlglot statements that
passed ``sql.allow``, normalized as PostgreSQL names identifiers, or raises the syntax error with its line
and column. Parameters become typed SQL constants in the statement itself, so nothing later knows there
were any.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import re
from collections.abc import Sequence

import numpy as np
import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokens import TokenType

from ivm.errors import DataError, NotSupportedError, ProgrammingError
from sql import allow
from sql.dialect import Ivm, plain_strings
from sql.errors import error_at
from sql.recursive import attach_mutually_recursive, rewrite_mutually_recursive
from sql.rewrite import values_as_selects
from sql.shorthands import one_form
from sql.spark import Spark, relations_of, to_postgres

__all__ = ["CONTROL", "parse"]


# transaction control, recognized before parsing (the most frequent statements of all)
CONTROL = {
    "BEGIN": exp.Transaction,
    "START TRANSACTION": exp.Transaction,
    "COMMIT": exp.Commit,
    "END": exp.Commit,
    "ROLLBACK": exp.Rollback,
    "ABORT": exp.Rollback,
}


def parse(
    sql: str, params: Sequence | dict | None = None, dialect: str | Spark = "postgres", catalog=None
) -> list[exp.Expression]:
    """The statements of ``sql`` (with ``params`` bound to its placeholders), each checked against the
    allow-list; or a syntax error with its line and column.

    ``dialect`` ``"spark"`` (or a ``sql.spark.Spark`` naming the session time zone) reads queries and
    CREATE VIEW as Spark SQL: names case-insensitive, and each statement rewritten into one of PostgreSQL's
    semantics computing Spark's answer (``sql.spark``), with the types of ``catalog``'s tables and views."""
    if dialect != "postgres":
        return _parse_spark(sql, params, Spark() if dialect == "spark" else dialect, catalog)
    named = None
    if params is not None:
        if isinstance(params, (str, bytes)) or not isinstance(params, (Sequence, dict)):
            raise ProgrammingError("parameters must be a sequence or a mapping")
        named = isinstance(params, dict)
    # a short text is parsed once and kept (a prepared statement); a long one (a bulk INSERT) is not kept
    parsed, names, sites = _parsed(sql, named) if len(sql) <= 4096 else _parsed.__wrapped__(sql, named)
    for name in names or ():
        if name not in params:
            raise ProgrammingError(f"no value given for the parameter %({name})s")
    statements = [s.copy() for s in parsed]
    if params is not None:
        return _bind(statements, sites, [params[n] for n in names] if names is not None else list(params))
    for s, paths in zip(statements, sites, strict=True):
        for path in paths:
            raise error_at(_node_at(s, path), "a parameter placeholder, but no parameters were given")
    return statements


@functools.lru_cache(maxsize=512)
def _parsed(sql: str, named: bool | None) -> tuple[tuple[exp.Expression, ...], tuple[str, ...] | None, tuple]:
    """The syntax trees of ``sql`` (its placeholders numbered when ``named`` is not None: see ``_numbered``),
    checked against the allow-list and their names normalized; the parameter names in their numbers'
    order; and per tree, the paths to its placeholders (see ``_node_at``). Kept for the text's next use, as a
    prepared statement, since parsing and checking cost more than the rest of a small statement. Binding
    parameters only puts constants in place of placeholders, found by their paths in a copy."""
    names = None
    original = sql
    if named is not None:
        sql, names = _numbered(sql, named)
    sql, mutual = rewrite_mutually_recursive(sql)
    try:
        statements = [plain_strings(s, sql) for s in sqlglot.parse(sql, dialect=Ivm) if s is not None]
        _locate_commands(sql, statements)
        attach_mutually_recursive(statements, mutual)
    except ParseError as err:
        _groups_without_order(sql)
        _refuse_overriding(sql)
        e = err.errors[0] if err.errors else {}
        what = e.get("description", str(err))
        if "<class" in what or "Required keyword" in what:  # the parser's words, not SQL's
            near = (e.get("highlight") or "").strip()
            what = f"at or near {near!r}" if near else "at end of input"
        raise ProgrammingError(f"syntax error: {what}", e.get("line"), e.get("col")) from err
    except TokenError:
        raise _token_error(sql) from None
    statements = [one_form(values_as_selects(_time_zone(s, original, i))) for i, s in enumerate(statements)]
    for s in statements:
        _rename_column_shorthand(s)
        allow.check(s, parameters=True)
        for node in s.walk():
            node.comments = None  # comments mean nothing, and must not make equal expressions differ
    statements = [normalize_identifiers(s, dialect="postgres") for s in statements]
    sites = tuple(
        tuple(_path_to(n) for n in s.find_all(exp.Placeholder, exp.Parameter, bfs=False)) for s in statements
    )
    return tuple(statements), (tuple(names) if names is not None else None), sites


def _path_to(node: exp.Expression) -> tuple[tuple[str, int | None], ...]:
    """The argument names (and list positions) leading from the root of ``node``'s tree to it."""
    path = []
    while node.parent is not None:
        path.append((node.arg_key, node.index))
        node = node.parent
    return tuple(reversed(path))


def _node_at(root: exp.Expression, path: tuple[tuple[str, int | None], ...]) -> exp.Expression:
    """The node at ``path`` (see ``_path_to``) in ``root``'s tree."""
    node = root
    for key, i in path:
        node = node.args[key] if i is None else node.args[key][i]
    return node


def _locate_commands(sql: str, statements: list[exp.Expression]) -> None:
    """Give each statement sqlglot kept only as words (a Command) the position of its first token, which
    the parser does not record, so that refusing it says where it is."""
    if not any(isinstance(s, exp.Command) for s in statements):
        return
    try:
        toks = Postgres().tokenize(sql)
    except TokenError:
        return
    firsts, at_start = [], True
    for t in toks:
        if t.token_type == TokenType.SEMICOLON:
            at_start = True
        elif at_start:
            firsts.append(t)
            at_start = False
    if len(firsts) != len(statements):
        return
    for s, t in zip(statements, firsts, strict=True):
        if isinstance(s, exp.Command) and not s.meta.get("line"):
            s.meta.update(line=t.line, col=t.col, start=t.start, end=t.end)


def _rename_column_shorthand(stmt: exp.Expression) -> None:
    """``ALTER TABLE t RENAME a TO b`` renames column a (COLUMN is optional), which sqlglot reads as a rename
    of the table: made the RENAME COLUMN it is."""
    if not isinstance(stmt, exp.Alter):
        return
    actions, options = stmt.args.get("actions") or [], stmt.args.get("options") or []
    if (
        len(actions) == 1
        and isinstance(actions[0], exp.AlterRename)
        and len(options) == 1
        and isinstance(options[0], exp.ToTableProperty)
        and isinstance(options[0].this, exp.Table)
    ):
        old, new = actions[0].this, options[0].this
        rename = exp.RenameColumn(this=exp.Column(this=old.this), to=exp.Column(this=new.this))
        stmt.set("actions", [rename])
        stmt.set("options", None)


def _refuse_overriding(sql: str) -> None:
    """Refuse ``INSERT ... OVERRIDING {SYSTEM|USER} VALUE`` by name (the parser does not know it and would only
    say where it stopped)."""
    try:
        toks = Postgres().tokenize(sql)
    except TokenError:
        return
    for t, nxt, last in zip(toks, toks[1:], toks[2:], strict=False):
        if (
            t.text.upper() == "OVERRIDING"
            and nxt.text.upper() in ("SYSTEM", "USER")
            and last.text.upper() == "VALUE"
        ):
            raise NotSupportedError(
                f"INSERT ... OVERRIDING {nxt.text.upper()} VALUE is not supported",
                t.line,
                t.col - (t.end - t.start),
            )


_UTC = frozenset({"UTC", "ETC/UTC", "UCT", "GMT", "Z", "ZULU", "UNIVERSAL", "+00", "+00:00", "0"})


def _time_zone(stmt: exp.Expression, sql: str, index: int) -> exp.Expression:
    """``SET TIME ZONE 'zone'`` (or ``SET timezone = 'zone'``): to UTC, which the session's time zone always
    is, a statement that does nothing; to any other zone, refused."""
    zone = None
    if isinstance(stmt, exp.Command) and stmt.name.upper() == "SET":
        text = str(stmt.expression.this if isinstance(stmt.expression, exp.Literal) else stmt.expression or "")
        words = text.strip().split(None, 3)
        if words[:1] == ["SESSION"] or words[:1] == ["LOCAL"]:
            words = words[1:]
        if [w.upper() for w in words[:2]] == ["TIME", "ZONE"]:
            zone = " ".join(words[2:]) if len(words) > 2 else ""
    elif isinstance(stmt, exp.Set) and len(stmt.expressions) == 1:
        item = stmt.expressions[0].this
        if (
            isinstance(item, exp.EQ)
            and isinstance(item.this, exp.Column)
            and item.this.name.lower() == "timezone"
        ):
            zone = item.expression.sql(dialect="postgres")
    if zone is None:
        return stmt
    if zone.strip().strip("'").upper() in _UTC:
        return exp.Command(this="SET", expression=exp.Literal.string("TIME ZONE 'UTC'"))
    message = (
        f"the session time zone is UTC, always: SET TIME ZONE {zone.strip()} is not supported (TIMESTAMP WITH "
        "TIME ZONE values are shown in UTC; AT TIME ZONE gives the wall time of another zone)"
    )
    if isinstance(stmt, exp.Command):  # the parser kept no place for it: the statement's first word
        starts = _statement_starts(sql)
        line, col = starts[index] if index < len(starts) else (None, None)
        raise NotSupportedError(message, line, col)
    raise error_at(stmt, message, unsupported=True)


def _statement_starts(sql: str) -> list[tuple[int, int]]:
    """The line and column of the first word of each statement of ``sql``."""
    starts, first = [], True
    for tok in Postgres().tokenize(sql):
        if tok.token_type == TokenType.SEMICOLON:
            first = True
        elif first:
            starts.append((tok.line, tok.col - (tok.end - tok.start)))
            first = False
    return starts


def _parse_spark(sql: str, params, spark: Spark, catalog) -> list[exp.Expression]:
    if not isinstance(spark, Spark):
        raise ProgrammingError(f"unknown SQL dialect {spark!r}: use 'postgres' or 'spark'")
    if params is not None:
        raise ProgrammingError("parameters are not supported in Spark's dialect")
    try:
        statements = [s for s in sqlglot.parse(sql, read="spark") if s is not None]
    except ParseError as err:
        e = err.errors[0] if err.errors else {}
        raise ProgrammingError(
            f"syntax error: {e.get('description', err)}", e.get("line"), e.get("col")
        ) from err
    except TokenError:
        raise _token_error(sql) from None
    out = []
    for s in statements:
        for node in s.walk():
            node.comments = None
        for w in s.find_all(exp.Window):  # Spark's window semantics are not checked against Spark's yet
            raise error_at(w, "window functions in Spark SQL are not supported", unsupported=True)
        s = normalize_identifiers(one_form(values_as_selects(s, "col")), dialect="spark")  # case-insensitive
        s = to_postgres(s, relations_of(catalog, spark) if catalog is not None else {}, spark)
        allow.check(s)
        out.append(s)
    return out


def _groups_without_order(sql: str) -> None:
    """A frame in GROUPS mode first in its window (``OVER (GROUPS ...)``, which the parser reads as a window's
    name and then stops): PostgreSQL's error, that GROUPS needs an ORDER BY."""
    try:
        toks = Postgres().tokenize(sql)
    except TokenError:
        return
    for before, t, nxt in zip(toks, toks[1:], toks[2:], strict=False):
        if (
            t.text.upper() == "GROUPS"
            and before.token_type == TokenType.L_PAREN
            and (nxt.text.upper() in ("BETWEEN", "UNBOUNDED", "CURRENT") or nxt.token_type == TokenType.NUMBER)
        ):
            raise ProgrammingError("GROUPS mode requires an ORDER BY clause", t.line, t.col - (t.end - t.start))


def _numbered(sql: str, named: bool) -> tuple[str, list[str] | None]:
    """``sql`` with its parameter placeholders written as ``$1``, ``$2``, ... (and, for a mapping, the names in
    their numbers' order): ``%s`` and ``?`` in order,
    ``%(name)s`` by name (``named``: the parameters are a mapping), ``%%`` as ``%``; ``$n`` stays. Found among
    the statement's tokens, so never inside a string, a quoted name or a comment. Each ``$`` before a digit is
    read as ``?`` first (the text keeps its length): the tokenizer would read ``$1,$2`` as the start of a
    string quoted by ``$1,$``, a tag PostgreSQL does not allow."""
    try:
        toks = Postgres().tokenize(re.sub(r"\$(?=[0-9])", "?", sql))
    except TokenError:
        raise _token_error(sql) from None
    T = sqlglot.tokens.TokenType
    names: dict[str, int] = {}
    edits: list[tuple[int, int, str]] = []
    count = 0
    i = 0
    while i < len(toks):
        t = toks[i]

        def glued(k: int, kind, text: str | None = None, i: int = i) -> bool:
            return _glued(toks, i + k, kind, text)

        if t.token_type == T.PLACEHOLDER and sql[t.start] == "$":  # ``$n``, kept, spaced from what follows
            if glued(1, T.NUMBER):
                edits.append((t.start, toks[i + 1].end, sql[t.start : toks[i + 1].end + 1]))
                i += 1
        elif t.token_type == T.PLACEHOLDER and t.text == "?" and not named:
            count += 1
            edits.append((t.start, t.end, f"${count}"))
        elif t.token_type == T.MOD and glued(1, T.MOD):
            edits.append((t.start, toks[i + 1].end, "%"))
            i += 1
        elif t.token_type == T.MOD and glued(1, T.VAR, "s") and not named:
            count += 1
            edits.append((t.start, toks[i + 1].end, f"${count}"))
            i += 1
        elif (
            t.token_type == T.MOD
            and named
            and glued(1, T.L_PAREN)
            and glued(2, T.VAR)
            and glued(3, T.R_PAREN)
            and glued(4, T.VAR, "s")
        ):
            name = toks[i + 2].text
            k = names.setdefault(name, len(names) + 1)
            edits.append((t.start, toks[i + 4].end, f"${k}"))
            i += 4
        i += 1
    out = sql
    for start, end, text in reversed(edits):
        if text != "%" and end + 1 < len(sql) and not sql[end + 1].isspace():
            text += " "  # the parser would read ``$1,$2`` as a dollar-quoted string's start
        out = out[:start] + text + out[end + 1 :]
    return out, (list(names) if named else None)


def _glued(toks: list, at: int, kind, text: str | None) -> bool:
    """Whether token ``at`` is of ``kind`` (and ``text``) and follows the one before without a space."""
    if at >= len(toks):
        return False
    u = toks[at]
    return u.token_type == kind and u.start == toks[at - 1].end + 1 and (text is None or u.text == text)


def _bind(statements: list[exp.Expression], sites: tuple, values: list) -> list[exp.Expression]:
    """The statements (changed in place) with each ``$n`` (at the paths ``sites`` gives per statement)
    replaced by the n-th value as a typed SQL constant."""
    used = set()

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter):
            k = node.this
            if not (isinstance(k, exp.Literal) and k.is_int):
                raise error_at(node, f"{node.sql()} is not a parameter of this statement")
            n = int(k.this)
            if not 1 <= n <= len(values):
                raise ProgrammingError(f"the statement uses parameter ${n}, but {len(values)} were given")
            used.add(n)
            value = _constant(values[n - 1])
            allow.check(value)
            return value
        if isinstance(node, exp.Placeholder):
            raise error_at(node, "parameter placeholders need parameters")
        return node

    for s, paths in zip(statements, sites, strict=True):  # the caller's own copies
        for node in [_node_at(s, path) for path in paths]:
            node.replace(replace(node))
    if len(used) != len(values):
        raise ProgrammingError(f"the statement uses {len(used)} parameters, but {len(values)} were given")
    return statements


def _constant(v: object) -> exp.Expression:
    """A Python value as a SQL constant of its type (a ``datetime`` with a time zone as TIMESTAMP WITH TIME
    ZONE, a ``timedelta`` as an INTERVAL)."""
    if v is None:
        return exp.Null()
    if isinstance(v, (bool, np.bool_)):
        return exp.Boolean(this=bool(v))
    if isinstance(v, (int, np.integer)):
        return _signed(exp.Literal.number(abs(int(v))), int(v) < 0)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        double = exp.DataType.build("DOUBLE PRECISION", dialect="postgres")
        if not math.isfinite(f):
            return exp.cast(
                exp.Literal.string("NaN" if f != f else "Infinity" if f > 0 else "-Infinity"), double
            )
        return _signed(exp.cast(exp.Literal.number(repr(abs(f))), double), math.copysign(1.0, f) < 0)  # -0.0
    if isinstance(v, decimal.Decimal):
        if not v.is_finite():
            raise DataError(f"the parameter {v} is not a number ivm can hold")
        return _signed(exp.Literal.number(format(abs(v), "f")), v < 0)
    if isinstance(v, str):
        return exp.Literal.string(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:  # an instant, as psycopg passes one: TIMESTAMP WITH TIME ZONE, in UTC
            utc = v.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ")
            return exp.cast(exp.Literal.string(utc + "+00:00"), "TIMESTAMPTZ", dialect="postgres")
        return exp.cast(exp.Literal.string(v.isoformat(sep=" ")), "TIMESTAMP", dialect="postgres")
    if isinstance(v, dt.timedelta):  # an interval of days and a time of day, as psycopg passes one
        micros = v // dt.timedelta(microseconds=1)
        days = abs(micros) // 86_400_000_000 * (1 if micros >= 0 else -1)
        text = f"{days} days {micros - days * 86_400_000_000} microseconds"
        return exp.Interval(this=exp.Literal.string(text))
    if isinstance(v, dt.date):
        return exp.cast(exp.Literal.string(v.isoformat()), "DATE", dialect="postgres")
    raise ProgrammingError(f"cannot pass a parameter of type {type(v).__name__}")


def _signed(node: exp.Expression, negative: bool) -> exp.Expression:
    return exp.Neg(this=node) if negative else node


def _token_error(sql: str) -> ProgrammingError:
    """The syntax error for text sqlglot cannot split into tokens: an unterminated string, quoted identifier,
    dollar quote or comment, pointed at where it opens."""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        opener, what = None, None
        if sql.startswith("/*", i):
            opener, what, close = "/*", "comment", "*/"
        elif ch in "'\"":
            opener, close = ch, ch
            what = "quoted string" if ch == "'" else "quoted identifier"
        elif ch == "$":
            tag = sql[i : sql.find("$", i + 1) + 1] if sql.find("$", i + 1) > 0 else ""
            if tag and (tag == "$$" or tag[1:-1].isidentifier()):
                opener, what, close = tag, "dollar-quoted string", tag
        if opener is None:
            i += 1
            continue
        j = sql.find(close, i + len(opener))
        while close in "'\"" and j >= 0 and sql.startswith(close * 2, j):
            j = sql.find(close, j + 2)  # a doubled quote stands for itself
        if j < 0:
            line = sql.count("\n", 0, i) + 1
            col = i - (sql.rfind("\n", 0, i) + 1) + 1
            return ProgrammingError(f"syntax error: unterminated {what}", line, col)
        i = j + len(close)
    return ProgrammingError("syntax error: the statement text cannot be read")
