"""The sidecar's durable state (``--state DIR``): the engine's tables and views in an ivm database directory,
and beside them what the sidecar knows that the engine does not.

``DIR`` is opened with ``ivm.connect(DIR)``: ivm logs every commit before it returns and checkpoints the
arrangements themselves, so a restart loads them and replays the log instead of reading a snapshot and
computing the views again. The rest travels in ``db.positions`` (``RECORD``), which ivm stores in the log
frame of every commit and in every checkpoint: it always describes the very engine state it is stored with.
It holds

- ``lsn``: every published source transaction that ends at or before it is in the state, none after;
- ``identity``: the source cluster, its timeline and database, the slot, the publication, the target schema
  when the target is the source database, and a digest of the views file; a state for anything else is not
  resumed;
- ``tables``, ``problems``, ``failed``, ``targets``: the source tables followed as they were read, the views
  that could not run or stopped (with why), and each running view's target table (columns, types, key);
- ``bad``: per table, the values ivm cannot hold (they put the views reading them in error);
- ``target`` and ``dirty``: the target LSN the sidecar last committed, and the views whose target tables may
  have changed since (when the target turns out to be at ``target`` after a crash, only those are replaced);
- ``pending``: a rebuild of some views under way (see ``sidecar._Rebuilding``);
- ``complete``: false while the state is being built or rebuilt (such a state is not resumed).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil

import pyarrow as pa

import ivm
from connectors.postgres._catalog import SourceTable
from connectors.postgres._changes import BadValues
from connectors.postgres._pgoutput import parse_lsn
from connectors.postgres._types import PgType, pg_type
from connectors.postgres.target import ViewTarget
from ivm.db.connection import Connection

__all__ = [
    "RECORD",
    "State",
    "digest",
    "load_bad",
    "table_json",
    "table_from_json",
    "target_json",
    "target_from_json",
]

log = logging.getLogger("ivm.sidecar")

RECORD = "postgres"  # the key of the sidecar's record in ``db.positions``
FORMAT = 1


def digest(text: str) -> str:
    """What tells a views file from another (its text's SHA-256): a state holds the views of one file."""
    return hashlib.sha256(text.encode()).hexdigest()


class State:
    """The state directory, and where its durable part has reached: ``lsn`` is the LSN the last commit (or
    checkpoint) recorded, ``durable`` the newest LSN known to survive a crash of the machine (every logged
    commit with ``synchronous``, else the last checkpoint's), ``target`` the target's LSN as last committed
    by this sidecar and ``dirty`` the views changed in the state since then."""

    def __init__(self, path: str, synchronous: bool = True, checkpoint_bytes: int = 64 << 20) -> None:
        self.path = os.path.abspath(path)
        self.synchronous = synchronous
        self.checkpoint_bytes = checkpoint_bytes
        self.lsn = 0
        self.durable = 0
        self.target: int | None = None
        self.dirty: set[str] = set()
        self.complete = False  # the record last noted describes whole views
        self._bad_cache: dict[int, tuple[object, str]] = {}  # table oid -> (its bad rows, their encoding)

    def open(self) -> Connection:
        """The database in the directory (created empty if it holds none)."""
        db = ivm.connect(self.path, synchronous=self.synchronous, checkpoint_bytes=self.checkpoint_bytes)
        return db

    def wipe(self, db: Connection | None = None) -> Connection:
        """Close ``db`` (if open), remove every file of the database from the directory and open it empty. The
        log goes first, then the manifests, then the data: a crash on the way leaves an older whole state, or
        none."""
        if db is not None:
            db.close()
        wal = os.path.join(self.path, "wal")
        shutil.rmtree(wal, ignore_errors=True)
        for name in sorted(os.listdir(self.path), reverse=True):
            if name.startswith("manifest-"):
                os.remove(os.path.join(self.path, name))
        shutil.rmtree(os.path.join(self.path, "data"), ignore_errors=True)
        self.lsn = self.durable = 0
        self.target, self.dirty = None, set()
        self.complete = False
        self._bad_cache = {}
        return self.open()

    def note(self, db: Connection, record: dict) -> None:
        """Make ``record`` the one the next commit or checkpoint stores."""
        db.positions[RECORD] = record

    def committed(self, db: Connection, lsn: int) -> None:
        """A commit recording ``lsn`` returned (or a checkpoint was taken): what is durable now (without
        ``synchronous``, the LSN of the newest checkpoint written, which may have run in the background)."""
        self.lsn = lsn
        record = db.store.durable[1].get(RECORD)
        if self.synchronous:
            self.durable = lsn
        elif record is not None:
            self.durable = max(self.durable, parse_lsn(record["lsn"]))

    def checkpoint(self, db: Connection, record: dict, lsn: int) -> None:
        """Store ``record`` in a checkpoint now."""
        self.note(db, record)
        db.store.checkpoint(db)
        self.committed(db, lsn)

    def bad_json(self, oid: int, bad: BadValues) -> dict | None:
        """A table's bad values as JSON (None when it has none); the rows' encoding is kept while they do not
        change (a new table each time they do)."""
        if not bad:
            return None
        rows = None
        if bad.rows is not None and bad.rows.num_rows:
            cached = self._bad_cache.get(oid)
            if cached is None or cached[0] is not bad.rows:
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, bad.rows.schema) as w:
                    w.write_table(bad.rows)
                cached = self._bad_cache[oid] = (bad.rows, base64.b64encode(sink.getvalue()).decode())
            rows = cached[1]
        return {"rows": rows, "counts": bad.counts, "keys": [list(k) for k in bad.keys]}


def load_bad(bad: BadValues, saved: dict | None) -> None:
    """Give ``bad`` the values saved by ``State.bad_json``."""
    bad.clear()
    if not saved:
        return
    if saved["rows"] is not None:
        bad.rows = pa.ipc.open_stream(pa.py_buffer(base64.b64decode(saved["rows"]))).read_all()
    bad.counts = {k: list(v) for k, v in saved["counts"].items()}
    bad.keys = {tuple(k): None for k in saved["keys"]}


def table_json(t: SourceTable) -> dict:
    """A followed table as the sidecar read it, as JSON."""
    return {
        "schema": t.schema,
        "name": t.name,
        "oid": t.oid,
        "columns": [[n, typ.oid, typ.typmod, typ.shown, nn] for n, typ, nn in t.columns],
        "primary_key": t.primary_key,
        "replica_identity": t.replica_identity,
        "unsupported": t.unsupported,
    }


def table_from_json(d: dict) -> SourceTable:
    """The table ``table_json`` gave (equal to the one read from the source, if it has not changed)."""
    unsupported = dict(d["unsupported"])
    cols = []
    for n, oid, typmod, shown, nn in d["columns"]:
        typ = PgType(oid, typmod, "", pa.string(), shown) if n in unsupported else pg_type(oid, typmod, shown)
        cols.append((n, typ, nn))
    return SourceTable(
        d["schema"], d["name"], d["oid"], cols, list(d["primary_key"]), d["replica_identity"], unsupported
    )


def target_json(v: ViewTarget) -> dict:
    """A view's target table (columns, Postgres types, key) as JSON."""
    return {"columns": v.columns, "pg_types": v.pg_types, "key": None if v.key is None else list(v.key)}


def target_from_json(name: str, d: dict) -> ViewTarget:
    """The target table ``target_json`` gave."""
    key = None if d["key"] is None else tuple(d["key"])
    return ViewTarget(name, list(d["columns"]), list(d["pg_types"]), key)
