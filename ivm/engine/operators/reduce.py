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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ivm.engine.batch import Batch, group_starts, key_hash, lexsort, sort_keys
from ivm.engine.operators import exact
from ivm.engine.operators.arrange import ArrangeOp
from ivm.engine.operators.reducers import Aggregate, Groups, Reducer
from ivm.engine.operators.running import RunningStates
from ivm.engine.scope import Operator, Point, Scope
from ivm.engine.trace import Spine, TraceBatch
from ivm.engine.trace.batch import expand_ranges, identity_hash

__all__ = ["ReduceOp", "streams"]

_TRUE = np.ones(1, dtype=bool)


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
        self.handle = None
        if trace is not None:
            self.handle = scope.dataflow.hold(trace.handle(scope.dataflow.frontier_in(trace.dim)))
        self.reducer = reducer
        key_dtypes = in_dtypes[: self.nkey]
        # a key of doubles may be written -0.0 or 0.0, one key but two rows: its output is taken back as it was
        # written (see ``_evaluate``), never as the key is written at the time
        self.signed_keys = any(np.dtype(d).kind == "f" for d in key_dtypes)
        out_dtypes = key_dtypes + tuple(reducer.out_dtypes(in_dtypes[self.nkey :]))
        self.output = ArrangeOp(scope, None, self.nkey, out_dtypes)
        self.output.sources.append(self)
        self.pending: dict[Point, list[Batch]] = {}
        # the groups the reducer may fail to compute: error code -> message (see ``Aggregate.failures``)
        self.failures: dict[int, str] = {}
        if isinstance(reducer, Aggregate):
            self.failures = reducer.failures(in_dtypes[self.nkey :])
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
        """Bytes of the running states (held outside any trace)."""
        return 0 if self.state is None else self.state.nbytes

    def run(self, point: Point) -> None:
        deltas = self.input.take(point)
        pending = self.pending.pop(point, [])
        if not deltas and not pending:
            return
        try:
            self._run(point, deltas, pending)
        finally:
            for p in self.pending:  # times found due later: run again there
                if p == point:
                    self.scope.activate_next_run(self, p)
                else:
                    self.activate(p)

    def _run(self, point: Point, deltas: list, pending: list) -> None:
        if self.state is not None:
            out = self._evaluate_linear(
                Batch.concat([d.updates if isinstance(d, TraceBatch) else d for d in deltas])
            )
            if out is not None:
                self.output.insert(out)
            return
        if len(deltas) == 1 and not pending:
            keys = _sorted_unique_keys(deltas[0])
        else:
            triggers = [tb.updates for tb in deltas] + pending
            keys = _unique_keys(Batch.concat([_keys_only(b, self.nkey) for b in triggers]), self.nkey)
        out = self._evaluate(keys, point)
        if out is not None:
            self.output.insert(out)

    def _evaluate(self, keys: tuple, point: Point) -> Batch | None:
        hashes, kcols, kvalid, trig = keys
        nk = len(hashes)
        hist_in, q_in = self.handle.trace.gather(hashes, kcols, kvalid)
        hist_out, q_out = self.output.trace.gather(hashes, kcols, kvalid)
        hist_err, q_err = None, q_out[:0]
        if self.error_trace is not None:
            hist_err, q_err = self.error_trace.gather(hashes, kcols, kvalid)
        dim = self.scope.dim
        if dim > 1:
            hist_in, q_in = self._split_future(hist_in, q_in, keys, point)
            hist_out, q_out = self._split_future(hist_out, q_out, keys, point)
            hist_err, q_err = self._split_future(hist_err, q_err, keys, point)

        # interesting epochs per key: history epochs not before the key's first trigger, and the triggers
        cq = [np.arange(nk)]
        ce = [trig]
        for h, q in ((hist_in, q_in), (hist_out, q_out), (hist_err, q_err)):
            if h is not None:
                e = h.times[:, 0]
                late = e >= trig[q]
                cq.append(q[late])
                ce.append(e[late])
        cand_q, cand_e = _unique_pairs(np.concatenate(cq), np.concatenate(ce))
        cstart = np.searchsorted(cand_q, np.arange(nk), side="left")
        cend = np.searchsorted(cand_q, np.arange(nk), side="right")

        # targets per candidate (the reducer's rows and errors) less what was emitted up to it, as whole rows:
        # the targets under the key as the triggers write it, what was emitted as it was (see ``signed_keys``)
        parts: list[tuple[np.ndarray, tuple, tuple, np.ndarray]] = []
        errors: list[tuple[np.ndarray, tuple, tuple, np.ndarray]] = []
        keyed = (cand_q, kcols, kvalid)
        if hist_in is not None:
            g = _accumulate(hist_in, q_in, self.nkey, cstart, cend, cand_e)
            if g is not None:
                if self.failures:
                    out, (bad, codes) = self.reducer.evaluate(g)
                    parts.append(_keyed(out, *keyed))
                    errors.append(_keyed((bad, (codes,), (None,), np.ones(len(bad), dtype=np.int64)), *keyed))
                else:
                    parts.append(_keyed(self.reducer(g), *keyed))
        for h, q, into in ((hist_out, q_out, parts), (hist_err, q_err, errors)):
            if h is not None:
                g = _accumulate(h, q, 0 if self.signed_keys else self.nkey, cstart, cend, cand_e)
                if g is not None:
                    emitted = (g.group, g.columns, g.valid, -g.weights)
                    into.append(emitted if self.signed_keys else _keyed(emitted, *keyed))
        fixes = _telescope(errors, cand_q, cend, cand_e, dim, point)
        if fixes is not None:
            tb = TraceBatch.from_updates(fixes, self.nkey)
            if len(tb):
                self.make_error_trace().insert(tb)
                self._count_errors(tb.updates.columns[-1], tb.updates.diffs)
        return _telescope(parts, cand_q, cend, cand_e, dim, point)

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
        kid = np.cumsum(key_start) - 1
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
        ends = np.flatnonzero(last_of_epoch)
        q = kid[ends]
        reps = order[starts]
        qh = h[reps]
        qcols = tuple(c[reps] for c in kcols)
        qvalid = tuple(None if m is None else m[reps] for m in kvalid)
        self.state.writes += 1
        slots = self.state.find(qh, qcols, qvalid)
        seen = slots >= 0
        step = q[1:] != q[:-1]
        first = np.concatenate((_TRUE, step))  # first new epoch of its key
        last = np.concatenate((step, _TRUE))  # last new epoch of its key: the state it leaves
        later = np.flatnonzero(~first)
        fresh = np.flatnonzero(~seen)
        if len(fresh):
            slots[fresh] = self.state.add(
                qh[fresh], [c[fresh] for c in qcols], [None if m is None else m[fresh] for m in qvalid]
            )
        new_states: list = [None] * len(contrib)
        prev_states: list = [None] * len(contrib)
        # the state columns of one dtype as the rows of one array, so each step is one numpy call for all
        for dtype in dict.fromkeys(c.dtype for c in contrib):
            js = [j for j, c in enumerate(contrib) if c.dtype == dtype]
            c = contrib[js[0]][None] if len(js) == 1 else np.stack([contrib[j] for j in js])
            cs = np.cumsum(c, axis=1)
            within = cs - (cs[:, starts] - c[:, starts])[:, kid]
            gathered = [self.state.states[j][slots] for j in js]
            base = (gathered[0][None] if len(js) == 1 else np.stack(gathered)).astype(dtype, copy=False)
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
            fidx = np.flatnonzero(first)
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
        times = epochs[order][ends][row].reshape(-1, 1)
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

    def _split_future(self, hist: Batch | None, q: np.ndarray, keys: tuple, point: Point):
        """Keep history at iterations ``<= point``; schedule later iterations' joins with this point."""
        if hist is None:
            return hist, q
        it = hist.times[:, 1:]
        here = np.asarray(point, dtype=np.int64)
        le = (it <= here).all(axis=1)
        if le.all():
            return hist, q
        fut = np.flatnonzero(~le)
        hashes, kcols, kvalid, trig = keys
        fq = q[fut]
        times = np.empty((len(fut), hist.dim), dtype=np.int64)
        times[:, 0] = np.maximum(hist.times[fut, 0], trig[fq])
        times[:, 1:] = np.maximum(it[fut], here)
        trig_batch = Batch(
            tuple(k[fq] for k in kcols),
            tuple(None if m is None else m[fq] for m in kvalid),
            times,
            np.ones(len(fut), dtype=np.int64),
        )
        from ivm.engine.scope import split_by_point

        for p, sel in split_by_point(times):
            self.pending.setdefault(p, []).append(trig_batch if sel is None else trig_batch.take(sel))
        keep = np.flatnonzero(le)
        return (hist.take(keep), q[keep]) if len(keep) else (None, q[:0])


def streams(reducer: Reducer, scope: Scope) -> bool:
    """Whether ``reducer`` keeps a running state per key in ``scope`` (and so needs no arranged input)."""
    return isinstance(reducer, Aggregate) and reducer.linear and scope.dim == 1


def _keys_only(b: Batch, nkey: int) -> Batch:
    cols, valid = b.select(range(nkey))
    return Batch(cols, valid, b.times, b.diffs)


def _sorted_unique_keys(tb: TraceBatch) -> tuple:
    """``_unique_keys`` of one trace batch, which is sorted by key already."""
    cols, valid = tb.key_columns()
    starts = np.flatnonzero(group_starts([tb.hashes, *sort_keys(cols, valid, None, False)], len(tb)))
    epochs = np.minimum.reduceat(tb.updates.times[:, 0], starts)
    return (
        tb.hashes[starts],
        tuple(c[starts] for c in cols),
        tuple(None if m is None else m[starts] for m in valid),
        epochs,
    )


def _unique_keys(b: Batch, nkey: int) -> tuple:
    """Distinct keys of ``b`` (hash, columns, validity) with the least epoch each was triggered at."""
    h = key_hash(b.columns, b.valid, len(b))
    epochs = b.times[:, 0]
    kk = [h] + sort_keys(b.columns, b.valid, None, False)
    order = lexsort(kk + [epochs])
    starts = np.flatnonzero(group_starts([k[order] for k in kk], len(b)))
    first = order[starts]
    return (
        h[first],
        tuple(c[first] for c in b.columns),
        tuple(None if m is None else m[first] for m in b.valid),
        epochs[first],
    )


def _unique_pairs(q: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((e, q))
    q, e = q[order], e[order]
    new = np.ones(len(q), dtype=bool)
    new[1:] = (q[1:] != q[:-1]) | (e[1:] != e[:-1])
    return q[new], e[new]


def _keyed(part: tuple, cand_q: np.ndarray, kcols: tuple, kvalid: tuple) -> tuple:
    """Rows by candidate (value columns) as whole rows, behind the key of their candidate."""
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
    cand_q: np.ndarray,
    cend: np.ndarray,
    cand_e: np.ndarray,
    dim: int,
    point: Point,
) -> Batch | None:
    """The updates that make a key's collection what ``parts`` says it lacks at each interesting epoch.

    ``parts`` are whole rows by candidate (of key ``cand_q[c]`` at epoch ``cand_e[c]``) with multiplicities:
    the target at the candidate less what was emitted up to it. Each goes out at its candidate's epoch and is
    taken back at the key's next candidate, whose own part says what it needs instead."""
    if not parts:
        return None
    c = np.concatenate([p[0] for p in parts])
    if len(c) == 0:
        return None
    ncol = len(parts[0][1])
    cols = tuple(np.concatenate([p[1][i] for p in parts]) for i in range(ncol))
    valid = tuple(_concat_masks([(p[1][i], p[2][i]) for p in parts]) for i in range(ncol))
    mult = np.concatenate([p[3] for p in parts])

    # target(c) at epoch e_c, and minus target(c) at the key's next interesting epoch
    q = cand_q[c]
    nxt = c + 1
    has_next = nxt < cend[q]
    rows = np.concatenate([c, nxt[has_next]])
    diffs = np.concatenate([mult, -mult[has_next]])
    pick = np.concatenate([np.arange(len(c)), np.flatnonzero(has_next)])
    epochs = cand_e[rows]
    times = np.empty((len(rows), dim), dtype=np.int64)
    times[:, 0] = epochs
    if dim > 1:
        times[:, 1:] = point
    out_cols = tuple(x[pick] for x in cols)
    out_valid = tuple(None if m is None else m[pick] for m in valid)
    return Batch(out_cols, out_valid, times, diffs)


def _concat_masks(parts: Sequence[tuple[np.ndarray, np.ndarray | None]]):
    if all(m is None for _, m in parts):
        return None
    return np.concatenate([np.ones(len(x), dtype=bool) if m is None else m for x, m in parts])


def _accumulate(
    hist: Batch,
    q: np.ndarray,
    nkey: int,
    cstart: np.ndarray,
    cend: np.ndarray,
    cand_e: np.ndarray,
) -> Groups | None:
    """The accumulated values of each key at each of its interesting epochs, as groups by candidate.

    ``hist`` holds a key's updates (key ``q[i]`` for row ``i``); candidate ``c`` of key ``k`` lies in
    ``[cstart[k], cend[k])`` with epoch ``cand_e[c]``. The value rows of the key with nonzero accumulated
    multiplicity at ``cand_e[c]`` form group ``c``.
    """
    vcols, vvalid = hist.select(range(nkey, hist.arity))
    epochs = hist.times[:, 0]
    vkeys = sort_keys(vcols, vvalid, None)
    single = bool(np.all(cend - cstart == 1))
    order = lexsort([q] + vkeys + ([] if single else [epochs]))
    qs = q[order]
    ds = hist.diffs[order]
    starts = group_starts([qs] + [k[order] for k in vkeys], len(qs))
    sidx = np.flatnonzero(starts)
    gq = qs[sidx]
    if single:
        # one interesting epoch per key, not before any of its history: the totals are the accumulations
        acc = np.add.reduceat(ds, sidx) if len(sidx) else ds[:0]
        nz = acc != 0
        rep = order[sidx[nz]]
        return Groups(
            cstart[gq[nz]],
            tuple(x[rep] for x in vcols),
            tuple(None if m is None else m[rep] for m in vvalid),
            acc[nz],
        )
    es = epochs[order]
    gid = np.cumsum(starts) - 1
    cs = np.cumsum(ds)
    base = (cs[sidx] - ds[sidx])[gid]
    within = cs - base
    pg, c = expand_ranges(cstart[gq], cend[gq])
    if len(pg) == 0:
        return None
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
    reorder = np.lexsort((pg, c))
    pg, c, acc = pg[reorder], c[reorder], acc[reorder]
    rep = order[sidx[pg]]
    return Groups(
        c,
        tuple(x[rep] for x in vcols),
        tuple(None if m is None else m[rep] for m in vvalid),
        acc,
    )
