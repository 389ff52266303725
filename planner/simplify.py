"""Plan simplification: rewrites that keep a view's result and give its dataflow fewer, cheaper operators.

Translation leaves shapes behind that cost work on every change: decorrelated EXISTS, IN and scalar subqueries
become outer joins under a filter that only matched rows pass, and conditions that were all moved elsewhere
leave a filter on TRUE. ``simplify`` rewrites, bottom-up:

- a filter on TRUE goes, and TRUE drops out of AND;
- a filter goes below a projection that only picks columns, and a filter over a filter becomes one filter
  on both conditions, when the upper one cannot fail on rows the lower one would have removed;
- an outer join under a filter that rejects the rows it pads with NULLs becomes the inner join it then equals
  (an outer join maintains the rows without a partner besides the matches; an inner join only the matches);
- a projection of a projection becomes one, when either of them only picks columns (so nothing is computed
  twice);
- a semijoin (antijoin) of rows with a subset of themselves, as an EXISTS correlated by more than equalities
  becomes, compares a key of the rows rather than every column, when they have one: columns, never NULL,
  that determine the rest (a table's primary key, carried through filters, projections and joins that find
  at most one partner). It becomes an inner join with the distinct keys found, whose inputs pruning can then
  narrow like any join's, instead of arranging every column of both sides by all of them.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.expr import fallible
from planner.properties import Keys, join_key, rows_of
from sql.logical import (
    Aggregate,
    Call,
    Canon,
    ColRef,
    Const,
    Distinct,
    Expr,
    Filter,
    Fixpoint,
    FixpointResult,
    Join,
    Negate,
    Plan,
    Positive,
    Project,
    SemiJoin,
    Series,
    TopK,
    UnionAll,
    Window,
)

__all__ = ["simplify", "column_picks", "renames", "Keys"]


# calls whose value is NULL when any argument is
_STRICT = frozenset(
    {
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "add",
        "sub",
        "mul",
        "div",
        "mod",
        "neg",
        "not",
        "like",
        "regex",
        "to_type",
    }
    | {"abs", "sign", "round", "floor", "ceil", "length", "upper", "lower", "reverse", "trim", "substring"}
    | {"left", "right", "replace", "regexp_replace", "pad", "split_part", "position", "starts_with"}
    | {"overlay", "translate"}
)


def simplify(plan: Plan, keys: Keys = lambda name: ()) -> Plan:
    """``plan`` rewritten as above; the result computes the same rows with the same columns. ``keys(name)``
    gives a table's primary key."""
    return _Simplifier(keys).plan(plan)


class _Simplifier:
    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.memo: dict[Plan, Plan] = {}

    def plan(self, plan: Plan) -> Plan:
        if plan not in self.memo:
            self.memo[plan] = self._rewrite(plan)
        return self.memo[plan]

    def _rewrite(self, plan: Plan) -> Plan:
        if isinstance(plan, Filter):
            return self._filter(self.plan(plan.input), _fold(plan.predicate))
        if isinstance(plan, Project):
            return _project(self.plan(plan.input), plan.exprs, plan.columns)
        if isinstance(plan, Join):
            left, right = self.plan(plan.left), self.plan(plan.right)
            return _join(plan.kind, left, right, plan.left_keys, plan.right_keys, plan.nulls_match)
        if isinstance(plan, SemiJoin):
            return self._semijoin(self.plan(plan.left), self.plan(plan.right), plan.anti)
        if isinstance(plan, Aggregate):
            return Aggregate(self.plan(plan.input), plan.group, plan.aggs, plan.columns)
        if isinstance(plan, Distinct):
            return Distinct(self.plan(plan.input))
        if isinstance(plan, UnionAll):
            return UnionAll(tuple(self.plan(p) for p in plan.inputs), plan.columns)
        if isinstance(plan, Negate):
            return Negate(self.plan(plan.input))
        if isinstance(plan, Positive):
            return Positive(self.plan(plan.input))
        if isinstance(plan, TopK):
            return TopK(self.plan(plan.input), plan.order, plan.limit, plan.offset, plan.group)
        if isinstance(plan, Window):
            return Window(self.plan(plan.input), plan.partition, plan.order, plan.calls, plan.columns)
        if isinstance(plan, Canon):
            return Canon(self.plan(plan.input), plan.positions)
        if isinstance(plan, Series):
            args = (plan.start, plan.stop, plan.step)
            return Series(self.plan(plan.input), *args, plan.columns, plan.ordinality, plan.outer)
        if isinstance(plan, FixpointResult):
            fx = plan.fixpoint
            bodies = tuple(self.plan(b) for b in fx.bodies)
            return FixpointResult(Fixpoint(fx.names, bodies, fx.limit, fx.on_limit), plan.index, plan.columns)
        return plan  # scans, constants, recursive references

    def _semijoin(self, left: Plan, right: Plan, anti: bool) -> Plan:
        n = len(left.columns)
        key = join_key(left, self.keys)
        if key is None or rows_of(right, left) != tuple(range(n)):
            return SemiJoin(left, right, anti)
        # a row of ``right`` is a row of ``left``: one with the same key is the same row
        while isinstance(right, Distinct):  # the distinct keys of distinct rows: those of the rows
            right = right.input
        cols = tuple(left.columns[i] for i in key)
        picks = tuple(ColRef(i, c.type) for i, c in zip(key, cols, strict=True))
        found = Distinct(_project(right, picks, cols))
        met = Join("inner", left, found, key, tuple(range(len(key))))
        semi = Project(met, tuple(ColRef(i, c.type) for i, c in enumerate(left.columns)), left.columns)
        return UnionAll((left, Negate(semi)), left.columns) if anti else semi

    def _filter(self, inner: Plan, pred: Expr) -> Plan:
        if _is_true(pred):
            return inner
        if isinstance(inner, Filter) and not fallible(pred):
            return self._filter(inner.input, _and(inner.predicate, pred))
        if isinstance(inner, Project) and column_picks(inner) is not None:  # the same values below it
            below = self._filter(inner.input, _substitute(pred, inner.exprs))
            return Project(below, inner.exprs, inner.columns)
        inner = _tighten(inner, lambda cols: _rejects(pred, cols))
        return Filter(inner, pred)


def _join(
    kind: str, left: Plan, right: Plan, lk: tuple[int, ...], rk: tuple[int, ...], nulls_match: bool = False
) -> Plan:
    """The join, or, when it is inner and an input projects an aggregate's rows (computing from them, or
    reordering them) and meets the other input on the aggregate's group columns, the join with the aggregate
    itself and the projection computed above it: the aggregate's reduction is arranged by its group already
    and the join reads it, where the projected rows would be arranged anew."""
    join = Join(kind, left, right, lk, rk, nulls_match)
    if kind != "inner":
        return join
    for side, keys in ((right, rk), (left, lk)):
        group = _group_picks(side, keys)
        if group is None:
            continue
        agg = side.input
        order = sorted(range(len(keys)), key=group.__getitem__)
        group = tuple(group[i] for i in order)
        if side is right:
            inner = Join("inner", left, agg, tuple(lk[i] for i in order), group, nulls_match)
            nl = len(left.columns)
            exprs = (
                *(ColRef(i, c.type) for i, c in enumerate(left.columns)),
                *(_shift(e, nl) for e in side.exprs),
            )
        else:
            inner = Join("inner", agg, right, group, tuple(rk[i] for i in order), nulls_match)
            na = len(agg.columns)
            exprs = (*side.exprs, *(ColRef(na + j, c.type) for j, c in enumerate(right.columns)))
        return Project(inner, tuple(exprs), join.columns)
    return join


def _group_picks(side: Plan, keys: tuple[int, ...]) -> tuple[int, ...] | None:
    """When ``side`` is a projection (other than a renaming) of a grouped aggregate whose columns ``keys`` pick
    each of the group columns once, the group column each of them picks."""
    if not isinstance(side, Project) or not isinstance(side.input, Aggregate) or renames(side):
        return None
    ng = len(side.input.group)
    picks = [side.exprs[k] for k in keys]
    if not ng or not all(isinstance(e, ColRef) for e in picks):
        return None
    group = tuple(e.index for e in picks)
    return group if sorted(group) == list(range(ng)) else None


def _shift(e: Expr, by: int) -> Expr:
    if isinstance(e, ColRef):
        return ColRef(e.index + by, e.type)
    if isinstance(e, Call):
        return Call(e.op, tuple(_shift(a, by) for a in e.args), e.type, e.param)
    return e


def _tighten(plan: Plan, rejects: Callable[[frozenset[int]], bool]) -> Plan:
    """``plan`` with its outer joins made inner where a filter above rejects every row they pad:
    ``rejects(cols)`` says whether the filter rejects each row whose columns ``cols`` (positions in ``plan``)
    are all NULL.

    A row of an input of a filter, projection or join reaches the output with its columns in known places, or
    not at all; and a row an outer join pads, or one that stops meeting a partner, has NULL in every column
    of the side it lacks. So the filter's verdict carries down through them."""
    if isinstance(plan, Filter):
        return Filter(_tighten(plan.input, rejects), plan.predicate)
    if isinstance(plan, Canon):
        return Canon(_tighten(plan.input, rejects), plan.positions)
    if isinstance(plan, Project):

        def below(cols: frozenset[int]) -> bool:
            return rejects(
                frozenset(k for k, e in enumerate(plan.exprs) if isinstance(e, ColRef) and e.index in cols)
            )

        return Project(_tighten(plan.input, below), plan.exprs, plan.columns)
    if isinstance(plan, Join):
        nl = len(plan.left.columns)
        left = frozenset(range(nl))
        right = frozenset(range(nl, len(plan.columns)))
        kind = plan.kind
        if kind in ("left", "full") and rejects(right):  # rows padded on the right cannot pass
            kind = "inner" if kind == "left" else "right"
        if kind in ("right", "full") and rejects(left):
            kind = "inner" if kind == "right" else "left"
        lhs = _tighten(plan.left, rejects)
        rhs = _tighten(plan.right, lambda cols: rejects(frozenset(nl + j for j in cols)))
        return _join(kind, lhs, rhs, plan.left_keys, plan.right_keys, plan.nulls_match)
    return plan


def _project(inner: Plan, exprs: tuple[Expr, ...], columns) -> Plan:
    """A projection of ``inner``, merged with ``inner`` when that is a projection and either only picks."""
    if isinstance(inner, Project):
        if all(isinstance(e, ColRef) for e in exprs):
            return _project(inner.input, tuple(inner.exprs[e.index] for e in exprs), columns)
        if all(isinstance(e, ColRef) for e in inner.exprs):
            return _project(inner.input, tuple(_substitute(e, inner.exprs) for e in exprs), columns)
    return Project(inner, exprs, columns)


def column_picks(plan: Project) -> tuple[int, ...] | None:
    """The input positions a projection picks, when it only picks columns (keeping their types)."""
    cols = plan.input.columns
    if all(isinstance(e, ColRef) and e.type.dtype == cols[e.index].type.dtype for e in plan.exprs):
        return tuple(e.index for e in plan.exprs)
    return None


def renames(plan: Plan) -> bool:
    """Whether ``plan`` is a projection of every input column in order: its input's rows, renamed."""
    return isinstance(plan, Project) and column_picks(plan) == tuple(range(len(plan.input.columns)))


def _substitute(e: Expr, picks: tuple[Expr, ...]) -> Expr:
    if isinstance(e, ColRef):
        return picks[e.index]
    if isinstance(e, Call):
        return Call(e.op, tuple(_substitute(a, picks) for a in e.args), e.type, e.param)
    return e


def _is_true(e: Expr) -> bool:
    return isinstance(e, Const) and e.value is True


def _fold(e: Expr) -> Expr:
    """``e`` with TRUE dropped from its conjunctions."""
    if isinstance(e, Call) and e.op == "and":
        args = [a for a in (_fold(a) for a in e.args) if not _is_true(a)]
        if not args:
            return Const(True, e.type)
        return args[0] if len(args) == 1 else Call("and", tuple(args), e.type, e.param)
    return e


def _and(a: Expr, b: Expr) -> Expr:
    return Call("and", (a, b), a.type)


def _null_when(e: Expr, cols: frozenset[int]) -> bool:
    """Whether ``e`` is NULL whenever every column of ``cols`` is."""
    if isinstance(e, ColRef):
        return e.index in cols
    if isinstance(e, Call) and e.op in _STRICT:
        return any(_null_when(a, cols) for a in e.args)
    return False


def _rejects(pred: Expr, cols: frozenset[int]) -> bool:
    """Whether ``pred`` is not TRUE (FALSE or NULL) whenever every column of ``cols`` is NULL."""
    if _null_when(pred, cols):
        return True
    if isinstance(pred, Call):
        if pred.op == "and":
            return any(_rejects(a, cols) for a in pred.args)
        if pred.op == "or":
            return all(_rejects(a, cols) for a in pred.args)
        if pred.op == "not":
            inner = pred.args[0]
            return isinstance(inner, Call) and inner.op == "is_null" and _null_when(inner.args[0], cols)
    return False
