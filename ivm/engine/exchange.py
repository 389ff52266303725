"""Exchange: moving a collection's updates to the shard that owns their key.

In a sharded engine each of N engines (shards) holds the same dataflows, and every arrangement holds only the
keys whose hash falls to its shard. Wherever a collection is arranged by a key (or reduced by one), an
``ExchangeOp`` sends each update to the shard of its key and a ``ReceiveOp`` in that shard takes it in; every
other operator works on its shard's part alone. The shards step together through ``ivm.engine.sharded``,
which moves the exchanged updates between them through a ``Transport``.

An exchanged batch crosses as an Arrow record batch with its text as text: a string's code means something
only in the string pool of the process that made it, so text columns are decoded by the sender and interned
by the receiver. The shard of a key is a function of its values (text by its UTF-8 bytes), never of codes or
of Python's per-process string hash, so every process agrees on it.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.engine.batch import Batch, Mask, _bits, _mix
from ivm.engine.scope import Operator, Point, Scope
from ivm.engine.strings import POOL

__all__ = [
    "Sharding",
    "Transport",
    "ShardGroup",
    "Collective",
    "ExchangeOp",
    "ReceiveOp",
    "shard_of",
    "to_arrow",
    "from_arrow",
]

_SEED = np.uint64(0x9E3779B97F4A7C15)
_NULL = np.uint64(0x5BD1E9955BD1E995)


class Transport(Protocol):
    """The collective operations of a group of shards; every shard calls them in the same order."""

    def gather(self, value: Any) -> list[Any]:
        """Every shard's ``value`` (small: counts, frontiers, errors), in shard order."""

    def exchange(self, outgoing: list[list[Any]]) -> list[Any]:
        """Send ``outgoing[d]`` (exchanged record batches) to shard ``d``; what the shards sent this one."""

    def abort(self) -> None:
        """This shard cannot go on (an unexpected error): every shard's collectives fail from now on."""


@dataclass
class Sharding:
    """This engine is shard ``index`` of ``count``, stepping with the others through ``transport``."""

    index: int
    count: int
    transport: Transport
    exchanges: list[ExchangeOp] = field(default_factory=list)  # by id, the same in every shard
    sending: list[ExchangeOp] = field(default_factory=list)  # those with updates for other shards

    def register(self, op: ExchangeOp) -> int:
        self.exchanges.append(op)
        return len(self.exchanges) - 1


def text_hash(arr: pa.Array) -> np.ndarray:
    """A hash of each string of ``arr`` from its UTF-8 bytes (uint64; the same in every process)."""
    arr = arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    b = raw[lo:hi].astype(np.uint64)
    lengths = np.diff(offsets)
    position = np.arange(hi - lo, dtype=np.int64) - np.repeat(offsets[:-1] - lo, lengths)
    terms = _mix(b | (position.astype(np.uint64) << np.uint64(8)))
    sums = np.concatenate(([np.uint64(0)], np.cumsum(terms, dtype=np.uint64)))
    starts = offsets[:-1] - lo
    return _mix(sums[starts + lengths] - sums[starts] + lengths.astype(np.uint64) * _SEED)


def shard_of(
    columns: Sequence[np.ndarray], valid: Sequence[Mask], texts: Sequence[int], count: int, n: int
) -> np.ndarray:
    """The shard (0 .. count - 1) of each of ``n`` rows keyed by ``columns`` (positions ``texts`` hold text
    codes of the active pool): equal keys go to the same shard, whatever process computes it."""
    if count == 1 or not columns:
        return np.zeros(n, dtype=np.int64)
    h = np.full(n, _SEED, dtype=np.uint64)
    for i, (col, mask) in enumerate(zip(columns, valid, strict=True)):
        v = text_hash(_strings(col, mask)) if i in texts else _mix(_bits(col).view(np.uint64))
        if mask is not None:
            v = np.where(mask, v, _NULL)
        h = _mix(h * np.uint64(31) + v)
    return (h % np.uint64(count)).astype(np.int64)


def _strings(codes: np.ndarray, mask: Mask) -> pa.Array:
    """The strings of text ``codes`` (the empty string under a NULL)."""
    if mask is None:
        return POOL.strings(codes)
    strings = POOL.strings(codes[mask])
    index = np.full(len(codes), len(strings), dtype=np.int64)
    index[np.flatnonzero(mask)] = np.arange(len(strings))
    return pa.concat_arrays([strings, pa.array([""], pa.large_string())]).take(pa.array(index))


def to_arrow(batch: Batch, texts: Sequence[int]) -> pa.RecordBatch:
    """``batch`` as a record batch: columns ``c0..`` (text as strings), ``t0..`` (time coordinates) and
    ``diff``."""
    arrays, names = [], []
    for i, (col, mask) in enumerate(zip(batch.columns, batch.valid, strict=True)):
        nulls = None if mask is None else ~mask
        if i in texts:
            arrays.append(_with_nulls(_strings(col, mask), nulls))
        else:
            arrays.append(pa.array(col, mask=nulls))
        names.append(f"c{i}")
    for j in range(batch.times.shape[1]):
        arrays.append(pa.array(np.ascontiguousarray(batch.times[:, j])))
        names.append(f"t{j}")
    arrays.append(pa.array(batch.diffs))
    names.append("diff")
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _with_nulls(strings: pa.Array, nulls: np.ndarray | None) -> pa.Array:
    if nulls is None:
        return strings
    return pc.if_else(pa.array(nulls), pa.scalar(None, pa.large_string()), strings)


def from_arrow(rb: pa.RecordBatch, dtypes: Sequence[np.dtype], texts: Sequence[int]) -> Batch:
    """The batch ``to_arrow`` made, with text interned in the active pool."""
    columns, valid = [], []
    for i, dtype in enumerate(dtypes):
        arr = rb.column(i)
        mask = None
        if arr.null_count:
            mask = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if i in texts:
            columns.append(POOL.encode_arrow(arr))
        else:
            zero = pa.scalar(np.zeros(1, dtype)[0].item(), arr.type) if arr.null_count else None
            filled = arr.fill_null(zero) if arr.null_count else arr
            columns.append(np.asarray(filled.to_numpy(zero_copy_only=False), dtype=dtype))
        valid.append(mask)
    dim = rb.num_columns - len(dtypes) - 1
    times = np.stack(
        [rb.column(len(dtypes) + j).to_numpy(zero_copy_only=False) for j in range(dim)], axis=1
    ).astype(np.int64)
    diffs = rb.column(rb.num_columns - 1).to_numpy(zero_copy_only=False).astype(np.int64)
    return Batch.build(columns, valid, times, diffs)


class ExchangeOp(Operator):
    """Sends each update of its input to the shard of its first ``nkey`` columns: to its own shard's
    ``ReceiveOp`` directly, to the others through the transport (see ``ivm.engine.sharded``)."""

    def __init__(
        self, scope: Scope, source: Operator, nkey: int, dtypes: Sequence, texts: Sequence[int]
    ) -> None:
        super().__init__(scope, "exchange")
        self.sharding: Sharding = scope.dataflow.engine.sharding
        self.nkey = nkey
        self.dtypes = tuple(dtypes)
        self.texts = tuple(texts)
        self.id = self.sharding.register(self)
        self.input = self.new_queue()
        source.subscribe(self.input)
        self.receiver: ReceiveOp | None = None
        self.outbox: list[tuple[int, Point, pa.RecordBatch]] = []  # (shard, point, updates) to send

    def run(self, point: Point) -> None:
        batches = self.input.take(point)
        if not batches:
            return
        b = Batch.concat(batches)
        sh = self.sharding
        cols, valid = b.select(range(self.nkey))
        dest = shard_of(cols, valid, [t for t in self.texts if t < self.nkey], sh.count, len(b))
        order = np.argsort(dest, kind="stable")
        bounds = np.searchsorted(dest[order], np.arange(sh.count + 1))
        for d in range(sh.count):
            lo, hi = int(bounds[d]), int(bounds[d + 1])
            if lo == hi:
                continue
            part = b if hi - lo == len(b) else b.take(order[lo:hi])
            if d == sh.index:
                self.receiver.input.put(point, part)
            else:
                if not self.outbox:
                    sh.sending.append(self)
                self.outbox.append((d, point, to_arrow(part, self.texts)))

    def deliver(self, point: Point, rb: pa.RecordBatch) -> None:
        """Updates another shard sent to this exchange's receiver here."""
        self.receiver.input.put(point, from_arrow(rb, self.dtypes, self.texts))


class ReceiveOp(Operator):
    """The updates of an exchange that fall to this shard, from every shard."""

    def __init__(self, scope: Scope, sender: ExchangeOp) -> None:
        super().__init__(scope, "receive")
        self.input = self.new_queue()
        self.sources.append(sender)
        sender.receiver = self

    def run(self, point: Point) -> None:
        batches = self.input.take(point)
        if batches:
            self.emit(Batch.concat(batches))


class Collective(Protocol):
    """Collective operations among the processes that host a group's shards (``ShardGroup``), numbered
    0 .. count - 1; every process calls them in the same order (see ``ivm.engine.collective``)."""

    index: int
    count: int

    def all_gather(self, message: bytes) -> list[bytes]:
        """Every process's ``message`` (small), in process order."""

    def all_to_all(self, outgoing: list[bytes]) -> list[bytes]:
        """Send ``outgoing[q]`` to process ``q`` (empty: nothing); what every process sent this one, in
        process order."""


class ShardGroup:
    """The shards of a group that run in this process, as threads, and the transport each steps with.

    With no ``collective`` every shard of the group is here (tests, and one machine's shards). With one, the
    group's ``count`` shards are spread over the collective's processes in order, each hosting a contiguous
    range (``hosted``): a collective call of the shards here is made once, by whichever thread arrives last,
    for all of them, and exchanged updates for shards elsewhere cross in one message per process."""

    def __init__(self, count: int, hosted: range | None = None, collective: Collective | None = None) -> None:
        self.count = count
        self.hosted = range(count) if hosted is None else hosted
        if collective is None and self.hosted != range(count):
            raise ValueError("shards hosted elsewhere need a collective to reach them")
        if not (0 <= self.hosted.start <= self.hosted.stop <= count and self.hosted.step == 1):
            raise ValueError(f"hosted shards {self.hosted} are not a range of 0 .. {count - 1}")
        self.collective = collective
        self._slots: list[Any] = [None] * len(self.hosted)
        self._results: list[Any] = []
        self._failure: BaseException | None = None
        self._combine: Any = None
        self._owner: list[int] | None = None  # the process hosting each shard
        self._barrier = threading.Barrier(max(len(self.hosted), 1), action=self._act)

    def transport(self, index: int) -> Transport:
        if index not in self.hosted:
            raise ValueError(f"shard {index} is not hosted here ({self.hosted})")
        return _GroupTransport(self, index)

    def abort(self) -> None:
        """Break the group: shards waiting in a collective raise ``threading.BrokenBarrierError``."""
        self._barrier.abort()

    @property
    def broken(self) -> bool:
        return self._barrier.broken

    def _act(self) -> None:
        try:
            self._results = self._combine(list(self._slots))
        except BaseException as err:
            self._failure = err
            raise

    def _all(self, local: int, value: Any, combine: Any) -> Any:
        """Every hosted shard's ``value`` combined (once, by the last to arrive) into one result per hosted
        shard: this one's."""
        self._slots[local] = value
        self._combine = combine
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            if self._failure is not None:
                raise self._failure from None
            raise
        out = self._results[local]
        self._barrier.wait()  # every shard has its result before any writes its slot again
        return out

    def _layout(self) -> list[int]:
        """The process hosting each shard of the group, learnt from every process at the first collective
        call (which every process makes at the same step)."""
        if self._owner is None:
            ranges = [pickle.loads(p) for p in self.collective.all_gather(pickle.dumps(self.hosted))]
            owner = [q for q, r in enumerate(ranges) for _ in r]
            if [i for r in ranges for i in r] != list(range(self.count)):
                raise RuntimeError(f"processes host shards {ranges}: not 0 .. {self.count - 1} in order")
            self._owner = owner
        return self._owner

    def _gather(self, values: list[Any]) -> list[list[Any]]:
        every = values
        if self.collective is not None:
            self._layout()
            parts = self.collective.all_gather(pickle.dumps(values))
            every = [v for p in parts for v in pickle.loads(p)]
        return [every] * len(values)

    def _exchange(self, outgoing: list[list[list[Any]]]) -> list[list[Any]]:
        """``outgoing[l][d]``: what hosted shard ``l`` sends shard ``d``; per hosted shard, what it receives,
        in the order of the shards that sent it."""
        lo = self.hosted.start
        received: list[list[tuple[int, list]]] = [[] for _ in self.hosted]  # (sender, items) per hosted shard
        if self.collective is not None:
            owner = self._layout()
            remote: list[list] = [[] for _ in range(self.collective.count)]
            for i, sent in enumerate(outgoing):
                for d, items in enumerate(sent):
                    if items and d not in self.hosted:
                        remote[owner[d]].append((lo + i, d, items))
            for payload in self.collective.all_to_all([pickle.dumps(r) if r else b"" for r in remote]):
                for src, d, items in pickle.loads(payload) if payload else ():
                    received[d - lo].append((src, items))
        for i, sent in enumerate(outgoing):
            for d in self.hosted:
                if sent[d]:
                    received[d - lo].append((lo + i, sent[d]))
        return [[item for _, items in sorted(r, key=_sender) for item in items] for r in received]


def _sender(received: tuple[int, list]) -> int:
    return received[0]


class _GroupTransport:
    def __init__(self, group: ShardGroup, index: int) -> None:
        self.group = group
        self.index = index
        self.local = index - group.hosted.start

    def gather(self, value: Any) -> list[Any]:
        return self.group._all(self.local, value, self.group._gather)

    def exchange(self, outgoing: list[list[Any]]) -> list[Any]:
        return self.group._all(self.local, outgoing, self.group._exchange)

    def abort(self) -> None:
        self.group.abort()
