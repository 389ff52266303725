"""Canonical text where text is compared: a plan rewritten so that stored codes meet no comparison.

A table keyed by other columns stores its columns of mostly distinct text (comments, names, addresses) under
codes that equal strings need not share (``ivm.engine.strings``): loading them then takes no lookup. Reading,
moving and joining such columns by other keys is as cheap as before; what compares their codes is not. Grouping,
join keys, DISTINCT, set operations, top-k, window functions and a view's own result (arranged by all its
columns) compare codes, so ``canonicalize`` puts a ``Canon`` step below each of them for the columns that may
still hold stored codes there. Filters and projections in between pass such columns along: their own
comparisons of text canonicalize inside the expression (``planner.expr``), and functions of text read the
strings, whatever the code. Most columns thus reach a comparison only if a view uses them, and then only after
its filters.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.prune import column_refs
from sql.logical import (
    Aggregate,
    Canon,
    Distinct,
    Filter,
    Fixpoint,
    FixpointResult,
    Join,
    Negate,
    Plan,
    Positive,
    Project,
    Scan,
    SemiJoin,
    Series,
    TopK,
    UnionAll,
    Window,
)

__all__ = ["canonicalize", "arranged_form", "Stored"]

Stored = Callable[[str], frozenset[int]]  # a relation's name -> the positions of columns it stores uninterned


def canonicalize(plan: Plan, stored: Stored) -> Plan:
    """``plan`` with every column it outputs, and every column its operators compare, in canonical codes."""
    out, loose = _Rewriter(stored).rewrite(plan)
    return _canon(out, loose)


def arranged_form(plan: Plan, key: tuple[int, ...], stored: Stored) -> Plan:
    """The plan an arrangement of ``plan`` by ``key`` is registered under once ``plan`` is canonicalized:
    its key columns canonical, the others as they come."""
    out, loose = _Rewriter(stored).rewrite(plan)
    return _canon(out, loose & frozenset(key))


def _canon(plan: Plan, positions: frozenset[int]) -> Plan:
    if not positions:
        return plan
    if isinstance(plan, Canon):
        return Canon(plan.input, tuple(sorted(positions | frozenset(plan.positions))))
    return Canon(plan, tuple(sorted(positions)))


class _Rewriter:
    """Rewrites bottom-up; each plan comes back with the positions of its output columns that may hold
    stored codes ("loose" columns)."""

    def __init__(self, stored: Stored) -> None:
        self.stored = stored
        self.memo: dict[Plan, tuple[Plan, frozenset[int]]] = {}

    def rewrite(self, plan: Plan) -> tuple[Plan, frozenset[int]]:
        if plan not in self.memo:
            self.memo[plan] = self._rewrite(plan)
        return self.memo[plan]

    def whole(self, plan: Plan) -> Plan:
        out, loose = self.rewrite(plan)
        return _canon(out, loose)

    def _rewrite(self, plan: Plan) -> tuple[Plan, frozenset[int]]:
        none = frozenset()
        if isinstance(plan, Scan):
            return plan, self.stored(plan.table)
        if isinstance(plan, Filter):
            inner, loose = self.rewrite(plan.input)
            return Filter(inner, plan.predicate), loose
        if isinstance(plan, Project):
            inner, loose = self.rewrite(plan.input)
            text = [i for i, e in enumerate(plan.exprs) if e.type.kind == "text"]
            out = frozenset(i for i in text if column_refs(plan.exprs[i]) & loose)
            return Project(inner, plan.exprs, plan.columns), out
        if isinstance(plan, Join):
            left, ll = self.rewrite(plan.left)
            right, rl = self.rewrite(plan.right)
            lk, rk = frozenset(plan.left_keys), frozenset(plan.right_keys)
            left, right = _canon(left, ll & lk), _canon(right, rl & rk)
            nl = len(plan.left.columns)
            loose = (ll - lk) | frozenset(nl + j for j in rl - rk)
            return Join(plan.kind, left, right, plan.left_keys, plan.right_keys, plan.nulls_match), loose
        if isinstance(plan, Aggregate):
            inner, loose = self.rewrite(plan.input)
            read = frozenset(plan.group) | frozenset(p for a in plan.aggs for p in a.reads)
            return Aggregate(_canon(inner, loose & read), plan.group, plan.aggs, plan.columns), none
        if isinstance(plan, Negate):
            inner, loose = self.rewrite(plan.input)
            return Negate(inner), loose
        if isinstance(plan, Series):  # (its arguments are numbers and times)
            inner, loose = self.rewrite(plan.input)
            args = (plan.start, plan.stop, plan.step)
            return Series(inner, *args, plan.columns, plan.ordinality, plan.outer), loose
        if isinstance(plan, UnionAll):
            parts = [self.rewrite(p) for p in plan.inputs]
            loose = frozenset().union(*(lo for _, lo in parts))
            return UnionAll(tuple(p for p, _ in parts), plan.columns), loose
        if isinstance(plan, Canon):
            inner, loose = self.rewrite(plan.input)
            return _canon(inner, frozenset(plan.positions)), loose - frozenset(plan.positions)
        if isinstance(plan, Distinct):
            return Distinct(self.whole(plan.input)), none
        if isinstance(plan, Positive):
            return Positive(self.whole(plan.input)), none
        if isinstance(plan, TopK):
            return TopK(self.whole(plan.input), plan.order, plan.limit, plan.offset, plan.group), none
        if isinstance(plan, SemiJoin):
            return SemiJoin(self.whole(plan.left), self.whole(plan.right), plan.anti), none
        if isinstance(plan, Window):
            inner = self.whole(plan.input)
            return Window(inner, plan.partition, plan.order, plan.calls, plan.columns), none
        if isinstance(plan, FixpointResult):
            fx = plan.fixpoint
            bodies = tuple(self.whole(b) for b in fx.bodies)
            return FixpointResult(
                Fixpoint(fx.names, bodies, fx.limit, fx.on_limit), plan.index, plan.columns
            ), none
        return plan, none  # constants and recursive references: canonical
