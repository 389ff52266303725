"""A database directory: checkpoints of the engine's state, and the write-ahead log of the commits after them.

``DIR/manifest-N.json`` (the two newest kept) names a checkpoint: the catalog as the events that made it (each
table, view and index with its SQL, each view dropped while others still read it, each view stopped), per
table and per dataflow the files of its state (see ``ivm.engine.checkpoint``), the string pool, the time, the
sources' positions and the log segment replay starts at. ``DIR/data/`` holds those files, ``DIR/wal/`` the log.

Opening reads the newest manifest that is whole (an older one if the newest is damaged), loads the string
pool, replays the catalog's events on empty tables (the same SQL in the same order builds the same
dataflows), and gives every table and dataflow its saved state: nothing is recomputed. A dataflow built
otherwise than when it was saved (the engine changed) cannot take saved state: then every view is built again
from the tables' saved rows, and the log says so. Then the log's commits are replayed and, if there were any,
a checkpoint is taken.

A commit is logged before it returns; a change of the catalog (DDL, a view that stopped) takes a checkpoint
instead, as does a log grown past ``checkpoint_bytes`` or holding commits older than ``checkpoint_interval``
seconds (those in the background). A checkpoint writes only what no kept manifest names
yet (batches are immutable; a merge's result is a new file), starts a new log segment, writes the manifest
(temporary name, sync, rename), and deletes the files, manifests and segments no kept manifest needs.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import logging
import os
import threading
import time
import uuid
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from sqlglot import exp

from ivm.db import ddl, parsing, state, transactions, wal
from ivm.engine import checkpoint
from ivm.engine.batch import Batch, consolidate
from ivm.engine.files import (
    StoredFile,
    Written,
    is_local,
    join,
    listdir,
    makedirs,
    read_ahead,
    read_arrays,
    read_table,
    read_whole,
    remove,
    resolve,
    sync_dir,
    write_arrays,
    write_bytes,
    write_table,
)
from ivm.engine.trace.files import FORMAT, read_batch
from ivm.errors import OperationalError

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["Store", "ENGINE", "open_database", "Versions"]

log = logging.getLogger("ivm.storage")

KEEP = 2  # manifests kept: the newest, and the one before should the newest be unreadable


def _engine_digest() -> str:
    """A digest of the source of everything that decides how views compile and what state means."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256(f"format {FORMAT}".encode())
    for part in ("sql", "planner", "ivm/engine", "ivm/db"):
        for f in sorted((root / part).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


ENGINE = _engine_digest()


class Store:
    """The directory of one open database: where checkpoints and the log go."""

    def __init__(
        self,
        path: str,
        synchronous: bool = True,
        checkpoint_bytes: int = 64 << 20,
        checkpoint_interval: float = 300.0,
        keeps_log: bool = True,
    ) -> None:
        self.local = is_local(path)
        self.keeps_log = keeps_log  # off for ``Versions``, whose caller keeps its own log of inputs
        self.path = resolve(path)[1] if self.local else path  # a local path, or the URI of an object store's
        self.data = join(self.path, "data")
        self.wal = join(self.path, "wal")
        self.synchronous = synchronous
        self.checkpoint_bytes = checkpoint_bytes
        self.checkpoint_interval = checkpoint_interval
        self._since = time.monotonic()  # when the last checkpoint was taken
        self.written = Written()  # the files of what earlier checkpoints wrote
        self.log: wal.Log | wal.ObjectLog | None = None
        self.number = 0  # the newest manifest written
        self._allocated = 0  # the newest manifest number given to a checkpoint (which may be under way)
        self.version = -1  # the catalog version the newest checkpoint holds
        self.logged = 0  # string codes below this are in the checkpoint or the log
        self.checkpoint_seconds: list[float] = []
        self.stalls: list[float] = []  # what each checkpoint in the background held its commit up for
        self._thread: threading.Thread | None = None
        self.group: list[bytes] | None = None  # the frames of an open commit group, written at its end
        # the sources' positions a crash of the machine keeps (with the time they are at): those of the newest
        # checkpoint written, or of the last commit logged and synced, whichever is newer
        self.durable: tuple[int, dict] = (-1, {})
        self._logged: tuple[int, dict] = (-1, {})  # those of the last commit logged
        self._durable_lock = threading.Lock()
        self._lock = None
        self._manifests: dict[int, dict] = {}  # those this connection wrote, by number: not read back
        self._owner: str | None = None  # on an object store: the token this connection wrote in ``owner``

    # -- writing ----------------------------------------------------------------------------------------
    def committed(self, db: Connection, batches: list[tuple[str, Batch]], start: int) -> None:
        """A commit (transactions from time ``start`` to ``db.time``) happened: log it before it returns (at
        the end of an open commit group), or take a checkpoint if the catalog changed."""
        if db.version != self.version:
            if self.group is None:  # in a group, the checkpoint waits for its end
                self._log(db, [], "the commit")
            return
        strings = None
        if len(db.pool) > self.logged:
            strings = (self.logged, *db.pool.added_since(self.logged))
        rows = [(name, b) for name, b in batches if len(b)]
        frame = wal.commit_frame(start, db.time, db.positions, strings, rows, _moved(db))
        self.logged = len(db.pool)
        if self.group is not None:
            self.group.append(frame)
        else:
            self._log(db, [frame], "the commit")

    def sequences_moved(self, db: Connection) -> None:
        """Outside a transaction, sequences that moved without a commit (in a statement that failed, or a
        transaction rolled back) go to the log, in a commit of no rows: a value handed out is not handed out
        again after a crash, as in PostgreSQL."""
        if db.in_transaction or not db.sequence_changes or db.version != self.version:
            return
        frame = wal.commit_frame(db.time, db.time, db.positions, None, [], _moved(db))
        if self.group is not None:
            self.group.append(frame)
        else:
            self._log(db, [frame], "a sequence")

    def end_group(self, db: Connection, whole: bool) -> None:
        """A commit group ends: its commits go to the log in one append (a checkpoint, if the catalog
        changed or the log is full). A group that is not ``whole`` writes nothing, which leaves the connection
        ahead of its directory: it breaks, and the directory reopens as it was before the group."""
        frames, self.group = self.group, None
        if not whole:
            if frames or db.version != self.version:
                db.broken = "a commit group ended with an error, and its commits were not written"
            return
        self._log(db, [wal.group_frame(frames), *frames] if frames else [], "a commit group")

    def _log(self, db: Connection, frames: list[bytes], what: str) -> None:
        """Append ``frames`` to the log, or take a checkpoint instead if the catalog changed; then one in the
        background if the log asks for it. A log that cannot be written breaks the connection: its state is
        ahead of what a restart would find."""
        try:
            if db.version != self.version:
                return self.checkpoint(db)
            if frames:
                self._still_owned()  # on an object store: another connection may have opened the database
                self.log.append(frames)
                self._appended(db)
            if self._due():
                self.checkpoint(db, background=True)
        except (OSError, OperationalError) as err:
            db.broken = f"{what} could not be made durable: {err}"
            raise OperationalError(f"{db.broken}; the database cannot be used any more") from err

    def _appended(self, db: Connection) -> None:
        self._logged = (db.time, dict(db.positions))
        if self.synchronous:
            self._made_durable(self._logged)

    def _made_durable(self, at: tuple[int, dict]) -> None:
        with self._durable_lock:  # the thread writing a checkpoint calls this too
            if at[0] >= self.durable[0]:  # a checkpoint written in the background may be older than a sync
                self.durable = at

    def sync(self) -> None:
        """Make every commit logged so far durable (for ``synchronous=False``: one sync for many commits)."""
        self.log.sync()
        self._made_durable(self._logged)

    def changed(self, db: Connection) -> None:
        """Outside a transaction and a commit group, a catalog change since the last checkpoint takes one."""
        if not db.in_transaction and self.group is None and db.version != self.version:
            self._log(db, [], "a change of the catalog")

    def checkpoint(self, db: Connection, background: bool = False, number: int | None = None) -> None:
        """Write the database's state and a manifest naming it (see the module's docstring). In the
        ``background`` the commit that asked for it waits only for the state to be taken (batches by
        reference, copies of what changes in place) and a new log segment; another thread writes the files
        and the manifest. A checkpoint under way finishes before another begins. ``number`` names the
        manifest (``Versions``) instead of the next number."""
        self.wait()
        if db.in_transaction or any(db.pending.values()):
            raise OperationalError("a checkpoint cannot be taken inside a transaction")
        t0, self._since = time.perf_counter(), time.monotonic()
        tables = {name: list(st.arranged.op.trace.batches()) for name, st in db.tables.items()}
        dataflows = {}
        for df in db.engine.dataflows:
            if df is db.base:
                continue
            if df.name in dataflows:
                raise OperationalError(f"two dataflows are named {df.name!r}")
            dataflows[df.name] = checkpoint.capture(df, self.written)
        pool = db.pool.at_rest()
        serial = next(db.serial)
        db.serial = itertools.count(serial)
        manifest = {
            "format": FORMAT,
            "engine": ENGINE,
            "time": db.time,
            "serial": serial,
            "version": db.version,
            "positions": json.loads(json.dumps(db.positions)),
            "catalog": _events(db),
            "sequences": {name: dict(st.sequences) for name, st in db.tables.items() if st.sequences},
        }
        db.sequence_changes.clear()
        if self.log is None:
            manifest["wal"] = 1 if self.keeps_log else 0
        else:
            manifest["wal"] = self.log.roll()
        if number is None:
            number = max(self.number, self._allocated) + 1
        self._allocated = number
        self.version = db.version
        if background:  # the strings it holds are logged again after it, should it never be written
            self.stalls.append(time.perf_counter() - t0)
            work = (manifest, tables, dataflows, pool, number, t0)
            self._thread = threading.Thread(target=self._write_in_background, args=work, daemon=True)
            self._thread.start()
            return
        self._write(manifest, tables, dataflows, pool, number, t0)
        if self.log is None and self.keeps_log:
            self.log = wal.open_log(self.wal, manifest["wal"], self.synchronous)
        self.logged = len(pool[3])

    def _due(self) -> bool:
        """Whether the log asks for a checkpoint: past ``checkpoint_bytes``, or holding commits older than
        ``checkpoint_interval`` seconds; not while one is written."""
        if self.writing() or not self.log.bytes:
            return False
        old = time.monotonic() - self._since >= self.checkpoint_interval
        return old or self.log.bytes >= self.checkpoint_bytes

    def writing(self) -> bool:
        """Whether a checkpoint is under way in the background (a full log then waits for the next commit)."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        """Let a checkpoint under way in the background finish."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _write_in_background(self, *work) -> None:
        try:
            self._write(*work)
        except Exception as err:  # the log still holds every commit since the last checkpoint written
            log.error("%s: a checkpoint could not be written: %s", self.path, err)

    def _write(self, manifest: dict, tables: dict, dataflows: dict, pool: tuple, number: int, t0: float):
        """Write what ``checkpoint`` took: the files no kept manifest names yet, then the manifest."""
        self._still_owned()
        makedirs(self.data)
        manifest["tables"] = {
            name: checkpoint.write_batches(batches, self.data, self.written) for name, batches in tables.items()
        }
        manifest["dataflows"] = {}
        for name, captured in dataflows.items():
            saved = checkpoint.write(captured, self.data, self.written)
            saved["fingerprint"] = _fingerprint(saved["shape"])
            manifest["dataflows"][name] = saved
        manifest["pool"] = self._save_pool(*pool)
        sync_dir(self.data)
        _write_manifest(self.path, number, manifest)
        self._manifests[number] = manifest
        self.number = number
        self._made_durable((manifest["time"], manifest["positions"]))
        self._collect()
        self.checkpoint_seconds.append(time.perf_counter() - t0)

    def _save_pool(self, chunks: list, starts: list, tiers: list, canon) -> dict:
        files = []
        for chunk, start, tier in zip(chunks, starts, tiers, strict=True):
            file = self.written.get(chunk)
            if file is None:
                file = self.written.put(chunk, write_table(pa.table({"s": chunk}), self._new_file()))
            files.append({"file": file.to_json(), "start": start, "tier": tier})
        canon_file = write_arrays({"canon": canon}, self._new_file())
        return {"chunks": files, "canon": canon_file.to_json(), "size": int(len(canon))}

    def _new_file(self) -> str:
        return join(self.data, f"{uuid.uuid4().hex}.arrow")

    def _collect(self) -> None:
        """Delete manifests beyond the newest ``KEEP`` that read whole (and any that do not), and the files and
        log segments none of those needs."""
        kept: list[dict] = []
        for n in reversed(_manifest_numbers(self.path)):
            try:
                m = self._manifests.get(n) or _read_manifest(self.path, n) if len(kept) < KEEP else None
            except OperationalError:
                m = None
            if m is None:
                remove(_manifest_path(self.path, n))
                self._manifests.pop(n, None)
            else:
                kept.append(m)
        for name in listdir(self.path):
            if name.startswith("manifest-") and name.endswith(".tmp"):
                remove(join(self.path, name))
        needed = set().union(*(_files_of(m) for m in kept))
        for name in listdir(self.data):
            full = join(self.data, name)
            if full not in needed:
                remove(full)
        self.written.keep(_files_of(kept[0]))
        if not self.keeps_log:
            return
        first_segment = min(m["wal"] for m in kept)
        for s in wal.segments(self.wal):
            if s < first_segment:
                wal.remove_segment(self.wal, s)

    def close(self, db: Connection) -> None:
        """A clean stop: a last checkpoint (nothing to replay at the next open), then release the directory."""
        try:
            if not db.broken and not db.in_transaction:
                self.checkpoint(db)
        finally:
            self.wait()  # nothing may write in the directory once it is released
            if self.log is not None:
                self.log.close()
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

    # -- opening ----------------------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the directory for this process: a second connection to it is refused. An object store
        cannot lock: there the connection writes a token of its own in ``owner``, and a commit or checkpoint
        finding another's token there (a second connection opened the database since) refuses to write."""
        if not self.local:
            makedirs(self.path)
            self._owner = uuid.uuid4().hex
            write_bytes(self._owner.encode(), join(self.path, "owner"))
            return
        os.makedirs(self.path, exist_ok=True)
        fd = os.open(os.path.join(self.path, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise OperationalError(f"database {self.path} is in use by another connection") from None
        self._lock = fd

    def _still_owned(self) -> None:
        if self._owner is not None and read_whole(join(self.path, "owner")).decode() != self._owner:
            raise OperationalError(
                f"database {self.path} was opened by another connection since this one opened it: "
                "a database on an object store takes one connection at a time"
            )


def open_database(
    db: Connection,
    path: str,
    synchronous: bool = True,
    checkpoint_bytes: int = 64 << 20,
    checkpoint_interval: float = 300.0,
) -> None:
    """Make ``db`` (new, empty) the database in directory ``path``, created if it holds none."""
    store = Store(path, synchronous, checkpoint_bytes, checkpoint_interval)
    store.lock()
    try:
        numbers = _manifest_numbers(store.path)
        if not numbers:
            if wal.segments(store.wal):
                raise OperationalError(
                    f"{store.path} holds a log but no checkpoint: it is not a whole database"
                )
            makedirs(store.data)
            store.checkpoint(db)
            db.store = store
            return
        manifest, number = _newest_manifest(store.path, numbers)
        store.number = numbers[-1]
        rebuilt = _load_checkpoint(db, store, manifest)
        with db.pool.active():  # a new pool, if the views were built again
            replayed = _replay(db, store, manifest)
        store.version = manifest["version"] if not rebuilt else -1
        store.logged = len(db.pool)
        store.log = wal.open_log(store.wal, max([manifest["wal"], *wal.segments(store.wal)]), store.synchronous)
        db.store = store
        if replayed or rebuilt or number != numbers[-1]:
            with db.pool.active():
                store.checkpoint(db)
    except BaseException:
        if store.log is not None:
            store.log.close()
        if store._lock is not None:
            os.close(store._lock)
        raise


def _load_checkpoint(db: Connection, store: Store, manifest: dict) -> bool:
    """Give ``db`` (new and empty, its engine's sharding set if any) the state ``manifest`` names: every table
    and dataflow its saved state, or, if the engine or a plan changed since, the tables' rows from which every
    view is computed again (said in the log). Whether the views were computed again."""
    if manifest["format"] != FORMAT:
        raise OperationalError(f"{store.path} holds format {manifest['format']}, this ivm reads {FORMAT}")
    if manifest["engine"] == ENGINE:
        try:
            with db.pool.active(), read_ahead(_stored_files(manifest)):
                _restore(db, store, manifest, hydrate=True)
            return False
        except checkpoint.Mismatch as err:
            log.warning("%s: %s; building every view again from the tables", store.path, err)
    else:
        log.warning("%s was written by another version of ivm: building every view again", store.path)
    sharding = db.engine.sharding
    db._reset()
    db.engine.sharding = sharding
    store.written = Written()
    with db.pool.active():  # the new pool
        _restore(db, store, manifest, hydrate=False)
    return True


def _restore(db: Connection, store: Store, manifest: dict, hydrate: bool) -> None:
    """Build the catalog again by its events and give it the saved state: every table and dataflow its own
    (``hydrate``), or the tables their rows, from which the views are computed again."""
    _load_pool(db, store, manifest["pool"])
    db.time = manifest["time"] if hydrate else 1
    for ev in manifest["catalog"]:
        _replay_event(db, store, manifest, ev, hydrate)
    if hydrate:
        for name, st in db.tables.items():
            checkpoint.load_trace(st.arranged.op, manifest["tables"][name], store.written)
        for df in db.engine.dataflows:
            if df is db.base:
                continue
            saved = manifest["dataflows"].get(df.name)
            if saved is None:
                raise checkpoint.Mismatch(f"dataflow {df.name!r} has no saved state")
            if saved["fingerprint"] != _fingerprint(checkpoint.shape(df)):
                raise checkpoint.Mismatch(f"dataflow {df.name!r} is built differently")
            checkpoint.load(df, saved, store.written)
    db.time = max(db.time, manifest["time"])
    for name, sequences in manifest.get("sequences", {}).items():
        db.tables[name].sequences.update(sequences)
    db.sequence_changes.clear()
    for st in db.tables.values():
        st.input.advance_to(db.time)
    for df in db.engine.dataflows:
        checkpoint.resume(df, db.time)
    if not hydrate:
        db.engine.step()
    db.positions = dict(manifest["positions"])
    db.serial = itertools.count(manifest["serial"])
    db.seq = itertools.count(manifest["version"] + 1)
    db.version = manifest["version"]


def _replay_event(db: Connection, store: Store, manifest: dict, ev: dict, hydrate: bool) -> None:
    kind, seq = ev["kind"], ev["seq"]
    if kind == "table":
        ddl.create_table(db, parsing.parse(ev["sql"])[0], replayed=True)
        st = db.tables[ev["name"]]
        st.created = seq
        if not hydrate:
            _fill_table(db, st, manifest["tables"][ev["name"]])
    elif kind == "view":
        name = exp.to_identifier(ev["name"]).sql(dialect="postgres")
        ddl.create_view(db, parsing.parse(f"CREATE VIEW {name} AS {ev['sql']}")[0])
        db.views[ev["name"]].created = seq
    elif kind == "index":
        ddl.create_index(db, parsing.parse(ev["sql"])[0])
        db.index_sql[ev["name"]] = (seq, ev["sql"])
    elif kind == "stop":
        st = db.views[ev["name"]]
        if not st.df.dropped:
            st.df.fail(RuntimeError(ev["error"]))
            db.registry.forget(ev["name"])
        st.error = ev["error"]
        st.stopped = seq
    elif kind == "drop":
        db.serial = itertools.count(ev["number"])
        ddl._drop_view(db, ev["name"])
        for st in db.retained.values():
            if st.view.name == ev["name"] and st.dropped is not None and st.dropped[1] == ev["number"]:
                st.dropped = (seq, ev["number"])
    else:
        raise OperationalError(f"{store.path}: unknown catalog event {kind!r}")


def _fill_table(db: Connection, st: state.TableState, files: list[dict]) -> None:
    """Insert a table's saved rows through its input, as one transaction."""
    batches = [read_batch(StoredFile.from_json(f)).updates for f in files]
    if not batches:
        return
    u = Batch.concat(batches)
    rows, _ = consolidate(u.with_times(np.zeros((len(u), 1), np.int64)))
    width = len(st.table.columns)
    inv = state.table_order(st.table, width, st.arranged.nkey)
    b = Batch(
        tuple(rows.columns[i] for i in inv),
        tuple(rows.valid[i] for i in inv),
        np.full((len(rows), 1), db.time, np.int64),
        rows.diffs,
    )
    st.input.send(b)
    transactions.advance(db)
    db.engine.step()


def _load_pool(db: Connection, store: Store, saved: dict) -> None:
    chunks, starts, tiers = [], [], []
    for c in saved["chunks"]:
        file = StoredFile.from_json(c["file"])
        columns, _ = read_table(file, "strings")
        chunk = columns["s"]
        store.written.put(chunk, file)
        chunks.append(chunk)
        starts.append(int(c["start"]))
        tiers.append(int(c["tier"]))
    arrays, _ = read_arrays(StoredFile.from_json(saved["canon"]), "string codes")
    db.pool.load(chunks, starts, tiers, arrays["canon"])


def _replay(db: Connection, store: Store, manifest: dict) -> int:
    """Apply the commits logged after the checkpoint, as they were committed; how many there were."""
    commits = wal.read_log(store.wal, manifest["wal"])
    for c in commits:  # first every string they name, at the codes the log gave them
        for start, strings, canonical in c.strings:
            if start > len(db.pool):
                raise OperationalError(
                    f"{store.wal}: the log's strings start at code {start}, the checkpoint's pool ends at "
                    f"{len(db.pool)}: the log does not follow the checkpoint"
                )
            known = len(db.pool) - start  # logged again after a checkpoint in the background that holds them
            db.pool.extend(strings[known:], canonical[known:])
    for c in commits:
        for name, sequences in c.sequences.items():
            db.tables[name].sequences.update(sequences)
        offset = db.time - c.start
        for name, b in c.rows:
            st = db.tables.get(name)
            if st is None:
                raise OperationalError(f"{store.wal}: the log changes table {name!r}, which does not exist")
            st.input.send(b.with_times(b.times + offset))
        db.time = c.time + offset - 1
        transactions.advance(db)
        db.engine.step()
        transactions.stop_failed(db, db.engine.failed, report=False)
        db.positions = dict(c.positions)  # each commit holds them all
    return len(commits)


def _moved(db: Connection) -> dict:
    """The sequences that moved since the log last said (each table's, whole), which it now says."""
    moved = {n: dict(db.tables[n].sequences) for n in db.sequence_changes if n in db.tables}
    db.sequence_changes.clear()
    return moved


def _events(db: Connection) -> list[dict]:
    """The catalog as the events that made it, in order."""
    events = [{"kind": "table", "name": n, "sql": st.sql, "seq": st.created} for n, st in db.tables.items()]
    for name, (seq, sql) in db.index_sql.items():
        events.append({"kind": "index", "name": name, "sql": sql, "seq": seq})
    for st in [*db.views.values(), *db.retained.values()]:
        name = st.view.name
        events.append({"kind": "view", "name": name, "sql": st.view.sql, "seq": st.created})
        if st.stopped is not None:
            events.append({"kind": "stop", "name": name, "error": st.error, "seq": st.stopped})
        if st.dropped is not None:
            events.append({"kind": "drop", "name": name, "number": st.dropped[1], "seq": st.dropped[0]})
    return sorted(events, key=lambda e: e["seq"])


def _fingerprint(shape: str) -> str:
    return hashlib.sha256(f"{ENGINE}:{shape}".encode()).hexdigest()


def _stored_files(obj) -> list[StoredFile]:
    """Every file a manifest (or part of one) names."""
    if isinstance(obj, dict):
        if obj.keys() == {"path", "size", "crc32"}:
            return [StoredFile.from_json(obj)]
        return [f for v in obj.values() for f in _stored_files(v)]
    if isinstance(obj, list):
        return [f for v in obj for f in _stored_files(v)]
    return []


def _files_of(manifest: dict) -> set[str]:
    """The paths of every data file a manifest names."""
    return {f.path for f in _stored_files(manifest)}


def _paths(obj, fn):
    """``obj`` (a manifest, or part of one) with ``fn`` applied to the path of every file it names."""
    if isinstance(obj, dict):
        if obj.keys() == {"path", "size", "crc32"}:
            return {**obj, "path": fn(obj["path"])}
        return {k: _paths(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_paths(v, fn) for v in obj]
    return obj


def _manifest_path(directory: str, number: int) -> str:
    return join(directory, f"manifest-{number:012d}.json")


def _manifest_numbers(directory: str) -> list[int]:
    names = [n for n in listdir(directory) if n.startswith("manifest-") and n.endswith(".json")]
    return sorted(int(n[9:-5]) for n in names if n[9:-5].isdigit())


def _relative(path: str, directory: str) -> str:
    """A file's path relative to the database's directory, which may move (or be copied elsewhere)."""
    if "://" not in directory:
        return os.path.relpath(path, directory)
    base = directory.partition("?")[0].rstrip("/") + "/"
    inner = path.partition("?")[0]
    if not inner.startswith(base):
        raise OperationalError(f"{path} is not inside the database {directory}")
    return inner[len(base) :]


def _write_manifest(directory: str, number: int, manifest: dict) -> None:
    relative = _paths(manifest, lambda p: _relative(p, directory))
    body = json.dumps(relative, separators=(",", ":")).encode()
    write_bytes(body + f"\n{zlib.crc32(body):08x}\n".encode(), _manifest_path(directory, number))
    sync_dir(directory)


def _read_manifest(directory: str, number: int) -> dict:
    path = _manifest_path(directory, number)
    try:
        data = read_whole(path)
        body, crc, _ = data.rsplit(b"\n", 2)
        if int(crc, 16) != zlib.crc32(body):
            raise ValueError("its checksum differs from the one written")
        return _paths(json.loads(body), lambda p: join(directory, *p.split("/")))
    except (OSError, ValueError) as err:
        raise OperationalError(f"{path} is damaged: {err}") from None


def _newest_manifest(directory: str, numbers: list[int]) -> tuple[dict, int]:
    """The newest manifest that reads whole (an older one, with a warning, if the newest does not)."""
    errors = []
    for n in reversed(numbers[-KEEP:]):
        try:
            return _read_manifest(directory, n), n
        except OperationalError as err:
            log.warning("%s", err)
            errors.append(str(err))
    raise OperationalError("; ".join(errors))


class Versions:
    """A database's state as checkpoints the caller numbers, with no log: for a caller that keeps its own log of
    inputs and applies them in numbered steps (the sharded Spark engine numbers a shard's checkpoints by
    micro-batch, whose routed rows it keeps). ``save`` writes the state as number n; ``load`` gives a new
    connection the newest state numbered at most n and deletes those above it, which belong to steps that
    were not recorded (a step retried, or replayed after a restart). The files are those of a database
    directory, checked as there; the newest two checkpoints are kept."""

    def __init__(self, path: str) -> None:
        self.store = Store(path, keeps_log=False)

    def numbers(self) -> list[int]:
        return _manifest_numbers(self.store.path)

    def save(self, db: Connection, number: int) -> None:
        """Write ``db``'s state (at rest, outside a transaction) as checkpoint ``number``."""
        with db.pool.active():
            self.store.checkpoint(db, number=number)

    def newest(self, at_most: int) -> tuple[dict, int] | None:
        """The newest checkpoint numbered at most ``at_most`` that reads whole, and its number (None if there
        is none); those numbered above it are deleted first."""
        for n in self.numbers():
            if n > at_most:
                remove(_manifest_path(self.store.path, n))
        numbers = self.numbers()
        return _newest_manifest(self.store.path, numbers) if numbers else None

    def load(self, db: Connection, manifest: dict, number: int) -> None:
        """Make ``db`` (new and empty, its engine's sharding set if any) the state of checkpoint ``number``
        (``manifest``, from ``newest``). A state saved by another version of ivm, or with other plans, gives
        its tables' rows, from which every view is computed again, as at the opening of a database
        directory."""
        store = self.store
        store.number = store._allocated = number
        _load_checkpoint(db, store, manifest)
        store.version = db.version
        store.logged = len(db.pool)
