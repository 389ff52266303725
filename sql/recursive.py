"""Recursive queries: ``WITH RECURSIVE`` (PostgreSQL's rules) and ``WITH MUTUALLY RECURSIVE`` to fixpoint plans.

``WITH RECURSIVE r AS (base UNION [ALL] step)`` is the least fixed point of ``r = base ∪ step(r)`` (a set with
UNION, a multiset with UNION ALL); the step reads ``r`` once, linearly, as PostgreSQL requires, so the fixed
point equals PostgreSQL's working-table evaluation. ``WITH MUTUALLY RECURSIVE`` (as in Materialize) declares
each definition's columns and types; all definitions start empty and are recomputed together from each other's
previous values until none changes, so their bodies may use anything (aggregates, DISTINCT, NOT EXISTS, EXCEPT).

sqlglot does not parse ``WITH MUTUALLY RECURSIVE``: ``rewrite_mutually_recursive`` blanks out the words and
column types it does not know (keeping every other character where it was, so positions in errors stay true)
and ``attach_mutually_recursive`` hangs the declarations on the parsed ``WITH`` nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Tokenizer, TokenType

from sql.errors import SqlError, error_at
from sql.logical import (
    ColRef,
    Column,
    Distinct,
    Fixpoint,
    FixpointResult,
    Plan,
    Project,
    RecRef,
    UnionAll,
)
from sql.scalar import cast
from sql.types import SqlType, from_sqlglot

__all__ = [
    "DEFAULT_RECURSION_LIMIT",
    "MutualSpec",
    "rewrite_mutually_recursive",
    "attach_mutually_recursive",
    "query_sql",
    "translate_recursive",
    "with_key",
]

DEFAULT_RECURSION_LIMIT = 10_000
"""Rounds a recursive query may take when it names no limit; beyond them it fails instead of running forever."""


@dataclass(frozen=True)
class MutualSpec:
    """The header of one ``WITH MUTUALLY RECURSIVE``: each definition's declared columns, and the limit."""

    names: tuple[str, ...]
    columns: tuple[tuple[Column, ...], ...]
    limit: int
    on_limit: str


# -- parsing the header --------------------------------------------------------------------------------------


def rewrite_mutually_recursive(sql: str) -> tuple[str, dict[int, MutualSpec]]:
    """``sql`` with every ``WITH MUTUALLY RECURSIVE`` header turned into ``WITH RECURSIVE`` of the same length,
    and the headers' declarations by the offset of their first definition's name."""
    if "MUTUALLY" not in sql.upper():
        return sql, {}
    try:
        tokens = Tokenizer(dialect="postgres").tokenize(sql)
    except TokenError:
        return sql, {}  # the parser reports it
    text = list(sql)
    specs: dict[int, MutualSpec] = {}
    i = 0
    while i < len(tokens) - 1:
        if tokens[i].token_type == TokenType.WITH and _word(tokens[i + 1]) == "MUTUALLY":
            i = _header(sql, tokens, i, text, specs)
        else:
            i += 1
    return "".join(text), specs


def attach_mutually_recursive(statements: list[exp.Expression], specs: dict[int, MutualSpec]) -> None:
    """Mark the ``WITH`` nodes that came from ``WITH MUTUALLY RECURSIVE`` with their declarations."""
    if not specs:
        return
    for stmt in statements:
        for with_ in stmt.find_all(exp.With):
            first = with_.expressions[0].args.get("alias")
            start = first.this.meta.get("start") if first is not None else None
            if start in specs:
                with_.meta["ivm_mutual"] = specs[start]


def with_key(query: exp.Expression) -> str:
    """The name of the argument holding a query's WITH clause (sqlglot's versions spell it differently)."""
    return "with_" if "with_" in query.args else "with"


def query_sql(query: exp.Expression) -> str:
    """``query`` (or any statement or expression) as PostgreSQL's SQL, each ``WITH MUTUALLY RECURSIVE`` header
    written back (sqlglot knows no such header and would write ``WITH RECURSIVE``): a text that parses to the
    same query again, as a reopened database parses the definitions of its tables, views and indexes.
    ``ROUND(x, n)`` is written as it is: sqlglot would cast a DOUBLE PRECISION ``x`` to DECIMAL (PostgreSQL has
    no such ROUND; ivm has, and the cast would change its value)."""
    return _Generator(dialect=Postgres()).generate(query)


class _Generator(Postgres.Generator):
    TRANSFORMS = {
        **Postgres.Generator.TRANSFORMS,
        exp.Round: lambda self, e: self.func("ROUND", e.this, e.args.get("decimals")),
    }

    def with_sql(self, expression: exp.With) -> str:
        spec = expression.meta.get("ivm_mutual")
        if spec is None:
            return super().with_sql(expression)
        definitions = []
        for cte, name, columns in zip(expression.expressions, spec.names, spec.columns, strict=True):
            declared = ", ".join(f"{_quoted(c.name)} {c.type}" for c in columns)
            definitions.append(f"{_quoted(name)}({declared}) AS {self.wrap(cte)}")
        limit = f"({spec.on_limit.upper()} AT RECURSION LIMIT {spec.limit})"
        return f"WITH MUTUALLY RECURSIVE {limit} {', '.join(definitions)}"


def _quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="postgres")


def _word(token) -> str:
    return token.text.upper() if token.token_type != TokenType.STRING else ""


def _blank(text: list[str], start: int, end: int) -> None:
    for k in range(start, end + 1):
        if text[k] not in "\n\r":
            text[k] = " "


def _syntax(sql: str, token, message: str) -> SqlError:
    line = sql.count("\n", 0, token.start) + 1
    col = token.start - (sql.rfind("\n", 0, token.start) + 1) + 1
    return SqlError(message, line, col)


def _header(sql: str, tokens: list, i: int, text: list[str], specs: dict[int, MutualSpec]) -> int:
    """Parse the header starting at ``tokens[i]`` (WITH), rewrite it in ``text``; the index after it."""
    mutually = tokens[i + 1]
    if i + 2 >= len(tokens) or tokens[i + 2].token_type != TokenType.RECURSIVE:
        raise _syntax(sql, mutually, "expected RECURSIVE after WITH MUTUALLY")
    _blank(text, mutually.start, mutually.end)  # "WITH MUTUALLY RECURSIVE" -> "WITH           RECURSIVE"
    j = i + 3
    limit, on_limit = DEFAULT_RECURSION_LIMIT, "error"
    opts_start = tokens[j].start if j < len(tokens) else None
    paren = j < len(tokens) and tokens[j].token_type == TokenType.L_PAREN
    k = j + 1 if paren else j
    words = []
    while k < len(tokens) and _word(tokens[k]) in ("RETURN", "ERROR", "AT", "RECURSION", "LIMIT"):
        words.append(_word(tokens[k]))
        k += 1
    if words:
        if words not in (
            ["RECURSION", "LIMIT"],
            ["RETURN", "AT", "RECURSION", "LIMIT"],
            ["ERROR", "AT", "RECURSION", "LIMIT"],
        ):
            raise _syntax(sql, tokens[j], "expected [RETURN AT | ERROR AT] RECURSION LIMIT n")
        if k >= len(tokens) or tokens[k].token_type != TokenType.NUMBER or not tokens[k].text.isdigit():
            raise _syntax(sql, tokens[min(k, len(tokens) - 1)], "RECURSION LIMIT takes a positive integer")
        limit = int(tokens[k].text)
        if limit < 1:
            raise _syntax(sql, tokens[k], "RECURSION LIMIT takes a positive integer")
        on_limit = "return" if words[0] == "RETURN" else "error"
        k += 1
        if paren:
            if k >= len(tokens) or tokens[k].token_type != TokenType.R_PAREN:
                raise _syntax(sql, tokens[min(k, len(tokens) - 1)], "expected ) after the recursion limit")
            k += 1
        _blank(text, opts_start, tokens[k - 1].end)
    elif paren:
        raise _syntax(sql, tokens[j], "expected a definition name after WITH MUTUALLY RECURSIVE")
    names, columns = [], []
    first_start = None
    while True:
        if k >= len(tokens) or tokens[k].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            raise _syntax(sql, tokens[min(k, len(tokens) - 1)], "expected the name of a recursive definition")
        name_tok = tokens[k]
        first_start = name_tok.start if first_start is None else first_start
        name = name_tok.text if name_tok.token_type == TokenType.IDENTIFIER else name_tok.text.lower()
        k += 1
        if k >= len(tokens) or tokens[k].token_type != TokenType.L_PAREN:
            raise _syntax(
                sql,
                tokens[min(k, len(tokens) - 1)],
                f"recursive definition {name!r} needs its columns and types",
            )
        k, cols = _columns(sql, tokens, k, text, name)
        names.append(name)
        columns.append(cols)
        if k >= len(tokens) or _word(tokens[k]) != "AS":
            raise _syntax(sql, tokens[min(k, len(tokens) - 1)], f"expected AS after the columns of {name!r}")
        k = _skip_parens(sql, tokens, k + 1)
        if k < len(tokens) and tokens[k].token_type == TokenType.COMMA:
            k += 1
            continue
        break
    if len(set(names)) != len(names):
        raise _syntax(sql, tokens[i], "WITH MUTUALLY RECURSIVE defines a name twice")
    specs[first_start] = MutualSpec(tuple(names), tuple(columns), limit, on_limit)
    return k


def _columns(sql: str, tokens: list, k: int, text: list[str], name: str) -> tuple[int, tuple[Column, ...]]:
    """The ``(column type, ...)`` list at ``tokens[k]``: the columns, with the types blanked out of ``text``."""
    cols = []
    k += 1
    while True:
        if k >= len(tokens) or tokens[k].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            raise _syntax(sql, tokens[min(k, len(tokens) - 1)], f"expected a column name in {name!r}")
        col_tok = tokens[k]
        col = col_tok.text if col_tok.token_type == TokenType.IDENTIFIER else col_tok.text.lower()
        k += 1
        start, depth = k, 0
        while k < len(tokens):
            t = tokens[k].token_type
            if depth == 0 and t in (TokenType.COMMA, TokenType.R_PAREN):
                break
            depth += t == TokenType.L_PAREN
            depth -= t == TokenType.R_PAREN
            k += 1
        if k >= len(tokens) or start == k:
            raise _syntax(sql, col_tok, f"column {col!r} of {name!r} needs a type")
        type_text = sql[tokens[start].start : tokens[k - 1].end + 1]
        try:
            sql_type = from_sqlglot(exp.DataType.build(type_text, dialect="postgres"))
        except (ParseError, ValueError):
            sql_type = None
        if sql_type is None:
            raise _syntax(sql, tokens[start], f"type {type_text} of column {col!r} is not supported")
        _blank(text, tokens[start].start, tokens[k - 1].end)
        cols.append(Column(col, sql_type, True))
        if tokens[k].token_type == TokenType.R_PAREN:
            return k + 1, tuple(cols)
        k += 1


def _skip_parens(sql: str, tokens: list, k: int) -> int:
    if k >= len(tokens) or tokens[k].token_type != TokenType.L_PAREN:
        raise _syntax(sql, tokens[min(k, len(tokens) - 1)], "expected ( before a recursive definition's query")
    depth = 0
    while k < len(tokens):
        depth += tokens[k].token_type == TokenType.L_PAREN
        depth -= tokens[k].token_type == TokenType.R_PAREN
        k += 1
        if depth == 0:
            return k
    raise _syntax(sql, tokens[-1], "unbalanced parentheses in WITH MUTUALLY RECURSIVE")


# -- translation ---------------------------------------------------------------------------------------------

Translate = Callable[[exp.Expression, object], Plan]


class _Bound:
    """A catalog seen from a recursive WITH: its definitions shadow relations, for sqlglot's resolution too."""

    def __init__(self, outer) -> None:
        self.outer = outer
        self.plans: dict[str, Plan] = {}

    def relation_plan(self, name: str, node: exp.Expression | None = None) -> Plan:
        if name in self.plans:
            return self.plans[name]
        return self.outer.relation_plan(name, node)

    def sqlglot_schema(self) -> dict:
        out = dict(self.outer.sqlglot_schema())
        for name, plan in self.plans.items():
            out[name] = {c.name: str(c.type) for c in plan.columns}
        return out


def translate_recursive(tree: exp.Expression, catalog, translate: Translate) -> Plan:
    """The plan of a query whose top-level WITH is recursive; ``translate`` translates its other parts."""
    with_ = tree.args[with_key(tree)]
    bound = _Bound(catalog)
    spec = with_.meta.get("ivm_mutual")
    if spec is not None:
        _mutual(with_, spec, bound, translate)
    else:
        _standard(with_, bound, translate)
    rest = tree.copy()
    rest.set(with_key(tree), None)
    return translate(rest, bound)


def _name(ident: exp.Expression) -> str:
    return ident.name if isinstance(ident, exp.Identifier) and ident.quoted else ident.name.lower()


def _refs(node: exp.Expression, name: str) -> list[exp.Table]:
    return [t for t in node.find_all(exp.Table) if not t.args.get("db") and _name(t.this) == name]


def _mutual(with_: exp.With, spec: MutualSpec, bound: _Bound, translate: Translate) -> None:
    for name, cols in zip(spec.names, spec.columns, strict=True):
        bound.plans[name] = RecRef(name, cols)
    bodies = []
    for cte, name, cols in zip(with_.expressions, spec.names, spec.columns, strict=True):
        body = translate(cte.this, bound)
        bodies.append(_conform(cte, body, cols, f"recursive definition {name!r}", lossy=True))
    fx = Fixpoint(spec.names, tuple(bodies), spec.limit, spec.on_limit)
    for i, (name, cols) in enumerate(zip(spec.names, spec.columns, strict=True)):
        bound.plans[name] = FixpointResult(fx, i, cols)


def _standard(with_: exp.With, bound: _Bound, translate: Translate) -> None:
    ctes = list(with_.expressions)
    for n, cte in enumerate(ctes):
        name = _name(cte.args["alias"].this)
        aliases = [_name(c) for c in cte.args["alias"].columns]
        body = cte.this
        later = {_name(c.args["alias"].this) for c in ctes[n + 1 :]} - {name}
        for t in body.find_all(exp.Table):
            if not t.args.get("db") and _name(t.this) in later:
                raise error_at(
                    t,
                    "mutual recursion between WITH items is not supported by WITH RECURSIVE; "
                    "use WITH MUTUALLY RECURSIVE",
                    unsupported=True,
                )
        if not _refs(body, name):
            plan = translate(body, bound)
            bound.plans[name] = _rename(cte, plan, aliases) if aliases else plan
            continue
        if not isinstance(body, exp.Union) or _refs(body.this, name):
            raise error_at(
                cte,
                f"recursive query {name!r} does not have the form "
                "non-recursive-term UNION [ALL] recursive-term",
            )
        for clause in ("order", "limit", "offset"):
            if body.args.get(clause):
                raise error_at(
                    body, f"{clause.upper()} in a recursive query is not supported", unsupported=True
                )
        _check_step(body.expression, name)
        base = translate(body.this, bound)
        if aliases:
            base = _rename(cte, base, aliases)
        columns = tuple(Column(c.name, c.type, True) for c in base.columns)
        base = _rename(cte, base, [c.name for c in columns], nullable=True)
        bound.plans[name] = RecRef(name, columns)
        step = translate(body.expression, bound)
        step = _conform(body.expression, step, columns, f"recursive query {name!r}", lossy=False)
        plan: Plan = UnionAll((base, step), columns)
        if body.args.get("distinct"):
            plan = Distinct(plan)
        fx = Fixpoint((name,), (plan,), DEFAULT_RECURSION_LIMIT, "error")
        bound.plans[name] = FixpointResult(fx, 0, columns)


def _check_step(step: exp.Expression, name: str) -> None:
    """PostgreSQL's rules for the recursive term: it reads the query once, linearly."""
    refs = _refs(step, name)
    if len(refs) > 1:
        raise error_at(refs[1], f"recursive reference to query {name!r} must not appear more than once")
    ref = refs[0]
    select = _select_of(ref)
    node = ref.parent
    while node is not None and node is not step.parent:
        if isinstance(node, exp.Subquery) or (isinstance(node, exp.Select) and node is not select):
            raise error_at(ref, f"recursive reference to query {name!r} must not appear within a subquery")
        if isinstance(node, (exp.Except, exp.Intersect)):
            raise error_at(
                ref, f"recursive reference to query {name!r} must not appear within {node.key.upper()}"
            )
        if isinstance(node, exp.Join) and node.side in ("LEFT", "FULL") and node.this is ref:
            raise error_at(ref, f"recursive reference to query {name!r} must not appear within an outer join")
        node = node.parent
    if select is not None:
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is not None and from_.this is ref:
            for j in select.args.get("joins") or []:
                if j.side in ("RIGHT", "FULL"):
                    raise error_at(
                        ref, f"recursive reference to query {name!r} must not appear within an outer join"
                    )
        for clause in ("group", "having", "distinct", "order", "limit", "offset"):
            if select.args.get(clause):
                raise error_at(
                    select.args[clause],
                    f"{clause.upper()} is not allowed in a recursive query's recursive term "
                    "(WITH MUTUALLY RECURSIVE allows it)",
                    unsupported=True,
                )
        for agg in select.find_all(exp.AggFunc):
            if agg.find_ancestor(exp.Select) is select:
                raise error_at(agg, "aggregate functions are not allowed in a recursive query's recursive term")


def _select_of(ref: exp.Table) -> exp.Select | None:
    """The SELECT whose FROM clause holds ``ref`` directly."""
    node = ref.parent
    while node is not None and not isinstance(node, exp.Select):
        node = node.parent
    return node


def _rename(node: exp.Expression, plan: Plan, names: list[str], nullable: bool = False) -> Plan:
    if len(names) != len(plan.columns):
        raise error_at(node, f"the query has {len(plan.columns)} columns but {len(names)} names are given")
    cols = tuple(Column(n, c.type, c.nullable or nullable) for n, c in zip(names, plan.columns, strict=True))
    return Project(plan, tuple(ColRef(i, c.type) for i, c in enumerate(plan.columns)), cols)


def _conform(node: exp.Expression, plan: Plan, columns: tuple[Column, ...], what: str, lossy: bool) -> Plan:
    """``plan`` with ``columns``' names and types (numbers cast; with ``lossy`` also to narrower types)."""
    if len(plan.columns) != len(columns):
        raise error_at(node, f"{what} has {len(columns)} columns but its query returns {len(plan.columns)}")
    exprs = []
    for i, (got, want) in enumerate(zip(plan.columns, columns, strict=True)):
        e = ColRef(i, got.type)
        if got.type != want.type and not lossy and _same_strings(got.type, want.type):
            e = ColRef(i, want.type)  # held alike: CHAR values are TEXT's stripped, as PostgreSQL converts them
        elif got.type != want.type and lossy and got.type.kind == want.type.kind == "text":
            e = cast(exp.Cast(this=exp.Null(), to=exp.DataType.build(str(want.type))), e)
        elif got.type != want.type:
            if not (got.type.numeric and want.type.numeric) or not (lossy or _widens(got.type, want.type)):
                raise error_at(
                    node,
                    f"{what} column {want.name!r} has type {want.type} in its definition "
                    f"but type {got.type} in its recursive part",
                )
            e = cast(exp.Cast(this=exp.Null(), to=exp.DataType.build(str(want.type))), e)
        exprs.append(e)
    return Project(plan, tuple(exprs), columns)


def _same_strings(got: SqlType, want: SqlType) -> bool:
    """Whether the recursive part's strings of type ``got`` take the type ``want`` of the definition as
    PostgreSQL's UNION does, the definition's type first (see ``sql.chars``): any string as TEXT or VARCHAR,
    only CHAR(n) of the same n as CHAR(n) and VARCHAR(n) as VARCHAR(n) (their UNION with anything else is
    typed without the length, which PostgreSQL refuses as the definition's type)."""
    if got.kind != "text" or want.kind != "text":
        return False
    if want.length:
        return got == want
    if not want.pad:
        return True
    return got.pad == want.pad and (want.scale == 1 or got.scale == 0)


def _widens(got: SqlType, want: SqlType) -> bool:
    if want.kind == "float":
        return True
    if want.kind == "decimal":
        return got.kind == "int" or (got.kind == "decimal" and got.scale <= want.scale)
    return False
