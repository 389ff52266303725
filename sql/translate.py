"""SELECT statements to logical plans.

sqlglot's ``qualify`` first resolves every column to its source (and rejects unknown ones); the translator then
builds the FROM clause as joins, pushes equality conditions into join keys, and puts grouping, aggregation,
HAVING, DISTINCT, set operations and ORDER BY ... LIMIT on top.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.unnest_subqueries import unnest_subqueries
from sqlglot.schema import MappingSchema

from sql import chars, rewrite
from sql.aggregates import aggregate, own_aggregates
from sql.allow import sql_name
from sql.catalog import Catalog
from sql.datetimes import unjustified
from sql.decorrelate import aggregate_only, decorrelate, inside, skips_a_level, subquery_values
from sql.errors import ProgrammingError, SqlError, UnsupportedError, error_at, position
from sql.hoist import hoist_select_subqueries
from sql.lateral import laterals_as_joins
from sql.logical import (
    AggCall,
    Aggregate,
    Call,
    ColRef,
    Column,
    Const,
    Distinct,
    Expr,
    Filter,
    Join,
    Negate,
    Plan,
    Positive,
    Project,
    SemiJoin,
    TopK,
    UnionAll,
    Values,
)
from sql.padded import padded_items_apart
from sql.recursive import translate_recursive, with_key
from sql.scalar import NULL_TYPE, boolean, coerce, common_type, read_unknown, translate_scalar, value_refused
from sql.scoping import sources
from sql.series import is_series, named_series, series_over
from sql.types import BOOL, INT, TEXT, SqlType
from sql.windows import check_no_windows, check_placement, is_window_function, translate_windows

__all__ = ["translate_query", "qualify_query"]


@dataclass
class Scope:
    """Columns visible in a FROM clause: (source alias, column name) -> position; ``extra`` maps other nodes
    (uncorrelated EXISTS) to the columns that hold their values."""

    names: dict[tuple[str, str], int]
    plan: Plan
    extra: dict[int, int] = field(default_factory=dict)

    def resolve(self, node: exp.Expression) -> Expr | None:
        if id(node) in self.extra:
            i = self.extra[id(node)]
            return ColRef(i, self.plan.columns[i].type)
        if isinstance(node, exp.Column):
            key = (node.table, node.name)
            if key in self.names:
                i = self.names[key]
                return ColRef(i, self.plan.columns[i].type)
            if node.table and all(t != node.table for t, _ in self.names):
                raise _correlated(node)
            raise error_at(node, f"column {node.sql()!r} does not exist")
        return None


def _correlated(node: exp.Column) -> SqlError:
    """The error for a column of an enclosing query met where it cannot be read: qualify has checked every
    column, so this is a correlated subquery of a shape that was not decorrelated into a join."""
    return error_at(
        node,
        f"this correlated subquery is not supported (it reads {node.sql()!r} of an enclosing query other than "
        "in equalities of its WHERE, or is not in WHERE or HAVING)",
        True,
    )


def translate_query(tree: exp.Expression, catalog: Catalog) -> Plan:
    """The logical plan of a query (SELECT or set operation), checked against the catalog."""
    with_ = tree.args.get("with_") or tree.args.get("with")
    if with_ is not None and with_.args.get("recursive"):
        check_no_windows(tree, "a recursive query")
        return translate_recursive(tree, catalog, translate_query)
    _check_relations(tree, catalog)
    rewrite.check_merged_columns(tree)
    rewrite.check_scalar_subqueries(tree)
    tree = padded_items_apart(laterals_as_joins(qualify_query(tree, catalog)))
    rewrite.always_exists(tree)
    tree = tree.transform(_every)
    if skips_a_level(tree):
        return _query(_unnested(tree), catalog)
    try:
        return _query(_subqueries_by_shape(tree.copy()), catalog)
    except UnsupportedError:
        if next(subquery_values(tree), None) is None:
            raise
    return _query(_unnested(tree), catalog)


def _unnested(tree: exp.Expression) -> exp.Expression:
    """``tree`` with every subquery used as a value decorrelated, and every derived table that reads an outer
    query's values (made LATERAL by that) joined on them."""
    tree = decorrelate(tree)
    while tree.find(exp.Lateral) is not None:
        tree = decorrelate(laterals_as_joins(tree))
    return tree


def qualify_query(tree: exp.Expression, catalog: Catalog) -> exp.Expression:
    """A copy of query ``tree`` with every column qualified by the alias of the source it reads and every
    ``*`` expanded (sqlglot's ``qualify``), or the error naming what cannot be resolved."""
    _check_relations(tree, catalog)
    rewrite.check_using_star(tree, catalog.sqlglot_schema())
    tree = named_series(tree.copy())
    for node in tree.find_all(exp.Subquery, exp.CTE):
        alias = node.args.get("alias")
        if isinstance(alias, exp.TableAlias) and alias.columns:
            node.meta["ivm_alias_columns"] = (len(alias.columns), alias.name, position(alias))
    series = {t.alias_or_name for t in tree.find_all(exp.Table) if is_series(t)}
    bare = {}  # a series' name written without a table, first where written (sqlglot changes the tree in place)
    for c in tree.find_all(exp.Column) if series else ():
        if not c.table and c.name in series and c.name not in bare:
            bare[c.name] = c.copy()
    try:
        qualified = qualify(
            tree,
            schema=MappingSchema(catalog.sqlglot_schema(), dialect="postgres", normalize=False),
            dialect="postgres",
            validate_qualify_columns=True,
            quote_identifiers=False,
        )
    except OptimizeError as err:
        raise _locate(tree, str(err), catalog.sqlglot_schema()) from err
    except (AssertionError, KeyError, ValueError, TypeError) as err:  # sqlglot's own, on what it cannot resolve
        raise error_at(tree, f"the query cannot be resolved: {err}") from err
    for node in (
        qualified.find_all(exp.TableColumn) if series else ()
    ):  # how sqlglot leaves a series' column another item has
        if node.name in series:
            raise error_at(bare.get(node.name, node), f'column reference "{node.name}" is ambiguous')
    for node in qualified.find_all(exp.Subquery, exp.CTE):
        named = node.meta.get("ivm_alias_columns")
        if named is not None and named[0] > len(node.this.selects):  # (sqlglot drops the names left over)
            count, alias, (line, col) = named
            available = len(node.this.selects)
            what = "WITH query" if isinstance(node, exp.CTE) else "table"  # (PostgreSQL's words)
            message = f"{what} {alias!r} has {available} columns available but {count} columns specified"
            raise ProgrammingError(message, line, col)
    return qualified


def _subqueries_by_shape(tree: exp.Expression) -> exp.Expression:
    """The subqueries of the shapes met most (correlated by equalities, in WHERE or a SELECT list) as the joins
    that need no domain of outer values; ``decorrelate`` takes the others."""
    tree = hoist_select_subqueries(tree)
    rewrite.check_in_subqueries(tree)
    tree = rewrite.not_in_subqueries(tree)
    rewrite.correlated_in_as_exists(tree)
    # correlated and uncorrelated EXISTS, IN and scalar subqueries become joins with grouped derived tables
    _stash_inequality_exists(tree)
    _refuse_scalars_of_no_row(tree)
    return unnest_subqueries(tree)


def _refuse_scalars_of_no_row(tree: exp.Expression) -> None:
    """Refuse (for ``decorrelate`` to take) a tree where sqlglot's unnesting would cross-join a scalar
    subquery wrongly: an uncorrelated one inside a condition or function that is not sure to give exactly one
    row (``LIMIT 1``, ``WHERE``d rows without an aggregate), which drops every outer row when it gives none,
    where its value must be NULL; and any in the list or HAVING of an aggregate without GROUP BY, which is
    then read from the aggregate's rows, NULL when there are none."""
    for node in subquery_values(tree):
        inner = node.this
        if not isinstance(node, exp.Subquery) or not isinstance(inner, exp.Select):
            continue
        outer = node.parent_select
        where = outer.args.get("where") if isinstance(outer, exp.Select) else None
        if isinstance(outer, exp.Select) and aggregate_only(outer) and not (where and inside(node, where)):
            # cross-joined, it would be read as a column of the aggregate's rows, which may be none
            raise error_at(node, "a subquery in the list of an aggregate without GROUP BY, cross-joined", True)
        if inner.find_ancestor(exp.Condition) is None or _one_row(inner):
            continue
        own = {t.alias_or_name for t in inner.find_all(exp.Table, exp.Subquery) if t.alias_or_name}
        if all(not c.table or c.table in own for c in inner.find_all(exp.Column)):
            raise error_at(node, "a scalar subquery that may give no row, cross-joined", True)


def _one_row(select: exp.Select) -> bool:
    """Whether a query gives exactly one row: one aggregate's, without GROUP BY, HAVING, LIMIT or OFFSET."""
    if any(select.args.get(k) for k in ("having", "limit", "offset")) or select.find(exp.Window):
        return False
    return aggregate_only(select)


def _every(node: exp.Expression) -> exp.Expression:
    """``EVERY(x)``, which sqlglot reads as an unknown function, as the ``BOOL_AND(x)`` it is."""
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "every" and len(node.expressions) == 1:
        out = exp.LogicalAnd(this=node.expressions[0])
        out.meta.update(node.meta)
        return out
    return node


def _check_relations(tree: exp.Expression, catalog) -> None:
    """Every relation a query names exists (a table, a view, or one of its WITH queries)."""
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    known = getattr(catalog, "ctes", {})
    for t in tree.find_all(exp.Table):
        name = t.name
        if name and name not in ctes and name not in known and not _relation_exists(catalog, name):
            raise error_at(t, f"relation {name!r} does not exist")


def _relation_exists(catalog, name: str) -> bool:
    try:
        catalog.relation_plan(name)
    except SqlError:
        return False
    return True


def _locate(tree: exp.Expression, message: str, schema: dict | None = None) -> SqlError:
    """sqlglot's resolution error, pointed at the column it names, in PostgreSQL's words (a name that two
    tables of its FROM clause have is ambiguous)."""
    m = re.search(r"Column '([^']+)' could not be resolved", message)
    if m:
        for col in tree.find_all(exp.Column):
            if col.name == m.group(1) or col.sql() == m.group(1):
                if not col.table and schema is not None and _ambiguous(col, schema):
                    return error_at(col, f"column reference {col.name!r} is ambiguous")
                return error_at(col, f"column {m.group(1)!r} does not exist")
    m = re.search(r"Unknown output column: (\d+)", message)
    if m:
        return ProgrammingError(f"ORDER BY position {m.group(1)} is not in select list")
    return ProgrammingError(message.split(". Line:")[0])


def _ambiguous(col: exp.Column, schema: dict) -> bool:
    """Whether more than one table or view read by the FROM clause of ``col``'s query has a column of its
    name."""
    select = col.find_ancestor(exp.Select)
    if select is None:
        return False
    from_ = select.args.get("from_")
    sources = ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]
    having = [s for s in sources if isinstance(s, exp.Table) and col.name in schema.get(s.name, {})]
    return len(having) > 1


class _WithCatalog:
    """A catalog seen from inside a WITH clause: its common table expressions shadow relations."""

    def __init__(self, outer, ctes: dict[str, Plan]) -> None:
        self.outer = outer
        self.ctes = ctes

    def relation_plan(self, name: str, node: exp.Expression | None = None) -> Plan:
        if name in self.ctes:
            return self.ctes[name]
        return self.outer.relation_plan(name, node)


def _query(node: exp.Expression, catalog: Catalog) -> Plan:
    key = with_key(node)
    with_ = node.args.get(key)
    if with_ is not None:
        if with_.args.get("recursive"):
            raise error_at(
                with_,
                "WITH RECURSIVE inside a subquery is not supported; put it first in the query",
                unsupported=True,
            )
        ctes: dict[str, Plan] = {}
        scoped = _WithCatalog(catalog, ctes)
        for cte in with_.expressions:
            ctes[cte.alias_or_name] = _query(cte.this, scoped)
        node = node.copy()
        node.set(key, None)
        catalog = scoped
    if isinstance(node, exp.Subquery):
        return _query(node.this, catalog)
    if isinstance(node, exp.Union):
        left, right = _unify(node, _query(node.left, catalog), _query(node.right, catalog))
        plan: Plan = UnionAll((left, right), left.columns)
        if node.args.get("distinct"):
            plan = Distinct(plan)
        return _order_limit(node, plan, None)
    if isinstance(node, (exp.Except, exp.Intersect)):
        left, right = _unify(node, _query(node.left, catalog), _query(node.right, catalog))
        if node.args.get("distinct", True):
            left, right = Distinct(left), Distinct(right)
        # EXCEPT ALL keeps max(m_left - m_right, 0) copies; INTERSECT ALL min(m_left, m_right) = m_left - that
        excess = Positive(UnionAll((left, Negate(right)), left.columns))
        plan = excess if isinstance(node, exp.Except) else UnionAll((left, Negate(excess)), left.columns)
        return _order_limit(node, plan, None)
    if isinstance(node, exp.Select):
        return _select(node, catalog)
    raise error_at(node, f"{sql_name(node)} is not a query", unsupported=True)


def _unify(node: exp.Expression, left: Plan, right: Plan) -> tuple[Plan, Plan]:
    """Both sides of a set operation with the same column types: each column in the common type of its two
    sides (integers and decimals widen, a NULL takes the other side's type, strings as ``sql.chars`` says),
    named as on the left."""
    what = node.key.upper()
    if len(left.columns) != len(right.columns):
        raise error_at(node, f"each side of {what} must have the same number of columns")
    types = []
    literals = (_string_constants(left), _string_constants(right))
    for i, (a, b) in enumerate(zip(left.columns, right.columns, strict=True)):
        left, right = _read_beside(node, left, i, b.type), _read_beside(node, right, i, a.type)
        a, b = left.columns[i], right.columns[i]
        real = [c.type for c in (a, b) if c.type != NULL_TYPE]
        if real and all(t.kind == "text" for t in real):
            marks = [chars.NULL if c.type == NULL_TYPE else c.type for c in (a, b)]
            types.append(chars.common_string_type(node, what, marks, [i in literals[0], i in literals[1]]))
            continue
        try:
            types.append(common_type(node, [a.type, b.type]))
        except SqlError as err:
            raise error_at(node, f"{what} of {a.type} and {b.type} is not possible") from err
    columns = tuple(Column(a.name, t) for a, t in zip(left.columns, types, strict=True))

    def typed(side: Plan) -> Plan:
        if all(c.type == t for c, t in zip(side.columns, types, strict=True)):
            return side
        exprs = tuple(
            Const(None, t) if c.type == NULL_TYPE else coerce(node, ColRef(i, c.type), t)
            for i, (c, t) in enumerate(zip(side.columns, types, strict=True))
        )
        return Project(side, exprs, columns)

    return typed(left), typed(right)


def _read_beside(node: exp.Expression, side: Plan, i: int, other: SqlType) -> Plan:
    """``side`` with column ``i`` read as ``other`` where that column is a string constant (or NULL) in every
    row and ``other`` is not text: PostgreSQL reads an unknown literal as the type beside it (VALUES
    ('2024-01-31'), (DATE '2024-02-01') is two dates)."""
    mine = side.columns[i].type
    if mine.kind == "text" and other.kind != "text" and other != NULL_TYPE and i in _readable_constants(side):
        return _read_constants(node, side, i, other)
    return side


def _readable_constants(side: Plan) -> set[int]:
    """The columns of one side of a set operation that are string constants as written in every row (a
    VALUES list's column, a union of them), which ``_read_constants`` can read as another type."""
    if isinstance(side, UnionAll):
        sets = [_readable_constants(p) for p in side.inputs]
        return set.intersection(*sets) if sets else set()
    if isinstance(side, Project):
        below = _readable_constants(side.input)
        return {
            i
            for i, e in enumerate(side.exprs)
            if (_unknown(e) or (isinstance(e, ColRef) and e.index in below)) and side.columns[i].type == TEXT
        }
    return set()


def _unknown(e: Expr) -> bool:
    """A string constant as written, or a NULL (read as text beside one): a value of no type yet."""
    return chars.untyped(e) or (isinstance(e, Const) and e.value is None)


def _read_constants(node: exp.Expression, side: Plan, i: int, t: SqlType) -> Plan:
    """``side`` with column ``i`` (in ``_readable_constants``) read as type ``t``."""
    if isinstance(side, UnionAll):
        inputs = tuple(_read_constants(node, p, i, t) for p in side.inputs)
        return UnionAll(inputs, inputs[0].columns)
    assert isinstance(side, Project)
    e = side.exprs[i]
    source = side.input
    if _unknown(e):
        e = Const(None, t) if e.value is None else read_unknown(node, e.value, t)
    else:
        source = _read_constants(node, source, e.index, t)
        e = ColRef(e.index, t)
    columns = tuple(Column(c.name, t, c.nullable) if j == i else c for j, c in enumerate(side.columns))
    return Project(source, tuple(e if j == i else x for j, x in enumerate(side.exprs)), columns)


def _string_constants(side: Plan) -> set[int]:
    """The columns of one side of a set operation that are string constants as written, still untyped (as in
    ``SELECT 'x' UNION SELECT c``; also under DISTINCT or LIMIT, which may refuse more than PostgreSQL would,
    never less)."""
    if isinstance(side, (Distinct, TopK, Filter)):
        return _string_constants(side.input)
    if isinstance(side, Project):
        below = _string_constants(side.input)
        return {
            i
            for i, e in enumerate(side.exprs)
            if chars.untyped(e) or (isinstance(e, ColRef) and e.type == TEXT and e.index in below)
        }
    return set()


def _from(select: exp.Select, catalog: Catalog) -> tuple[Scope, list[exp.Expression]]:
    """The FROM clause joined as far as possible by equality conditions; returns the conditions left over."""
    from_ = select.args.get("from_") or select.args.get("from")
    where = select.args.get("where")
    if from_ is None:  # one row without columns (held as one unnamed column), kept where WHERE holds
        return Scope({}, Values(((0,),), (Column("?", INT, False),))), _conjuncts(where.this) if where else []
    groups = [[(from_.this, "inner", None)]]  # FROM's comma-separated items, each a chain of joins
    for j in select.args.get("joins") or []:
        if j.args.get("using"):
            raise error_at(j, "JOIN ... USING is not supported yet", unsupported=True)
        side = (j.side or "").lower()
        kind = j.kind.lower() if j.kind else ""
        if kind in ("semi", "anti", "lateral") or j.method:
            raise error_at(j, f"{kind or j.method} joins are not supported", unsupported=True)
        if not side and not kind and j.args.get("on") is None:  # a comma: the next item of FROM
            groups.append([])
        groups[-1].append((j.this, side or "inner", j.args.get("on")))
    sources = [s for g in _padded_first(groups) for s in g]
    _series_read_before(sources)
    pending = _conjuncts(where.this) if where is not None else []
    k = next((i for i, (_, kind, _) in enumerate(sources) if kind != "inner"), len(sources))
    if k == len(sources):
        return _inner_joins(sources, pending, catalog)
    # the inner joins before the first outer join are ordered freely; WHERE conditions may move into them only
    # when every later join is a LEFT join, which keeps all of their rows
    if all(kind == "left" for _, kind, _ in sources[k:]):
        scope, pending = _inner_joins(sources[:k], pending, catalog)
    else:
        scope, leftover = _inner_joins(sources[:k], [], catalog)
        # the inner joins' own ON conditions apply before any later outer join
        scope = _filtered(scope, leftover)
    outer = sources[k:]
    for n, (src, kind, on) in enumerate(outer):
        if _reads_before(src):
            scope = _lateral_series(scope, src, kind, on)
            continue
        plan, alias = _source(src, catalog)
        names = {(alias, c.name): i for i, c in enumerate(plan.columns)}
        offset = len(scope.plan.columns)
        right = Scope(names, plan)
        both = Scope({**scope.names, **{k: v + offset for k, v in names.items()}}, None)  # type: ignore[arg-type]
        conds = _conjuncts(on) if on is not None else []
        if kind == "inner":
            own = len(conds)
            # WHERE conditions may serve as this join's keys only when no later join pads its rows with NULLs
            movable = all(later in ("inner", "left") for _, later, _ in outer[n + 1 :])
            if movable:
                conds += pending
                pending = []
            lk, rk, types, on_rest, where_rest = [], [], [], [], []
            equalities = [_equi(c, scope, right, widen=True) for c in conds]
            null_safe = not any(equalities)
            for i, c in enumerate(conds):
                pair = _null_safe_pair(c, scope, right) if null_safe else equalities[i]
                if pair is None:
                    (on_rest if i < own else where_rest).append(c)
                else:
                    lk.append(pair[0])
                    rk.append(pair[1])
                    types.append(pair[2])
            both.plan = _keyed_join(kind, scope.plan, plan, lk, rk, types, nulls_match=null_safe and bool(lk))
            scope = _filtered(both, on_rest)  # the join's own conditions hold before any later join
            pending = where_rest + pending
        else:
            both.plan = _outer_join(kind, scope, right, both, conds)
            scope = both
    return scope, pending


def _lateral_series(scope: Scope, src: exp.Table, kind: str, on: exp.Expression | None) -> Scope:
    """A generate_series reading the items before it, joined to them after an outer join: CROSS JOIN or JOIN
    ... ON (its condition filters the rows), or LEFT JOIN ... ON true (a row without values is padded). (A
    RIGHT or FULL join beside it is refused by ``_padded_first``.)"""
    conds = [c for c in (_conjuncts(on) if on is not None else []) if not _is_true(c)]
    if kind == "left" and conds:
        raise error_at(
            conds[0],
            "LEFT JOIN generate_series(...) reading the items before it is supported with ON true only",
            True,
        )
    return _filtered(_with_series(scope, src, kind == "left"), conds)


def _is_true(cond: exp.Expression) -> bool:
    return isinstance(cond, exp.Boolean) and cond.this is True


def _padded_first(groups: list[list]) -> list[list]:
    """FROM's items in an order whose left-deep chain of joins means what the items cross-joined mean: a
    comma binds looser than any JOIN, so an item holding a RIGHT or FULL join (which pads the rows before it
    with NULLs) goes first; LEFT and inner joins of an item read only that item, so they may join the items
    before it too. Two such items are refused by name."""
    padding = [n for n, g in enumerate(groups) if any(kind in ("right", "full") for _, kind, _ in g[1:])]
    if not padding:
        return groups
    series = next((src for g in groups for src, _, _ in g if _reads_before(src)), None)
    if series is not None:
        raise error_at(
            series,
            "generate_series(...) reading other items of a FROM clause holding a RIGHT or "
            "FULL join is not supported",
            True,
        )
    if padding == [0]:
        return groups
    if len(padding) > 1:
        src = groups[padding[1]][0][0]
        raise error_at(src, "several items of FROM holding RIGHT or FULL joins are not supported", True)
    n = padding[0]
    return [groups[n], *groups[:n], *groups[n + 1 :]]


def _outer_join(kind: str, left: Scope, right: Scope, both: Scope, conds: list[exp.Expression]) -> Plan:
    """A LEFT, RIGHT or FULL join on ``conds``. Equalities of a column of each side are its keys (numbers of
    different types compared in their common type). A condition on one side alone filters that side when the
    other side is the one kept whole; on a side kept whole, it makes the side's keys NULL where it does not
    hold, so that the row is kept unmatched. A condition comparing both sides otherwise takes
    ``_matched_and_unmatched``."""
    lk: list[int] = []
    rk: list[int] = []
    types: list[SqlType] = []
    only: dict[str, list[Expr]] = {"left": [], "right": []}
    null_safe = [c for c in conds if isinstance(c, exp.NullSafeEQ)]
    if null_safe:
        if len(null_safe) < len(conds):
            return _matched_and_unmatched(kind, left, right, both, conds)
        return _null_safe_join(kind, left, right, conds)
    for c in conds:
        pair = _equi(c, left, right, widen=True) or _expression_equality(c, left, right)
        if pair is not None:
            lk.append(pair[0])
            rk.append(pair[1])
            types.append(pair[2])
            continue
        cols = list(c.find_all(exp.Column))
        side = None
        if not list(c.find_all(exp.Exists, exp.Subquery)):
            if all((col.table, col.name) in right.names for col in cols):
                side = "right"
            elif all((col.table, col.name) in left.names for col in cols):
                side = "left"
        if side is None:
            if list(c.find_all(exp.Exists, exp.Subquery)):
                what = f"this {kind.upper()} JOIN condition, comparing both sides through a subquery,"
                raise error_at(c, f"{what} is not supported", True)
            return _matched_and_unmatched(kind, left, right, both, conds)
        only[side].append(boolean(c, translate_scalar(c, (right if side == "right" else left).resolve)))
    lplan, rplan = left.plan, right.plan
    kept = {"left": kind in ("left", "full"), "right": kind in ("right", "full")}
    if only["right"] and not kept["right"]:
        rplan, only["right"] = Filter(rplan, _all(only["right"])), []
    if only["left"] and not kept["left"]:
        lplan, only["left"] = Filter(lplan, _all(only["left"])), []
    if not lk and (only["left"] or only["right"]):  # one constant key, so that a gate has a key to make NULL
        lk, rk, types = [-1], [-1], [INT]
    return _keyed_join(kind, lplan, rplan, lk, rk, types, only["left"], only["right"])


def _matched_and_unmatched(
    kind: str, left: Scope, right: Scope, both: Scope, conds: list[exp.Expression]
) -> Plan:
    """An outer join on any conditions: the inner join on them (on their equalities as keys, the rest
    filtering the pairs), and the rows of each side kept whole that no pair holds, padded with NULLs. Such a
    row is found by an antijoin with the distinct rows of that side among the pairs, so duplicates of a row
    share its fate, as they must."""
    lk, rk, types, rest = _keys_and_rest(
        conds,
        lambda c: (
            None
            if isinstance(c, exp.NullSafeEQ)
            else _equi(c, left, right, widen=True) or _expression_equality(c, left, right)
        ),
    )
    lplan, rplan = left.plan, right.plan
    pairs = _filtered(Scope(both.names, _keyed_join("inner", lplan, rplan, lk, rk, types)), rest).plan
    nl = len(lplan.columns)
    columns = Join(kind, lplan, rplan, (), ()).columns
    parts = [pairs]
    for side, plan, at in (("left", lplan, 0), ("right", rplan, nl)):
        if kind not in (side, "full"):
            continue
        own = tuple(ColRef(at + i, c.type) for i, c in enumerate(plan.columns))
        alone = SemiJoin(plan, Distinct(Project(pairs, own, plan.columns)), True)
        other = rplan if side == "left" else lplan
        nulls = tuple(Const(None, c.type) for c in other.columns)
        mine = tuple(ColRef(i, c.type) for i, c in enumerate(plan.columns))
        exprs = (*mine, *nulls) if side == "left" else (*nulls, *mine)
        parts.append(Project(alone, exprs, columns))
    return UnionAll(tuple(parts), columns)


def _keys_and_rest(conds: list[exp.Expression], pair_of) -> tuple[list, list, list[SqlType], list]:
    """The conditions ``pair_of`` makes a pair of join keys (left key, right key, type) of, as three lists,
    and the others."""
    lk: list = []
    rk: list = []
    types: list[SqlType] = []
    rest = []
    for c in conds:
        pair = pair_of(c)
        if pair is None:
            rest.append(c)
        else:
            lk.append(pair[0])
            rk.append(pair[1])
            types.append(pair[2])
    return lk, rk, types, rest


def _null_safe_join(kind: str, left: Scope, right: Scope, conds: list[exp.Expression]) -> Plan:
    """A join whose every condition is ``l IS NOT DISTINCT FROM r`` of a column of each side: keys where NULL
    meets NULL (the join of a decorrelated subquery's results with the outer rows)."""
    lk: list[int] = []
    rk: list[int] = []
    types: list[SqlType] = []
    for c in conds:
        eq = exp.EQ(this=c.this, expression=c.expression)
        pair = _equi(eq, left, right, widen=True) or _expression_equality(eq, left, right)
        if not isinstance(c, exp.NullSafeEQ) or pair is None:
            what = f"this {kind.upper()} JOIN condition beside IS NOT DISTINCT FROM"
            raise error_at(c, f"{what} is not supported", True)
        lk.append(pair[0])
        rk.append(pair[1])
        types.append(pair[2])
    return _keyed_join(kind, left.plan, right.plan, lk, rk, types, nulls_match=True)


def _keyed_join(
    kind: str,
    left: Plan,
    right: Plan,
    lk: list[int],
    rk: list[int],
    types: list[SqlType],
    lgates=(),
    rgates=(),
    nulls_match: bool = False,
) -> Plan:
    """A join of ``left`` and ``right`` on key columns ``lk`` = ``rk`` compared in ``types`` (see
    ``_join_keys`` for the gates), with the columns of both sides and no others."""
    lplan, lkeys = _join_keys(left, lk, types, list(lgates))
    rplan, rkeys = _join_keys(right, rk, types, list(rgates))
    joined = Join(kind, lplan, rplan, lkeys, rkeys, nulls_match)
    nl, nr = len(left.columns), len(right.columns)
    if (len(lplan.columns), len(rplan.columns)) == (nl, nr):
        return joined
    wl = len(lplan.columns)
    keep = [*range(nl), *range(wl, wl + nr)]  # the added key columns go again
    cols = tuple(joined.columns[i] for i in keep)
    return Project(joined, tuple(ColRef(i, joined.columns[i].type) for i in keep), cols)


def _all(preds: list[Expr]) -> Expr:
    out = preds[0]
    for p in preds[1:]:
        out = Call("and", (out, p), BOOL)
    return out


def _join_keys(plan: Plan, keys: list, types: list[SqlType], gates: list[Expr]) -> tuple[Plan, tuple]:
    """``plan`` with its join keys as columns of the keys' types, NULL where ``gates`` do not all hold (a key
    is a column's position, an expression over the columns, or -1: the constant 1); unchanged when the keys
    are its own columns as they are."""
    cols = plan.columns
    pairs = zip(keys, types, strict=True)
    if not gates and all(isinstance(k, int) and k >= 0 and _same_key(cols[k].type, t) for k, t in pairs):
        return plan, tuple(keys)
    gate = _all(gates) if gates else None
    exprs: list[Expr] = [ColRef(i, c.type) for i, c in enumerate(cols)]
    added = []
    for j, (k, t) in enumerate(zip(keys, types, strict=True)):
        e: Expr = k if not isinstance(k, int) else Const(1, INT) if k < 0 else ColRef(k, cols[k].type)
        e = coerce(None, e, t)
        if gate is not None:
            e = Call("case", (gate, e, Const(None, t)), t)
        exprs.append(e)
        added.append(Column(f"_key{j}", t))
    width = len(cols)
    return Project(plan, tuple(exprs), (*cols, *added)), tuple(range(width, width + len(keys)))


def _same_key(a: SqlType, b: SqlType) -> bool:
    """Whether a column of type ``a`` serves as a join key compared in type ``b`` as it is: the same type, or
    strings held alike (TEXT, VARCHAR and CHAR values compare by their held values, see ``_equi``)."""
    return a == b or a.kind == b.kind == "text"


def _uncorrelated_exists(scope: Scope, conds: list[exp.Expression], catalog: Catalog) -> Scope:
    """Each EXISTS left in the conditions (those sqlglot did not turn into joins: uncorrelated ones) becomes a
    one-row boolean column ``COUNT(*) > 0`` of its query, cross-joined into the FROM clause."""
    for cond in conds:
        for node in cond.find_all(exp.Exists):
            sub = _query(node.this, catalog)
            counted = Aggregate(sub, (), (AggCall("count_star", None, False, INT),), (Column("n", INT),))
            flag = Project(
                counted,
                (Call("gt", (ColRef(0, INT), Const(0, INT)), BOOL),),
                (Column("exists", BOOL, False),),
            )
            joined = Join("inner", scope.plan, flag, (), ())
            extra = dict(scope.extra)
            extra[id(node)] = len(scope.plan.columns)
            scope = Scope(scope.names, joined, extra)
    return scope


def _filtered(scope: Scope, conds: list[exp.Expression]) -> Scope:
    """The scope's rows that meet every condition (the scope itself when there is none)."""
    pred = None
    for c in conds:
        e = boolean(c, translate_scalar(c, scope.resolve))
        pred = e if pred is None else Call("and", (pred, e), BOOL)
    if pred is None:
        return scope
    return Scope(scope.names, Filter(scope.plan, pred), scope.extra)


def _tables_of(cond: exp.Expression) -> set[str]:
    return {c.table for c in cond.find_all(exp.Column)}


def _inner_joins(sources, conds: list[exp.Expression], catalog: Catalog) -> tuple[Scope, list[exp.Expression]]:
    """Inner and cross joins, reordered: conditions on one relation filter it before any join, and each next
    relation joined is one linked to those already joined by an equality, so that no cross product is formed
    while a join key exists."""
    conds = list(conds)
    for _, _, on in sources:
        if on is not None:
            conds += _conjuncts(on)
    rels = []
    for src, _, _ in sources:
        if _reads_before(src):
            rels.append([src.alias_or_name, src])  # planned once the items it reads are joined
            continue
        plan, alias = _source(src, catalog)
        rels.append([alias, plan])
    aliases = {a for a, p in rels if not isinstance(p, exp.Expression)}
    rest = []
    for c in conds:
        tables = _tables_of(c)
        local = len(tables) == 1 and tables <= aliases and not list(c.find_all(exp.Exists, exp.Subquery))
        if local:
            rel = next(r for r in rels if r[0] in tables)
            scope = Scope({(rel[0], col.name): i for i, col in enumerate(rel[1].columns)}, rel[1])
            rel[1] = Filter(rel[1], boolean(c, translate_scalar(c, scope.resolve)))
        else:
            rest.append(c)
    first, *remaining = rels
    if isinstance(first[1], exp.Expression):  # reading an enclosing query's columns: refused as it reads them
        first[1] = _source(first[1], catalog)[0]
    scope = Scope({(first[0], c.name): i for i, c in enumerate(first[1].columns)}, first[1])
    joined = {first[0]}
    while remaining:
        items = [r for r in remaining if not isinstance(r[1], exp.Expression)]
        ready = [r for r in remaining if isinstance(r[1], exp.Expression) and _tables_of(r[1].this) <= joined]
        if ready or not items:
            rel = (ready or remaining)[0]
            remaining.remove(rel)
            scope = _with_series(scope, rel[1])
            joined.add(rel[0])
            here = [
                c for c in rest if rel[0] in _tables_of(c) and _tables_of(c) <= joined and not _has_subquery(c)
            ]
            rest = [c for c in rest if all(c is not h for h in here)]
            scope = _filtered(scope, here)
            continue
        rel = next((r for r in items if _linked(r[0], joined, rest)), items[0])
        remaining.remove(rel)
        alias, plan = rel
        names = {(alias, c.name): i for i, c in enumerate(plan.columns)}
        right = Scope(names, plan)
        reach = joined | {alias}
        lk, rk, types, rest = _keys_and_rest(
            rest,
            lambda c, s=scope, r=right, reach=reach: (
                _equi(c, s, r, widen=True) if _tables_of(c) <= reach else None
            ),
        )
        null_safe = not lk
        if null_safe:
            lk, rk, types, rest = _keys_and_rest(
                rest,
                lambda c, s=scope, r=right, reach=reach: (
                    _null_safe_pair(c, s, r) if _tables_of(c) <= reach else None
                ),
            )
        offset = len(scope.plan.columns)
        join = _keyed_join("inner", scope.plan, plan, lk, rk, types, nulls_match=null_safe and bool(lk))
        scope = Scope({**scope.names, **{k: v + offset for k, v in names.items()}}, join)
        joined.add(alias)
    return scope, rest


def _series_read_before(sources: list) -> None:
    """PostgreSQL's error for a generate_series reading an item that comes after it in FROM."""
    for n, (src, _, _) in enumerate(sources):
        if _reads_before(src):
            later = {s.alias_or_name for s, _, _ in sources[n + 1 :]}
            col = next((c for c in src.this.find_all(exp.Column) if c.table in later), None)
            if col is not None:
                raise error_at(col, f'invalid reference to FROM-clause entry for table "{col.table}"')


def _reads_before(src: exp.Expression) -> bool:
    """Whether ``src`` is a generate_series reading columns of the items before it (or of an enclosing
    query)."""
    return is_series(src) and next(src.this.find_all(exp.Column), None) is not None


def _with_series(scope: Scope, item: exp.Table, outer: bool = False) -> Scope:
    """The scope's rows, each with the values of the generate_series ``item`` reading them."""
    series = series_over(item, scope.plan, scope.resolve, outer)
    offset = len(scope.plan.columns)
    alias = item.alias_or_name
    names = {(alias, c.name): offset + j for j, c in enumerate(series.columns[offset:])}
    return Scope({**scope.names, **names}, series, scope.extra)


def _has_subquery(cond: exp.Expression) -> bool:
    return next(cond.find_all(exp.Exists, exp.Subquery), None) is not None


def _linked(alias: str, joined: set[str], conds: list[exp.Expression]) -> bool:
    """Whether an equality between columns links relation ``alias`` to the relations already joined."""
    return any(
        _is_column_equality(c, True) and _tables_of(c) - joined == {alias} and bool(_tables_of(c) & joined)
        for c in conds
    )


def _stash_inequality_exists(tree: exp.Expression) -> None:
    """Take out of each WHERE the [NOT] EXISTS conditions correlated by more than column equalities (which
    sqlglot would turn into array aggregates) and keep them on the SELECT, to be planned as joins."""
    for select in list(tree.find_all(exp.Select)):
        where = select.args.get("where")
        if where is None:
            continue
        keep, stash = [], []
        for c in _conjuncts(where.this):
            negated = isinstance(c, exp.Not)
            node = c.this if negated else c
            if isinstance(node, exp.Exists) and isinstance(node.this, exp.Select):
                inner = node.this
                local = sources(inner)
                sub_where = inner.args.get("where")
                conds = _conjuncts(sub_where.this) if sub_where is not None else []
                correlated = [d for d in conds if any(col.table not in local for col in d.find_all(exp.Column))]
                if any(not _is_column_equality(d) for d in correlated):
                    stash.append((negated, node))
                    continue
            keep.append(c)
        if stash:
            select.meta["ivm_exists"] = stash
            select.set("where", exp.Where(this=exp.and_(*keep)) if keep else None)


def _null_safe_pair(cond: exp.Expression, left: Scope, right: Scope):
    """For ``l IS NOT DISTINCT FROM r`` of a column of each side, what ``_equi`` gives for ``l = r``."""
    if not isinstance(cond, exp.NullSafeEQ):
        return None
    return _equi(exp.EQ(this=cond.this, expression=cond.expression), left, right, widen=True)


def _is_column_equality(cond: exp.Expression, null_safe: bool = False) -> bool:
    return (
        isinstance(cond, (exp.EQ, exp.NullSafeEQ) if null_safe else exp.EQ)
        and isinstance(cond.this, exp.Column)
        and isinstance(cond.expression, exp.Column)
    )


def _exists_by_join(scope: Scope, node: exp.Exists, negated: bool, catalog: Catalog) -> Scope:
    """``[NOT] EXISTS (SELECT ... WHERE correlated conditions)``: join the outer rows with the subquery's rows
    on the correlated equalities, keep the pairs meeting the other correlated conditions, and semijoin
    (antijoin) the outer rows with the distinct outer rows found."""
    inner_select = node.this
    if inner_select.args.get("group") or inner_select.args.get("having") or inner_select.args.get("limit"):
        raise error_at(node, "this correlated EXISTS is not supported yet", unsupported=True)
    local = sources(inner_select)
    sub_where = inner_select.args.get("where")
    conds = _conjuncts(sub_where.this) if sub_where is not None else []
    correlated = [d for d in conds if any(col.table not in local for col in d.find_all(exp.Column))]
    plain = inner_select.copy()
    inner_only = [d for d in conds if d not in correlated]
    plain.set("where", exp.Where(this=exp.and_(*inner_only)) if inner_only else None)
    inner_scope, inner_pending = _from(plain, catalog)
    inner_scope = _filtered(inner_scope, inner_pending)
    inner_plan = inner_scope.plan
    outer_plan = scope.plan
    width = len(outer_plan.columns)

    def pair_of(d: exp.Expression):
        pair = _equi(d, scope, inner_scope, widen=True) if _is_column_equality(d) else None
        return pair or _expression_equality(d, scope, inner_scope)

    lk, rk, types, residual = _keys_and_rest(correlated, pair_of)
    if not lk:
        raise error_at(node, "a correlated EXISTS needs an equality with the outer query", unsupported=True)
    joined = _keyed_join("inner", outer_plan, inner_plan, lk, rk, types)
    both = Scope({**scope.names, **{k: v + width for k, v in inner_scope.names.items()}}, joined)
    matched = _filtered(both, residual).plan
    outer_cols = tuple(ColRef(i, c.type) for i, c in enumerate(outer_plan.columns))
    found = Distinct(Project(matched, outer_cols, outer_plan.columns))
    plan = SemiJoin(outer_plan, found, negated)
    return Scope(scope.names, plan, scope.extra)


def _expression_equality(cond: exp.Expression, left: Scope, right: Scope) -> tuple[Expr, Expr, SqlType] | None:
    """An equality of an expression over ``left``'s columns alone with one over ``right``'s alone, as the two
    expressions and the type they are compared in (a join on computed keys)."""
    if not isinstance(cond, exp.EQ) or list(cond.find_all(exp.Subquery, exp.Exists)):
        return None

    def side(e: exp.Expression) -> Scope | None:
        cols = list(e.find_all(exp.Column))
        for s in (left, right):
            if cols and all((c.table, c.name) in s.names for c in cols):
                return s
        return None

    a, b = cond.this, cond.expression
    if side(a) is right and side(b) is left:
        a, b = b, a
    if side(a) is not left or side(b) is not right:
        return None
    ea, eb = translate_scalar(a, left.resolve), translate_scalar(b, right.resolve)
    if ea.type == eb.type:
        return ea, eb, ea.type
    if ea.type.kind == eb.type.kind == "text":  # as ``sql.chars.comparable`` compares them
        ea, eb = chars.comparable(ea, eb)
        return ea, eb, TEXT
    if ea.type.numeric and eb.type.numeric:
        return ea, eb, common_type(cond, [ea.type, eb.type])
    return None


def _equi(cond: exp.Expression, left: Scope, right: Scope, widen: bool = False):
    """The columns ``(left, right)`` an equality compares, one of each side, when they have the same type;
    with ``widen``, also numbers of different types, given with their common type as ``(left, right, type)``."""
    if not isinstance(cond, exp.EQ):
        return None
    a, b = cond.this, cond.expression
    if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
        return None
    ka, kb = (a.table, a.name), (b.table, b.name)
    if ka in left.names and kb in right.names:
        i, j = left.names[ka], right.names[kb]
    elif kb in left.names and ka in right.names:
        i, j = left.names[kb], right.names[ka]
    else:
        return None
    ti, tj = left.plan.columns[i].type, right.plan.columns[j].type
    if not widen:
        return (i, j) if ti == tj else None
    if ti == tj:
        return i, j, ti
    if ti.kind == tj.kind == "text":  # a VARCHAR compared with a CHAR is keyed without trailing spaces
        a, b = chars.comparable(ColRef(i, ti), ColRef(j, tj))
        return (i if isinstance(a, ColRef) else a), (j if isinstance(b, ColRef) else b), TEXT
    if ti.numeric and tj.numeric:
        return i, j, common_type(cond, [ti, tj])
    return None


def _source(src: exp.Expression, catalog: Catalog) -> tuple[Plan, str]:
    if is_series(src):  # reading nothing before it: over one row
        one = Values(((0,),), (Column("?", INT, False),))
        series = series_over(src, one, Scope({}, one).resolve)
        cols = series.columns[1:]
        plan = Project(series, tuple(ColRef(i + 1, c.type) for i, c in enumerate(cols)), cols)
        return plan, src.alias_or_name
    if isinstance(src, exp.Table):
        name = src.name
        alias = src.alias_or_name
        return catalog.relation_plan(name, src), alias
    if isinstance(src, exp.Subquery):
        plan = _query(src.this, catalog)
        names = [s.alias_or_name for s in src.this.selects] if isinstance(src.this, exp.Select) else None
        if names:
            plan = Project(
                plan,
                tuple(ColRef(i, c.type) for i, c in enumerate(plan.columns)),
                tuple(Column(n, c.type, c.nullable) for n, c in zip(names, plan.columns, strict=True)),
            )
        return plan, src.alias_or_name
    raise error_at(src, f"{sql_name(src)} in FROM is not supported", unsupported=True)


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """The AND-ed conditions of ``node``; conditions common to every branch of an OR are factored out, so
    that a join condition repeated in each branch still becomes a join key."""
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Or):
        branches = [_conjuncts(b) for b in _disjuncts(node)]
        common = [c for c in branches[0] if all(any(c == d for d in b) for b in branches[1:])]
        if common:
            rest = []
            for b in branches:
                left = [d for d in b if not any(d == c for c in common)]
                if not left:
                    return common  # one branch is implied by the common part: the OR is true
                rest.append(exp.and_(*left) if len(left) > 1 else left[0])
            return common + [exp.or_(*[exp.Paren(this=r) for r in rest])]
    return [node]


def _disjuncts(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Paren):
        return _disjuncts(node.this)
    if isinstance(node, exp.Or):
        return _disjuncts(node.this) + _disjuncts(node.expression)
    return [node]


def _select(select: exp.Select, catalog: Catalog) -> Plan:
    for key in ("windows", "qualify"):
        if select.args.get(key):
            raise error_at(select, f"{key.upper()} is not supported yet", unsupported=True)
    check_placement(select)
    scope, pending = _from(select, catalog)
    scope = _uncorrelated_exists(scope, pending, catalog)
    scope = _filtered(scope, pending)
    for negated, node in select.meta.get("ivm_exists", []):
        scope = _exists_by_join(scope, node, negated, catalog)
    plan = scope.plan
    group = select.args.get("group")
    having = select.args.get("having")
    aggs = [a for s in select.selects for a in _own_aggregates(s, select)]
    if having is not None:
        aggs += _own_aggregates(having, select)
    hidden = _hidden_order(select, scope)
    aggs += [a for _, o in hidden for a in _own_aggregates(o, select)]
    if group is not None or aggs:
        plan, resolve = _aggregate(select, scope, group, aggs)
    else:
        resolve = scope.resolve
    if having is not None:
        plan = Filter(plan, boolean(having, translate_scalar(having.this, resolve)))
    plan, resolve = translate_windows(select, plan, resolve)
    exprs = []
    cols = []
    for s in select.selects:
        node = s.this if isinstance(s, exp.Alias) else s
        e = translate_scalar(node, resolve)
        if unjustified(e):
            raise value_refused(node)
        exprs.append(e)
        cols.append(Column(s.alias_or_name, e.type))
    shown = len(cols)
    for i, (_, o) in enumerate(hidden):  # ORDER BY ... LIMIT on what is not selected: ranked, then dropped
        e = translate_scalar(o, resolve)
        exprs.append(e)
        cols.append(Column(f"_order{i}", e.type))
    computes = [s.unalias().sql() for s in select.selects] + [t for t, _ in hidden]
    on = _distinct_on(select)
    group = []
    for i, o in enumerate(on):
        e = translate_scalar(o.transform(lambda n: _output_expression(n, select, scope)), resolve)
        if e not in exprs:
            exprs.append(e)
            cols.append(Column(f"_on{i}", e.type))
            computes.append(o.sql())
        group.append(exprs.index(e))
    plan = Project(plan, tuple(exprs), tuple(cols))
    if on:
        keys = _order_keys(select, plan, computes)
        leading = {exprs[k[0]] for k in keys[: len(set(group))]}
        if keys and leading != {exprs[g] for g in group}:
            raise error_at(
                select.args["order"], "SELECT DISTINCT ON expressions must match initial ORDER BY expressions"
            )
        plan = TopK(plan, tuple(keys), 1, 0, tuple(dict.fromkeys(group)))
    elif select.args.get("distinct"):
        plan = Distinct(plan)
    plan = _order_limit(select, plan, computes)
    if len(cols) > shown:
        plan = Project(plan, tuple(ColRef(i, c.type) for i, c in enumerate(cols[:shown])), tuple(cols[:shown]))
    return plan


def _distinct_on(select: exp.Select) -> list[exp.Expression]:
    """The expressions of SELECT DISTINCT ON (...), or none."""
    distinct = select.args.get("distinct")
    on = distinct.args.get("on") if distinct is not None else None
    if on is None:
        return []
    return list(on.expressions) if isinstance(on, exp.Tuple) else [on]


def _own_aggregates(node: exp.Expression, select: exp.Select) -> list[exp.Expression]:
    """The aggregate calls in ``node`` that belong to ``select`` (not to a subquery inside it)."""
    return [a for a in own_aggregates(node, select) if not is_window_function(a)]


def _hidden_order(select: exp.Select, scope: Scope) -> list[tuple[str, exp.Expression]]:
    """The ORDER BY items of a SELECT with LIMIT or OFFSET that are not among its output columns (a SELECT
    DISTINCT must select them, as in SQL): each as written, and as computed from the FROM clause."""
    order = select.args.get("order")
    on = _distinct_on(select)
    if order is None or (select.args.get("limit") is None and select.args.get("offset") is None and not on):
        return []
    if select.args.get("distinct") and not on:
        return []
    names = [s.alias_or_name for s in select.selects]
    computes = [s.unalias().sql() for s in select.selects]
    out: list[tuple[str, exp.Expression]] = []
    for o in order.expressions:
        t = o.this
        if isinstance(t, exp.Literal) and not t.is_string and not 1 <= int(t.this) <= len(names):
            raise error_at(t, f"ORDER BY position {t.this} is not in the select list")
        if _output_position(t, names, computes) is None and t.sql() not in [w for w, _ in out]:
            out.append((t.sql(), t.transform(lambda n: _output_expression(n, select, scope))))
    return out


def _output_expression(node: exp.Expression, select: exp.Select, scope: Scope) -> exp.Expression:
    """An unqualified column in an ORDER BY expression: the input column of that name (as in SQL, where only a
    whole ORDER BY item names an output column), or else the output column's expression."""
    if isinstance(node, exp.Column) and not node.table:
        inputs = [t for t, name in scope.names if name == node.name]
        if len(inputs) == 1:
            return exp.column(node.name, inputs[0])
        for s in select.selects:
            if s.alias_or_name == node.name:
                return s.unalias().copy()
    return node


def _output_position(target: exp.Expression, names: list[str], computes: list[str]) -> int | None:
    """Which output column an ORDER BY item names: by position, by output name, or by what it computes."""
    if isinstance(target, exp.Literal) and not target.is_string:
        return int(target.this) - 1
    if isinstance(target, exp.Column) and not target.table and target.name in names:
        return names.index(target.name)
    if target.sql() in computes:
        return computes.index(target.sql())
    return None


def _aggregate(select: exp.Select, scope: Scope, group: exp.Group | None, aggs: list[exp.Expression]):
    """The aggregation of the FROM clause (see ``sql.aggregates``) and the resolver of what reads it."""
    groupings = [g for g in select.find_all(exp.Grouping) if g.parent_select is select]
    plan, resolve_aggregates = aggregate(scope.plan, scope.resolve, group, aggs, groupings)
    scope_tables = {t for t, _ in scope.names}

    def resolve(node: exp.Expression) -> Expr | None:
        found = resolve_aggregates(node)
        if found is not None:
            return found
        if isinstance(node, exp.Column):
            if node.table.startswith("_u_"):  # a subquery decorrelated into a join, read after grouping
                # the column was made by the decorrelation, without a position: the SELECT's is given
                raise error_at(select, "a subquery in HAVING that is not an aggregate is not supported", True)
            if node.table and node.table not in scope_tables:
                raise _correlated(node)
            raise error_at(node, f"column {node.sql()!r} must appear in GROUP BY or be used in an aggregate")
        return None

    return plan, resolve


def _order_limit(node: exp.Expression, plan: Plan, computes: list[str] | None) -> Plan:
    """``plan`` ranked by the ORDER BY of ``node`` when it has LIMIT or OFFSET (``computes``: the SQL each
    output column computes, for ORDER BY items that repeat it)."""
    limit = node.args.get("limit")
    offset = node.args.get("offset")
    if limit is None and offset is None:
        return plan  # ORDER BY alone does not change a view's contents
    keys = _order_keys(node, plan, computes)
    if isinstance(limit, exp.Fetch):  # FETCH FIRST n ROWS ONLY: n is 1 when not given
        n = _count(limit.args.get("count")) if limit.args.get("count") is not None else 1
    else:
        n = _count(limit.expression if limit is not None else None)
    off = _count(offset.expression if offset is not None else None) or 0
    return TopK(plan, tuple(keys), n, off)


def _order_keys(node: exp.Expression, plan: Plan, computes: list[str] | None) -> list[tuple[int, bool, bool]]:
    """The ORDER BY of ``node`` as (output position, descending, NULLs first) keys."""
    order = node.args.get("order")
    keys: list[tuple[int, bool, bool]] = []
    if order is not None:
        names = [c.name for c in plan.columns]
        for o in order.expressions:
            idx = _output_position(o.this, names, computes or [])
            if idx is None or not 0 <= idx < len(names):
                raise error_at(o, "ORDER BY with LIMIT must name output columns", unsupported=True)
            desc = bool(o.args.get("desc"))
            first = o.args.get("nulls_first")
            keys.append((idx, desc, desc if first is None else bool(first)))
    return keys


def _count(node: exp.Expression | None) -> int | None:
    if node is None:
        return None
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this)
    raise error_at(node, "LIMIT and OFFSET need integer constants", unsupported=True)
