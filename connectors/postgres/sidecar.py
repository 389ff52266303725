"""``ivm sidecar``: keep views over Postgres tables up to date as tables in Postgres.

    ivm sidecar --source DSN --views FILE [--target DSN] [--slot NAME] [--publication NAME] [--schema NAME]

At start (and after any restart) the sidecar takes a new snapshot consistent with a new replication slot,
computes the views and makes every target table equal to them in one target transaction with the slot's LSN.
It then follows the slot: each batch of source transactions goes into the engine one transaction per logical
time, and the views' net changes go into the target in one transaction with the LSN reached; only then is the
slot advanced. A reader of the target sees whole source transactions only, and a crash at any moment leaves
the target at a committed LSN that the next start replaces atomically.

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
from connectors.postgres.source import SlotInUse, Source
from connectors.postgres.target import InUse, Target, ViewTarget, quote
from ivm.db.arrow import to_arrow_column
from ivm.engine.allocator import tune_allocator
from planner.properties import unique_key
from sql.errors import SqlError

__all__ = ["Sidecar", "main"]

log = logging.getLogger("ivm.sidecar")

_IVM_TO_PG = {
    "int": "bigint",
    "float": "double precision",
    "text": "text",
    "date": "date",
    "timestamp": "timestamp without time zone",
    "bool": "boolean",
}


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
    the source transactions it contained and the wall-clock time of the commit (for measurements)."""

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
    ) -> None:
        self.source_dsn = source
        self.target_dsn = target or source
        self.views_file = parse_views(views_sql)
        self.slot, self.publication, self.schema = slot, publication, schema
        self.batch_changes = batch_changes
        self.on_batch = on_batch
        self.stopping = False
        self.started = False  # the target has been written once: a view that no longer works fails alone
        self.failed: dict[str, str] = {}  # views that cannot run since a change of the source, with why
        self.missing: list[tuple[str | None, str]] = []  # tables views name that do not exist (now)
        self.unwritable: dict[str, list] = {}  # view -> [rows its target cannot hold, an example]

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
        try:
            with TARGET:
                tgt.connect()  # first of all: one sidecar per target schema
            with SOURCE:
                src.connect()
                self.own_schema = self.schema if _where(src.conn) == _where(tgt.conn) else None
                tables, statements, problems = self._resolve(src)
                if problems and not self.started:
                    raise ConfigError("; ".join(problems.values()))
                self._fail(problems)
                pg_types = view_pg_types(src.conn, self.views_file, self.failed)
            self._adopt(tables, problems)
            followed = list({t.oid: t for t in tables.values()}.values())
            db = ivm.connect()
            feeds = {}
            for t in followed:
                db.execute(t.engine_ddl())
                feeds[t.oid] = TableFeed(t)
            views, subs = self._create_views(db, statements, pg_types, set(self.views_file.views), {})
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
            self._load(db, feeds, followed, data)
            self.unwritable = {}
            contents = {name: self._writable(views[name], _diffs(sub)) for name, sub in subs.items()}
            with TARGET:
                tgt.replace_all(list(views.values()), contents, lsn, self.failed)
            self.started = True
            log.info(
                "initial state written at %s: %s",
                lsn,
                ", ".join(f"{n} {int(d.sum())} rows" for n, (_, d) in contents.items()),
            )
            self._stream(src, tgt, db, feeds, subs, parse_lsn(lsn))
        finally:
            src.close()
            tgt.close()

    def _resolve(self, src) -> tuple[dict, list[str], dict[str, str]]:
        """The views' source tables as the source has them now (see ``resolve_tables``)."""
        return resolve_tables(src.conn, self.views_file, self.own_schema, self.started, src.zone)

    def _adopt(self, tables: dict, problems: dict[str, str]) -> None:
        """Take ``tables`` (by the name views give them) as the ones followed from now on."""
        self.tables, self.problems = tables, problems
        self.missing = [r for r in self.views_file.refs if r not in tables]
        self.reads = columns_read(self.views_file, tables)

    @staticmethod
    def _load(db, feeds: dict, tables: list[SourceTable], data: dict[str, pa.Table]) -> None:
        """Tables' snapshot contents into their (empty) engine tables, in one transaction."""
        db.execute("BEGIN")
        for t in tables:
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
            ivm_types = [
                _IVM_TO_PG.get(c.type.kind) or f"numeric({c.type.precision},{c.type.scale})" for c in v.columns
            ]
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
            subs[name] = db.subscribe(name, snapshot=True)
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
    def _stream(self, src, tgt, db, feeds, subs, start_lsn: int) -> None:
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
        pending: _Rebuilding | None = None
        while not self.stopping:
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
            # every published transaction that ends at or before ``reached`` has been read
            reached = seen if msgs else max(parse_lsn(before), committed)
            finish = pending is not None and reached >= pending.lsn
            rows_in = sum(t.rows for t in txns)
            for group in _groups(txns):
                for v in self._apply(db, feeds, group, pending):
                    msg = f"view {v!r} stopped: {db.views[v].error}"
                    log.error(msg)
                    newly_failed[v] = msg
                    db.execute(f"DROP VIEW {quote(v)}")
                    del subs[v]
                    if pending is not None:
                        pending.views.pop(v, None)
            if pending is not None and not finish:
                if reached > committed:
                    # reading up to a rebuild's snapshot: the target waits, to go from one whole state to the
                    # next (the slot goes on: a restart takes a new snapshot anyway)
                    with SOURCE:
                        src.advance(format_lsn(reached))
                    committed = reached
            elif txns or finish:
                replaced = {}
                if finish:
                    newly_failed.update(pending.failed)
                    for v, target in pending.views.items():
                        self.unwritable.pop(v, None)
                        if v in subs:
                            replaced[v] = (target, self._writable(target, _diffs(subs[v])))
                    pending = None
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
                newly_failed = {}
                with SOURCE:
                    src.advance(lsn)
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
                with SOURCE:
                    src.advance(format_lsn(seen))
                committed = seen
            elif not msgs and time.monotonic() - idle_since >= 1.0 and parse_lsn(before) > committed:
                # nothing published committed before ``before``: the slot may release the WAL up to there
                # (at most once a second), so a source busy only with other tables does not fill its disk
                with SOURCE:
                    src.advance(before)
                idle_since = time.monotonic()
            if msgs:
                idle_since = time.monotonic()
            if why is not None:
                if pending is not None:
                    raise Resnapshot(f"{why}, while views were being rebuilt")
                keys = {n: v.key for n, v in tgt.views.items() if v.key}
                pending = self._rebuild(why, src, db, feeds, subs, keys, committed)
                if pending is not None:  # their statuses are written whole with them
                    in_error = {v: e for v, e in in_error.items() if v not in pending.views}
            elif not msgs:
                self._sleep(0.05)
        log.info("stopped at %s", format_lsn(committed))

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
        return _Rebuilding(parse_lsn(lsn), {t.oid for t in fresh}, views, failed)

    def _apply(self, db, feeds: dict, txns, pending: _Rebuilding | None) -> list[str]:
        """Consecutive source transactions into the engine in one step, each its own logical time (but the
        changes a rebuild's snapshot holds); the views that could not go on (a recursion past its limit, a
        sum past 64 bits)."""
        parts: dict[int, list] = {}
        for i, txn in enumerate(txns):
            for relid, ch in txn.changes.items():
                if pending is not None and relid in pending.tables and txn.end_lsn <= pending.lsn:
                    continue
                if relid in feeds:
                    parts.setdefault(relid, []).append((i, ch))
        changes = {feeds[r].table.engine: feeds[r].changes(db, p) for r, p in parts.items()}
        return db.apply_changes_arrow(changes, len(txns))


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
