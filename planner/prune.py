"""Column pruning: a plan rewritten so that what joins and aggregates arrange holds only the columns read above.

A join's output carries every column of both inputs, and whatever arranges it (the next join, an aggregate)
would store and move all of them. ``prune`` narrows each input of a join and of an aggregate to the columns the
rest of the plan reads (its keys, its predicates, the output), by a projection right there, unless an
arrangement of the whole input by the same key exists already (a table's own arrangement, an index, another
view's): then the view reads that one. A table is narrowed only when that drops several columns, since a whole
table arranged by a key is what other views are most likely to share. The inputs of operators whose result
depends on every column (DISTINCT, set difference, semijoins, top-k) and recursive definitions stay whole.
A window function's input keeps its partition, order and argument columns and those read above.
"""

from __future__ import annotations

from collections.abc import Callable

from sql.logical import (
    Aggregate,
    Call,
    ColRef,
    Const,
    Distinct,
    Expr,
    Filter,
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
    WindowCall,
)

__all__ = ["prune", "column_refs"]

SCAN_NARROWING = 4  # a scan is narrowed when that drops at least this many columns
Mapping = dict[int, int]  # a kept column's position before pruning -> its position after
Exists = Callable[[Plan, tuple[int, ...]], bool]


def prune(plan: Plan, exists: Exists = lambda plan, key: False) -> Plan:
    """``plan`` with the inputs of its joins and aggregates narrowed to the columns read above them; the result
    has the same columns. ``exists(plan, key)`` says whether an arrangement of ``plan`` by ``key`` is there
    to be read."""
    return _Pruner(exists).exact(plan)


def _select(plan: Plan, m: Mapping, keep, columns) -> Plan:
    """``plan``'s columns ``keep`` (positions before pruning), in that order, by a projection if needed;
    ``columns`` are their descriptions."""
    keep = list(keep)
    picks = [m[i] for i in keep]
    if picks == list(range(len(plan.columns))):
        return plan
    return Project(plan, tuple(ColRef(p, plan.columns[p].type) for p in picks), tuple(columns))


class _Pruner:
    def __init__(self, exists: Exists) -> None:
        self.exists = exists

    def exact(self, plan: Plan) -> Plan:
        """``plan`` pruned inside, with exactly its own columns."""
        width = len(plan.columns)
        inner, m = self.prune(plan, frozenset(range(width)))
        return _select(inner, m, range(width), plan.columns)

    def narrow(
        self, plan: Plan, m: Mapping, need: frozenset[int], key: tuple[int, ...]
    ) -> tuple[Plan, Mapping]:
        """A pruned input, to be arranged by ``key`` (positions before pruning), cut down to the needed columns
        (kept in order), unless the whole input is arranged by that key already."""
        keep = sorted(need)
        if len(keep) == len(plan.columns) or self.exists(plan, tuple(m[i] for i in key)):
            return plan, m
        if isinstance(plan, Scan) and len(plan.columns) - len(keep) < SCAN_NARROWING:
            return plan, m  # a narrow table: one arrangement other views can share is worth more
        columns = [plan.columns[m[i]] for i in keep]
        return _select(plan, m, keep, columns), {old: new for new, old in enumerate(keep)}

    def prune(self, plan: Plan, needed: frozenset[int]) -> tuple[Plan, Mapping]:
        """``plan`` rewritten to compute at least the columns ``needed``, and where each of those now is."""
        if isinstance(plan, Filter):
            inner, m = self.prune(plan.input, needed | column_refs(plan.predicate))
            return Filter(inner, _remap(plan.predicate, m)), m
        if isinstance(plan, Project):
            keep = sorted(needed)
            used = frozenset().union(*(column_refs(plan.exprs[i]) for i in keep))
            inner, m = self.prune(plan.input, used)
            exprs = tuple(_remap(plan.exprs[i], m) for i in keep)
            return Project(inner, exprs, tuple(plan.columns[i] for i in keep)), {
                i: j for j, i in enumerate(keep)
            }
        if isinstance(plan, Join):
            nl = len(plan.left.columns)
            need_l = frozenset(i for i in needed if i < nl) | frozenset(plan.left_keys)
            need_r = frozenset(i - nl for i in needed if i >= nl) | frozenset(plan.right_keys)
            left, ml = self.narrow(*self.prune(plan.left, need_l), need_l, plan.left_keys)
            right, mr = self.narrow(*self.prune(plan.right, need_r), need_r, plan.right_keys)
            lk = tuple(ml[i] for i in plan.left_keys)
            join = Join(plan.kind, left, right, lk, tuple(mr[i] for i in plan.right_keys), plan.nulls_match)
            m = {i: ml[i] for i in range(nl) if i in ml}
            m.update({nl + j: len(left.columns) + mr[j] for j in mr})
            return join, m
        if isinstance(plan, Aggregate):
            need = frozenset(plan.group) | frozenset(p for a in plan.aggs for p in a.reads)
            inner, m = self.narrow(*self.prune(plan.input, need), need, plan.group)
            aggs = tuple(a.moved(m) for a in plan.aggs)
            out = Aggregate(inner, tuple(m[g] for g in plan.group), aggs, plan.columns)
            return out, {i: i for i in range(len(plan.columns))}
        if isinstance(plan, Window):
            return self._window(plan, needed)
        if isinstance(plan, UnionAll):
            keep = sorted(needed)
            inputs = tuple(
                _select(*self.prune(p, needed), keep, [p.columns[i] for i in keep]) for p in plan.inputs
            )
            return UnionAll(inputs, tuple(plan.columns[i] for i in keep)), {i: j for j, i in enumerate(keep)}
        if isinstance(plan, Negate):
            inner, m = self.prune(plan.input, needed)
            return Negate(inner), m
        if isinstance(plan, Series):
            return self._series(plan, needed)
        identity = {i: i for i in range(len(plan.columns))}
        if isinstance(plan, Distinct):
            return Distinct(self.exact(plan.input)), identity
        if isinstance(plan, Positive):
            return Positive(self.exact(plan.input)), identity
        if isinstance(plan, SemiJoin):
            return SemiJoin(self.exact(plan.left), self.exact(plan.right), plan.anti), identity
        if isinstance(plan, TopK):
            return TopK(self.exact(plan.input), plan.order, plan.limit, plan.offset, plan.group), identity
        return plan, identity  # scans, constants, recursive definitions and their results

    def _series(self, plan: Series, needed: frozenset[int]) -> tuple[Plan, Mapping]:
        """The input narrowed to the columns read above and by the series' arguments; the values follow."""
        n = len(plan.input.columns)
        args = (plan.start, plan.stop, plan.step)
        need = frozenset(i for i in needed if i < n).union(*(column_refs(e) for e in args))
        inner, m = self.prune(plan.input, need)
        start, stop, step = (_remap(e, m) for e in args)
        own = plan.columns[n:]
        out = Series(inner, start, stop, step, inner.columns + own, plan.ordinality, plan.outer)
        width = len(inner.columns)
        return out, {**{i: m[i] for i in range(n) if i in m}, **{n + j: width + j for j in range(len(own))}}

    def _window(self, plan: Window, needed: frozenset[int]) -> tuple[Plan, Mapping]:
        """A window's input narrowed to its partition, order and argument columns and those read above: the
        columns dropped only broke ties among peers, which PostgreSQL leaves unspecified."""
        width = len(plan.input.columns)
        need = (
            frozenset(i for i in needed if i < width)
            | frozenset(plan.partition)
            | frozenset(p for p, _, _ in plan.order)
            | frozenset(c.arg for c in plan.calls if c.arg is not None)
        )
        inner, m = self.narrow(*self.prune(plan.input, need), need, plan.partition)
        calls = tuple(
            WindowCall(c.func, None if c.arg is None else m[c.arg], c.frame, c.param, c.default, c.type)
            for c in plan.calls
        )
        order = tuple((m[p], d, f) for p, d, f in plan.order)
        kept = [i for i in range(width) if i in m]
        columns = tuple(inner.columns) + plan.columns[width:]
        out = Window(inner, tuple(m[p] for p in plan.partition), order, calls, columns)
        n = len(inner.columns)
        mapping = {i: m[i] for i in kept}
        mapping.update({width + j: n + j for j in range(len(plan.calls))})
        return out, mapping


def column_refs(e: Expr) -> frozenset[int]:
    if isinstance(e, ColRef):
        return frozenset((e.index,))
    if isinstance(e, Call):
        return frozenset().union(*(column_refs(a) for a in e.args))
    return frozenset()


def _remap(e: Expr, m: Mapping) -> Expr:
    if isinstance(e, ColRef):
        return ColRef(m[e.index], e.type)
    if isinstance(e, Call):
        return Call(e.op, tuple(_remap(a, m) for a in e.args), e.type, e.param)
    assert isinstance(e, Const)
    return e
