"""The source side: publication, logical replication slot, the snapshot consistent with it, and the stream.

The slot is created over a replication connection with ``CREATE_REPLICATION_SLOT ... LOGICAL pgoutput
(SNAPSHOT 'export')``; a second connection imports that snapshot (``SET TRANSACTION SNAPSHOT`` in a REPEATABLE
READ transaction) and COPYs the tables. Every transaction committed before the slot's consistent point is in
the snapshot, every later one comes out of the slot: nothing is missed or counted twice. Changes are read with
``pg_logical_slot_peek_binary_changes`` (whole transactions) and the slot is advanced with
``pg_replication_slot_advance`` only after the target has committed them.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg.conninfo import make_conninfo

from connectors.postgres._catalog import SourceTable
from connectors.postgres.target import SLOT_LOCK, quote, release_locks, take_lock

__all__ = ["Source", "SlotInUse"]

log = logging.getLogger("ivm.sidecar")


class SlotInUse(Exception):
    """The replication slot is held by another connection (for example one of a process just killed)."""


class Source:
    def __init__(self, dsn: str, slot: str, publication: str) -> None:
        self.dsn = dsn
        self.slot = slot
        self.publication = publication
        self.conn: psycopg.Connection | None = None
        self.zone: str | None = None

    def connect(self) -> None:
        """Connect and become the one user of the slot (``InUse`` naming the sidecar that is)."""
        name = f"ivm sidecar (slot {self.slot})"
        self.conn = psycopg.connect(self.dsn, autocommit=True, application_name=name)
        # the time zone the source's own sessions compute in, unless it is UTC at every date
        self.zone = self.conn.execute(
            "SELECT CASE WHEN (TIMESTAMPTZ '2024-01-15 12:00+00' AT TIME ZONE z, "
            "TIMESTAMPTZ '2024-07-15 12:00+00' AT TIME ZONE z) = ('2024-01-15 12:00', '2024-07-15 12:00') "
            "THEN NULL ELSE z END "
            "FROM current_setting('TimeZone') AS z"
        ).fetchone()[0]
        _session(self.conn)
        take_lock(self.conn, SLOT_LOCK, self.slot, "replication slot", "--slot")

    def close(self) -> None:
        if self.conn is not None:
            try:
                release_locks(self.conn)
                self.conn.close()
            finally:
                self.conn = None

    def ensure_publication(self, tables: list[SourceTable]) -> None:
        """Create the publication for the tables, or add the tables an existing one lacks."""
        c = self.conn
        row = c.execute(
            "SELECT puballtables FROM pg_publication WHERE pubname = %s", (self.publication,)
        ).fetchone()
        names = ", ".join(t.sql for t in tables)
        if row is None:
            c.execute(f"CREATE PUBLICATION {quote(self.publication)} FOR TABLE {names}")
            log.info("created publication %s for %s", self.publication, ", ".join(t.engine for t in tables))
            return
        if row[0]:
            return
        have = {
            r[0]
            for r in c.execute(
                "SELECT c.oid FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid "
                "JOIN pg_class c ON c.oid = pr.prrelid WHERE p.pubname = %s",
                (self.publication,),
            ).fetchall()
        }
        missing = [t for t in tables if t.oid not in have]
        if missing:
            added = ", ".join(t.sql for t in missing)
            c.execute(f"ALTER PUBLICATION {quote(self.publication)} ADD TABLE {added}")
            log.info("added %s to publication %s", ", ".join(t.engine for t in missing), self.publication)

    def drop_slot(self) -> None:
        """Drop the slot if it exists; ``SlotInUse`` when another connection holds it."""
        row = self.conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
        ).fetchone()
        if row is None:
            return
        if row[0] is not None:
            raise SlotInUse(f"replication slot {self.slot!r} is in use by process {row[0]}")
        try:
            self.conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        except psycopg.errors.ObjectInUse as err:
            raise SlotInUse(str(err).strip()) from err

    def snapshot(
        self, tables: list[SourceTable], stopping: Callable[[], bool], again: bool = False
    ) -> tuple[str, dict[str, pa.Table]] | None:
        """A new slot and the tables' contents at its consistent point: (LSN, engine name -> the table's text
        values, every column as strings), or None when asked to stop on the way. ``again`` reads tables while
        the slot stays where it is (through a temporary slot): the contents are those of every transaction
        that ends at or before the LSN, the slot's stream has the others."""
        if not again:
            self.drop_slot()
        repl = psycopg.connect(make_conninfo(self.dsn, replication="database"), autocommit=True)
        reader = None
        try:
            name, temporary = (f"{self.slot[:57]}_again", " TEMPORARY") if again else (self.slot, "")
            slot, lsn, snap, _ = repl.execute(
                f"CREATE_REPLICATION_SLOT {quote(name)}{temporary} LOGICAL pgoutput (SNAPSHOT 'export')"
            ).fetchone()
            reader = psycopg.connect(self.dsn, application_name="ivm sidecar snapshot")
            _session(reader)
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            reader.execute(f"SET TRANSACTION SNAPSHOT '{snap}'")
            repl.close()  # the importing transaction now holds the snapshot itself
            log.info("snapshot: slot %s consistent at %s; reading %d tables", slot, lsn, len(tables))
            out, start, total = {}, time.monotonic(), 0
            for i, t in enumerate(tables, 1):
                if stopping():
                    return None
                out[t.engine] = _copy_table(reader, t, start, total)
                total += out[t.engine].num_rows
                el = max(time.monotonic() - start, 1e-9)
                log.info(
                    "snapshot: table %s done, %d rows (%d/%d tables, %d rows, %.0f rows/s)",
                    t.engine,
                    out[t.engine].num_rows,
                    i,
                    len(tables),
                    total,
                    total / el,
                )
            reader.rollback()
            return lsn, out
        finally:
            repl.close()
            if reader is not None:
                reader.close()

    def peek(self, max_changes: int) -> list[bytes]:
        """The pgoutput messages of the next whole transactions after the slot's confirmed position."""
        rows = self.conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, 'proto_version', '1', "
            "'publication_names', %s)",
            (self.slot, max_changes, self.publication),
        ).fetchall()
        return [r[0] for r in rows]

    def position(self) -> str:
        """The source's current WAL insert position."""
        return self.conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]

    def advance(self, lsn: str) -> None:
        """Release WAL up to ``lsn`` (the end of the last transaction the target committed)."""
        self.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, lsn))


def _session(conn: psycopg.Connection) -> None:
    """Text output ivm reads back: UTC timestamps, ISO dates, shortest exact floats."""
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("SET DateStyle = 'ISO'")
    conn.execute("SET extra_float_digits = 1")
    conn.execute("SET IntervalStyle = 'postgres'")


def _copy_table(conn: psycopg.Connection, t: SourceTable, start: float, done: int) -> pa.Table:
    """The table's rows as text (what Postgres prints), every column a string column."""
    names = [c[0] for c in t.columns]
    kept = set(t.kept())
    cols = ", ".join(quote(n) if i in kept else "NULL" for i, n in enumerate(names))
    chunks, size, rows, last = [], 0, 0, time.monotonic()
    with conn.cursor().copy(f"COPY (SELECT {cols} FROM {t.sql}) TO STDOUT (FORMAT csv)") as cp:
        for chunk in cp:
            b = bytes(chunk)
            chunks.append(b)
            size += len(b)
            rows += b.count(b"\n")
            if time.monotonic() - last > 2.0:
                last = time.monotonic()
                log.info(
                    "snapshot: table %s, about %d rows read (%.0f rows/s)",
                    t.engine,
                    rows,
                    (done + rows) / max(last - start, 1e-9),
                )
    data = b"".join(chunks)
    if not data:
        return pa.Table.from_arrays(
            [pa.array([], type=pa.string()) for _ in names], names=[f"c{i}" for i in range(len(names))]
        )
    return pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=[f"c{i}" for i in range(len(names))], block_size=1 << 24),
        parse_options=pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False),
        convert_options=pacsv.ConvertOptions(
            column_types={f"c{i}": pa.string() for i in range(len(names))},
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            null_values=[""],
        ),
    )
