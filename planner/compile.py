"""Logical plans to differential dataflows, with one arrangement per (collection, key) across all views.

A view is compiled into its own dataflow. Every arrangement built is entered in the ``Registry`` under the
logical plan of the arranged collection and the key columns. Compiling a later view that needs the same
(plan, key) imports the existing arrangement instead of building another, so each (collection, key) is indexed
once in the engine; within one dataflow identical sub-plans compile to one fragment.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from ivm import engine as ivm
from ivm.engine.dataflow import Arranged, Collection, Dataflow, Loop
from ivm.engine.operators import window as windows
from ivm.engine.operators.reducers import distinct
from ivm.engine.strings import POOL
from planner.explain import Step, arrangement, describe, render
from planner.expr import compile_exprs, compile_predicate
from planner.registry import Registry
from planner.series import series_rows
from planner.simplify import column_picks, renames
from planner.values import encode
from sql.logical import (
    Aggregate,
    Canon,
    ColRef,
    Column,
    Const,
    Distinct,
    Filter,
    Fixpoint,
    FixpointResult,
    Join,
    Negate,
    Plan,
    Positive,
    Project,
    RecRef,
    Scan,
    SemiJoin,
    Series,
    TopK,
    UnionAll,
    Values,
    Window,
    is_recursive,
)
from sql.scalar import SPREADS
from sql.types import INT

__all__ = ["Compiled", "compile_index", "compile_view", "one_group"]


class _Compiler:
    """Compiles plans in one scope: the dataflow's top level, or (with ``parent`` and ``loop``) the loop of a
    fixpoint whose definitions ``own`` names. Plans that do not read those definitions are compiled by the
    parent and entered into the loop, so a relation used inside and outside recursion is arranged once."""

    def __init__(
        self,
        df: Dataflow,
        registry: Registry,
        owner: str,
        parent: _Compiler | None = None,
        loop: Loop | None = None,
        own: frozenset[str] = frozenset(),
    ) -> None:
        self.df = df
        self.registry = registry
        self.owner = owner
        self.parent = parent
        self.loop = loop
        self.own = own
        self.bindings: dict[str, Collection] = {}
        self.fixpoints: dict[Fixpoint, list[Collection]] = {}
        self.memo: dict[Plan, Collection] = {}
        self.imported: dict[tuple, Arranged] = {}
        self.used: list[tuple[Plan, tuple[int, ...], str]] = [] if parent is None else parent.used
        # EXPLAIN's tree, grown as operators are made: the step being made is last (loops share their parent's)
        self.steps: list[Step] = [Step("")] if parent is None else parent.steps
        self.shown: dict[tuple, Step] = {}  # the step of each (plan, key) arranged, for when it is read again

    def _show(self, what: str, how: str = "") -> Step:
        """A new step of the tree, fed to the step being made."""
        step = Step(what, how)
        self.steps[-1].inputs.append(step)
        return step

    @contextmanager
    def _making(self, step: Step | None):
        """Steps shown inside the block feed ``step`` (or the step being made, for None)."""
        if step is None:
            yield
            return
        self.steps.append(step)
        try:
            yield
        finally:
            self.steps.pop()

    def _invariant(self, plan: Plan) -> bool:
        """Whether ``plan`` is the same in every round of this scope's loop (always true at the top)."""
        return self.parent is not None and not is_recursive(plan, self.own)

    def arranged(self, plan: Plan, key: tuple[int, ...], shown: bool = True) -> Arranged:
        """``plan``'s collection arranged by ``key`` (columns: key, then the others in order). Without
        ``shown`` the arrangement is no step of its own in the tree (a scan reads its relation's)."""
        k = (plan, key)
        if k in self.imported:
            if shown:
                again = self.shown.get(k)
                if again is not None and isinstance(plan, Scan):
                    self.steps[-1].inputs.append(again)
                else:
                    self._show(arrangement(plan, key), "above")
            return self.imported[k]
        if renames(plan):  # the same rows under other names: the input's arrangement
            with self._making(self._show(describe(plan))):
                self.imported[k] = self.arranged(plan.input, key, shown)
            return self.imported[k]
        if self.parent is not None:
            if self._invariant(plan):
                arr = self.loop.enter_arranged(self.parent.arranged(plan, key, shown))
            else:
                arr = self._arrange(plan, key, shown)
                self.used.append((plan, key, "built"))
            self.imported[k] = arr
            return arr
        entry = self.registry.lookup(plan, key)
        if entry is not None:
            arr = self.df.import_arranged(entry.arranged)
            self.used.append((plan, key, "reused"))
            if shown and _reduction(plan, key):  # another view's reduction, read as it is
                self.shown[k] = self._show(describe(plan), "reused")
                self.shown[k].inputs.append(Step(describe(plan.input)))
            elif shown:
                self.shown[k] = self._show(arrangement(plan, key), "reused")
                self.shown[k].inputs.append(Step(describe(plan)))
        else:
            arr = self._arrange(plan, key, shown)
            self.registry.add(plan, key, arr, self.owner)
            self.used.append((plan, key, "built"))
        self.imported[k] = arr
        return arr

    def _arrange(self, plan: Plan, key: tuple[int, ...], shown: bool = True) -> Arranged:
        """A new arrangement of ``plan`` by ``key``: a reduction's own output trace when it is keyed so."""
        step = self._show(arrangement(plan, key), "built") if shown else None
        if step is not None:
            self.shown[(plan, key)] = step
        with self._making(step):
            if _reduction(plan, key):
                if step is not None:
                    step.how = "the reduction's" if isinstance(plan, Distinct) else "the aggregate's"
                with self._making(self._show(describe(plan))):
                    if isinstance(plan, Distinct):
                        return self._reduce(plan.input, key, distinct())
                    return self._reduced(plan)
            return self.collection(plan).arrange(key)

    def collection(self, plan: Plan) -> Collection:
        quiet = _one_group(plan) or isinstance(plan, Distinct) or (isinstance(plan, Aggregate) and plan.group)
        if plan in self.memo:
            if isinstance(plan, (Scan, RecRef)):
                self._show(describe(plan))
            elif not _one_group(plan):
                self._show(describe(plan), "above")
            return self.memo[plan]
        if self._invariant(plan):
            out = self.loop.enter(self.parent.collection(plan))
        elif isinstance(plan, FixpointResult) and plan.fixpoint in self.fixpoints:
            self._show(f"Fixpoint {plan.fixpoint.names[plan.index]}", "above")
            out = self._build(plan)
        else:
            # a distinct or grouped aggregate is shown as the arrangement its reduction makes
            with self._making(None if quiet else self._show(describe(plan))):
                out = self._build(plan)
        out.texts = _texts(plan)
        self.memo[plan] = out
        return out

    def constant_row(self, dtypes, counts: list[bool]) -> Collection:
        """The default row of a global aggregate (see ``_constant_row``) in this scope."""
        if self.parent is None:
            return _constant_row(self.df, dtypes, counts)
        return self.loop.enter(self.parent.constant_row(dtypes, counts))

    def _fixpoint(self, fx: Fixpoint) -> list[Collection]:
        """A loop with one variable per definition, each set to its body; the values they converge to."""
        if fx not in self.fixpoints:
            outer = self.df if self.loop is None else self.loop
            loop = outer.loop(fx.limit, fx.on_limit)
            inner = _Compiler(self.df, self.registry, self.owner, self, loop, frozenset(fx.names))
            for name, body in zip(fx.names, fx.bodies, strict=True):
                inner.bindings[name] = loop.variable([c.type.dtype for c in body.columns])
            outs = []
            for name, body in zip(fx.names, fx.bodies, strict=True):
                with self._making(self._show(f"Recursive {name} :=")):
                    outs.append(inner.collection(body))
            for name, out in zip(fx.names, outs, strict=True):
                inner.bindings[name].set(out)
            self.fixpoints[fx] = [loop.leave(out) for out in outs]
        return self.fixpoints[fx]

    def _build(self, plan: Plan) -> Collection:
        if isinstance(plan, RecRef):
            return self.bindings[plan.name]
        if isinstance(plan, Values):
            rows = [tuple(encode(v, c.type) for v, c in zip(r, plan.columns, strict=True)) for r in plan.rows]
            return _constant_rows(self.df, [c.type.dtype for c in plan.columns], rows, _texts(plan))
        if isinstance(plan, FixpointResult):
            return self._fixpoint(plan.fixpoint)[plan.index]
        if isinstance(plan, Scan):
            key = self.registry.key_of(plan)
            arr = self.arranged(plan, key, shown=False)
            return _restore_order(arr.as_collection(), key, len(plan.columns))
        if isinstance(plan, Filter):
            return self.collection(plan.input).filter(compile_predicate(plan.predicate))
        if isinstance(plan, Series):
            dtypes = [c.type.dtype for c in plan.columns]
            return self.collection(plan.input).expand(series_rows(plan), dtypes, _texts(plan))
        if isinstance(plan, Canon):
            return self.collection(plan.input).map(
                _canonical(plan.positions), [c.type.dtype for c in plan.columns]
            )
        if isinstance(plan, Project):
            inner = self.collection(plan.input)
            picks = column_picks(plan)
            if picks is None:
                return inner.map(compile_exprs(plan.exprs), [c.type.dtype for c in plan.columns])
            return inner if renames(plan) else inner.project(picks)
        if isinstance(plan, Join):
            return self._join(plan)
        if isinstance(plan, SemiJoin):
            key = tuple(range(len(plan.columns)))
            left = self.arranged(plan.left, key)
            found = left.join(self.arranged(plan.right, key), nulls_match=True)
            if not plan.anti:
                return found
            return self.collection(plan.left).concat(found.negate())
        if isinstance(plan, Aggregate):
            return self._aggregate(plan)
        if isinstance(plan, Distinct):
            return self.arranged(plan, tuple(range(len(plan.columns)))).as_collection()
        if isinstance(plan, UnionAll):
            parts = [self.collection(p) for p in plan.inputs]
            return parts[0].concat(*parts[1:])
        if isinstance(plan, Negate):
            return self.collection(plan.input).negate()
        if isinstance(plan, Positive):
            return self.collection(plan.input).threshold(_positive)
        if isinstance(plan, TopK):
            types = [c.type.kind for c in plan.input.columns]
            group = plan.group
            n = len(plan.columns)
            values = [i for i in range(n) if i not in group]  # the reducer sees the columns outside the key
            order = tuple(
                (values.index(p), desc, "nulls_first" if first else "nulls_last")
                + (("text",) if types[p] == "text" else ())
                for p, desc, first in plan.order
                if p not in group  # equal within a group
            )
            rank = ivm.TopK(order, plan.limit, plan.offset)
            if not group:
                ranked = self.arranged(one_group(plan.input), (0,)).reduce(rank)
                return ranked.as_collection().project(range(1, n + 1))
            ranked = self.arranged(plan.input, group).reduce(rank)
            back = [group.index(i) if i in group else len(group) + values.index(i) for i in range(n)]
            return ranked.as_collection().project(back)
        if isinstance(plan, Window):
            return self._window(plan)
        raise NotImplementedError(type(plan).__name__)

    def _window(self, plan: Window) -> Collection:
        """The window functions' reduction of the input arranged by the partition columns (all rows under one
        key without PARTITION BY): a change recomputes the partitions it touches."""
        source, group, calls = plan.input, plan.partition, plan.calls
        n = len(source.columns)
        copies = sorted({c.arg for c in calls if c.arg in group})
        if copies:  # a function of a partition column reads a copy of it: the reducer sees no key column
            cols = source.columns
            source = Project(
                source,
                tuple(ColRef(i, c.type) for i, c in enumerate(cols))
                + tuple(ColRef(i, cols[i].type) for i in copies),
                tuple(cols) + tuple(Column(f"_copy{i}", cols[i].type) for i in copies),
            )
            calls = tuple(replace(c, arg=n + copies.index(c.arg)) if c.arg in group else c for c in calls)
        types = [c.type for c in source.columns]
        if not group:
            arranged, shift = self.arranged(one_group(source), (0,)), 1
        else:
            arranged, shift = self.arranged(source, group), 0
        values = [
            i for i in range(len(types)) if i not in group
        ]  # the reducer sees the columns outside the key
        order = tuple(
            (values.index(p), desc, first, types[p].kind == "text")
            for p, desc, first in plan.order
            if p not in group  # equal within a partition
        )
        calls = [_window_call(c, values, types) for c in calls]
        out = arranged.reduce(windows.Window(order, calls)).as_collection()
        k = len(group) or shift
        back = [group.index(i) if i in group else k + values.index(i) for i in range(n)]
        back += [k + len(values) + j for j in range(len(calls))]
        return out.project(back)

    def _join(self, plan: Join) -> Collection:
        nl, nr = len(plan.left.columns), len(plan.right.columns)
        lk, rk = plan.left_keys, plan.right_keys
        if plan.kind == "inner":
            left = self.arranged(plan.left, lk)
            right = self.arranged(plan.right, rk)
            k = len(lk)
            lrest = [i for i in range(nl) if i not in lk]
            rrest = [j for j in range(nr) if j not in rk]
            pos = [lk.index(i) if i in lk else k + lrest.index(i) for i in range(nl)]
            pos += [rk.index(j) if j in rk else k + len(lrest) + rrest.index(j) for j in range(nr)]
            return left.join(right, positions=pos, nulls_match=plan.nulls_match)
        # the inner join, plus each side's rows without a partner padded with NULLs; every arrangement
        # comes from the registry, so outer joins share indexes like inner ones
        inner = self._join(Join("inner", plan.left, plan.right, lk, rk, plan.nulls_match))
        parts = [inner]
        if plan.kind in ("left", "full"):
            with self._making(self._show("Left rows without a partner")):
                unmatched = self._unmatched(plan.left, lk, plan.right, rk, plan.nulls_match)
            parts.append(unmatched.map(_pad(plan.right.columns, True)))
        if plan.kind in ("right", "full"):
            with self._making(self._show("Right rows without a partner")):
                unmatched = self._unmatched(plan.right, rk, plan.left, lk, plan.nulls_match)
            parts.append(unmatched.map(_pad(plan.left.columns, False)))
        return parts[0].concat(*parts[1:])

    def _unmatched(
        self, side: Plan, keys: tuple[int, ...], other: Plan, other_keys: tuple[int, ...], nulls_match: bool
    ):
        """The rows of ``side`` whose ``keys`` meet no row of ``other`` (NULL keys meet nothing, unless
        ``nulls_match``)."""
        k = len(keys)
        partners = Distinct(
            Project(
                other,
                tuple(ColRef(i, other.columns[i].type) for i in other_keys),
                tuple(Column(f"k{j}", other.columns[i].type) for j, i in enumerate(other_keys)),
            )
        )
        n = len(side.columns)
        rest = [i for i in range(n) if i not in keys]
        restore = [keys.index(i) if i in keys else k + rest.index(i) for i in range(n)]
        arranged = self.arranged(side, keys)
        matched = arranged.join(
            self.arranged(partners, tuple(range(k))), positions=restore, nulls_match=nulls_match
        )
        return self.collection(side).concat(matched.negate())

    def _aggregate(self, plan: Aggregate) -> Collection:
        ng = len(plan.group)
        if ng:
            return self.arranged(plan, tuple(range(ng))).as_collection()
        out = self._reduced(plan).as_collection()
        counts = [a.func in ("count_star", "count") for a in plan.aggs]
        default = self.constant_row(out.dtypes, counts)
        nonempty = self.collection(one_group(plan.input)).project([0]).distinct()
        out = out.concat(default.antijoin(nonempty, [0]))
        return out.project(range(1, 1 + len(plan.aggs)))

    def _reduced(self, plan: Aggregate) -> Arranged:
        """The aggregate's reduction, arranged by its group columns (for a global aggregate, a constant 0
        column put in front of the input: see ``one_group``)."""
        ng = len(plan.group)
        group, shift = (plan.group, 0) if ng else ((0,), 1)
        width = len(plan.input.columns) + shift
        rest = [i for i in range(width) if i not in group]
        specs = []
        for a in plan.aggs:
            kind = {"count_star": "count", "count": "count_col"}.get(a.func, a.func)
            if a.func == "count" and a.distinct:
                kind = "count_distinct"
            if a.func in ("min", "max") and a.type.kind == "text":
                kind = a.func + "_text"
            spec = (kind, None if a.arg is None else rest.index(a.arg + shift))
            if a.func == "string_agg":  # the ordering keys as the reducer sees them, in text order for text
                sep, order = a.param
                types = [c.type.kind for c in plan.input.columns]
                keys = tuple(
                    (rest.index(p + shift), desc, "nulls_first" if first else "nulls_last")
                    + (("text",) if types[p] == "text" else ())
                    for p, desc, first in order
                )
                spec = (*spec, (sep, keys))
            specs.append(spec)
        reducer = ivm.Aggregate(specs, _avg_divisors(plan), _sum_overflows(plan))
        return self._reduce(plan.input if ng else one_group(plan.input), group, reducer)

    def _reduce(self, plan: Plan, key: tuple[int, ...], reducer: ivm.Aggregate) -> Arranged:
        """``plan`` reduced per ``key``. An existing arrangement of it by the key is read; otherwise an
        aggregate with a running state per key reads the collection as it flows, and needs none."""
        arranged = (plan, key) in self.imported or self.registry.lookup(plan, key) is not None
        if self.parent is None and reducer.linear and not arranged:
            self.used.append((plan, key, "running"))
            self.steps[-1].how = "running state per group" if reducer.specs else "running count per row"
            return self.collection(plan).reduce(key, reducer)
        return self.arranged(plan, key).reduce(reducer)


def _window_call(c, values: list[int], types) -> windows.Call:
    """The engine's window function for a logical one, over the reducer's value columns ``values``."""
    mode, start, end, exclude = c.frame
    frame = windows.Frame(mode, windows.Bound(*start), windows.Bound(*end), exclude)
    arg = None if c.arg is None else values.index(c.arg)
    t = None if c.arg is None else types[c.arg]
    divisor = 10.0**t.scale if c.func == "avg" and t.kind == "decimal" else None
    overflow = "bigint out of range"
    if c.func == "sum" and t.kind == "decimal":
        overflow = f"numeric field overflow: a sum of {t} values beyond 64 bits"
    return windows.Call(
        c.func,
        arg,
        frame,
        c.param,
        None if c.default is None else encode(c.default, t),
        t is not None and t.kind == "text",
        divisor,
        overflow,
    )


def _reduction(plan: Plan, key: tuple[int, ...]) -> bool:
    """Whether the arrangement of ``plan`` by ``key`` is the output of a reduction: the distinct rows by all
    columns, a grouped aggregate's rows by the group columns."""
    if isinstance(plan, Distinct):
        return key == tuple(range(len(plan.columns)))
    return isinstance(plan, Aggregate) and bool(plan.group) and key == tuple(range(len(plan.group)))


def _one_group(plan: Plan) -> bool:
    """Whether ``plan`` is ``one_group`` of its input (shown as its input in EXPLAIN)."""
    return (
        isinstance(plan, Project)
        and bool(plan.columns)
        and plan.columns[0].name == "?group"
        and plan.exprs[0] == Const(0, INT)
    )


def one_group(plan: Plan) -> Plan:
    """``plan``'s rows behind a constant 0 column: one group holding every row, for a global aggregate or a
    top-k. A plan like any other, so views ranking or totalling the same rows share its arrangement."""
    cols = (Column("?group", INT, False), *plan.columns)
    refs = tuple(ColRef(i, c.type) for i, c in enumerate(plan.columns))
    return Project(plan, (Const(0, INT), *refs), cols)


def _avg_divisors(plan: Aggregate) -> dict[int, float]:
    """Decimals are held as scaled integers, so their averages, variances and standard deviations are divided
    by the scale's unit: aggregate position -> divisor."""
    in_types = [c.type for c in plan.input.columns]
    return {
        j: 10.0 ** in_types[a.arg].scale
        for j, a in enumerate(plan.aggs)
        if a.func in ("avg", *SPREADS) and in_types[a.arg].kind == "decimal"
    }


def _sum_overflows(plan: Aggregate) -> dict[int, str]:
    """A sum of decimals that does not fit in 64 bits puts its group in error as a numeric that does not fit
    (sums of integers say ``bigint out of range``): aggregate position -> error."""
    in_types = [c.type for c in plan.input.columns]
    return {
        j: f"numeric field overflow: a sum of {in_types[a.arg]} values beyond 64 bits"
        for j, a in enumerate(plan.aggs)
        if a.func == "sum" and in_types[a.arg].kind == "decimal"
    }


def _pad(columns, after: bool):
    """Appends (or prepends) NULL columns of the given plan columns' types."""
    dtypes = [c.type.dtype for c in columns]

    def pad(cols, valid, n):
        extra = tuple(np.zeros(n, dtype=t) for t in dtypes)
        nulls = tuple(np.zeros(n, dtype=bool) for _ in dtypes)
        return (cols + extra, valid + nulls) if after else (extra + cols, nulls + valid)

    return pad


def _canonical(positions: tuple[int, ...]):
    """Canonical codes for the text columns at ``positions``."""

    def fn(cols, valid):
        cols = list(cols)
        for p in positions:
            cols[p] = POOL.canonical(cols[p])
        return tuple(cols), valid

    return fn


def _positive(w: np.ndarray) -> np.ndarray:
    return np.maximum(w, 0)


def _texts(plan: Plan) -> tuple[int, ...]:
    """The positions of ``plan``'s text columns."""
    return tuple(i for i, c in enumerate(plan.columns) if c.type.kind == "text")


def _constant_row(df: Dataflow, dtypes, counts: list[bool]) -> Collection:
    """A collection holding one row forever: key 0, then 0 for counts and NULL for other aggregates."""
    return _constant_rows(df, dtypes, [(0, *(0 if c else None for c in counts))])


def _constant_rows(df: Dataflow, dtypes, rows: list[tuple], texts: tuple[int, ...] = ()) -> Collection:
    """A collection holding ``rows`` from the start of time, forever (in a sharded engine, in its first
    shard only)."""
    inp = df.input(dtypes, frontier=0, texts=texts)
    sharding = df.engine.sharding
    if rows and (sharding is None or sharding.index == 0):
        inp.insert(rows, time=0)
    inp.advance_to(2**62)
    return inp


def _restore_order(c: Collection, key: tuple[int, ...], width: int) -> Collection:
    rest = [i for i in range(width) if i not in key]
    layout = list(key) + rest
    if layout == list(range(width)):
        return c
    inv = [layout.index(i) for i in range(width)]
    return c.project(inv)


@dataclass
class Compiled:
    """What compiling a view built: its dataflow, its result's arrangement, per arrangement it reads (plan,
    key) whether it was built, reused from another dataflow, or replaced by running state, and the tree of
    steps EXPLAIN shows."""

    dataflow: Dataflow
    arranged: Arranged
    used: list[tuple[Plan, tuple[int, ...], str]]
    steps: Step

    def explain(self) -> list[str]:
        """The lines of EXPLAIN: what was made, one step per line, indented under what it feeds."""
        return render(self.steps)


def compile_view(engine: ivm.Engine, registry: Registry, name: str, plan: Plan) -> Compiled:
    """A new dataflow maintaining ``plan``; its result is arranged and registered as the relation ``name``:
    by all columns, or, for the rows of a grouped aggregate, by the group columns (one row per group). The
    result of a grouped aggregate or DISTINCT is the reduction's own output arrangement (unless another
    view's is read: the view's result is then its own)."""
    df = engine.dataflow(name)
    comp = _Compiler(df, registry, name)
    inner = plan
    while renames(inner):
        inner = inner.input
    key = tuple(range(len(inner.group) if isinstance(inner, Aggregate) else len(inner.columns)))
    if _reduction(inner, key) and registry.lookup(inner, key) is None:
        arr = comp.arranged(plan, key, shown=False)
    else:
        key = tuple(range(len(plan.columns)))
        arr = comp.collection(plan).arrange(key)
    registry.add(Scan(name, plan.columns), key, arr, name)
    comp.used.append((Scan(name, plan.columns), key, "built"))
    return Compiled(df, arr, comp.used, comp.steps[0])


def compile_index(
    engine: ivm.Engine, registry: Registry, name: str, plan: Plan, key: tuple[int, ...]
) -> Dataflow:
    """A dataflow arranging relation ``plan`` by ``key`` (an index that later views reuse)."""
    df = engine.dataflow(f"index:{name}")
    comp = _Compiler(df, registry, f"index:{name}")
    comp.arranged(plan, key)
    return df
