"""Reduce: per key, a function of the key's accumulated values, kept exact at every time.

The operator keeps an output trace beside the input trace. When new input arrives for some keys at a point,
it re-evaluates those keys at the *interesting* times: the epochs at which the key's accumulated input may have
changed (the joins of the new times with the key's history). At each such time ``t`` the correction is
``f(input accumulated at t) - (output accumulated at t)``, and the output update at ``t`` is that correction
minus the correction already emitted at the key's previous interesting time, which telescopes the corrections
into exact updates. Inside loops, history at later iterations (left by earlier epochs) makes later points
interesting too; those are recorded and revisited when the loop reaches them.

Errors are data: a group the reducer cannot compute (a sum beyond 64 bits) has no output row but an error, an
update of the dataflow's error collection with the time and multiplicity its row would have had, so that the
group leaves the error when its input changes again. The operator keeps the errors it emitted per key in a
trace of their own, made when the first appears, and corrects them exactly as it corrects its output.

All keys and all their interesting times are evaluated together with sorting, cumulative sums and binary
searches; nothing iterates over keys or times in Python.

A reducer of the key's total weight alone (distinct, a threshold) inside one loop, in a step that retires one
epoch, does not read its output trace: the output it has emitted follows from its input (see
``ReduceOp._evaluate_from_input``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ivm.engine.batch import Batch, concat_masks, group_starts, key_hash, lexsort, sort_groups, sort_keys
from ivm.engine.operators import exact
from ivm.engine.operators.arrange import ArrangeOp
from ivm.engine.operators.ordered import OrderedWindow
from ivm.engine.operators.reducers import Aggregate, Groups, Reducer, Shared
from ivm.engine.operators.running import RunningStates
from ivm.engine.operators.window import Window
from ivm.engine.scope import Operator, Point, Scope, split_by_point
from ivm.engine.trace import Spine, TraceBatch
from ivm.engine.trace.batch import expand_ranges, identity_hash

__all__ = ["ReduceOp", "streams"]

_TRUE = np.ones(1, dtype=bool)
_NEVER = np.iinfo(np.int64).max  # no later iteration (see ``ReduceOp._defer_next``)
_LATER_EPOCHS = object()  # ``_evaluate_counts`` leaves the keys to the general path
# A(i), A(i - 1), O(i), O(i - 1) from the input before the step up to iteration i - 1 and at i, then the step's
# the same (see ``ReduceOp._evaluate_from_input``)
_ACCUMULATIONS = np.array([[1, 1, 1, 1], [1, 0, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=np.int64)
_SIGNS = np.array([1, -1, -1, 1], dtype=np.int64)

# keys to evaluate: their hashes, columns and validity, and per key the least epoch it was triggered at
Keys = tuple[np.ndarray, tuple, tuple, np.ndarray]


class ReduceOp(Operator):
    """Reduces an arrangement (keyed by its first ``nkey`` columns) with ``reducer``; the output is
    arranged by the same key (key columns, then the reducer's columns).

    A linear aggregate outside loops may instead read a plain collection (``trace`` None, with ``nkey`` and
    the source's ``dtypes``): it keeps a running state per key and never re-reads its input, so the input
    needs no arrangement of its own."""

    def __init__(
        self,
        scope: Scope,
        source: Operator,
        trace: Spine | None,
        reducer: Reducer,
        nkey: int | None = None,
        dtypes: Sequence | None = None,
    ) -> None:
        super().__init__(scope, "reduce")
        self.nkey = trace.nkey if trace is not None else nkey
        in_dtypes = tuple(trace.dtypes if trace is not None else dtypes)
        self.input = self.new_queue()
        source.subscribe(self.input)
        self.reducer = reducer
        key_dtypes = in_dtypes[: self.nkey]
        # a key of doubles may be written -0.0 or 0.0, one key but two rows: its output is taken back as it was
        # written (see ``_evaluate``), never as the key is written at the time
        self.signed_keys = any(np.dtype(d).kind == "f" for d in key_dtypes)
        out_dtypes = key_dtypes + tuple(reducer.out_dtypes(in_dtypes[self.nkey :]))
        # the groups the reducer may fail to compute: error code -> message (see ``Aggregate.failures``)
        self.failures: dict[int, str] = {}
        # whether the reducer reads rows common to a key's interesting times once (``Aggregate.shares``)
        self.shares = False
        if isinstance(reducer, Aggregate):
            self.failures = reducer.failures(in_dtypes[self.nkey :])
            self.shares = reducer.shares(in_dtypes[self.nkey :])
        # a reducer of the key's total weight alone, over rows that are their keys: see ``_evaluate_counts``
        self.counts_only = (
            not self.signed_keys  # (its output is written under the key as the trigger writes it)
            and len(in_dtypes) == self.nkey
            and len(out_dtypes) == self.nkey
            and not self.failures
            and getattr(reducer, "multiplicities", None) is not None
            and reducer.multiplicities(np.zeros(0, dtype=np.int64)) is not None
        )
        # and in one loop, it may work from its input alone (``_evaluate_from_input``), which needs the input's
        # history compacted up to the epoch before the running step only
        self.from_input = self.counts_only and trace is not None and scope.dim == trace.dim == 2
        self.step = (0, 0)  # the running step (its frontier and target), when last run
        self.last = -1  # the greatest iteration it ran at in the step
        self.latest = -1  # the greatest epoch of the input it brought in the step
        self.seen = -1  # and in the steps before
        # whether the step retires one epoch, the input brought in it is all at that epoch and none before was,
        # and every run in it was at a later iteration than the runs before (in a loop run again at the same
        # outer point, not)
        self.fresh = False
        self.handle = None
        if trace is not None:
            handle = trace.handle(scope.dataflow.frontier_in(trace.dim))
            self.handle = scope.dataflow.hold(handle, lag=1 if self.from_input else 0)
        self.output = ArrangeOp(scope, None, self.nkey, out_dtypes)
        self.output.sources.append(self)
        self.pending: dict[Point, list[Keys]] = {}  # keys found due at later points, by point
        # the errors emitted, as (key..., code) updates: made when the first appears (see ``make_error_trace``)
        self.error_trace: Spine | None = None
        self.error_handle = None
        # linear aggregates outside loops keep a running state per key instead of re-reading their groups
        self.state: RunningStates | None = None
        if streams(reducer, scope):
            self.state_layout = reducer.state_columns(in_dtypes[self.nkey :])
            # per column summed exactly, wide states 2i (its limbs) and 2i + 1 (its NaN, +inf, -inf and -0.0
            # counts, held from the first such value on)
            self.wide_layout = reducer.wide_columns(in_dtypes[self.nkey :])
            # and per key column of doubles, how many of the group's rows write it -0.0: the group's key is
            # -0.0 while all do, as PostgreSQL shows such a group (0.0 otherwise, one of the ways it may)
            self.zero_keys = [i for i, d in enumerate(key_dtypes) if np.dtype(d).kind == "f"]
            state_dtypes = [d for _, _, d in self.state_layout] + [np.dtype(np.int64)] * len(self.zero_keys)
            self.state = RunningStates(key_dtypes, state_dtypes, wide=2 * len(self.wide_layout))
        elif trace is None:
            raise ValueError("only a linear aggregate outside loops reduces a collection that is not arranged")
        # window functions outside loops keep their rows in order, and recompute only the rows a change reaches
        self.ordered: OrderedWindow | None = None
        if isinstance(reducer, Window) and scope.dim == 1:
            self.ordered = OrderedWindow(reducer, self.nkey, in_dtypes)

    def pending_points(self):
        yield from super().pending_points()
        yield from self.pending.keys()

    def release(self) -> None:
        if self.handle is not None:
            self.handle.release()
        if self.error_handle is not None:
            self.error_handle.release()
            self.error_handle = None
        self.output.release()
        self.state = None
        self.ordered = None

    def make_error_trace(self) -> Spine:
        """The trace of the errors emitted, keyed as the output, with the error's code as its one value (made
        on first use, so that an operator that never fails holds none)."""
        if self.error_trace is None:
            dtypes = tuple(self.output.dtypes[: self.nkey]) + (np.dtype(np.int64),)
            self.error_trace = Spine(self.nkey, dtypes, self.scope.dim)
            handle = self.error_trace.handle(self.scope.dataflow.frontier_in(self.scope.dim))
            self.error_handle = self.scope.dataflow.hold(handle)
        return self.error_trace

    def _count_errors(self, codes: np.ndarray, diffs: np.ndarray) -> None:
        """Add updates of groups in error (their codes and diffs) to the dataflow's errors, summed by code."""
        if not len(codes):
            return
        distinct, inverse = np.unique(codes, return_inverse=True)
        totals = np.zeros(len(distinct), dtype=np.int64)
        np.add.at(totals, inverse.reshape(-1), diffs)
        moved = np.flatnonzero(totals)  # a group in and out of error within the updates moves nothing
        self.scope.dataflow.add_errors([self.failures[int(distinct[i])] for i in moved], totals[moved])

    @property
    def state_bytes(self) -> int:
        """Bytes of the running states and ordered window rows (held outside any trace)."""
        return (0 if self.state is None else self.state.nbytes) + (
            0 if self.ordered is None else self.ordered.nbytes
        )

    def run(self, point: Point) -> None:
        deltas = self.input.take(point)
        pending = self.pending.pop(point, [])
        if not deltas and not pending:
            return
        if self.from_input:
            self._note_step(deltas, point[0])
        self._run(point, deltas, pending)

    def _note_step(self, deltas: list[TraceBatch], i: int) -> None:
        """Keep ``fresh`` for the running step, now at iteration ``i`` with ``deltas``."""
        df = self.scope.dataflow
        step = (df.frontier, df.target)
        if step != self.step:
            self.seen = max(self.seen, self.latest)
            self.step, self.last, self.latest = step, -1, -1
            self.fresh = df.target == df.frontier + 1 and self.seen < df.frontier
        if i <= self.last:
            self.fresh = False
        self.last = max(self.last, i)
        for tb in deltas:
            epochs = tb.updates.times[:, 0]
            if self.fresh and not np.count_nonzero(epochs != df.frontier):
                self.latest = df.frontier
                continue
            self.fresh = False  # (as an imported arrangement's history, replayed, is not)
            self.latest = max(self.latest, int(np.maximum.reduce(epochs)))

    def _run(self, point: Point, deltas: list, pending: list) -> None:
        if self.ordered is not None:
            if not self.ordered.loaded:  # (the output's arrangement may have been loaded from a checkpoint)
                batches = [b.updates for b in self.output.trace.batches()]
                self.ordered.load(Batch.concat(batches) if batches else Batch.empty(self.output.dtypes))
            whole = len(deltas) == 1 and isinstance(deltas[0], TraceBatch)  # a trace's batch is consolidated
            out = self.ordered.apply(
                Batch.concat([d.updates if isinstance(d, TraceBatch) else d for d in deltas]), whole
            )
            if out is not None:
                self.output.insert(out)
            return
        if self.state is not None:
            out = self._evaluate_linear(
                Batch.concat([d.updates if isinstance(d, TraceBatch) else d for d in deltas])
            )
            if out is not None:
                self.output.insert(out)
            return
        found = self._evaluate(_trigger_keys(deltas, pending, self.nkey), point)
        if found is not None:
            out, hashes, ordered = found
            self.output.insert(out, hashes, point, ordered)

    def _evaluate(self, keys: Keys, point: Point) -> tuple[Batch, np.ndarray, bool] | None:
        """The output updates that make the output right at every interesting time of ``keys`` at ``point``,
        with their key hashes, and whether they are sorted and consolidated already."""
        hashes, kcols, kvalid, trig = keys
        if self.from_input and self.fresh:
            found = self._evaluate_from_input(keys, point)
            if found is not _LATER_EPOCHS:
                return found
        hist_in, q_in = self.handle.trace.gather(hashes, kcols, kvalid)
        hist_out, q_out = self.output.trace.gather(hashes, kcols, kvalid)
        if self.counts_only:
            counted = self._evaluate_counts(keys, hist_in, q_in, hist_out, q_out, point)
            if counted is not _LATER_EPOCHS:
                return counted
        hist_err, q_err = None, q_out[:0]
        if self.error_trace is not None:
            hist_err, q_err = self.error_trace.gather(hashes, kcols, kvalid)
        dim = self.scope.dim
        if dim > 1:
            later: list = []
            slim = self.counts_only  # only times and diffs are read on
            hist_in, q_in = self._split_future(hist_in, q_in, keys, point, later, slim)
            hist_out, q_out = self._split_future(hist_out, q_out, keys, point, later, slim)
            if hist_err is not None:
                hist_err, q_err = self._split_future(hist_err, q_err, keys, point, later)
            if later:
                self._defer(keys, later, point)
        cands = _candidates(trig, ((hist_in, q_in), (hist_out, q_out), (hist_err, q_err)))

        # targets per candidate (the reducer's rows and errors) less what was emitted up to it; where a key of
        # doubles may be written two ways, as whole rows: the targets under the key as the triggers write it,
        # what was emitted as it was (see ``signed_keys``)
        parts: list[tuple[np.ndarray, tuple, tuple, np.ndarray]] = []
        errors: list[tuple[np.ndarray, tuple, tuple, np.ndarray]] = []
        whole = self.signed_keys
        keyed = (cands.q, kcols, kvalid)
        if hist_in is not None:
            shared = None
            if self.shares:
                g, shared = _accumulate(hist_in, q_in, self.nkey, cands, share=True)
                if g is None and shared is not None:
                    g = _no_groups(shared.rows)
            else:
                g = _accumulate(hist_in, q_in, self.nkey, cands)
            if g is not None:
                if self.failures:
                    out, (bad, codes) = self.reducer.evaluate(g, shared)
                    parts.append(_keyed(out, whole, *keyed))
                    errors.append(
                        _keyed((bad, (codes,), (None,), np.ones(len(bad), dtype=np.int64)), whole, *keyed)
                    )
                else:
                    out = self.reducer(g) if shared is None else self.reducer(g, shared)
                    parts.append(_keyed(out, whole, *keyed))
        for h, q, into in ((hist_out, q_out, parts), (hist_err, q_err, errors)):
            if h is not None:
                g = _accumulate(h, q, 0 if whole else self.nkey, cands)
                if g is not None:
                    into.append((g.group, g.columns, g.valid, -g.weights))
        if errors:
            fixes = _telescope(errors, cands, keys, dim, point, whole)
            if fixes is not None:
                tb = TraceBatch.from_updates(fixes[0], self.nkey, fixes[1])  # (errors have a value column)
                if len(tb):
                    self.make_error_trace().insert(tb)
                    self._count_errors(tb.updates.columns[-1], tb.updates.diffs)
        return _telescope(parts, cands, keys, dim, point, whole)

    def _evaluate_from_input(self, keys: Keys, point: Point):
        """``_evaluate`` for a reducer of the key's total weight alone in one loop, in a step retiring one epoch
        ``e`` that brought nothing else (see ``fresh``), from its input trace alone: the general path, or
        ``_LATER_EPOCHS`` when a key's trigger or history is at another epoch.

        With ``f`` the multiplicity a total calls for, ``A(j)`` a key's input accumulated up to iteration ``j``
        (at epoch ``e``: every update is at an epoch up to ``e``) and ``O(j)`` the same before the step, the
        output is right at every time before the step and at the iterations before ``i`` in it, and the step
        emitted nothing at iteration ``i`` yet (it ran at earlier iterations only), so what was emitted up to
        ``(e, i)`` sums to ``f(A(i - 1)) + f(O(i)) - f(O(i - 1))``: the output at ``(e, i - 1)`` plus what
        epochs before ``e`` emitted at iteration ``i``. The update at ``(e, i)`` is ``f(A(i))`` less that, what
        the output trace would give, without reading it. The input's updates at epoch ``e`` are the step's, as
        the handle lags an epoch: compaction moves the others to epochs before ``e`` only.

        History at later iterations is deferred as ``_split_future`` does, the input's alone (at a later
        iteration where the input has no history, ``A`` and ``O`` keep their difference, and the update is
        zero), and a key to its next such iteration only (``_defer_next``)."""
        hashes, kcols, kvalid, trig = keys
        e = self.step[0]
        if np.count_nonzero(trig != e):
            return _LATER_EPOCHS
        hist, q = self.handle.trace.gather(hashes, kcols, kvalid)
        nk = len(hashes)
        i = point[0]
        # per key: input up to iteration i - 1 and at i from before the step, then the step's the same
        total = np.zeros(4 * nk, dtype=np.int64)
        if hist is not None:
            times = hist.times
            epochs, it = times[:, 0], times[:, 1]
            if np.count_nonzero(epochs > e):
                return _LATER_EPOCHS
            after = it > i
            fut = after.nonzero()[0]
            diffs = hist.diffs
            if len(fut):
                diffs = np.where(after, 0, diffs)
            np.add.at(total, q + nk * ((it == i) + 2 * (epochs == e)), diffs)
            if len(fut):
                self._defer_next(keys, q[fut], it[fut], epochs[fut] == e, total, point)
        # A(i), A(i - 1), O(i), O(i - 1), then f(A(i)) - f(A(i - 1)) - f(O(i)) + f(O(i - 1))
        acc = _ACCUMULATIONS @ total.reshape(4, nk)
        net = _SIGNS @ self.reducer.multiplicities(acc.ravel()).reshape(4, nk)
        rows = net.nonzero()[0]
        if not len(rows):
            return None
        times = np.empty((len(rows), 2), dtype=np.int64)
        times[:, 0] = e
        times[:, 1] = i
        out_cols = tuple([k[rows] for k in kcols])
        out_valid = tuple([None if m is None else m[rows] for m in kvalid])
        return Batch(out_cols, out_valid, times, net[rows]), hashes[rows], True

    def _defer_next(
        self, keys: Keys, fq: np.ndarray, fit: np.ndarray, now: np.ndarray, total: np.ndarray, point: Point
    ) -> None:
        """Defer, for ``_evaluate_from_input`` at ``point`` (iteration ``i`` of epoch ``e``), each key with
        history at later iterations (key ``fq``, iteration ``fit``, ``now`` where it is at ``e``) to the first
        of them only, and only while the step changed the key: its evaluation there defers it to the next.

        A key whose updates at ``e`` up to ``i`` (``total``'s last two quarters, per key) sum to zero, with
        none after ``i``, has ``A(j) = O(j)`` at every later iteration ``j``: its update there is zero until an
        update at ``e`` reaches the key again, which triggers it anew. Deferring a key to its next iteration
        only (not to every later one of its history at once, each time it is evaluated) keeps one pending
        entry per key, and spares the evaluations, and the rounds, of keys the step no longer changes."""
        hashes, kcols, kvalid, _ = keys
        nk = len(hashes)
        nearest = np.full(nk, _NEVER, dtype=np.int64)
        np.minimum.at(nearest, fq, fit)
        settled = (total[2 * nk : 3 * nk] + total[3 * nk :]) == 0
        settled[fq[now]] = False
        nearest[settled] = _NEVER
        order = nearest.argsort(kind="stable")  # the keys by the iteration they are due at, each's in key order
        its = nearest[order]
        m = int(its.searchsorted(_NEVER))
        if not m:
            return
        rows = order[:m]
        its = its[:m]
        cuts = [0, *((its[1:] != its[:-1]).nonzero()[0] + 1).tolist(), m]
        epochs = np.full(m, self.step[0], dtype=np.int64)
        self._pend(
            [(p,) for p in its[cuts[:-1]].tolist()],
            cuts,
            (hashes[rows], [k[rows] for k in kcols], [None if v is None else v[rows] for v in kvalid], epochs),
            point,
        )

    def _evaluate_counts(
        self,
        keys: Keys,
        hist_in: Batch | None,
        q_in: np.ndarray,
        hist_out: Batch | None,
        q_out: np.ndarray,
        point: Point,
    ):
        """``_evaluate`` for a reducer of the key's total weight alone (distinct, a threshold) when no key has
        history at an epoch after its trigger's (else ``_LATER_EPOCHS``, for the general path): each key has
        one interesting epoch, and its update is the multiplicity its total calls for less the total emitted,
        in the keys' order (the trace's), so sorted and consolidated already. What the general path computes,
        with the groups, the reducer's rows and the telescoping each reduced to one number per key; the
        histories of both traces are read as one (the output's keys numbered after the input's), and the
        times at later iterations are deferred as ``_split_future`` does."""
        hashes, kcols, kvalid, trig = keys
        nk = len(hashes)
        if hist_in is not None and hist_out is not None:
            times = np.concatenate((hist_in.times, hist_out.times))
            diffs = np.concatenate((hist_in.diffs, hist_out.diffs))
            key = np.concatenate((q_in, q_out))
            slot = np.concatenate((q_in, q_out + nk))
        elif hist_in is not None or hist_out is not None:
            hist, key = (hist_in, q_in) if hist_in is not None else (hist_out, q_out)
            times, diffs = hist.times, hist.diffs
            slot = key if hist_in is not None else key + nk
        else:
            times = None
        total = np.zeros(2 * nk, dtype=np.int64)
        if times is not None:
            if np.count_nonzero(times[:, 0] > trig[key]):
                return _LATER_EPOCHS
            if len(point):
                if len(point) == 1:
                    after = times[:, 1] > point[0]
                else:
                    after = np.logical_or.reduce(times[:, 1:] > np.asarray(point, dtype=np.int64), axis=1)
                fut = after.nonzero()[0]
                if len(fut):
                    fk = key[fut]
                    due = np.maximum(times.take(fut, axis=0), np.asarray((0, *point), dtype=np.int64))
                    np.maximum(due[:, 0], trig[fk], out=due[:, 0])
                    self._defer(keys, [(fk, due)], point)
                    diffs = np.where(after, 0, diffs)
            np.add.at(total, slot, diffs)
        net = self.reducer.multiplicities(total[:nk])
        net -= total[nk:]
        rows = net.nonzero()[0]
        if not len(rows):
            return None
        dim = self.scope.dim
        times = np.empty((len(rows), dim), dtype=np.int64)
        times[:, 0] = trig[rows]
        if dim > 1:
            times[:, 1:] = point
        out_cols = tuple([k[rows] for k in kcols])
        out_valid = tuple([None if m is None else m[rows] for m in kvalid])
        return Batch(out_cols, out_valid, times, net[rows]), hashes[rows], True

    def _evaluate_linear(self, delta: Batch) -> Batch | None:
        """Output updates of a linear aggregate from the keys' running states and the new updates alone: at each
        new epoch of a key, the state is the old state plus the contributions up to that epoch."""
        n, nk = len(delta), self.nkey
        if n == 0:
            return None
        kcols, kvalid = delta.select(range(nk))
        h = key_hash(kcols, kvalid, n)
        epochs = delta.times[:, 0]
        # keys that are their own hash sort by the hash alone; one epoch (a transaction's) needs no sort by it
        kkeys = [h] if identity_hash(kcols, kvalid, h) else [h] + sort_keys(kcols, kvalid, None, False)
        one_epoch = bool((epochs == epochs[0]).all())
        order = lexsort(kkeys if one_epoch else kkeys + [epochs])
        key_start = group_starts([k[order] for k in kkeys], n)
        if one_epoch:
            last_of_epoch = np.concatenate((key_start[1:], _TRUE))
        else:
            es = epochs[order]
            last_of_epoch = np.concatenate((key_start[1:] | (es[1:] != es[:-1]), _TRUE))
        starts = np.flatnonzero(key_start)
        vcols, vvalid = delta.select(range(nk, delta.arity))
        contrib = self.reducer.contributions(
            self.state_layout,
            tuple(c[order] for c in vcols),
            tuple(None if m is None else m[order] for m in vvalid),
            delta.diffs[order],
        )
        for i in self.zero_keys:
            negative = (kcols[i] == 0) & np.signbit(kcols[i])
            if kvalid[i] is not None:
                negative &= kvalid[i]
            contrib.append(delta.diffs[order] * negative[order])
        if one_epoch:
            q = np.arange(len(starts))  # the key of each (key, epoch)
        else:
            kid = np.cumsum(key_start) - 1
            ends = np.flatnonzero(last_of_epoch)
            q = kid[ends]
        reps = order[starts]
        qh = h[reps]
        qcols = tuple(c[reps] for c in kcols)
        qvalid = tuple(None if m is None else m[reps] for m in kvalid)
        self.state.writes += 1
        slots = self.state.find(qh, qcols, qvalid)
        fresh = np.flatnonzero(slots < 0)
        if len(fresh):
            slots[fresh] = self.state.add(
                qh[fresh], [c[fresh] for c in qcols], [None if m is None else m[fresh] for m in qvalid]
            )
        if one_epoch:  # each key at one epoch: its state moves once, by the sum of its contributions
            first = last = None
        else:
            step = q[1:] != q[:-1]
            first = np.concatenate((_TRUE, step))  # first new epoch of its key
            last = np.concatenate((step, _TRUE))  # last new epoch of its key: the state it leaves
            later = np.flatnonzero(~first)
        new_states: list = [None] * len(contrib)
        prev_states: list = [None] * len(contrib)
        # the state columns of one dtype as the rows of one array, so each step is one numpy call for all
        for dtype in dict.fromkeys(c.dtype for c in contrib):
            js = [j for j, c in enumerate(contrib) if c.dtype == dtype]
            c = contrib[js[0]][None] if len(js) == 1 else np.stack([contrib[j] for j in js])
            gathered = [self.state.states[j][slots] for j in js]
            base = (gathered[0][None] if len(js) == 1 else np.stack(gathered)).astype(dtype, copy=False)
            if one_epoch:
                before = base
                now = final = before + np.add.reduceat(c, starts, axis=1)
            else:
                cs = np.cumsum(c, axis=1)
                within = cs - (cs[:, starts] - c[:, starts])[:, kid]
                before = base[:, q]
                now = before + within[:, ends]
                before[:, later] = now[:, later - 1]
                final = now[:, last]
            for t, j in enumerate(js):
                new_states[j] = now[t]
                prev_states[j] = before[t]
                self.state.states[j][slots] = final[t]
        m = len(q)
        wide = {}
        if self.wide_layout:
            seg = np.cumsum(last_of_epoch) - last_of_epoch  # the (key, epoch) of each row, as ``ends`` counts
            fidx = q if first is None else np.flatnonzero(first)
            diffs = delta.diffs[order]
            for i, pos in enumerate(self.wide_layout):
                x, mask = vcols[pos][order], None if vvalid[pos] is None else vvalid[pos][order]
                rows = exact.finite(x, mask, diffs)
                lowest, parts = exact.split(x[rows], diffs[rows])
                if len(rows):
                    self.state.widen(2 * i, *exact.window(lowest))
                limbs = self._wide(2 * i, rows, lowest, parts, seg, q, fidx, slots, carry=True)
                rows, which = exact.special(x, mask, diffs)
                if len(rows):
                    self.state.widen(2 * i + 1, 0, 4)
                counts = self._wide(2 * i + 1, rows, which, diffs[rows][None], seg, q, fidx, slots, carry=False)
                wide[pos] = (limbs, self.state.wide_lo[2 * i], counts)
        # the groups' outputs now (added) and before (retracted), finished together
        states = [np.concatenate((a, b)) for a, b in zip(new_states, prev_states, strict=True)]
        ns = len(self.state_layout)
        values, masks, failed = self.reducer.finish(self.state_layout, states[:ns], wide)
        present = states[0] > 0  # groups with rows at that time
        negative_keys = [states[0] == c for c in states[ns:]]  # a key of doubles written -0.0 by every row
        if failed is not None:
            # a group in error has no row: its error goes in (now) or out (before) instead
            wrong = np.flatnonzero(present & (failed >= 0))
            self._count_errors(failed[wrong], np.where(wrong < m, 1, -1))
            present[wrong] = False
        # a group whose output row is the same before and after (a distinct row counted once more, say)
        # would add and retract it at the same time: neither goes out
        unchanged = present[:m] & present[m:]
        for v, mask in zip(values, masks, strict=True):
            same = v[:m] == v[m:]
            if v.dtype.kind == "f":  # a sum going from 0.0 to -0.0 changes its row
                same &= np.signbit(v[:m]) == np.signbit(v[m:])
            if mask is None:
                unchanged &= same
            else:
                unchanged &= (mask[:m] == mask[m:]) & (same | ~mask[:m])
        for negative in negative_keys:
            unchanged &= negative[:m] == negative[m:]
        if unchanged.any():
            present[:m] &= ~unchanged
            present[m:] &= ~unchanged
        sel = np.flatnonzero(present)
        if not len(sel):
            return None
        now = sel < m
        row = np.where(now, sel, sel - m)
        # each key as its group's state holds it (the first written), so that a row goes out and is taken back
        # under one key even when the key is written -0.0 and 0.0
        held = slots[q[row]]
        keys = [k[held] for k in self.state.keys]
        for i, negative in zip(self.zero_keys, negative_keys, strict=True):
            keys[i] = np.where(negative[sel], -0.0, keys[i] + 0.0)
        cols = tuple(keys) + tuple(v[sel] for v in values)
        valid = tuple(None if v is None else k[held] for v, k in zip(qvalid, self.state.valid, strict=True))
        valid += tuple(None if v is None else v[sel] for v in masks)
        times = np.full((len(row), 1), epochs[0]) if one_epoch else epochs[order][ends][row].reshape(-1, 1)
        return Batch.build(cols, valid, times, np.where(now, 1, -1))

    def _wide(self, j, rows, lowest, parts, seg, q, fidx, slots, carry: bool) -> np.ndarray:
        """Wide state ``j`` (the limbs or the counts of an exact sum of doubles: see ``exact``) after each new
        epoch of a key and before it (in two halves: shape ``(width, 2 * len(q))``), ``q`` being the epochs'
        keys and ``fidx`` each key's first; the update adds ``parts`` of the sorted ``rows`` (in epochs
        ``seg``) to their states' columns numbered ``lowest`` and up (see ``exact.scatter``). Each key's last
        state is stored, normalized if ``carry`` (limbs, not counts)."""
        lo, state = self.state.wide_lo[j], self.state.wide[j]
        one_epoch = len(q) == len(fidx)  # each key at one new epoch (q is then 0, 1, 2, ...)
        before = np.take(state, slots if one_epoch else slots[q], axis=0)  # (epochs, width)
        if not len(rows):
            return np.concatenate((before, before)).T
        added = np.zeros(before.T.shape, dtype=np.int64)
        exact.scatter(added, lowest, parts, lo, seg[rows])
        if one_epoch:
            now = before + added.T
            final = now.copy()
        else:
            cs = np.cumsum(added, axis=1)
            now = before + (cs - (cs[:, fidx] - added[:, fidx])[:, q]).T
            later = np.flatnonzero(np.diff(q, prepend=-1) == 0)
            before[later] = now[later - 1]
            final = now[np.append(fidx[1:] - 1, len(q) - 1)]
        if carry:
            exact.normalize(final.T)
        state[slots] = final
        return np.concatenate((now, before)).T

    def _split_future(
        self, hist: Batch | None, q: np.ndarray, keys: Keys, point: Point, later: list, slim: bool = False
    ):
        """Keep history at iterations ``<= point`` (its times and diffs alone when ``slim``); add to ``later``
        the joins of later iterations' with this point (the keys, by their index, and the times when they are
        due)."""
        if hist is None:
            return hist, q
        times = hist.times
        if len(point) == 1:
            after = times[:, 1] > point[0]
        else:
            after = (times[:, 1:] > np.asarray(point, dtype=np.int64)).any(axis=1)
        fut = after.nonzero()[0]
        if not len(fut):
            return hist, q
        fq = q[fut]
        due = np.maximum(times.take(fut, axis=0), np.asarray((0, *point), dtype=np.int64))
        due[:, 0] = np.maximum(due[:, 0], keys[3][fq])
        later.append((fq, due))
        keep = (~after).nonzero()[0]
        if not len(keep):
            return None, q[:0]
        if slim:
            return Batch((), (), times.take(keep, axis=0), hist.diffs[keep]), q[keep]
        return hist.take(keep), q[keep]

    def _defer(self, keys: Keys, later: list, point: Point) -> None:
        """Record the keys found due at later points (``_split_future``), by point (each point's are a slice
        of them sorted by point), and run again there (at ``point``, the one running, on its next run)."""
        hashes, kcols, kvalid, _ = keys
        fq = later[0][0] if len(later) == 1 else np.concatenate([f for f, _ in later])
        due = later[0][1] if len(later) == 1 else np.concatenate([d for _, d in later])
        if due.shape[1] == 2:
            it = due[:, 1]
            order = it.argsort(kind="stable")
            its = it[order]
            cuts = [0, *((its[1:] != its[:-1]).nonzero()[0] + 1).tolist(), len(its)]
            points = [(p,) for p in its[cuts[:-1]].tolist()]
        else:
            parts = split_by_point(due)
            order = np.concatenate([np.arange(len(due)) if sel is None else sel for _, sel in parts])
            cuts = [0, *np.cumsum([len(due) if sel is None else len(sel) for _, sel in parts]).tolist()]
            points = [p for p, _ in parts]
        rows = fq[order]
        gathered = (hashes[rows], [k[rows] for k in kcols], [None if m is None else m[rows] for m in kvalid])
        self._pend(points, cuts, (*gathered, due[:, 0][order]), point)

    def _pend(self, points: list[Point], cuts: list[int], keys: tuple, point: Point) -> None:
        """Record keys (hashes, columns, validity and epochs, sorted by the point they are due at: those of
        ``points[j]`` at ``[cuts[j], cuts[j + 1])``) as pending at their points, and run again there (at
        ``point``, the one running, on its next run)."""
        h, cols, valid, epochs = keys
        for p, s, e in zip(points, cuts[:-1], cuts[1:], strict=True):
            if p not in self.pending:
                if p == point:
                    self.scope.activate_next_run(self, p)
                else:
                    self.activate(p)
            self.pending.setdefault(p, []).append(
                (
                    h[s:e],
                    tuple([c[s:e] for c in cols]),
                    tuple([None if m is None else m[s:e] for m in valid]),
                    epochs[s:e],
                )
            )


def streams(reducer: Reducer, scope: Scope) -> bool:
    """Whether ``reducer`` keeps a running state per key in ``scope`` (and so needs no arranged input)."""
    return isinstance(reducer, Aggregate) and reducer.linear and scope.dim == 1


def _trigger_keys(deltas: list[TraceBatch], pending: list[Keys], nkey: int) -> Keys:
    """The distinct keys of new input batches and of keys found due at this point, each with the least
    epoch it was triggered at (sorted by key hash, then key)."""
    if len(deltas) == 1 and not pending:
        return _sorted_unique_keys(deltas[0], nkey)
    sets = [_keys_of(tb, nkey) for tb in deltas] + pending
    if len(sets) == 1:
        h, cols, valid, epochs = sets[0]
    else:
        h = np.concatenate([k[0] for k in sets])
        cols = tuple([np.concatenate([k[1][i] for k in sets]) for i in range(nkey)])
        valid = tuple(
            [concat_masks([k[2][i] for k in sets], [len(k[1][i]) for k in sets]) for i in range(nkey)]
        )
        epochs = np.concatenate([k[3] for k in sets])
    if len(h) == 1:
        return h, cols, valid, epochs
    keys = [h] if identity_hash(cols, valid, h) else [h, *sort_keys(cols, valid, None, False)]
    order, starts = sort_groups(keys)
    if np.count_nonzero(starts) == len(starts):
        rows = order
        least = epochs[order]
    else:
        first = starts.nonzero()[0]
        rows = order[first]
        least = np.minimum.reduceat(epochs[order], first)
    return (
        h[rows],
        tuple([c[rows] for c in cols]),
        tuple([None if m is None else m[rows] for m in valid]),
        least,
    )


def _keys_of(tb: TraceBatch, nkey: int) -> Keys:
    """The keys of a trace batch's updates (one per update) with their epochs."""
    u = tb.updates
    return tb.hashes, u.columns[:nkey], u.valid[:nkey], u.times[:, 0]


def _sorted_unique_keys(tb: TraceBatch, nkey: int) -> Keys:
    """The distinct keys of one trace batch (sorted by key already), each with its least epoch."""
    u = tb.updates
    h, cols, valid = tb.hashes, u.columns[:nkey], u.valid[:nkey]
    epochs = u.times[:, 0]
    n = len(h)
    if n == 1:
        return h, cols, valid, epochs
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.not_equal(h[1:], h[:-1], out=starts[1:])
    distinct = np.count_nonzero(starts)
    if distinct < n and not identity_hash(cols, valid, h):  # equal hashes: the same key, or a collision
        starts = group_starts([h, *sort_keys(cols, valid, None, False)], n)
        distinct = np.count_nonzero(starts)
    if distinct == n:
        return h, cols, valid, epochs
    first = starts.nonzero()[0]
    return (
        h[first],
        tuple([c[first] for c in cols]),
        tuple([None if m is None else m[first] for m in valid]),
        np.minimum.reduceat(epochs, first),
    )


class _Candidates(NamedTuple):
    """The interesting epochs of the keys being evaluated: candidate ``c`` is key ``q[c]`` at epoch
    ``epoch[c]``, sorted by key then epoch, key ``k``'s in ``[start[k], end[k])``; ``single`` when each key
    has one (its trigger's epoch)."""

    q: np.ndarray
    epoch: np.ndarray
    start: np.ndarray
    end: np.ndarray
    single: bool


def _candidates(trig: np.ndarray, hists) -> _Candidates:
    """Per key, its trigger's epoch and the epochs of its history after it."""
    nk = len(trig)
    late_q, late_e = [], []
    for h, q in hists:
        if h is not None:
            e = h.times[:, 0]
            late = (e > trig[q]).nonzero()[0]
            if len(late):
                late_q.append(q[late])
                late_e.append(e[late])
    idx = np.arange(nk)
    if not late_q:
        return _Candidates(idx, trig, idx, idx + 1, True)
    cq, ce = _unique_pairs(np.concatenate([idx, *late_q]), np.concatenate([trig, *late_e]))
    return _Candidates(cq, ce, cq.searchsorted(idx, "left"), cq.searchsorted(idx, "right"), len(cq) == nk)


def _unique_pairs(q: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((e, q))
    q, e = q[order], e[order]
    new = np.empty(len(q), dtype=bool)
    new[0] = True
    new[1:] = (q[1:] != q[:-1]) | (e[1:] != e[:-1])
    return q[new], e[new]


def _keyed(part: tuple, whole: bool, cand_q: np.ndarray, kcols: tuple, kvalid: tuple) -> tuple:
    """Rows by candidate (value columns), as whole rows behind the key of their candidate if ``whole``."""
    if not whole:
        return part
    c, cols, valid, mult = part
    kq = cand_q[c]
    return (
        c,
        tuple(k[kq] for k in kcols) + tuple(cols),
        tuple(None if m is None else m[kq] for m in kvalid) + tuple(valid),
        mult,
    )


def _telescope(
    parts: list[tuple[np.ndarray, tuple, tuple, np.ndarray]],
    cands: _Candidates,
    keys: Keys,
    dim: int,
    point: Point,
    whole: bool = False,
) -> tuple[Batch, np.ndarray, bool] | None:
    """The updates that make a key's collection what ``parts`` says it lacks at each interesting epoch, with
    their key hashes, and whether they are sorted and consolidated already.

    ``parts`` are rows by candidate (of key ``cands.q[c]`` at epoch ``cands.epoch[c]``) with multiplicities,
    whole rows if ``whole``, else their values behind the candidate's key:
    the target at the candidate less what was emitted up to it. Each goes out at its candidate's epoch and is
    taken back at the key's next candidate, whose own part says what it needs instead."""
    if not parts:
        return None
    if len(parts) == 1:
        c, cols, valid, mult = parts[0]
    else:
        c = np.concatenate([p[0] for p in parts])
        ncol = len(parts[0][1])
        cols = tuple([np.concatenate([p[1][i] for p in parts]) for i in range(ncol)])
        valid = tuple(
            [concat_masks([p[2][i] for p in parts], [len(p[1][i]) for p in parts]) for i in range(ncol)]
        )
        mult = np.concatenate([p[3] for p in parts])
    if len(c) == 0:
        return None
    hashes, kcols, kvalid, _ = keys
    if cands.single and not cols:
        # one epoch per key and no values: a key's update is its net change, and the keys are in the trace's
        # order (by hash, then key), so the updates come out sorted and consolidated without a sort
        net = np.zeros(len(cands.q), dtype=np.int64)
        np.add.at(net, c, mult)
        rows = net.nonzero()[0]
        if not len(rows):
            return None
        times = np.empty((len(rows), dim), dtype=np.int64)
        times[:, 0] = cands.epoch[rows]
        if dim > 1:
            times[:, 1:] = point
        out_cols = tuple([k[rows] for k in kcols])
        out_valid = tuple([None if m is None else m[rows] for m in kvalid])
        return Batch(out_cols, out_valid, times, net[rows]), hashes[rows], True
    if cands.single:  # no key has a next interesting epoch
        rows, diffs, pick = c, mult, None
    else:
        # target(c) at epoch e_c, and minus target(c) at the key's next interesting epoch
        nxt = c + 1
        has_next = (nxt < cands.end[cands.q[c]]).nonzero()[0]
        rows = np.concatenate([c, nxt[has_next]])
        diffs = np.concatenate([mult, -mult[has_next]])
        pick = np.concatenate([np.arange(len(c)), has_next])
    times = np.empty((len(rows), dim), dtype=np.int64)
    times[:, 0] = cands.epoch[rows]
    if dim > 1:
        times[:, 1:] = point
    kq = cands.q[rows]
    out_cols = cols if pick is None else tuple([x[pick] for x in cols])
    out_valid = valid if pick is None else tuple([None if m is None else m[pick] for m in valid])
    if not whole:
        out_cols = tuple([k[kq] for k in kcols]) + out_cols
        out_valid = tuple([None if m is None else m[kq] for m in kvalid]) + out_valid
    return Batch(out_cols, out_valid, times, diffs), hashes[kq], False


def _no_groups(like: Groups) -> Groups:
    """Groups without a row, of ``like``'s columns."""
    return Groups(
        like.group[:0], tuple(x[:0] for x in like.columns), tuple(None for _ in like.valid), like.weights[:0]
    )


def _accumulate(
    hist: Batch, q: np.ndarray, nkey: int, cands: _Candidates, share: bool = False
) -> Groups | None | tuple[Groups | None, Shared | None]:
    """The accumulated values of each key at each of its interesting epochs, as groups by candidate (None
    when every accumulation is zero).

    ``hist`` holds a key's updates (key ``q[i]`` for row ``i``). The value rows of the key with nonzero
    accumulated multiplicity at candidate ``c``'s epoch form group ``c``. With ``share``, the result is a pair:
    the groups of the value rows whose multiplicity changes between the key's first and last candidates,
    and those that hold the same at all of them, once per key (``Shared``). A key changed at many epochs
    of a step (a batch of many source transactions) then costs its changes times its epochs, not its
    values times its epochs.
    """
    ds = hist.diffs
    vcols, vvalid = hist.columns[nkey:], hist.valid[nkey:]
    cstart, cend, cand_e = cands.start, cands.end, cands.epoch
    if cands.single:
        # one interesting epoch per key, not before any of its history: the totals are the accumulations
        if not vcols:  # the key is the whole row: one total per key
            acc = np.zeros(len(cstart), dtype=np.int64)
            np.add.at(acc, q, ds)
            nz = acc.nonzero()[0]
            g = Groups(cstart[nz], (), (), acc[nz]) if len(nz) else None
            return (g, None) if share else g
        order, starts = sort_groups([q, *sort_keys(vcols, vvalid, None)])
        sidx = starts.nonzero()[0]
        acc = np.add.reduceat(ds[order], sidx)
        nz = acc.nonzero()[0]
        if not len(nz):
            return (None, None) if share else None
        rep = order[sidx[nz]]
        g = Groups(
            cstart[q[rep]],
            tuple([x[rep] for x in vcols]),
            tuple([None if m is None else m[rep] for m in vvalid]),
            acc[nz],
        )
        return (g, None) if share else g
    epochs = hist.times[:, 0]
    vkeys = sort_keys(vcols, vvalid, None)
    order = lexsort([q, *vkeys, epochs])
    qs = q[order]
    ds = ds[order]
    starts = group_starts([qs] + [k[order] for k in vkeys], len(qs))
    sidx = np.flatnonzero(starts)
    gq = qs[sidx]
    es = epochs[order]
    gid = np.cumsum(starts) - 1
    cs = np.cumsum(ds)
    base = (cs[sidx] - ds[sidx])[gid]
    within = cs - base
    shared = None
    if share:
        first, last = cand_e[cstart[gq]][gid], cand_e[cend[gq] - 1][gid]
        varies = np.bincount(gid[(es > first) & (es <= last)], minlength=len(sidx)) > 0
        held = np.add.reduceat(np.where(es <= first, ds, 0), sidx)  # at the first candidate, so at all
        common = (~varies & (held != 0)).nonzero()[0]
        if len(common):
            rep = order[sidx[common]]
            shared = Shared(
                Groups(
                    gq[common],
                    tuple(x[rep] for x in vcols),
                    tuple(None if m is None else m[rep] for m in vvalid),
                    held[common],
                ),
                cands.q,
                cstart,
                cend,
            )
        apart = varies.nonzero()[0]
        pg, c = expand_ranges(cstart[gq[apart]], cend[gq[apart]])
        pg = apart[pg]
    else:
        pg, c = expand_ranges(cstart[gq], cend[gq])
    if len(pg) == 0:
        return (None, shared) if share else None
    all_e, inv = np.unique(np.concatenate([es, cand_e]), return_inverse=True)
    inv = inv.reshape(-1)
    width = len(all_e) + 1
    comp_rows = gid * width + inv[: len(es)]
    comp_pairs = pg * width + inv[len(es) :][c]
    pos = np.searchsorted(comp_rows, comp_pairs, side="right") - 1
    posc = np.maximum(pos, 0)
    ok = (pos >= 0) & (gid[posc] == pg)
    acc = np.where(ok, within[posc], 0)
    nz = acc != 0
    pg, c, acc = pg[nz], c[nz], acc[nz]
    if not len(c):
        return (None, shared) if share else None
    reorder = np.lexsort((pg, c))
    pg, c, acc = pg[reorder], c[reorder], acc[reorder]
    rep = order[sidx[pg]]
    g = Groups(
        c,
        tuple(x[rep] for x in vcols),
        tuple(None if m is None else m[rep] for m in vvalid),
        acc,
    )
    return (g, shared) if share else g
