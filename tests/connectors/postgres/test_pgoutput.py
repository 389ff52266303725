"""The pgoutput decoder on hand-built messages (the layouts of the Postgres 15 protocol documentation)."""

from __future__ import annotations

import struct

import pytest

from connectors.postgres._pgoutput import (
    DELETE,
    INSERT,
    PG_EPOCH_US,
    UPDATE,
    DecodeError,
    Decoder,
    format_lsn,
    parse_lsn,
)


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _tuple(*values) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v == "<unchanged>":
            out += b"u"
        else:
            out += b"t" + struct.pack(">i", len(v.encode())) + v.encode()
    return out


RELATION = (
    b"R"
    + struct.pack(">I", 77)
    + _s("public")
    + _s("t")
    + b"d"
    + struct.pack(">h", 2)
    + b"\1"
    + _s("id")
    + struct.pack(">Ii", 23, -1)
    + b"\0"
    + _s("v")
    + struct.pack(">Ii", 25, -1)
)


def _begin(xid: int) -> bytes:
    return b"B" + struct.pack(">QqI", 0x100, 5, xid)


def _commit(end: int, ts: int) -> bytes:
    return b"C" + struct.pack(">bQQq", 0, end - 8, end, ts)


def test_a_transaction_of_every_change_kind():
    d = Decoder()
    msgs = [
        _begin(9),
        RELATION,
        b"I" + struct.pack(">I", 77) + b"N" + _tuple("1", "a"),
        b"U" + struct.pack(">I", 77) + b"N" + _tuple("1", None),
        b"U" + struct.pack(">I", 77) + b"K" + _tuple("1", None) + b"N" + _tuple("2", "<unchanged>"),
        b"D" + struct.pack(">I", 77) + b"K" + _tuple("2", None),
        _commit(0x2_0000_0010, 1_000_000),
    ]
    out = [d.feed(m) for m in msgs]
    assert out[:-1] == [None] * 6
    txn = out[-1]
    assert (txn.xid, txn.end_lsn, txn.rows) == (9, 0x2_0000_0010, 4)
    assert txn.commit_ts_us == PG_EPOCH_US + 1_000_000
    assert [r.name for r in d.new_relations] == ["t"]
    assert d.relations[77].columns == [("id", 23, -1, True), ("v", 25, -1, False)]
    ch = txn.changes[77]
    assert ch.ops == [INSERT, UPDATE, UPDATE, DELETE]
    assert ch.has_new == [True, True, True, False] and ch.has_old == [False, False, True, True]
    assert ch.new == [[b"1", b"1", b"2", None], [b"a", None, None, None]]
    assert ch.old == [[None, None, b"1", b"2"], [None, None, None, None]]
    assert ch.unchanged == [(2, 1)]


def test_truncate_drops_the_events_before_it():
    d = Decoder()
    d.feed(RELATION)
    d.feed(_begin(3))
    d.feed(b"I" + struct.pack(">I", 77) + b"N" + _tuple("1", "a"))
    d.feed(b"T" + struct.pack(">ib", 1, 0) + struct.pack(">I", 77))
    d.feed(b"I" + struct.pack(">I", 77) + b"N" + _tuple("5", "b"))
    ch = d.feed(_commit(64, 0)).changes[77]
    assert ch.truncated and ch.ops == [INSERT] and ch.new == [[b"5"], [b"b"]]


def test_malformed_streams_are_named():
    d = Decoder()
    with pytest.raises(DecodeError, match="unknown relation 77"):
        d.feed(_begin(1))
        d.feed(b"I" + struct.pack(">I", 77) + b"N" + _tuple("1", "a"))
    d.feed(RELATION)
    with pytest.raises(DecodeError, match="tuple has 1 columns, the relation 2"):
        d.feed(b"I" + struct.pack(">I", 77) + b"N" + _tuple("1"))
    with pytest.raises(DecodeError, match="unexpected pgoutput message 'Z'"):
        d.feed(b"Z")
    with pytest.raises(DecodeError, match="Commit message without Begin"):
        Decoder().feed(_commit(8, 0))


def test_lsn_text():
    assert format_lsn(0x16_B374D848) == "16/B374D848"
    assert parse_lsn("16/B374D848") == 0x16_B374D848
    assert parse_lsn(format_lsn(123)) == 123
