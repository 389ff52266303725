"""``ivm sidecar``: keep views over Postgres tables up to date as tables in Postgres.

    ivm sidecar --source DSN --views FILE [--target DSN] [--slot NAME] [--publication NAME] [--schema NAME]

At start (and after any restart) the sidecar takes a new snapshot consistent with a new replication slot,
computes the views and makes every target table equal to them in one target transaction with the slot's LSN.
It then follows the slot: each batch of source transactions goes into the engine one transaction per logical
time, and the views' net changes go into the target in one transaction with the LSN reached; only then is the
slot advanced. A reader of the target sees whole source transactions only, and a crash at any moment leaves
the target at a committed LSN that the next start replaces atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import psycopg
import pyarrow as pa

import ivm
from connectors.postgres._catalog import (
    ConfigError,
    SourceTable,
    parse_views,
    read_source_tables,
    tables_read,
    unique_key,
    view_pg_types,
)
from connectors.postgres._changes import TableFeed, consolidate
from connectors.postgres._pgoutput import Decoder, Relation, Transaction, format_lsn, parse_lsn
from connectors.postgres._types import pg_type
from connectors.postgres.source import SlotInUse, Source
from connectors.postgres.target import Target, ViewTarget
from sql.arrow import to_arrow_column
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


class _Side:
    """Turns a lost or refused connection into ``Unreachable`` naming the side."""

    def __init__(self, side: str) -> None:
        self.side = side

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if err is not None and isinstance(err, (psycopg.OperationalError, psycopg.InterfaceError)):
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

    # -- the outer loop: restart on lost connections, with backoff -------------------------------------------
    def run(self) -> None:
        delay = 0.5
        while not self.stopping:
            try:
                self._run_once()
                return
            except (Unreachable, SlotInUse) as err:
                log.warning("%s; retrying in %.1fs", err, delay)
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
            with SOURCE:
                src.connect()
                tables = read_source_tables(src.conn, self.views_file.tables)
                pg_types = view_pg_types(src.conn, self.views_file)
            db, views, feeds, subs = self._engine(tables, pg_types)
            with SOURCE:
                src.ensure_publication(self.views_file.tables)
            with TARGET:
                tgt.connect()
                before = tgt.committed_lsn()
            if before:
                log.info("target reflects the source up to %s; rebuilding from a new snapshot", before)
            with SOURCE:
                snap = src.snapshot([tables[t] for t in self.views_file.tables], lambda: self.stopping)
            if snap is None:
                return
            lsn, data = snap
            db.execute("BEGIN")
            for name, t in data.items():
                if t.num_rows:
                    db.insert_arrow(name, t)
            db.execute("COMMIT")
            contents = {name: _diffs(sub) for name, sub in subs.items()}
            with TARGET:
                tgt.replace_all(list(views.values()), contents, lsn)
            log.info(
                "initial state written at %s: %s",
                lsn,
                ", ".join(f"{n} {int(d.sum())} rows" for n, (_, d) in contents.items()),
            )
            self._stream(src, tgt, db, tables, views, feeds, subs, parse_lsn(lsn))
        finally:
            src.close()
            tgt.close()

    # -- engine ---------------------------------------------------------------------------------------------
    def _engine(self, tables: dict[str, SourceTable], pg_types: dict[str, list[str]] | None):
        db = ivm.connect()
        for t in tables.values():
            db.execute(t.engine_ddl())
        for stmt in self.views_file.statements:
            try:
                db.execute(stmt)
            except SqlError as err:
                raise ConfigError(f"views file: {err} in {stmt[:80]!r}") from err
        views, subs = {}, {}
        plans = {n: db.views[n].view.plan for n in self.views_file.views}
        keys = {n: t.primary_key for n, t in db.catalog.tables.items() if t.primary_key}
        for name in self.views_file.views:
            v = db.views[name].view
            names = [c.name for c in v.columns]
            if pg_types is not None and len(pg_types[name]) == len(names):
                types = pg_types[name]
            else:
                types = [
                    _IVM_TO_PG.get(c.type.kind) or f"numeric({c.type.precision},{c.type.scale})"
                    for c in v.columns
                ]
            views[name] = ViewTarget(name, names, types, unique_key(v.plan, keys))
            if views[name].key:
                keys[name] = views[name].key
            subs[name] = db.subscribe(name, snapshot=False)
        self.reads = {n: tables_read(plans[n], plans) for n in plans}
        feeds = {t.name: TableFeed(t) for t in tables.values()}
        return db, views, feeds, subs

    # -- the stream -----------------------------------------------------------------------------------------
    def _stream(self, src, tgt, db, tables, views, feeds, subs, start_lsn: int) -> None:
        decoder = Decoder()
        ignored: set[str] = set()  # tables whose definition changed
        newly_failed: dict[str, str] = {}
        in_error = {v: e for v, e in db.view_errors().items() if v in subs}
        if in_error:
            for v, e in in_error.items():
                log.error("view %r is in error: %s", v, e)
            with TARGET:
                tgt.set_errors(in_error)
        committed = start_lsn
        idle_since = time.monotonic()
        while not self.stopping:
            with SOURCE:
                before = src.position()
                msgs = src.peek(self.batch_changes)
            if not msgs:
                # nothing published committed before ``before``: the slot may release the WAL up to there
                # (at most once a second), so a source busy only with other tables does not fill its disk
                if time.monotonic() - idle_since >= 1.0 and parse_lsn(before) > committed:
                    with SOURCE:
                        src.advance(before)
                    idle_since = time.monotonic()
                self._sleep(0.05)
                continue
            idle_since = time.monotonic()
            txns, seen = [], committed
            for m in msgs:
                t = decoder.feed(m)
                if decoder.new_relations:
                    for rel in decoder.new_relations:
                        self._check_relation(rel, tables, ignored, db, views, subs, newly_failed)
                    decoder.new_relations.clear()
                if t is not None:
                    seen = max(seen, t.end_lsn)
                    if t.end_lsn > committed:
                        txns.append(t)
            if not txns:  # all already in the target: only the slot is behind
                with SOURCE:
                    src.advance(format_lsn(seen))
                continue
            rows_in = sum(t.rows for t in txns)
            for group in _groups(txns):
                for v in self._apply(db, decoder, feeds, ignored, group):
                    msg = f"view {v!r} stopped: {db.views[v].error}"
                    log.error(msg)
                    newly_failed[v] = msg
                    db.execute(f"DROP VIEW {v}")
                    del subs[v]
            diffs = {name: _diffs(sub) for name, sub in subs.items()}
            lsn = format_lsn(txns[-1].end_lsn)
            now = {v: e for v, e in db.view_errors().items() if v in subs}
            changed = {v: now.get(v) for v in {*now, *in_error} if now.get(v) != in_error.get(v)}
            for v, e in changed.items():
                if e is None:
                    log.info("view %r recovered", v)
                else:
                    log.error("view %r is in error: %s", v, e)
            in_error = now
            with TARGET:
                tgt.apply(diffs, lsn, len(txns), newly_failed, changed)
            done = time.time()
            newly_failed = {}
            with SOURCE:
                src.advance(lsn)
            committed = txns[-1].end_lsn
            lag = done - txns[-1].commit_ts_us / 1e6
            log.info(
                "batch lsn=%s txns=%d rows_in=%d rows_out=%d lag=%.3fs",
                lsn,
                len(txns),
                rows_in,
                sum(int(abs(d).sum()) for _, d in diffs.values()),
                lag,
            )
            if self.on_batch is not None:
                self.on_batch(txns, done)
        log.info("stopped at %s", format_lsn(committed))

    def _apply(self, db, decoder: Decoder, feeds: dict[str, TableFeed], ignored: set[str], txns) -> list[str]:
        """Consecutive source transactions into the engine in one step, each its own logical time; the views
        that could not go on (a value they cannot compute, a recursion past its limit)."""
        parts: dict[str, list] = {}
        for i, txn in enumerate(txns):
            for relid, ch in txn.changes.items():
                name = decoder.relations[relid].name
                if name not in ignored and name in feeds:
                    parts.setdefault(name, []).append((i, ch))
        changes = {name: feeds[name].changes(db, p) for name, p in parts.items()}
        return db.apply_changes_arrow(changes, len(txns))

    def _check_relation(self, rel: Relation, tables, ignored, db, views, subs, failed) -> None:
        """A Relation message that differs from the table read at start: the views reading it stop."""
        t = tables.get(rel.name)
        if t is None or rel.name in ignored:
            return
        change = _describe_change(t, rel)
        if change is None:
            return
        ignored.add(rel.name)
        stopped = [v for v in self.views_file.views if rel.name in self.reads[v] and v in views]
        for v in reversed(stopped):
            msg = f"source table {rel.name!r} changed ({change}); view {v!r} stopped"
            log.error(msg)
            failed[v] = msg
            db.execute(f"DROP VIEW {v}")
            del subs[v]


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


def _describe_change(t: SourceTable, rel: Relation) -> str | None:
    before = {n: typ for n, typ, _ in t.columns}
    after = {n: (oid, mod) for n, oid, mod, _ in rel.columns}
    parts = [f"column {n} added" for n in after if n not in before]
    parts += [f"column {n} dropped" for n in before if n not in after]
    for n, (oid, mod) in after.items():
        if n in before and (before[n].oid, before[n].typmod) != (oid, mod):
            try:
                now = pg_type(oid, mod, f"type oid {oid}").sql
            except ValueError:
                now = f"an unsupported type (oid {oid})"
            parts.append(f"column {n} changed type from {before[n].sql} to {now}")
    if not parts and [n for n, *_ in t.columns] != [c[0] for c in rel.columns]:
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
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ivm sidecar", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", required=True, help="source database connection string")
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
