"""Engines, dataflows, collections and inputs: the engine's public Python surface.

An ``Engine`` holds dataflows that may share arrangements. A ``Dataflow`` is built from ``Input``s by calling
operators on ``Collection``s (which stand for collections changing over time) and ``Arranged`` collections
(indexed by key, with a shared trace). ``Dataflow.step`` (or ``Engine.step``) retires every logical time below
the inputs' frontiers in one physical step; outputs are exact at each of those times.

>>> import numpy as np, ivm
>>> engine = ivm.Engine()
>>> df = engine.dataflow()
>>> words = df.input([np.int64])
>>> counts = words.count([0]).as_collection().capture()
>>> words.insert([(1,), (1,), (2,)], time=0)
>>> words.advance_to(1)
>>> engine.step()
>>> sorted(counts.rows_at(0).items())
[((1, 2), 1), ((2, 1), 1)]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ivm.engine import sharded
from ivm.engine.batch import Batch, Mask
from ivm.engine.exchange import ExchangeOp, ReceiveOp, Sharding
from ivm.engine.lattice import Antichain
from ivm.engine.operators.arrange import ArrangeOp, ImportOp, lift_times
from ivm.engine.operators.basic import (
    CaptureOp,
    ConcatOp,
    EvaluationError,
    ExpandFn,
    ExpandOp,
    FilterOp,
    MapFn,
    MapOp,
    NegateOp,
    PredicateFn,
    ProjectOp,
    takes_rows,
)
from ivm.engine.operators.iterate import EnterOp, IterationLimitError, LeaveOp, LoopOp, VariableOp
from ivm.engine.operators.join import JoinOp
from ivm.engine.operators.reduce import ReduceOp, streams
from ivm.engine.operators.reducers import Aggregate, Reducer, Threshold, TopK, distinct
from ivm.engine.scope import Operator, Point, Scope
from ivm.engine.trace import Spine, TraceBatch, TraceHandle

__all__ = ["Engine", "Dataflow", "Collection", "Arranged", "Input", "Loop", "Capture", "Probe"]


class Engine:
    """Dataflows that run together and may read each other's arrangements."""

    def __init__(self) -> None:
        self.dataflows: list[Dataflow] = []
        self.failed: list[Dataflow] = []
        self.crashed: Dataflow | None = None  # the dataflow an unexpected exception stopped in its step
        self.step_seconds: dict[str, float] = {}  # time spent stepping each dataflow, by name
        self.some_failed = False  # a dataflow failed since the last step (its readers are failed at the next)
        # set before any dataflow is made: this engine is one shard of several (``ivm.engine.exchange``)
        self.sharding: Sharding | None = None

    def dataflow(self, name: str = "") -> Dataflow:
        df = Dataflow(self, name or f"dataflow{len(self.dataflows)}")
        self.dataflows.append(df)
        return df

    def step(self) -> None:
        """Run every dataflow up to its inputs' frontiers, sources before the dataflows importing them; the
        time each takes is added to ``step_seconds`` (which a dropped dataflow leaves).

        A dataflow whose loop exceeds its iteration limit, or whose functions cannot evaluate a row, is dropped
        with the error kept in its ``error``, as are the dataflows reading its arrangements; the others go on.
        ``failed`` lists them after the step.

        A dataflow that reads only other dataflows' arrangements and that nothing reached in a step falls
        *asleep*: later steps pass it by, at the cost of looking at one flag, and its frontier is its sources'
        whenever it is read, until something reaches it again (``Dataflow.frontier``, ``Dataflow.wake``). So
        views that a transaction does not reach cost it next to nothing, however many there are."""
        self.failed = failed = []
        self.crashed = None
        t0 = time.perf_counter()
        dataflows = list(self.dataflows)
        agreed: dict[int, int | None] = {}  # sharded: the first operator activated in each dataflow to come
        prepared: set[int] = set()
        for pos, df in enumerate(dataflows):
            broken = self.some_failed and next((src for _, src in df.imports if src.error is not None), None)
            if broken:
                df.fail(RuntimeError(f"it reads {broken.name!r}, which failed: {broken.error}"))
                failed.append(df)
                continue
            if df.asleep:
                continue
            try:
                if self.sharding is None and df.follows_only and not df.scope.active:
                    df.follow()  # idle: nothing reached it, its frontier follows its sources'
                    df.asleep = True
                    continue
                if self.sharding is None:
                    df.step()
                elif not df.dropped:
                    if id(df) not in agreed:
                        agreed = self._agree(dataflows[pos:], prepared)
                    first = agreed[id(df)]
                    if first is not None:
                        agreed = {}  # what it makes activates the dataflows reading it
                    df.run(first)
            except (IterationLimitError, EvaluationError) as err:
                df.fail(err)
                failed.append(df)
                t0 = time.perf_counter()
                continue
            except BaseException:
                self.crashed = df  # stopped half-way (out of memory, interrupted): its state is not exact
                raise
            now = time.perf_counter()
            self.step_seconds[df.name] = self.step_seconds.get(df.name, 0.0) + now - t0
            t0 = now
        self.some_failed = False  # every reader of a failed dataflow came after it, and failed with it

    def _agree(self, dataflows: list[Dataflow], prepared: set[int]) -> dict[int, int | None]:
        """Prepare the step of each of ``dataflows`` not in ``prepared`` yet, and agree with the other shards
        in one call on the first operator activated in each: idle dataflows then cost no call each."""
        for df in dataflows:
            if id(df) not in prepared:
                df.prepare()
                prepared.add(id(df))
        live = [df for df in dataflows if not df.dropped]
        return dict(zip(map(id, live), sharded.first_orders([df.scope for df in live]), strict=True))

    def traces(self) -> list[Spine]:
        """Every live trace held by some dataflow, each once."""
        seen: dict[int, Spine] = {}
        for df in self.dataflows:
            for h in df.handles:
                if not h.released:
                    seen[id(h.trace)] = h.trace
        return list(seen.values())

    def stored_updates(self) -> int:
        """Updates stored in all live traces, shared traces counted once."""
        return sum(len(t) for t in self.traces())

    def state_bytes(self) -> int:
        """Bytes operators hold outside traces (the running states of linear aggregates)."""
        return sum(getattr(op, "state_bytes", 0) for df in self.dataflows for op in df.scope.operators)


class Dataflow:
    """A graph of operators over inputs; ``frontier`` is the least epoch not yet retired."""

    def __init__(self, engine: Engine, name: str) -> None:
        self.engine = engine
        self.name = name
        self._frontier = 0
        self.asleep = False
        self.handles: list[TraceHandle] = []
        self.inputs: list[Input] = []
        self.imports: list[tuple[ImportOp, Dataflow]] = []
        self.variables: list[Variable] = []
        self.scope = Scope(self, 1)
        self.dropped = False
        self.error: Exception | None = None
        # errors as data: per message, the net count of the rows in error (see ``MapOp``)
        self.errors: dict[str, int] = {}
        self._frontiers: dict[tuple[int, int], tuple[int, Antichain]] = {}
        self.staged = 0  # in a sharded engine: the operators that had their stages when they were last given
        self.target = 0  # while a step runs: it retires the epochs from ``frontier`` up to this one, excluded

    def add_errors(self, messages: Sequence[str], diffs: np.ndarray) -> None:
        """Count rows in error: each message with its row's diff (a retraction cancels its insertion)."""
        for m, d in zip(messages, diffs.tolist(), strict=True):
            left = self.errors.get(m, 0) + d
            if left:
                self.errors[m] = left
            else:
                del self.errors[m]

    def live_error(self) -> str | None:
        """An error of the rows in error now, of this dataflow or of one whose arrangements it imports."""
        if self.errors:
            return min(self.errors)
        for _, src in self.imports:
            e = src.live_error()
            if e is not None:
                return e
        return None

    # -- building -------------------------------------------------------------------------------
    def input(
        self, dtypes: Sequence, name: str = "", frontier: int | None = None, texts: Sequence[int] = ()
    ) -> Input:
        """A new input collection with columns of the given numpy dtypes.

        Its frontier starts at the dataflow's, or earlier at ``frontier`` to give it contents from the start of
        time (as a constant collection in a dataflow created late needs)."""
        inp = Input(self, [np.dtype(t) for t in dtypes], name)
        inp.texts = tuple(texts)
        if frontier is not None:
            inp.frontier = min(inp.frontier, frontier)
        self.inputs.append(inp)
        return inp

    def import_arranged(self, arranged: Arranged) -> Arranged:
        """Use another dataflow's arrangement here without copying or re-sorting it."""
        if not isinstance(arranged.op, ArrangeOp) or arranged.scope.dim != 1:
            raise ValueError("only top-level arrangements can be imported")
        source_df = arranged.scope.dataflow
        if source_df is self:
            return arranged
        if source_df.dropped or arranged.trace.freed:
            raise ValueError("the arrangement's dataflow has been dropped")
        op = ImportOp(self.scope, arranged.op)
        self.imports.append((op, source_df))
        self.frontier = max(self.frontier, source_df.frontier)
        return Arranged(self.scope, op, arranged.trace, arranged.dtypes)

    def loop(self, limit: int | None = None, on_limit: str = "error") -> Loop:
        """A loop scope for iterative computations (``with df.loop() as loop: ...``).

        With ``limit``, a body that still changes its variable after running ``limit`` times (iterations
        ``0 .. limit - 1``) raises ``IterationLimitError``, or with ``on_limit="return"`` the loop stops there
        and leaves the state it reached.
        """
        return Loop(self.scope, limit, on_limit)

    def hold(self, handle: TraceHandle, lag: int = 0) -> TraceHandle:
        """Keep ``handle`` for this dataflow: it follows the dataflow's frontier (taken back by ``lag``
        epochs) and is released with it."""
        self.handles.append(handle)
        handle.follow(self, lag)
        return handle

    def frontier_in(self, dim: int, lag: int = 0) -> Antichain:
        """The dataflow's frontier, taken back by ``lag`` epochs, as a frontier of times with ``dim``
        coordinates (iterations at 0)."""
        cached = self._frontiers.get((dim, lag))
        if cached is not None and cached[0] == self.frontier:
            return cached[1]
        t = np.zeros((1, dim), dtype=np.int64)
        t[0, 0] = max(self.frontier - lag, 0)
        f = Antichain(t)
        self._frontiers[(dim, lag)] = (self.frontier, f)
        return f

    # -- running --------------------------------------------------------------------------------
    @property
    def frontier(self) -> int:
        """The least epoch not yet retired. Asleep (``Engine.step``), the dataflow has retired what its sources
        have: what stepping it would have moved its frontier to (``follow``), found when asked."""
        if self.asleep and self.imports:
            least = min(df.frontier for _, df in self.imports)
            if least > self._frontier:
                self._frontier = least
        return self._frontier

    @frontier.setter
    def frontier(self, epoch: int) -> None:
        self._frontier = epoch

    def wake(self) -> None:
        """Something reached the dataflow asleep (its scope's first activation): from here on it steps, from
        the frontier it has now, which its sources have not moved past yet (they move theirs at the end of their
        step, after what they send)."""
        self._frontier = self.frontier
        self.asleep = False

    @property
    def follows_only(self) -> bool:
        """Whether the dataflow has no inputs and no loop variables of its own: it reads only other dataflows'
        arrangements, so when nothing reached it a step only moves its frontier (``follow``)."""
        return not self.inputs and not self.variables and not self.dropped

    def follow(self) -> None:
        """The step of an idle dataflow that reads only other dataflows: its frontier moves up to theirs."""
        if self.imports:
            target = min(max(df.frontier, df.target) for _, df in self.imports)
            self.target = target
            if target > self.frontier:
                self.frontier = target

    def step(self) -> None:
        """Retire every epoch below the least input frontier, all in one physical step."""
        self.prepare()
        self.run()

    def prepare(self) -> None:
        """Begin a step: fix its ``target`` (the least frontier of the inputs and of the dataflows read, as
        theirs will be after this step) and release the inputs' updates below it. In a sharded engine, also
        give new operators their stages."""
        if self.dropped:
            return
        if self.asleep:
            self.wake()
        for v in self.variables:
            if not v.is_set:
                raise RuntimeError("a loop variable was never set")
        bounds = [inp.frontier for inp in self.inputs] + [max(df.frontier, df.target) for _, df in self.imports]
        target = min(bounds) if bounds else self.frontier
        self.target = target
        for inp in self.inputs:
            if inp.staged:
                inp._release(target)
        if self.engine.sharding is not None:
            made = sum(len(s.operators) for s in sharded.scopes(self.scope))
            if made != self.staged:
                sharded.assign_stages(self.scope)
                self.staged = made

    def run(self, first: int | None = sharded.UNKNOWN) -> None:
        """Run the step ``prepare`` began; in a sharded engine, ``first`` is the first operator the shards
        have activated, when they have agreed on it already (``sharded.first_orders``)."""
        if self.dropped:
            return
        if self.engine.sharding is not None:
            sharded.run_point(self.scope, (), first)
        elif self.scope.active:
            self.scope.run_point(())
        if self.target > self.frontier:
            self.frontier = self.target  # and with it every handle the dataflow holds

    def fail(self, error: Exception) -> None:
        """Drop the dataflow, keeping ``error`` as the reason (its state is no longer consistent)."""
        self.error = error
        self.engine.some_failed = True
        self.drop()
        self.asleep = False

    def drop(self) -> None:
        """Remove the dataflow, releasing its trace handles (traces go with their last reader)."""
        for op in self.scope.operators:
            _release_all(op)
        for h in self.handles:
            h.release()
        self.dropped = True
        self.engine.step_seconds.pop(self.name, None)
        if self in self.engine.dataflows:
            self.engine.dataflows.remove(self)


def _release_all(op: Operator) -> None:
    op.release()
    if isinstance(op, LoopOp):
        for inner in op.inner.operators:
            _release_all(inner)


class Collection:
    """A collection changing over time, produced by an operator of some scope."""

    def __init__(
        self, scope: Scope, op: Operator, dtypes: Sequence[np.dtype], texts: Sequence[int] | None = None
    ) -> None:
        self.scope = scope
        self.op = op
        self.dtypes = tuple(np.dtype(t) for t in dtypes)
        # the positions of the columns holding text codes, where known: a sharded engine must know them to
        # send rows to another shard (``ivm.engine.exchange``)
        self.texts: tuple[int, ...] | None = None if texts is None else tuple(texts)
        self._arranged: dict[tuple[int, ...], Arranged] = {}

    @property
    def arity(self) -> int:
        return len(self.dtypes)

    def _same_scope(self, *others: Collection) -> None:
        for o in others:
            if o.scope is not self.scope:
                raise ValueError("collections are in different scopes; enter them into the loop first")

    # -- stateless --------------------------------------------------------------------------------
    def map(self, fn: MapFn, dtypes: Sequence | None = None) -> Collection:
        """New rows ``fn(columns, validity) -> (columns, validity)``, applied to whole arrays; a function with a
        third parameter also receives the number of rows."""
        if dtypes is None:
            empty = tuple(np.zeros(0, dtype=t) for t in self.dtypes), tuple(None for _ in self.dtypes)
            cols, _ = fn(*empty, 0) if takes_rows(fn) else fn(*empty)
            dtypes = [np.asarray(c).dtype for c in cols]
        return Collection(self.scope, MapOp(self.scope, self.op, fn), dtypes)

    def expand(self, fn: ExpandFn, dtypes: Sequence, texts: Sequence[int] | None = None) -> Collection:
        """Each row as the rows ``fn(columns, validity, n) -> (columns, validity, rows)`` gives it (``rows``:
        the input row of each output row, ascending), of types ``dtypes`` (text at positions ``texts``)."""
        return Collection(self.scope, ExpandOp(self.scope, self.op, fn), dtypes, texts)

    def filter(self, pred: PredicateFn) -> Collection:
        """Rows for which ``pred(columns, validity)`` is True."""
        return Collection(self.scope, FilterOp(self.scope, self.op, pred), self.dtypes, self.texts)

    def project(self, positions: Sequence[int]) -> Collection:
        """The columns at ``positions``."""
        texts = None if self.texts is None else [j for j, p in enumerate(positions) if p in self.texts]
        return Collection(
            self.scope,
            ProjectOp(self.scope, self.op, positions),
            [self.dtypes[p] for p in positions],
            texts,
        )

    def concat(self, *others: Collection) -> Collection:
        """The sum of this and other collections with the same columns."""
        self._same_scope(*others)
        for o in others:
            if o.dtypes != self.dtypes:
                raise ValueError(f"concat of different column types: {self.dtypes} and {o.dtypes}")
        op = ConcatOp(self.scope, [self.op] + [o.op for o in others])
        texts = self.texts if all(o.texts == self.texts for o in others) else None
        return Collection(self.scope, op, self.dtypes, texts)

    def negate(self) -> Collection:
        return Collection(self.scope, NegateOp(self.scope, self.op), self.dtypes, self.texts)

    # -- arranged ---------------------------------------------------------------------------------
    def arrange(self, key: Sequence[int]) -> Arranged:
        """This collection indexed by the columns ``key``: key columns first, then the others in order.

        Arranging the same collection by the same key again returns the same arrangement.
        """
        key = tuple(key)
        if key in self._arranged:
            return self._arranged[key]
        src = self._keyed(key)._exchanged(len(key))
        op = ArrangeOp(self.scope, src.op, len(key), src.dtypes)
        arr = Arranged(self.scope, op, op.trace, src.dtypes)
        self._arranged[key] = arr
        return arr

    def _exchanged(self, nkey: int) -> Collection:
        """This collection with each row in the shard of its first ``nkey`` columns (itself, unsharded)."""
        sharding = self.scope.dataflow.engine.sharding
        if sharding is None:
            return self
        if self.texts is None:
            raise ValueError("a sharded engine must know which columns hold text to exchange a collection")
        sender = ExchangeOp(self.scope, self.op, nkey, self.dtypes, self.texts)
        return Collection(self.scope, ReceiveOp(self.scope, sender), self.dtypes, self.texts)

    def _keyed(self, key: tuple[int, ...]) -> Collection:
        """This collection with the ``key`` columns first, then the others in order."""
        rest = [i for i in range(self.arity) if i not in key]
        return self if list(key) + rest == list(range(self.arity)) else self.project(list(key) + rest)

    def join(
        self,
        other: Collection,
        key: Sequence[int],
        other_key: Sequence[int],
        positions: Sequence[int] | None = None,
    ) -> Collection:
        """Inner join on ``key = other_key`` (NULL keys never match). Output columns: the key, this
        collection's other columns, the other collection's other columns (or ``positions`` of those)."""
        return self.arrange(key).join(other.arrange(other_key), positions)

    def semijoin(self, keys: Collection, key: Sequence[int]) -> Collection:
        """Rows whose ``key`` columns appear in ``keys`` (a collection of distinct keys), original order."""
        arr = self.arrange(key)
        out = arr.join(keys.arrange(range(keys.arity)))
        return out.project(_inverse_layout(key, self.arity))

    def antijoin(self, keys: Collection, key: Sequence[int]) -> Collection:
        """Rows whose ``key`` columns do not appear in ``keys`` (a collection of distinct keys)."""
        return self.concat(self.semijoin(keys, key).negate())

    def outer_join(
        self, other: Collection, key: Sequence[int], other_key: Sequence[int], kind: str
    ) -> Collection:
        """``left``, ``right`` or ``full`` outer join: the inner join plus unmatched rows padded with NULLs.

        Output columns: this collection's columns, then the other's (keys included on both sides).
        """
        if kind not in ("left", "right", "full"):
            raise ValueError(f"unknown outer join kind {kind!r}")
        nl, nr = self.arity, other.arity
        k = len(key)
        inner = self.join(other, key, other_key)
        # inner rows are (key, left rest, right rest): restore both sides' own column orders
        lrest = [i for i in range(nl) if i not in key]
        rrest = [i for i in range(nr) if i not in other_key]
        lpos = [0] * nl
        for j, c in enumerate(key):
            lpos[c] = j
        for j, c in enumerate(lrest):
            lpos[c] = k + j
        rpos = [0] * nr
        for j, c in enumerate(other_key):
            rpos[c] = j
        for j, c in enumerate(rrest):
            rpos[c] = k + len(lrest) + j
        parts = [inner.project(lpos + rpos)]
        if kind in ("left", "full"):
            rkeys = other.project(list(other_key)).distinct()
            missing = self.antijoin(rkeys, key)
            parts.append(missing.map(_pad_nulls(other.dtypes, after=True)))
        if kind in ("right", "full"):
            lkeys = self.project(list(key)).distinct()
            missing = other.antijoin(lkeys, other_key)
            parts.append(missing.map(_pad_nulls(self.dtypes, after=False)))
        return parts[0].concat(*parts[1:])

    def reduce(self, key: Sequence[int], reducer: Reducer) -> Arranged:
        """Per distinct ``key``, the reducer's rows over the other columns; arranged by the key. A linear
        aggregate reads this collection as it flows unless it is arranged by ``key`` already."""
        key = tuple(key)
        if key in self._arranged or not streams(reducer, self.scope):
            return self.arrange(key).reduce(reducer)
        src = self._keyed(key)._exchanged(len(key))
        op = ReduceOp(self.scope, src.op, None, reducer, len(key), src.dtypes)
        return Arranged(self.scope, op.output, op.output.trace, op.output.dtypes)

    def distinct(self) -> Collection:
        """Each row present with positive multiplicity, once."""
        out = self.reduce(range(self.arity), distinct()).as_collection()
        out.texts = self.texts
        return out

    def threshold(self, fn: Callable[[np.ndarray], np.ndarray]) -> Collection:
        """Each row with multiplicity ``fn(its multiplicity)`` (vectorized)."""
        out = self.reduce(range(self.arity), Threshold(fn)).as_collection()
        out.texts = self.texts
        return out

    def count(self, key: Sequence[int]) -> Arranged:
        """``(key..., number of rows)`` per distinct key."""
        return self.reduce(key, Aggregate([("count", None)]))

    def aggregate(self, key: Sequence[int], specs: Sequence[tuple[str, int | None]]) -> Arranged:
        """``(key..., aggregates...)``; positions in ``specs`` count the non-key columns in order."""
        return self.reduce(key, Aggregate(specs))

    def top_k(
        self,
        key: Sequence[int],
        order: Sequence[tuple[int, bool]],
        limit: int | None,
        offset: int = 0,
    ) -> Arranged:
        """Per key, the rows ranked ``[offset, offset+limit)`` by ``order`` over the non-key columns."""
        return self.reduce(key, TopK(order, limit, offset))

    # -- observing --------------------------------------------------------------------------------
    def capture(self) -> Capture:
        """Record this collection's updates for inspection."""
        return Capture(CaptureOp(self.scope, self.op), self.scope.dataflow, self.dtypes)

    def probe(self) -> Probe:
        return Probe(self.scope.dataflow)


class Arranged:
    """A collection indexed by its first ``nkey`` columns: a stream of sorted batches and a shared trace."""

    def __init__(self, scope: Scope, op: Operator, trace: Spine, dtypes: Sequence) -> None:
        self.scope = scope
        self.op = op
        self.trace = trace
        self.dtypes = tuple(dtypes)
        self.nkey = trace.nkey

    def join(
        self, other: Arranged, positions: Sequence[int] | None = None, nulls_match: bool = False
    ) -> Collection:
        """Inner join on the keys: columns key, this side's values, the other side's values."""
        if other.scope is not self.scope:
            raise ValueError("arrangements are in different scopes; enter them into the loop first")
        if other.nkey != self.nkey:
            raise ValueError("join keys differ in arity")
        dtypes = self.dtypes + other.dtypes[other.nkey :]
        if positions is not None:
            dtypes = tuple(dtypes[p] for p in positions)
        op = JoinOp(self.scope, self.op, self.trace, other.op, other.trace, positions, nulls_match)
        return Collection(self.scope, op, dtypes)

    def reduce(self, reducer: Reducer) -> Arranged:
        op = ReduceOp(self.scope, self.op, self.trace, reducer)
        out = op.output
        return Arranged(self.scope, out, out.trace, out.dtypes)

    def as_collection(self) -> Collection:
        """The arranged updates as a plain collection (columns: key, then values)."""
        op = _Flatten(self.scope, self.op)
        return Collection(self.scope, op, self.dtypes)


class _Flatten(Operator):
    """An arrangement's sorted batches as plain batches of updates, passed on as they come."""

    def __init__(self, scope: Scope, source: Operator) -> None:
        super().__init__(scope, "flatten")
        self.input = self.new_inlet(self.push)
        source.subscribe(self.input)

    def push(self, point: Point, tb: TraceBatch) -> None:
        self.emit_at(point, tb.updates)

    def run(self, point: Point) -> None:
        pass  # nothing ever waits for it


class _EnterArranged(EnterOp):
    """An outer arrangement's batches inside a loop at iteration 0; the trace itself stays shared."""

    def __init__(self, scope: Scope, source: Operator) -> None:
        super().__init__(scope, source, "enter_arranged")

    def enter(self, tb: TraceBatch) -> TraceBatch:
        lifted = tb.updates.with_times(lift_times(tb.updates.times, self.scope.dim))
        return TraceBatch(lifted, tb.hashes, tb.nkey)


class Input(Collection):
    """An input collection: stage updates at times not before its frontier, then advance the frontier."""

    def __init__(self, dataflow: Dataflow, dtypes: list[np.dtype], name: str) -> None:
        op = _InputOp(dataflow.scope, name or "input")
        super().__init__(dataflow.scope, op, dtypes)
        self.dataflow = dataflow
        self.name = name
        self.frontier = dataflow.frontier
        self.staged: list[Batch] = []

    def send(self, batch: Batch) -> None:
        """Stage a batch of updates (columns, times, diffs)."""
        if len(batch) == 0:
            return
        if batch.arity != self.arity:
            raise ValueError(f"expected {self.arity} columns, got {batch.arity}")
        if int(batch.times[:, 0].min()) < self.frontier:
            raise ValueError(
                f"update at time {int(batch.times[:, 0].min())} is before the input's frontier {self.frontier}"
            )
        cols = tuple(np.asarray(c, dtype=t) for c, t in zip(batch.columns, self.dtypes, strict=True))
        self.staged.append(Batch(cols, batch.valid, batch.times, batch.diffs))

    def update(
        self,
        rows: Iterable[tuple] | Sequence[np.ndarray],
        time: int | np.ndarray | None = None,
        diff: int | np.ndarray = 1,
    ) -> None:
        """Stage rows (tuples with ``None`` for NULL, or one array per column) with a multiplicity change."""
        cols, valid, n = _columns(rows, self.dtypes)
        t = self.frontier if time is None else time
        times = np.broadcast_to(np.asarray(t, dtype=np.int64), (n,)).reshape(-1, 1)
        diffs = np.broadcast_to(np.asarray(diff, dtype=np.int64), (n,)).copy()
        self.send(Batch.build(cols, valid, times, diffs))

    def insert(self, rows, time=None) -> None:
        """Stage insertions of ``rows`` (at ``time``, default the frontier)."""
        self.update(rows, time, 1)

    def delete(self, rows, time=None) -> None:
        """Stage deletions of ``rows``."""
        self.update(rows, time, -1)

    def replace(self, old_rows, new_rows, time=None) -> None:
        """Stage an update: ``old_rows`` out and ``new_rows`` in, at the same time."""
        self.update(old_rows, time, -1)
        self.update(new_rows, time, 1)

    def advance_to(self, time: int) -> None:
        """Promise that no more updates come at times before ``time``."""
        if time < self.frontier:
            raise ValueError(f"cannot move the frontier back from {self.frontier} to {time}")
        self.frontier = time

    def _release(self, target: int) -> None:
        if not self.staged:
            return
        batch = Batch.concat(self.staged)
        early = batch.times[:, 0] < target
        if early.all():
            self.staged = []
            self.op.emit(batch)
        elif early.any():
            self.staged = [batch.take(~early)]
            self.op.emit(batch.take(early))


class _InputOp(Operator):
    def run(self, point: Point) -> None:
        pass


class Loop:
    """A loop scope: ``enter`` outer collections, declare ``variable``s, ``set`` them, ``leave``."""

    def __init__(self, outer: Scope, limit: int | None, on_limit: str) -> None:
        if on_limit not in ("error", "return"):
            raise ValueError("on_limit must be 'error' or 'return'")
        self.outer = outer
        self.inner = Scope(outer.dataflow, outer.dim + 1, outer)
        self.op = LoopOp(outer, self.inner)
        self.limit = limit
        self.on_limit = on_limit
        self._entered: dict[int, Collection] = {}

    def __enter__(self) -> Loop:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def loop(self, limit: int | None = None, on_limit: str = "error") -> Loop:
        """A loop nested in this one."""
        return Loop(self.inner, limit, on_limit)

    def _check_outer(self, c: Collection | Arranged) -> None:
        if c.scope is not self.outer:
            raise ValueError("only collections of the enclosing scope can be entered")
        if c.op.index > self.op.index:
            if any(leave.consumers for leave in self.op.leaves):
                raise ValueError(
                    "a collection created after the loop's results were used cannot be entered into it"
                )
            self.outer.move_to_end(self.op)

    def enter(self, c: Collection) -> Collection:
        """An outer collection inside the loop (unchanging across iterations)."""
        if c.scope is self.inner:
            return c
        self._check_outer(c)
        key = id(c)
        if key not in self._entered:
            self._entered[key] = Collection(self.inner, EnterOp(self.inner, c.op), c.dtypes)
        return self._entered[key]

    def enter_arranged(self, a: Arranged) -> Arranged:
        """An outer arrangement inside the loop, reading the same trace."""
        self._check_outer(a)
        op = _EnterArranged(self.inner, a.op)
        return Arranged(self.inner, op, a.trace, a.dtypes)

    def variable(self, dtypes: Sequence | None = None, initial: Collection | None = None) -> Variable:
        """A collection defined by what is ``set`` to it one iteration earlier (starting at ``initial``)."""
        if initial is not None:
            initial = self.enter(initial)
            dtypes = initial.dtypes
        if dtypes is None:
            raise ValueError("a variable needs dtypes or an initial collection")
        var = Variable(self, [np.dtype(t) for t in dtypes], initial)
        self.outer.dataflow.variables.append(var)
        return var

    def leave(self, c: Collection) -> Collection:
        """The loop collection's final value (every iteration's updates) in the enclosing scope."""
        if c.scope is not self.inner:
            raise ValueError("only collections of this loop can leave it")
        op = LeaveOp(self.inner, c.op, self.outer)
        self.op.leaves.append(op)
        return Collection(self.outer, op, c.dtypes)


class Variable(Collection):
    """A loop variable; ``set`` it to the collection it takes at the next iteration."""

    def __init__(self, loop: Loop, dtypes: list[np.dtype], initial: Collection | None) -> None:
        self.var_op = VariableOp(loop.inner, loop.limit, loop.on_limit)
        self.initial = initial
        op = self.var_op
        if initial is not None:
            op = ConcatOp(loop.inner, [initial.op, self.var_op])
        super().__init__(loop.inner, op, dtypes)
        self.is_set = False

    def set(self, result: Collection) -> None:
        if self.is_set:
            raise RuntimeError("variable already set")
        self._same_scope(result)
        if result.dtypes != self.dtypes:
            raise ValueError(f"variable has columns {self.dtypes}, got {result.dtypes}")
        self.var_op.feed(result.op)
        if self.initial is not None:
            self.var_op.feed(self.initial.op, negate=True)
        self.is_set = True


class Capture:
    """The updates a collection produced, for inspection (tests, examples, sinks)."""

    def __init__(self, op: CaptureOp, dataflow: Dataflow, dtypes: tuple) -> None:
        self.op = op
        self.dataflow = dataflow
        self.dtypes = dtypes

    def updates(self) -> Batch:
        """All captured updates, consolidated."""
        from ivm.engine.batch import consolidate

        if not self.op.batches:
            return Batch.empty(self.dtypes, self.op.scope.dim)
        out, _ = consolidate(Batch.concat(self.op.batches))
        return out

    def rows_at(self, time: int) -> dict[tuple, int]:
        """The collection at ``time``: row tuple (``None`` for NULL) to multiplicity; not a hot path."""
        u = self.updates()
        sel = u.take(u.times[:, 0] <= time)
        acc: dict[tuple, int] = {}
        for row in sel.to_rows():
            r = row[:-2]
            acc[r] = acc.get(r, 0) + row[-1]
        return {r: m for r, m in acc.items() if m != 0}

    def on_batch(self, fn: Callable[[Batch], None]) -> None:
        """Call ``fn`` with every batch of updates as it is produced."""
        self.op.callbacks.append(fn)


class Probe:
    """Says whether a time is final in a dataflow: all its outputs are exact."""

    def __init__(self, dataflow: Dataflow) -> None:
        self.dataflow = dataflow

    def done(self, time: int) -> bool:
        return time < self.dataflow.frontier


def _inverse_layout(key: Sequence[int], arity: int) -> list[int]:
    """Positions that turn a (key, rest) layout back into the original column order."""
    rest = [i for i in range(arity) if i not in key]
    layout = list(key) + rest
    inv = [0] * arity
    for j, c in enumerate(layout):
        inv[c] = j
    return inv


def _pad_nulls(dtypes: Sequence[np.dtype], after: bool) -> MapFn:
    def pad(cols, valid, n):
        extra = tuple(np.zeros(n, dtype=t) for t in dtypes)
        nulls = tuple(np.zeros(n, dtype=bool) for _ in dtypes)
        if after:
            return cols + extra, valid + nulls
        return extra + cols, nulls + valid

    return pad


def _columns(rows, dtypes: Sequence[np.dtype]) -> tuple[list[np.ndarray], list[Mask], int]:
    """Columns and validity masks from tuples (``None`` = NULL) or from one array per column."""
    if isinstance(rows, (tuple, list)) and rows and isinstance(rows[0], np.ndarray):
        cols = [np.asarray(c, dtype=t) for c, t in zip(rows, dtypes, strict=True)]
        return cols, [None] * len(cols), len(cols[0]) if cols else 0
    rows = list(rows)
    n = len(rows)
    cols, valid = [], []
    for i, t in enumerate(dtypes):
        vals = [r[i] for r in rows]
        mask = np.array([v is not None for v in vals], dtype=bool)
        filled = [v if v is not None else 0 for v in vals]
        cols.append(np.asarray(filled, dtype=t).reshape(n))
        valid.append(None if mask.all() else mask)
    return cols, valid, n
