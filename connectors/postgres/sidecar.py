"""``ivm sidecar``: keep views over Postgres tables up to date as tables in Postgres.

    ivm sidecar --source DSN --views FILE [--target DSN] [--slot NAME] [--publication NAME] [--schema NAME]
                [--state DIR [--no-sync]]

Without ``--state``, at start (and after any restart) the sidecar takes a new snapshot consistent with a new
replication slot, computes the views and makes every target table equal to them in one target transaction with
the slot's LSN. It then follows the slot: each batch of source transactions goes into the engine one transaction
per logical time, and the views' net changes go into the target in one transaction with the LSN reached; only
then is the slot advanced. A reader of the target sees whole source transactions only, and a crash at any
moment leaves the target at a committed LSN that the next start replaces atomically.

With ``--state DIR`` the engine's tables and views live in an ivm database directory (``ivm.connect(DIR)``;
see ``_state``). Each engine commit is logged, synced, before the target is written, together with the LSN it
reaches and what the sidecar knows beside the engine; the slot is advanced only to LSNs durable there (without
sync, to the state's last checkpoint, one being taken when the slot would otherwise send only what the state
has). A restart opens DIR and checks that the slot can send every transaction after the state's LSN (it exists,
has not lost its WAL, has not been advanced past that LSN, and the state was built for this source, slot,
publication and views file); then it follows the slot from there, with no snapshot and no recompute, skipping
the transactions the slot sends again up to the state's LSN. The target is brought to the state first: behind
it (the state committed a batch, the target not yet), the views that may have changed since the target's LSN
are replaced whole in one target transaction at the state's LSN; ahead of it (the state's last commits were
not synced and are lost), the changes of the transactions up to the target's LSN are not written again. A state
that cannot be resumed is said in the log, emptied and built again from a new snapshot.

When a followed table is altered, dropped or created, only the views naming it (and the views over those) are
rebuilt: the changed tables are read again from a snapshot of a temporary slot, the stream is read up to that
snapshot (the changed tables' changes it holds are skipped), and one target transaction then takes every view
from the state before to the state at the snapshot, the rebuilt ones replaced whole. Other views go on.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import psycopg
import pyarrow as pa

import ivm
from connectors.postgres._catalog import (
    ConfigError,
    SourceTable,
    columns_read,
    parse_views,
    resolve_tables,
    view_pg_types,
)
from connectors.postgres._changes import TableFeed, consolidate
from connectors.postgres._pgoutput import Decoder, Transaction, format_lsn, parse_lsn
from connectors.postgres._state import FORMAT as STATE_FORMAT
from connectors.postgres._state import (
    RECORD,
    State,
    digest,
    load_bad,
    table_from_json,
    table_json,
    target_from_json,
    target_json,
)
from connectors.postgres.source import SlotInUse, Source
from connectors.postgres.target import InUse, Target, ViewTarget, quote
from ivm.db.arrow import to_arrow_column
from ivm.db.subscribe import Subscription
from ivm.engine.allocator import tune_allocator
from ivm.errors import OperationalError
from planner.properties import unique_key
from sql.errors import SqlError

__all__ = ["Sidecar", "main"]

log = logging.getLogger("ivm.sidecar")

_POLL_MIN, _POLL_MAX = 0.001, 0.05  # seconds between polls finding nothing: doubling from one to the other

_IVM_TO_PG = {
    "float": "double precision",
    "text": "text",
    "date": "date",
    "timestamp": "timestamp without time zone",
    "interval": "interval",
    "bool": "boolean",
}


def _pg_type(t) -> str:
    """The PostgreSQL type of a target column holding ivm's type ``t``."""
    if t.kind == "decimal":
        return f"numeric({t.precision},{t.scale})"
    if t.kind == "text" and t.pad:  # the values written are padded, as Postgres holds them
        return "bpchar" if t.scale else f"character({t.pad})"
    if t.varchar:
        return f"character varying({t.length})" if t.length else "character varying"
    if t.tz:
        return "timestamp with time zone"
    return str(t).lower() if t.kind == "int" else _IVM_TO_PG[t.kind]


class Unreachable(Exception):
    def __init__(self, side: str, err: Exception) -> None:
        super().__init__(f"{side} unreachable or connection lost: {str(err).strip()}")
        self.side = side


class Resnapshot(Exception):
    """The stream cannot go on from where it is (the slot was dropped or lost its WAL, a followed table
    changed): the sidecar takes a new snapshot and replaces the target with it."""


_PERMANENT = re.compile(
    r"does not exist|authentication failed|no pg_hba\.conf entry|not permitted to log in|must be superuser|"
    r"permission denied|wal_level|invalid connection|missing \"=\"|invalid (integer|sslmode) value"
)


class _Side:
    """Turns what goes wrong with a connection into the sidecar's terms: a permanent problem (unknown
    database or role, bad password, missing privilege, ``wal_level`` not logical) as ``ConfigError`` saying
    what to fix; a lost or refused connection as ``Unreachable`` (retried); a dropped or lost slot as
    ``Resnapshot``."""

    def __init__(self, side: str) -> None:
        self.side = side

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if not isinstance(err, psycopg.Error):
            return False
        text = str(err).strip()
        detail = (err.diag.message_detail or "").strip()
        if detail:
            text = f"{text} ({detail})"
        lost = isinstance(err, psycopg.errors.UndefinedObject) or any(
            w in text for w in ("invalidated", "removed", "no longer get changes")
        )
        if self.side == "source" and "replication slot" in text and lost:
            raise Resnapshot(f"source: {text}") from err
        if isinstance(err, psycopg.errors.InsufficientPrivilege) or _PERMANENT.search(text):
            hint = ""
            if "wal_level" in text:
                hint = " (set wal_level = logical in the source's postgresql.conf and restart it)"
            elif "replication" in text:
                hint = " (the source role needs the REPLICATION attribute: ALTER ROLE ... REPLICATION)"
            raise ConfigError(f"{self.side}: {text}{hint}") from err
        if isinstance(err, (psycopg.OperationalError, psycopg.InterfaceError)):
            raise Unreachable(self.side, err) from err
        return False


SOURCE, TARGET = _Side("source"), _Side("target")


class Sidecar:
    """The sidecar's state and loop. ``on_batch(txns, committed_at)`` is called after each target commit with
    the source transactions it contained and the wall-clock time of the commit (for measurements). With
    ``state`` (a directory) the engine's tables and views are kept there, durable (see ``_state``), and a
    restart resumes the slot from them instead of taking a new snapshot; ``synchronous`` and
    ``checkpoint_bytes`` are those of ``ivm.connect``."""

    def __init__(
        self,
        source: str,
        views_sql: str,
        target: str | None = None,
        slot: str = "ivm",
        publication: str = "ivm",
        schema: str = "ivm",
        batch_changes: int = 50_000,
        on_batch: Callable[[list[Transaction], float], None] | None = None,
        state: str | None = None,
        synchronous: bool = True,
        checkpoint_bytes: int = 64 << 20,
    ) -> None:
        self.source_dsn = source
        self.target_dsn = target or source
        self.views_file = parse_views(views_sql)
        self.views_digest = digest(views_sql)
        self.state = State(state, synchronous, checkpoint_bytes) if state is not None else None
        self.slot, self.publication, self.schema = slot, publication, schema
        self.batch_changes = batch_changes
        self.on_batch = on_batch
        self.stopping = False
        self.started = False  # the target has been written once: a view that no longer works fails alone
        self.failed: dict[str, str] = {}  # views that cannot run since a change of the source, with why
        self.missing: list[tuple[str | None, str]] = []  # tables views name that do not exist (now)
        self.unwritable: dict[str, list] = {}  # view -> [rows its target cannot hold, an example]
        self.snapshot_rows = 0  # rows read from snapshots of the source, over the sidecar's life
        self.resumed = 0  # starts that went on from the state directory, without a snapshot
        self.pending: _Rebuilding | None = None  # a rebuild of some views under way
        self.targets: dict[str, ViewTarget] = {}  # the running views' target tables
        self.feeds: dict[int, TableFeed] = {}
        self.subs: dict = {}
        self._fresh = False  # the stream could not go on: the next start takes a new snapshot
        self._clean = False
        self._slot_at = 0  # where the slot was last advanced to

    def stop(self) -> None:
        """Stop after the batch in flight."""
        self.stopping = True

    @contextlib.contextmanager
    def in_thread(self):
        """Run in a background thread for the ``with`` block, then stop after the batch in flight. An error of
        the sidecar's own is raised in place of (or after) the block's."""
        errors: list[BaseException] = []

        def run() -> None:
            try:
                self.run()
            except BaseException as err:
                errors.append(err)

        th = threading.Thread(target=run, daemon=True)
        th.start()
        try:
            yield self
        except BaseException:
            if errors:  # the sidecar's own failure explains the block's
                raise errors[0] from None
            raise
        finally:
            self.stop()
            th.join()
        if errors:
            raise errors[0]

    # -- the outer loop: restart on lost connections, with backoff --------------------------------------------
    def run(self) -> None:
        """Follow the source until stopped. Lost connections are retried with backoff; a stream that cannot
        go on restarts from a new snapshot; a problem only the operator can fix raises ``ConfigError``."""
        delay = 0.5
        while not self.stopping:
            try:
                self._run_once()
                return
            except Resnapshot as err:
                log.warning("%s; taking a new snapshot", err)
                self._fresh = True
                delay = 0.5
                continue
            except (Unreachable, SlotInUse) as err:
                log.warning("%s; retrying in %.1fs", err, delay)
            except InUse as err:
                raise ConfigError(str(err)) from err
            self._sleep(delay)
            delay = min(delay * 2, 30.0)

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.05, max(end - time.monotonic(), 0)))

    def _run_once(self) -> None:
        src = Source(self.source_dsn, self.slot, self.publication)
        tgt = Target(self.target_dsn, self.schema, self.slot)
        db = None
        self._clean = False  # the stream ended between batches (asked to stop)
        try:
            with TARGET:
                tgt.connect()  # first of all: one sidecar per target schema
            with SOURCE:
                src.connect()
                self.own_schema = self.schema if _where(src.conn) == _where(tgt.conn) else None
                system, database = _where(src.conn)
                # the source's history: a cluster restored to an earlier point, or promoted, starts another
                (timeline,) = src.conn.execute(
                    "SELECT left(pg_walfile_name(pg_current_wal_lsn()), 8)"
                ).fetchone()
            self.identity = {
                "system": str(system),
                "timeline": timeline,
                "database": database,
                "slot": self.slot,
                "publication": self.publication,
                "schema": self.own_schema,
                "views": self.views_digest,
            }
            if self.state is not None:
                db = self._open_state()
                resumed = self._resume(src, tgt, db)
                if resumed is not None:
                    self._stream(src, tgt, db, *resumed)
                    return
                if db.tables or db.positions:
                    db = self.state.wipe(db)
            else:
                db = ivm.connect()
            self._fresh = False
            self.pending = None
            with SOURCE:
                tables, statements, problems = self._resolve(src)
                if problems and not self.started:
                    raise ConfigError("; ".join(problems.values()))
                self._fail(problems)
                pg_types = view_pg_types(src.conn, self.views_file, self.failed)
            self._adopt(tables, problems)
            followed = list({t.oid: t for t in tables.values()}.values())
            feeds = self.feeds = {}
            for t in followed:
                db.execute(t.engine_ddl())
                feeds[t.oid] = TableFeed(t)
            views, subs = self._create_views(db, statements, pg_types, set(self.views_file.views), {})
            self.targets, self.subs = dict(views), subs
            with SOURCE:
                src.ensure_publication(followed)
            with TARGET:
                before = tgt.committed_lsn()
            if before:
                log.info("target reflects the source up to %s; rebuilding from a new snapshot", before)
            with SOURCE:
                snap = src.snapshot(followed, lambda: self.stopping)
            if snap is None:
                return
            lsn, data = snap
            self._slot_at = parse_lsn(lsn)
            self._load(db, feeds, followed, data)
            if self.state is not None:  # the state is whole from here on
                self.state.target, self.state.dirty = None, set(views)
                self.state.checkpoint(db, self._record(parse_lsn(lsn)), parse_lsn(lsn))
            self.unwritable = {}
            contents = {name: self._writable(views[name], _diffs(sub)) for name, sub in subs.items()}
            with TARGET:
                tgt.replace_all(list(views.values()), contents, lsn, self.failed)
            if self.state is not None:
                self.state.target, self.state.dirty = parse_lsn(lsn), set()
            self.started = True
            log.info(
                "initial state written at %s: %s",
                lsn,
                ", ".join(f"{n} {int(d.sum())} rows" for n, (_, d) in contents.items()),
            )
            self._stream(src, tgt, db, feeds, subs, parse_lsn(lsn))
        finally:
            if db is not None and self.state is not None:
                self._close_state(src, db)
            src.close()
            tgt.close()

    # -- the state directory --------------------------------------------------------------------------------
    def _open_state(self):
        """The state directory's database; a damaged one is said and emptied."""
        self.state.complete = False  # until its record is taken up
        try:
            return self.state.open()
        except OperationalError as err:
            if "in use" in str(err):
                raise ConfigError(f"state directory: {err}; give each sidecar its own --state") from err
            log.warning(
                "state %s cannot be read (%s); taking a new snapshot to build it again", self.state.path, err
            )
            return self.state.wipe()

    def _close_state(self, src, db) -> None:
        """Close the state (a checkpoint: all of it is durable now), then let the slot go as far."""
        if db.closed:
            return
        broken = db.broken
        if self.state.complete and self._clean and not broken:
            # stopped between batches: what the sidecar knows now (the target's LSN, for one) goes with the
            # last checkpoint; after an error it may be ahead of the engine's state, which keeps its own
            self.state.note(db, self._record(self.state.lsn))
        try:
            db.close()
        except (OSError, OperationalError) as err:
            log.error("state %s: the last checkpoint failed: %s", self.state.path, err)
            return
        lsn = self.state.lsn
        if broken or lsn <= self._slot_at or src.conn is None or src.conn.broken:
            return
        with contextlib.suppress(psycopg.Error):
            src.advance(format_lsn(lsn))
            self._slot_at = lsn

    def _record(self, lsn: int, complete: bool = True) -> dict:
        """What the sidecar knows beside the engine, as the state stores it with the engine's (see ``_state``):
        ``lsn`` is the source position the engine's state reflects; not ``complete`` while views are being
        built (such a state is not resumed)."""
        st, p = self.state, self.pending
        st.complete = complete
        return {
            "format": STATE_FORMAT,
            "identity": self.identity,
            "complete": complete,
            "lsn": format_lsn(lsn),
            "tables": [[ref[0], ref[1], table_json(t)] for ref, t in self.tables.items()],
            "problems": self.problems,
            "failed": self.failed,
            "targets": {n: target_json(v) for n, v in self.targets.items()},
            "bad": {str(o): b for o, f in self.feeds.items() if (b := st.bad_json(o, f.bad)) is not None},
            "target": None if st.target is None else format_lsn(st.target),
            "dirty": sorted(st.dirty),
            "pending": None
            if p is None
            else {
                "lsn": format_lsn(p.lsn),
                "tables": sorted(p.tables),
                "views": sorted(p.views),
                "failed": p.failed,
            },
        }

    def _unusable(self, rec: dict | None, db) -> str | None:
        """Why the state's record cannot be resumed here, or None."""
        if self._fresh:
            return "the stream could not go on from it"
        if rec is None:
            return "it holds no complete state yet" if db.tables else None
        if rec.get("format") != STATE_FORMAT:
            return f"it was written by a sidecar of another format ({rec.get('format')})"
        if not rec["complete"]:
            return "it was left while views were being built"
        mine, theirs = self.identity, rec["identity"]
        if mine != theirs:
            said = {
                "system": "another source cluster",
                "timeline": "another timeline of the source (restored to an earlier point, or promoted)",
                "database": "another source database",
                "slot": "another replication slot",
                "publication": "another publication",
                "schema": "another target schema",
                "views": "another views file",
            }
            return "it was built for " + ", ".join(said[k] for k in said if mine.get(k) != theirs.get(k))
        live = {v for v in self.views_file.views if v in rec["targets"]}
        engine = {f"{t['schema']}.{t['name']}" for _, _, t in rec["tables"]}
        if live != set(db.views) or engine != set(db.tables):
            return "its tables and views are not those its record names"
        return None

    def _slot_problem(self, src, lsn: int) -> str | None:
        """Why the slot cannot send every transaction that ends after ``lsn`` (the state's), or None.
        ``SlotInUse`` when another session holds it (a process just killed may still)."""
        row = src.conn.execute(
            "SELECT database, plugin, confirmed_flush_lsn::text, wal_status, active_pid "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (self.slot,),
        ).fetchone()
        at = format_lsn(lsn)
        if row is None:
            return f"replication slot {self.slot!r} does not exist (dropped): the changes after {at} are lost"
        database, plugin, confirmed, status, pid = row
        if database != self.identity["database"] or plugin != "pgoutput":
            return f"replication slot {self.slot!r} is not a pgoutput slot of database {database!r}"
        if status == "lost":
            return (
                f"replication slot {self.slot!r} lost the WAL it needs (wal_status lost: it held more than "
                f"max_slot_wal_keep_size); the changes after {at} are gone"
            )
        if confirmed is None or parse_lsn(confirmed) > lsn:
            return (
                f"replication slot {self.slot!r} starts at {confirmed}, after the state's {at} (it was dropped "
                "and created again, or the state is older than the slot): the changes between are lost"
            )
        if pid is not None:
            raise SlotInUse(f"replication slot {self.slot!r} is in use by process {pid}")
        self._slot_at = parse_lsn(confirmed)
        return None

    def _resume(self, src, tgt, db) -> tuple | None:
        """Go on from the state directory, reading no snapshot: the tables, views and what the sidecar knew as
        of the state's LSN, and the target brought there (see ``_catch_up``). The arguments of ``_stream``,
        or None (said in the log) when the state cannot be resumed."""
        st = self.state
        rec = db.positions.get(RECORD)
        why = self._unusable(rec, db)
        if why is None and rec is not None:
            with SOURCE:
                why = self._slot_problem(src, parse_lsn(rec["lsn"]))
        if why is not None or rec is None:
            if why is None:
                log.info("state %s is new; taking the first snapshot", st.path)
            else:
                log.warning(
                    "state %s cannot be resumed: %s; taking a new snapshot and building it again", st.path, why
                )
            return None
        lsn = parse_lsn(rec["lsn"])
        self.started = True
        self._adopt({(a, b): table_from_json(t) for a, b, t in rec["tables"]}, dict(rec["problems"]))
        self.failed = dict(rec["failed"])
        followed = list({t.oid: t for t in self.tables.values()}.values())
        feeds = self.feeds = {t.oid: TableFeed(t) for t in followed}
        for oid, f in feeds.items():
            load_bad(f.bad, rec["bad"].get(str(oid)))
        self.targets = {n: target_from_json(n, d) for n, d in rec["targets"].items()}
        p = rec["pending"]
        self.pending = None
        if p is not None:
            views = {v: self.targets[v] for v in p["views"] if v in self.targets}
            self.pending = _Rebuilding(parse_lsn(p["lsn"]), set(p["tables"]), views, dict(p["failed"]))
        st.lsn = st.durable = lsn  # read back from disk (and checkpointed if the log was replayed)
        st.complete = True
        st.target = None if rec["target"] is None else parse_lsn(rec["target"])
        st.dirty = set(rec["dirty"])
        with SOURCE:
            src.ensure_publication(followed)
        with TARGET:
            at = tgt.committed_lsn()
            stale = tgt.stale(list(self.targets.values()))
        subs, catch_up = self._catch_up(tgt, db, lsn, None if at is None else parse_lsn(at), stale)
        slot = self._slot_at
        self._advance(src, db, lsn)  # what the slot would send again up to there is in the state
        self.resumed += 1
        log.info(
            "resumed from state %s at %s (target at %s, slot at %s): no snapshot read",
            st.path,
            rec["lsn"],
            at,
            format_lsn(slot),
        )
        return feeds, subs, lsn, catch_up

    def _catch_up(self, tgt, db, lsn: int, at: int | None, stale: set[str]) -> tuple[dict, int]:
        """Subscribe to the views and bring the target, at ``at``, to the state, at ``lsn``. Behind (the state
        committed, the target not yet): in one transaction, the views that may have changed since (all, unless
        the target is where the state says the sidecar left it) and those whose table is missing or other are
        replaced whole, at ``lsn``; during a rebuild, they are replaced when it ends. Ahead (the state had not
        reached the disk): nothing is written until the stream passes ``at``, the views' changes up to there
        are already in the target. Returns the subscriptions and that LSN (0: none)."""
        st = self.state
        live = [v for v in self.views_file.views if v in self.targets]
        catch_up = 0
        if at is not None and at > lsn:  # ahead; with a table to make again, all go back to the state
            catch_up, replace = (0, set(live)) if stale else (at, set())
        elif at == lsn:
            replace = set()
        elif at is not None and at == st.target:
            replace = st.dirty & set(live)
        else:
            replace = set(live)
        replace |= stale & set(live)
        later = set(self.pending.views) if self.pending is not None else set()
        narrow = {v for v in live if {"smallint", "integer"} & set(self.targets[v].pg_types)}
        subs = self.subs = {v: _subscribe(db, v, v in replace | later | narrow) for v in live}
        self.unwritable = {}
        for v in narrow - replace - later:  # only to count the rows their target cannot hold
            self._writable(self.targets[v], _diffs(subs[v]))
        contents = {}
        if self.pending is not None:
            self.pending.views.update({v: self.targets[v] for v in replace})
            later |= replace
        else:
            contents = {v: self._writable(self.targets[v], _diffs(subs[v])) for v in replace}
        errors = self._errors(db, self.feeds, subs)
        now = [self.targets[v] for v in live if v not in later]
        known = [self.targets[v] for v in live if v in later]
        write = None if catch_up or self.pending is not None else format_lsn(lsn)
        with TARGET:
            tgt.resume(now, contents, write, self.failed, errors, known)
        if write is not None:
            st.target, st.dirty = lsn, set()
            if replace:
                log.info(
                    "target brought from %s to the state's %s: %s replaced",
                    None if at is None else format_lsn(at),
                    write,
                    ", ".join(sorted(replace)),
                )
        elif catch_up:
            st.target, st.dirty = at, set()
            log.info(
                "target at %s, ahead of the state: the changes up to there are not written again",
                format_lsn(at),
            )
        else:
            st.target, st.dirty = at, st.dirty | replace
        return subs, catch_up

    def _resolve(self, src) -> tuple[dict, list[str], dict[str, str]]:
        """The views' source tables as the source has them now (see ``resolve_tables``)."""
        return resolve_tables(src.conn, self.views_file, self.own_schema, self.started, src.zone)

    def _adopt(self, tables: dict, problems: dict[str, str]) -> None:
        """Take ``tables`` (by the name views give them) as the ones followed from now on."""
        self.tables, self.problems = tables, problems
        self.missing = [r for r in self.views_file.refs if r not in tables]
        self.reads = columns_read(self.views_file, tables)

    def _load(self, db, feeds: dict, tables: list[SourceTable], data: dict[str, pa.Table]) -> None:
        """Tables' snapshot contents into their (empty) engine tables, in one transaction."""
        db.execute("BEGIN")
        for t in tables:
            self.snapshot_rows += data[t.engine].num_rows
            rows = feeds[t.oid].snapshot(data[t.engine])
            if rows.num_rows:
                db.insert_arrow(t.engine, rows)
        db.execute("COMMIT")

    # -- engine ---------------------------------------------------------------------------------------------
    def _create_views(
        self, db, statements: list[str], pg_types: dict[str, list[str]] | None, only: set[str], keys: dict
    ) -> tuple[dict[str, ViewTarget], dict]:
        """Create the views of ``only`` that have not failed (in file order, with their indexes), each with
        its target table and a subscription to its changes (its contents first); ``keys`` are the unique
        keys of views not created again. A view that does not work after the first start fails alone."""
        for stmt, name, engine_sql in zip(
            self.views_file.statements, self.views_file.owners, statements, strict=True
        ):
            if name in self.failed or name not in only:
                continue
            try:
                db.execute(engine_sql)
            except SqlError as err:
                message = f"views file: {err} in {stmt.sql(dialect='postgres')[:80]!r}"
                if not self.started:
                    raise ConfigError(message) from err
                log.error("view %r stopped: %s", name, message)
                self.failed[name] = message
        views, subs = {}, {}
        keys = {**{n: t.primary_key for n, t in db.catalog.tables.items() if t.primary_key}, **keys}
        for name in self.views_file.views:
            if name in self.failed or name not in only:
                continue
            v = db.views[name].view
            names = [c.name for c in v.columns]
            ivm_types = [_pg_type(c.type) for c in v.columns]
            if pg_types is None:
                types = ivm_types
            elif len(pg_types[name]) != len(names):
                raise ConfigError(
                    f"view {name!r} has {len(pg_types[name])} columns in Postgres but {len(names)} in ivm"
                )
            else:
                # where ivm computes a double and Postgres a numeric (AVG, division), the target keeps the
                # double: a numeric column would show digits ivm did not compute
                types = [
                    mine if mine == "double precision" and theirs.startswith("numeric") else theirs
                    for mine, theirs in zip(ivm_types, pg_types[name], strict=True)
                ]
            views[name] = ViewTarget(name, names, types, unique_key(v.plan, keys))
            if views[name].key:
                keys[name] = views[name].key
            subs[name] = _subscribe(db, name, snapshot=True)
        return views, subs

    def _fail(self, problems: dict[str, str]) -> None:
        """The views that do not work after a change of the source (those of the previous start are
        forgotten: a change may make them work again): they stop, keeping their last contents."""
        before, self.failed = self.failed, dict(problems)
        for v, message in problems.items():
            if before.get(v) != message:
                log.error("view %r stopped: %s", v, message)

    def _writable(self, view: ViewTarget, change: tuple[pa.Table, np.ndarray]) -> tuple[pa.Table, np.ndarray]:
        """A view's change without the rows whose value its target column cannot hold: Postgres computes the
        view's smallint and integer columns in that width and fails where ivm's 64 bits do not. The view is
        in error while such rows are in it (counted, as they come and go)."""
        rows, diff = change
        bad = np.zeros(rows.num_rows, dtype=bool)
        what = None
        for j, t in enumerate(view.pg_types):
            bits = {"smallint": 15, "integer": 31}.get(t)
            if bits is None or rows.num_rows == 0:
                continue
            col = rows.column(j).to_numpy(zero_copy_only=False)
            valid = ~np.asarray(rows.column(j).is_null().to_numpy(zero_copy_only=False), dtype=bool)
            out = valid & ((np.nan_to_num(col) < -(2**bits)) | (np.nan_to_num(col) >= 2**bits))
            if out.any():
                what = what or f"{t} out of range in column {view.columns[j]!r}: {int(col[out][0])}"
                bad |= out
        if not bad.any():
            return change
        entry = self.unwritable.setdefault(view.name, [0, what])
        entry[0] += int(diff[bad].sum())
        entry[1] = what
        keep = np.flatnonzero(~bad)
        return rows.take(keep), diff[keep]

    def _errors(self, db, feeds: dict, subs: dict) -> dict[str, str]:
        """The views in error now: a value they cannot compute (the engine's), a value of a column they
        read that ivm cannot hold, or a value their target cannot hold."""
        out = {v: e for v, e in db.view_errors().items() if v in subs}
        for v, (n, what) in self.unwritable.items():
            if n > 0 and v in subs and v not in out:
                out[v] = f"{what} (the target column cannot hold it; Postgres fails the same way)"
        bad = {f.table.engine: f.bad.columns() for f in feeds.values() if f.bad}
        for v, reads in self.reads.items():
            if v not in subs or v in out:
                continue
            for table, cols in bad.items():
                if table not in reads:
                    continue
                hit = sorted(set(cols) & reads[table]) or (["*"] if "*" in cols else [])
                if hit:
                    out[v] = cols[hit[0]]
                    break
        return out

    # -- the stream -----------------------------------------------------------------------------------------
    def _stream(self, src, tgt, db, feeds, subs, start_lsn: int, catch_up: int = 0) -> None:
        """Follow the slot from ``start_lsn`` (the target's and the state's), or with ``catch_up`` from the
        state's ``start_lsn`` while the target is already at ``catch_up``: the views' changes up to there are
        not written (they are in the target)."""
        decoder = Decoder()
        newly_failed: dict[str, str] = {}
        in_error = self._errors(db, feeds, subs)
        if in_error:
            for v, e in in_error.items():
                log.error("view %r is in error: %s", v, e)
            with TARGET:
                tgt.set_errors(in_error)
        committed = start_lsn
        idle_since = checked = time.monotonic()
        wait = _POLL_MIN  # after a poll that read nothing: short while changes flow, longer as the source rests
        while not self.stopping:
            pending = self.pending
            why = None
            if time.monotonic() - checked >= 5.0:  # a table dropped, altered or created may send nothing
                with SOURCE:
                    why = self._source_changed(src)
                checked = time.monotonic()
            with SOURCE:
                before = src.position()
                msgs = src.peek(self.batch_changes)
            txns, seen, changed = _decode(decoder, msgs, feeds, committed, pending)
            why = why or changed
            if (
                msgs
                and seen <= committed
                and why is None
                and self._slot_at < committed
                and self.state is not None
            ):
                # the slot sends again only what the state has (it moves as far as the state is durable, and
                # without sync only checkpoints are): one now lets it move on
                self.state.checkpoint(db, self._record(self.state.lsn), self.state.lsn)
                self._advance(src, db, committed)
                continue
            # every published transaction that ends at or before ``reached`` has been read
            reached = seen if msgs else max(parse_lsn(before), committed)
            finish = pending is not None and reached >= pending.lsn
            rows_in = sum(t.rows for t in txns)
            # the target holds the changes of the transactions up to ``catch_up`` already
            early = sum(1 for t in txns if t.end_lsn <= catch_up)
            runs = [(g, False) for g in _groups(txns[:early])] + [(g, True) for g in _groups(txns[early:])]
            for i, (group, counted) in enumerate(runs):
                lsn = reached if i + 1 == len(runs) else group[-1].end_lsn
                for v in self._apply(db, feeds, group, pending, lsn):
                    msg = f"view {v!r} stopped: {db.views[v].error}"
                    log.error(msg)
                    newly_failed[v] = msg
                    if pending is not None:
                        pending.views.pop(v, None)
                    self._stopped(db, v, msg)
                if not counted and (i + 1 == len(runs) or runs[i + 1][1]):
                    self._discard(subs, pending)
            if catch_up and reached <= catch_up:
                # the target holds these: their changes are dropped, their errors left to the next write
                self._discard(subs, None if finish else pending)
                if finish:
                    self.pending = None
                if reached > committed:
                    self._advance(src, db, reached)
                    committed = reached
            elif pending is not None and not finish:
                if reached > committed:
                    # reading up to a rebuild's snapshot: the target waits, to go from one whole state to the
                    # next (the slot goes on: a restart takes a new snapshot, or the state goes on with it)
                    self._advance(src, db, reached)
                    committed = reached
            elif txns or finish:
                if self.state is not None:
                    self._at(db, reached)  # the state first: a target ahead of it is harder to bring back
                replaced = {}
                if finish:
                    newly_failed.update(pending.failed)
                    for v, target in pending.views.items():
                        self.unwritable.pop(v, None)
                        if v in subs:
                            replaced[v] = (target, self._writable(target, _diffs(subs[v])))
                    self.pending = pending = None
                diffs = {
                    name: self._writable(tgt.views[name], _diffs(sub))
                    for name, sub in subs.items()
                    if name not in replaced
                }
                lsn = format_lsn(reached)
                now = self._errors(db, feeds, subs)
                changed = {v: now.get(v) for v in {*now, *in_error} if now.get(v) != in_error.get(v)}
                for v, e in changed.items():
                    if e is None:
                        log.info("view %r recovered", v)
                    else:
                        log.error("view %r is in error: %s", v, e)
                in_error = now
                with TARGET:
                    tgt.apply(diffs, lsn, len(txns), newly_failed, changed, replaced)
                done = time.time()
                if self.state is not None:
                    self.state.target, self.state.dirty = reached, set()
                newly_failed = {}
                self._advance(src, db, reached)
                committed = reached
                if replaced:
                    log.info("views %s rebuilt and written at %s", ", ".join(replaced), lsn)
                if txns:
                    log.info(
                        "batch lsn=%s txns=%d rows_in=%d rows_out=%d lag=%.3fs",
                        lsn,
                        len(txns),
                        rows_in,
                        sum(int(abs(d).sum()) for _, d in diffs.values()),
                        done - txns[-1].commit_ts_us / 1e6,
                    )
                    if self.on_batch is not None:
                        self.on_batch(txns, done)
            elif msgs and seen > committed:  # nothing for the views: only the slot is behind
                self._advance(src, db, seen)
                committed = seen
            elif not msgs and time.monotonic() - idle_since >= 1.0 and parse_lsn(before) > committed:
                # nothing published committed before ``before``: the slot may release the WAL up to there
                # (at most once a second), so a source busy only with other tables does not fill its disk
                self._advance(src, db, parse_lsn(before))
                idle_since = time.monotonic()
            if catch_up and reached >= catch_up:
                catch_up = 0
            if msgs:
                idle_since = time.monotonic()
            if why is not None:
                if self.pending is not None:
                    raise Resnapshot(f"{why}, while views were being rebuilt")
                keys = {n: v.key for n, v in tgt.views.items() if v.key}
                pending = self._rebuild(why, src, db, feeds, subs, keys, committed)
                if pending is not None:  # their statuses are written whole with them
                    in_error = {v: e for v, e in in_error.items() if v not in pending.views}
            elif not msgs:
                self._sleep(wait)
                wait = min(wait * 2, _POLL_MAX)
            if msgs:
                wait = _POLL_MIN
        self._clean = True
        log.info(
            "stopped at %s (%d rows read from snapshots since start)", format_lsn(committed), self.snapshot_rows
        )

    def _discard(self, subs: dict, pending: _Rebuilding | None) -> None:
        """Drop the views' pending changes (counting the rows their targets cannot hold): the target has them.
        The views a rebuild replaces keep theirs (their whole contents)."""
        for name, sub in subs.items():
            if pending is None or name not in pending.views:
                self._writable(self.targets[name], _diffs(sub))

    def _stopped(self, db, view: str, message: str) -> None:
        """A view that could not go on is dropped (its target keeps its last contents, marked failed)."""
        self.failed[view] = message
        self.targets.pop(view, None)
        del self.subs[view]
        if self.state is not None:
            self.state.note(db, self._record(self.state.lsn))
        db.execute(f"DROP VIEW {quote(view)}")
        if self.state is not None:
            self.state.committed(db, self.state.lsn)

    def _at(self, db, lsn: int) -> None:
        """Make the state say it reflects the source up to ``lsn`` (a commit of no change, when the last one
        said less): every published transaction up to there is in it."""
        if self.state.lsn < lsn:
            self.state.note(db, self._record(lsn))
            db.apply_changes_arrow({}, 1)
            self.state.committed(db, lsn)

    def _advance(self, src, db, lsn: int) -> None:
        """Let the slot release the WAL up to ``lsn``: every published transaction ending there is in the
        target or, with a state, in the state, where it is made durable first (the slot goes only as far as
        the state has reached the disk)."""
        if self.state is not None:
            self._at(db, lsn)
            lsn = min(lsn, self.state.durable)
        if lsn > self._slot_at:
            with SOURCE:
                src.advance(format_lsn(lsn))
            self._slot_at = lsn

    def _source_changed(self, src) -> str | None:
        """What changed in the source's tables since they were read (dropped, replaced, altered or created
        where a view names one), or None."""
        tables, _, problems = self._resolve(src)
        if tables == self.tables and problems == self.problems:
            return None
        return _what_changed(self.tables, tables) or "the source's tables changed"

    def _rebuild(
        self, why: str, src, db, feeds: dict, subs: dict, keys: dict, committed: int
    ) -> _Rebuilding | None:
        """Follow the source's tables as they are now. The views naming a table that changed, appeared or went
        (and the views over them) are created again, over a new snapshot of the tables that changed; those
        that cannot run any more fail alone; the others go on untouched. None when asked to stop."""
        with SOURCE:
            tables, statements, problems = self._resolve(src)
        if self.state is not None:  # until the views are whole again, the state is not to be resumed
            self.state.note(db, self._record(self.state.lsn, complete=False))
        vf = self.views_file
        changed = {r for r in {*self.tables, *tables} if self.tables.get(r) != tables.get(r)}
        redo: set[str] = set()
        for v in vf.views:  # in file order: a view reads only views defined before it
            if vf.reads[v] & changed or vf.uses[v] & redo or problems.get(v) != self.problems.get(v):
                redo.add(v)
        by_oid = {t.oid: t for t in tables.values()}
        stale = [oid for oid, f in feeds.items() if by_oid.get(oid) != f.table]
        fresh = [t for oid, t in by_oid.items() if oid not in feeds or oid in stale]
        for v in reversed(vf.views):
            if v in redo and v in db.views:
                db.execute(f"DROP VIEW {quote(v)}")
                del subs[v]
                self.targets.pop(v, None)
        for oid in stale:
            db.execute(f"DROP TABLE {quote(feeds.pop(oid).table.engine)}")
        self._adopt(tables, problems)
        before = dict(self.failed)
        for v in redo:
            self.failed.pop(v, None)
            if v in problems:
                self.failed[v] = problems[v]
        for t in fresh:
            db.execute(t.engine_ddl())
            feeds[t.oid] = TableFeed(t)
        lsn = format_lsn(committed)
        if fresh:
            with SOURCE:
                src.ensure_publication(fresh)
                snap = src.snapshot(fresh, lambda: self.stopping, again=True)
            if snap is None:
                return None
            lsn, data = snap
            self._load(db, feeds, fresh, data)
        with SOURCE:
            skip = [v for v in vf.views if v not in redo or v in self.failed]
            pg_types = view_pg_types(src.conn, vf, skip)
        views, new_subs = self._create_views(db, statements, pg_types, redo, keys)
        subs.update(new_subs)
        self.targets.update(views)
        failed = {v: self.failed[v] for v in redo if v in self.failed}
        for v, message in failed.items():
            if before.get(v) != message:
                log.error("view %r stopped: %s", v, message)
        log.warning(
            "%s; %s",
            why,
            f"rebuilding views {', '.join(views)} from a new snapshot of {', '.join(t.engine for t in fresh)} "
            f"at {lsn}"
            if views
            else "no view is rebuilt",
        )
        self.pending = _Rebuilding(parse_lsn(lsn), {t.oid for t in fresh}, views, failed)
        if self.state is not None:  # whole again: the rebuild goes on from here after a restart
            self.state.dirty |= set(views)
            self.state.checkpoint(db, self._record(self.state.lsn), self.state.lsn)
        return self.pending

    def _apply(self, db, feeds: dict, txns, pending: _Rebuilding | None, lsn: int) -> list[str]:
        """Consecutive source transactions into the engine in one step, each its own logical time (but the
        changes a rebuild's snapshot holds); the views that could not go on (a recursion past its limit, a
        sum past 64 bits). With a state, the commit records ``lsn`` (every published transaction ending
        there is in it) and the views it may change."""
        parts: dict[int, list] = {}
        for i, txn in enumerate(txns):
            for relid, ch in txn.changes.items():
                if pending is not None and relid in pending.tables and txn.end_lsn <= pending.lsn:
                    continue
                if relid in feeds:
                    parts.setdefault(relid, []).append((i, ch))
        changes = {feeds[r].table.engine: feeds[r].changes(db, p) for r, p in parts.items()}
        if self.state is None:
            return db.apply_changes_arrow(changes, len(txns))
        self.state.dirty |= {v for v in self.subs if self.reads.get(v, {}).keys() & changes.keys()}
        self.state.note(db, self._record(lsn))
        stopped = db.apply_changes_arrow(changes, len(txns))
        self.state.committed(db, lsn)
        return stopped


@dataclass
class _Rebuilding:
    """Views created again over ``tables`` read from a snapshot at ``lsn``: the changes of those tables in
    transactions ending at or before ``lsn`` are in the snapshot, not applied again. The target is written
    once the stream has passed ``lsn``, in one transaction: the other views' changes, the ``views`` (name ->
    target) replacing their tables whole, and the ``failed`` views (name -> why) marked."""

    lsn: int
    tables: set[int]
    views: dict[str, ViewTarget]
    failed: dict[str, str]


def _subscribe(db, view: str, snapshot: bool) -> Subscription:
    """A subscription to a view's changes (first its contents, with ``snapshot``), even while the view is in
    error: its target goes on without the rows in error (``Connection.subscribe`` refuses such a view)."""
    st = db.views[view]
    with db.pool.active():
        return Subscription(db, st.arranged, st.view.columns, snapshot, None)


def _where(conn) -> tuple:
    """Which database a connection reaches: the cluster's identifier and the database's name."""
    return conn.execute(
        "SELECT (SELECT system_identifier FROM pg_control_system()), current_database()"
    ).fetchone()


def _decode(
    decoder: Decoder, msgs: list[bytes], feeds: dict, committed: int, pending: _Rebuilding | None
) -> tuple[list[Transaction], int, str | None]:
    """The whole transactions in ``msgs`` ending after ``committed`` that change followed tables, the end of
    the last one read, and why the stream cannot go on past it: a followed table changed (the transaction
    showing it, and those after, are left for after the table is read again)."""
    txns, seen = [], committed
    for m in msgs:
        t = decoder.feed(m)
        if t is None:
            continue
        relations, decoder.new_relations = decoder.new_relations, []
        if t.end_lsn <= committed:
            continue
        for rel in relations:
            feed = feeds.get(rel.oid)
            if feed is None or pending is not None and rel.oid in pending.tables and t.end_lsn <= pending.lsn:
                continue  # not followed, or its changes are in the snapshot just read
            change = _describe_change(feed.table, rel.schema, rel.name, [c[:3] for c in rel.columns])
            if change is not None:
                return txns, seen, f"source table {feed.table.engine} changed ({change})"
        seen = max(seen, t.end_lsn)
        # transactions of tables not followed (a FOR ALL TABLES publication, the target's own writes) are
        # passed over
        if any(r in feeds for r in t.changes):
            txns.append(t)
    return txns, seen, None


def _what_changed(old: dict, new: dict) -> str:
    """The tables views name that differ between ``old`` and ``new`` (by name as views give them), and how."""
    said = []
    for ref in dict.fromkeys([*old, *new]):
        a, b = old.get(ref), new.get(ref)
        if a == b:
            continue
        if a is None:
            said.append(f"source table {ref[1] if ref[0] is None else f'{ref[0]}.{ref[1]}'} was created")
        elif b is None or a.oid != b.oid:
            said.append(f"source table {a.engine} was dropped, renamed or replaced")
        else:
            cols = [(n, t.oid, t.typmod) for n, t, _ in b.columns]
            change = _describe_change(a, b.schema, b.name, cols) or "key, NOT NULL or replica identity"
            said.append(f"source table {a.engine} changed ({change})")
    return "; ".join(dict.fromkeys(said))


def _groups(txns: list[Transaction]) -> list[list[Transaction]]:
    """Runs of transactions the engine takes in one step. A transaction that truncates a table is alone
    (what it removes is the table's contents at that moment); one with updates whose unchanged TOASTed values
    were not sent starts a run (they are read from the engine's state just before it)."""
    out: list[list[Transaction]] = [[]]
    for t in txns:
        if any(ch.truncated for ch in t.changes.values()):
            out += [[t], []]
        elif any(ch.unchanged for ch in t.changes.values()):
            out.append([t])
        else:
            out[-1].append(t)
    return [g for g in out if g]


def _describe_change(t: SourceTable, schema: str, name: str, columns: list[tuple[str, int, int]]) -> str | None:
    """How a table read as ``t`` differs from one named ``schema.name`` with ``columns`` (name, type oid,
    typmod), or None."""
    if (schema, name) != (t.schema, t.name):
        return f"renamed to {schema}.{name}"
    before = {n: typ for n, typ, _ in t.columns}
    after = {n: (oid, mod) for n, oid, mod in columns}
    parts = [f"column {n} added" for n in after if n not in before]
    parts += [f"column {n} dropped" for n in before if n not in after]
    for n, (oid, mod) in after.items():
        if n in before and (before[n].oid, before[n].typmod) != (oid, mod):
            parts.append(f"column {n} changed type")
    if not parts and [n for n, *_ in t.columns] != [c[0] for c in columns]:
        parts.append("columns reordered")
    return "; ".join(parts) or None


def _diffs(sub) -> tuple[pa.Table, np.ndarray]:
    """A subscription's pending changes, consolidated over all their times: (rows, diff)."""
    names = [c.name for c in sub.columns]
    n = len(names)
    batches = list(sub)
    if not batches:
        arrays = [to_arrow_column(np.zeros(0, c.type.dtype), None, c.type) for c in sub.columns]
        return pa.Table.from_arrays(arrays, names=names), np.zeros(0, dtype=np.int64)
    # by position: a view may have columns named like the subscription's own time and diff
    t = pa.Table.from_batches(batches)
    rows, diff, _ = consolidate(t.select(list(range(n))), t.column(n + 1).to_numpy())
    return rows, diff


# -- command line -------------------------------------------------------------------------------------------
_EPILOG = """\
connection strings: libpq key=value or URI, e.g. "host=db.example port=5432 dbname=shop user=ivm" or
  postgresql://ivm@db.example/shop (a password from PGPASSWORD or ~/.pgpass).
prerequisites: pip install 'ivm[postgres]'; on the source wal_level = logical (postgresql.conf, restart)
  and a role with the REPLICATION attribute that can read the tables (and create the publication, or
  create it yourself: CREATE PUBLICATION ivm FOR TABLE ...); on the target, a role that can create the schema.
tables: views name source tables as in PostgreSQL: unqualified on the source role's search_path,
  schema.table for others, "Quoted" names keep their case. Views cannot read the target schema.
exit status: 0 when stopped (SIGTERM, SIGINT), 1 for a problem only the operator can fix (bad views file,
  unknown database or role, wal_level, missing privilege, another sidecar on the same --schema or --slot).
  Lost connections are retried with backoff; a dropped slot is taken up from a new snapshot. A source
  table altered, dropped or created rebuilds only the views naming it, from a new snapshot of that table.
state: with --state DIR the tables and views are kept in DIR (an ivm database; one sidecar per directory)
  and every batch is synced there before the target is written; a restart resumes the slot from the LSN
  DIR holds, reading no snapshot and computing nothing again. When the slot cannot send from there (dropped,
  created again, its WAL lost) or DIR was built for another source, slot, publication or views file, the log
  says so and DIR is built again from a new snapshot. Without --state every start takes a new snapshot.
"""


def main(argv: list[str] | None = None) -> int:
    tune_allocator()  # a long-running command: freed memory is kept for the next merge
    p = argparse.ArgumentParser(
        prog="ivm sidecar",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    p.add_argument("--source", required=True, help="source database connection string (DSN, see below)")
    p.add_argument("--views", required=True, help="file of CREATE MATERIALIZED VIEW / CREATE INDEX statements")
    p.add_argument("--target", help="target database (default: the source)")
    p.add_argument("--slot", default="ivm", help="logical replication slot name (default ivm)")
    p.add_argument("--publication", default="ivm", help="publication name (default ivm)")
    p.add_argument("--schema", default="ivm", help="target schema for the views' tables (default ivm)")
    p.add_argument("--batch-changes", type=int, default=50_000, help="changes read per batch at most (about)")
    p.add_argument(
        "--state",
        metavar="DIR",
        help="keep the engine's state in this directory (created if new): a restart resumes from it, "
        "reading no snapshot",
    )
    p.add_argument(
        "--no-sync",
        action="store_true",
        help="with --state: do not sync each batch to disk; the slot then keeps the source's WAL back to the "
        "state's last checkpoint (taken when the slot must move on: about every --batch-changes changes)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        with open(args.views) as f:
            text = f.read()
        car = Sidecar(
            args.source,
            text,
            args.target,
            args.slot,
            args.publication,
            args.schema,
            args.batch_changes,
            state=args.state,
            synchronous=not args.no_sync,
        )
    except (OSError, ConfigError) as err:
        print(f"ivm sidecar: {err}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: car.stop())
    signal.signal(signal.SIGINT, lambda *_: car.stop())
    try:
        car.run()
    except ConfigError as err:
        print(f"ivm sidecar: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
