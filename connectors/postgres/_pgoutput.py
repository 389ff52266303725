"""Decoding of pgoutput (protocol version 1) messages into per-transaction, per-relation column lists.

Each message is decoded once with ``struct`` over a memoryview; tuple values stay raw text bytes collected
column by column, so that converting them into typed Arrow arrays later is one vectorized step per column and
batch (see ``_types.text_to_arrow``). Message layouts follow the Postgres 15 "Logical Replication Message
Formats" chapter.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = [
    "Relation",
    "RelationChanges",
    "Transaction",
    "Decoder",
    "DecodeError",
    "INSERT",
    "UPDATE",
    "DELETE",
    "PG_EPOCH_US",
    "format_lsn",
    "parse_lsn",
]

INSERT, UPDATE, DELETE = 0, 1, 2
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">bQQq")


@dataclass
class Relation:
    """A relation as pgoutput describes it: columns are (name, type oid, typmod, part of the identity)."""

    oid: int
    schema: str
    name: str
    replica_identity: str
    columns: list[tuple[str, int, int, bool]]


@dataclass
class RelationChanges:
    """The changes of one relation in one transaction, in order. ``new[j]``/``old[j]`` hold column ``j``'s raw
    text values (``None`` for NULL or no tuple); ``has_new``/``has_old`` say which events carry which tuple
    (an update's old tuple is sent only for REPLICA IDENTITY FULL or when its key changed). ``unchanged`` lists
    (event, column) pairs of TOASTed values the update left unchanged and did not send. ``truncated``: the
    table was truncated in this transaction before these events."""

    ncols: int
    ops: list[int] = field(default_factory=list)
    has_new: list[bool] = field(default_factory=list)
    has_old: list[bool] = field(default_factory=list)
    new: list[list] = field(default_factory=list)
    old: list[list] = field(default_factory=list)
    unchanged: list[tuple[int, int]] = field(default_factory=list)
    truncated: bool = False

    def __post_init__(self) -> None:
        self.new = [[] for _ in range(self.ncols)]
        self.old = [[] for _ in range(self.ncols)]

    def __len__(self) -> int:
        return len(self.ops)


@dataclass
class Transaction:
    """One committed source transaction: ``end_lsn`` is where decoding resumes after it."""

    xid: int
    final_lsn: int
    commit_ts_us: int = 0  # microseconds since 1970-01-01
    end_lsn: int = 0
    changes: dict[int, RelationChanges] = field(default_factory=dict)
    rows: int = 0


class DecodeError(ValueError):
    pass


class Decoder:
    """Feeds messages in order; complete transactions come out of ``feed`` at their Commit."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self.current: Transaction | None = None
        # Relation messages received since the caller last looked (each decoding session resends them)
        self.new_relations: list[Relation] = []

    def feed(self, data: bytes | memoryview) -> Transaction | None:
        m = memoryview(data)
        kind = m[0]
        if kind == 0x42:  # B
            final_lsn, _ts, xid = _BEGIN.unpack_from(m, 1)
            self.current = Transaction(xid, final_lsn)
            return None
        if kind == 0x43:  # C
            _flags, _commit_lsn, end_lsn, ts = _COMMIT.unpack_from(m, 1)
            txn = self.current
            if txn is None:
                raise DecodeError("Commit message without Begin")
            txn.end_lsn = end_lsn
            txn.commit_ts_us = ts + PG_EPOCH_US
            self.current = None
            return txn
        if kind == 0x52:  # R
            self._relation(m)
            return None
        txn = self.current
        if kind in (0x49, 0x55, 0x44):  # I U D
            if txn is None:
                raise DecodeError("row change outside a transaction")
            relid = _U32.unpack_from(m, 1)[0]
            rel = self.relations.get(relid)
            if rel is None:
                raise DecodeError(f"row change for unknown relation {relid}")
            ch = txn.changes.get(relid)
            if ch is None:
                ch = txn.changes[relid] = RelationChanges(len(rel.columns))
            txn.rows += 1
            if kind == 0x49:
                if m[5] != 0x4E:
                    raise DecodeError("Insert without a new tuple")
                self._event(ch, INSERT, None, m, 6)
            elif kind == 0x55:
                tag = m[5]
                if tag in (0x4B, 0x4F):  # K or O: old tuple first
                    pos = self._tuple(ch.old, m, 6, None)
                    if m[pos] != 0x4E:
                        raise DecodeError("Update without a new tuple")
                    self._event(ch, UPDATE, True, m, pos + 1)
                elif tag == 0x4E:
                    self._event(ch, UPDATE, False, m, 6)
                else:
                    raise DecodeError(f"Update with unexpected tuple tag {chr(tag)!r}")
            else:
                if m[5] not in (0x4B, 0x4F):
                    raise DecodeError("Delete without an old tuple")
                self._tuple(ch.old, m, 6, None)
                ch.ops.append(DELETE)
                ch.has_old.append(True)
                ch.has_new.append(False)
                for col in ch.new:
                    col.append(None)
            return None
        if kind == 0x54:  # T
            if txn is None:
                raise DecodeError("Truncate outside a transaction")
            n = _I32.unpack_from(m, 1)[0]
            for i in range(n):
                relid = _U32.unpack_from(m, 6 + 4 * i)[0]
                rel = self.relations.get(relid)
                if rel is None:
                    raise DecodeError(f"Truncate of unknown relation {relid}")
                ch = RelationChanges(len(rel.columns))
                ch.truncated = True
                txn.changes[relid] = ch
            return None
        if kind in (0x59, 0x4F, 0x4D):  # Y (type), O (origin), M (message): nothing to apply
            return None
        raise DecodeError(f"unexpected pgoutput message {chr(kind)!r}")

    def _event(self, ch: RelationChanges, op: int, old: bool | None, m: memoryview, pos: int) -> None:
        if not old:
            for col in ch.old:
                col.append(None)
        ch.ops.append(op)
        ch.has_old.append(bool(old))
        ch.has_new.append(True)
        self._tuple(ch.new, m, pos, ch)

    @staticmethod
    def _tuple(cols: list[list], m: memoryview, pos: int, ch: RelationChanges | None) -> int:
        n = _I16.unpack_from(m, pos)[0]
        if n != len(cols):
            raise DecodeError(f"tuple has {n} columns, the relation {len(cols)}")
        pos += 2
        unpack = _I32.unpack_from
        for j in range(n):
            tag = m[pos]
            pos += 1
            if tag == 0x74:  # t
                ln = unpack(m, pos)[0]
                pos += 4
                cols[j].append(m[pos : pos + ln].tobytes())
                pos += ln
            elif tag == 0x6E:  # n
                cols[j].append(None)
            elif tag == 0x75:  # u: unchanged TOASTed value, not sent
                cols[j].append(None)
                if ch is not None:
                    ch.unchanged.append((len(ch.ops) - 1, j))
            else:
                raise DecodeError(f"unexpected column tag {chr(tag)!r} (binary values are not requested)")
        return pos

    def _relation(self, m: memoryview) -> None:
        relid = _U32.unpack_from(m, 1)[0]
        pos = 5
        schema, pos = _string(m, pos)
        name, pos = _string(m, pos)
        ident = chr(m[pos])
        pos += 1
        n = _I16.unpack_from(m, pos)[0]
        pos += 2
        cols = []
        for _ in range(n):
            flags = m[pos]
            pos += 1
            cname, pos = _string(m, pos)
            typoid, typmod = _U32.unpack_from(m, pos)[0], _I32.unpack_from(m, pos + 4)[0]
            pos += 8
            cols.append((cname, typoid, typmod, bool(flags & 1)))
        rel = Relation(relid, schema or "pg_catalog", name, ident, cols)
        self.relations[relid] = rel
        self.new_relations.append(rel)


def _string(m: memoryview, pos: int) -> tuple[str, int]:
    end = pos
    while m[end] != 0:
        end += 1
    return m[pos:end].tobytes().decode(), end + 1


def format_lsn(lsn: int) -> str:
    """An LSN as Postgres writes it (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
