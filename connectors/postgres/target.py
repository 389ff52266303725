"""The target side: each view is a Postgres table kept equal to the view, written one batch per transaction
together with the source LSN it reflects.

A view with a unique non-NULL key (its GROUP BY columns, or DISTINCT) gets that key as primary key and
deletes join on it. Any other view keeps duplicate rows as repeated rows: a delete of ``n`` copies of a row
removes ``n`` physical rows equal to it (matched through the row's text form, so NULLs match and the join
can hash). Data goes in with COPY into session temporary tables, then set-based DELETE and INSERT.
"""

from __future__ import annotations

import io
import logging
import time
import zlib
from dataclasses import dataclass

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from connectors.postgres._pgoutput import parse_lsn

log = logging.getLogger("ivm.sidecar")

__all__ = ["ViewTarget", "Target", "quote", "take_lock", "release_locks", "InUse"]

TARGET_LOCK, SLOT_LOCK = 0x69766D74, 0x69766D73  # advisory lock classes: a target schema, a slot


class InUse(Exception):
    """Another sidecar owns the target schema or the replication slot."""


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def take_lock(conn, kind: int, name: str, what: str, option: str) -> None:
    """Take the session-level advisory lock of ``name`` (a target schema or a slot) on ``conn``, or raise
    ``InUse`` naming the session that holds it."""
    key = zlib.crc32(name.encode()) & 0x7FFFFFFF
    for _ in range(20):  # a session that has just closed may not have released its locks yet
        got = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (kind, key)).fetchone()[0]
        if not conn.autocommit:
            conn.commit()
        if got:
            return
        time.sleep(0.1)
    row = conn.execute(
        "SELECT a.pid, a.application_name, a.client_addr, a.backend_start FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
        "AND l.classid = %s::oid AND l.objid = %s::oid AND l.objsubid = 2 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (kind, key),
    ).fetchone()
    if not conn.autocommit:
        conn.commit()
    holder = "a session that has just ended"
    if row is not None:
        pid, app, addr, since = row
        where = addr or "a local socket"
        holder = f"{app or 'a session'} (pid {pid}, from {where}, since {since:%Y-%m-%d %H:%M:%S})"
    raise InUse(f"{what} {name!r} is in use by {holder}; stop that sidecar, or give this one another {option}")


def release_locks(conn) -> None:
    """Release the session's advisory locks before closing it (the server may take a moment to end it)."""
    if conn.closed or conn.broken:
        return
    try:
        if not conn.autocommit:
            conn.rollback()
        conn.execute("SELECT pg_advisory_unlock_all()")
        if not conn.autocommit:
            conn.commit()
    except psycopg.Error:
        pass  # a connection that fails here ends, and its locks with it


@dataclass
class ViewTarget:
    """One view's table: column names and Postgres types, and the key positions (None: no unique key)."""

    name: str
    columns: list[str]
    pg_types: list[str]
    key: tuple[int, ...] | None

    def ddl(self, schema: str) -> str:
        cols = [f"{quote(c)} {t}" for c, t in zip(self.columns, self.pg_types, strict=True)]
        if self.key:
            cols.append(f"PRIMARY KEY ({', '.join(quote(self.columns[i]) for i in self.key)})")
        return f"CREATE TABLE {quote(schema)}.{quote(self.name)} ({', '.join(cols)})"

    def signature(self) -> tuple[list[str], list[str], list[str]]:
        """Column names, Postgres types and key columns, as ``Target._signature`` reads them back."""
        return self.columns, self.pg_types, [self.columns[k] for k in self.key or ()]


class Target:
    """A connection to the target database writing the views of one slot into ``schema``."""

    def __init__(self, dsn: str, schema: str, slot: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.slot = slot
        self.conn: psycopg.Connection | None = None
        self.views: dict[str, ViewTarget] = {}
        self.temp: dict[str, str] = {}  # view -> its session's change table

    def connect(self) -> None:
        """Connect and become the one writer of the schema (``InUse`` naming the sidecar that is)."""
        self.conn = psycopg.connect(self.dsn, application_name=f"ivm sidecar (slot {self.slot})")
        self.conn.execute("SET TimeZone = 'UTC'")
        self.conn.execute("SET DateStyle = 'ISO'")
        self.conn.commit()
        take_lock(self.conn, TARGET_LOCK, self.schema, "target schema", "--schema")

    def close(self) -> None:
        if self.conn is not None:
            try:
                release_locks(self.conn)
                self.conn.close()
            finally:
                self.conn = None

    def _t(self, name: str) -> str:
        return f"{quote(self.schema)}.{quote(name)}"

    def committed_lsn(self) -> str | None:
        """The source LSN the target reflects, if it has been written before."""
        c = self.conn
        exists = c.execute("SELECT to_regclass(%s)", (f"{quote(self.schema)}._ivm_progress",)).fetchone()[0]
        if exists is None:
            c.commit()
            return None
        row = c.execute(
            f"SELECT lsn::text FROM {self._t('_ivm_progress')} WHERE slot = %s", (self.slot,)
        ).fetchone()
        c.commit()
        return None if row is None else row[0]

    def replace_all(self, views: list[ViewTarget], contents: dict, lsn: str, failed: dict[str, str]) -> None:
        """In one transaction: create what is missing (recreating a table whose columns changed), make every
        view's table hold exactly its ``contents`` ``(rows, counts)``, mark the ``failed`` views (name -> why;
        their tables keep their contents) and record ``lsn``. Readers see the old or the new contents."""
        self.resume(views, contents, lsn, failed)

    def resume(
        self,
        views: list[ViewTarget],
        contents: dict,
        lsn: str | None,
        failed: dict[str, str],
        errors: dict[str, str | None] | None = None,
        known: list[ViewTarget] | None = None,
    ) -> None:
        """In one transaction: prepare ``views`` (see ``_prepare``), replace the contents of those in
        ``contents`` (name -> ``(rows, counts)``; the others keep theirs), mark the ``failed`` views, record
        the views' ``errors`` and, unless None, ``lsn``. ``known`` are further views the target writes later
        (a rebuild's, replaced whole when it ends)."""
        c = self.conn
        self._ensure_meta()
        for v in views:
            self._prepare(v)
        for name, err in failed.items():
            c.execute(
                f"INSERT INTO {self._t('_ivm_status')} VALUES (%s, 'failed', %s, now()) ON CONFLICT (view) "
                "DO UPDATE SET state = 'failed', error = excluded.error, changed_at = now() "
                "WHERE _ivm_status.state <> 'failed'",
                (name, err),
            )
        prepared = {v.name for v in views}
        self._errors({v: e for v, e in (errors or {}).items() if v in prepared})
        self.views = {v.name: v for v in [*views, *(known or [])]}
        statements = [s for v in views if v.name in contents for s in self._replace(v, *contents[v.name])]
        if lsn is not None:
            statements.append(self._progress_sql(lsn, 0))
        if statements:
            c.execute(";\n".join(statements))
        c.commit()

    def stale(self, views: list[ViewTarget]) -> set[str]:
        """The views whose table is missing or has other columns, types or key than ``views`` say."""
        out = {v.name for v in views if self._signature(v.name) != v.signature()}
        self.conn.commit()
        return out

    def _ensure_meta(self) -> None:
        """The schema, the progress and status tables; a note of another slot that wrote the schema before."""
        c = self.conn
        s = quote(self.schema)
        c.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        c.execute(
            f"CREATE TABLE IF NOT EXISTS {s}._ivm_progress (slot text PRIMARY KEY, lsn pg_lsn NOT NULL, "
            "source_txns bigint NOT NULL DEFAULT 0, committed_at timestamptz NOT NULL DEFAULT now())"
        )
        c.execute(
            f"CREATE TABLE IF NOT EXISTS {s}._ivm_status (view text PRIMARY KEY, state text NOT NULL, "
            "error text, changed_at timestamptz NOT NULL DEFAULT now())"
        )
        for (slot,) in c.execute(
            f"DELETE FROM {s}._ivm_progress WHERE slot <> %s RETURNING slot", (self.slot,)
        ).fetchall():
            log.warning(
                "target schema %s was written through slot %r until now; if that slot still exists on its "
                "source and nothing else reads it, drop it (SELECT pg_drop_replication_slot('%s')) so that it "
                "does not hold back WAL",
                self.schema,
                slot,
                slot,
            )

    def _prepare(self, v: ViewTarget) -> None:
        """The view's table (created again when its columns or key changed), its session's change table, and
        its status: running."""
        c = self.conn
        if self._signature(v.name) != v.signature():
            c.execute(f"DROP TABLE IF EXISTS {self._t(v.name)}")
            c.execute(v.ddl(self.schema))
        if not v.key:  # deletes stay possible should a publication of this database include the table
            c.execute(f"ALTER TABLE {self._t(v.name)} REPLICA IDENTITY FULL")
        self._change_table(v, again=True)
        c.execute(
            f"INSERT INTO {self._t('_ivm_status')} VALUES (%s, 'running', NULL, now()) ON CONFLICT (view) "
            "DO UPDATE SET state = 'running', error = NULL, changed_at = now()",
            (v.name,),
        )

    def _change_table(self, v: ViewTarget, again: bool = False) -> str:
        """The session's change table of a view (made like its table, plus the count), created when the
        session has none yet or ``again``."""
        chg = self.temp.get(v.name)
        if chg is not None and not again:
            return chg
        c = self.conn
        chg = chg or f"_ivm_chg_{len(self.temp)}"
        c.execute(f"DROP TABLE IF EXISTS pg_temp.{chg}")
        c.execute(f"CREATE TEMP TABLE {chg} (LIKE {self._t(v.name)}) ON COMMIT DELETE ROWS")
        c.execute(f"ALTER TABLE {chg} ADD COLUMN _ivm_n bigint NOT NULL")
        self.temp[v.name] = chg
        return chg

    def _replace(self, v: ViewTarget, rows: pa.Table, counts) -> list[str]:
        """The statements that make the view's table hold exactly ``rows`` (each ``counts`` times), after
        its change table is filled."""
        if not rows.num_rows:
            return [f"DELETE FROM {self._t(v.name)}"]
        self._copy(v, rows, counts)
        return [f"DELETE FROM {self._t(v.name)}", self._insert_sql(v)]

    def set_errors(self, errors: dict[str, str | None]) -> None:
        """Record which views are in error (name -> the error, or None once it is gone), in a transaction."""
        self._errors(errors or {})
        self.conn.commit()

    def _errors(self, errors: dict[str, str | None]) -> None:
        for name, err in errors.items():
            self.conn.execute(
                f"UPDATE {self._t('_ivm_status')} SET state = %s, error = %s, changed_at = now() "
                "WHERE view = %s",
                ("running" if err is None else "error", err, name),
            )

    def apply(
        self,
        diffs: dict,
        lsn: str,
        txns: int,
        failed: dict[str, str],
        errors: dict[str, str | None] | None = None,
        replaced: dict[str, tuple[ViewTarget, tuple[pa.Table, np.ndarray]]] | None = None,
    ) -> None:
        """One batch in one transaction: each view's consolidated changes ``(rows, diff)``, the views that
        stopped (name -> error), the views whose error changed (see ``set_errors``; a view in error leaves
        out the rows it cannot compute), the views whose table is ``replaced`` by whole new contents (their
        columns may have changed) and the LSN. One COPY per changed view, then one round trip for all the
        DELETEs and INSERTs and the LSN."""
        c = self.conn
        statements = []
        for name, (v, contents) in (replaced or {}).items():
            self._prepare(v)
            self.views[name] = v
            statements += self._replace(v, *contents)
        self._errors(errors or {})
        for name, (rows, counts) in diffs.items():
            if rows.num_rows == 0:
                continue
            v = self.views[name]
            self._copy(v, rows, counts)
            if (counts < 0).any():
                statements.append(self._delete_sql(v))
            if (counts > 0).any():
                statements.append(self._insert_sql(v))
        for name, err in failed.items():
            c.execute(
                f"UPDATE {self._t('_ivm_status')} SET state = 'failed', error = %s, changed_at = now() "
                "WHERE view = %s",
                (err, name),
            )
        c.execute(";\n".join([*statements, self._progress_sql(lsn, txns)]))
        c.commit()

    def _insert_sql(self, v: ViewTarget) -> str:
        """Rows of the change table with a positive count, each repeated count times."""
        cols = ", ".join(quote(x) for x in v.columns)
        picked = ", ".join(f"d.{quote(x)}" for x in v.columns)
        return (
            f"INSERT INTO {self._t(v.name)} ({cols}) SELECT {picked} FROM {self.temp[v.name]} d, "
            "generate_series(1, d._ivm_n) AS g(_ivm_i) WHERE d._ivm_n > 0"
        )

    def _delete_sql(self, v: ViewTarget) -> str:
        """Rows of the change table with a negative count: by key, or -count copies of an equal row (NULLs
        equal, matched on the row's text form so the join can hash)."""
        chg, t = self.temp[v.name], self._t(v.name)
        if v.key:
            on = " AND ".join(f"t.{quote(v.columns[k])} = d.{quote(v.columns[k])}" for k in v.key)
            return f"DELETE FROM {t} t USING {chg} d WHERE d._ivm_n < 0 AND {on}"
        row = f"ROW({', '.join(quote(x) for x in v.columns)})::text"
        return (
            f"DELETE FROM {t} t USING (SELECT x.ctid AS c FROM (SELECT r.ctid, d.n, row_number() OVER "
            f"(PARTITION BY r.k) AS rn FROM (SELECT ctid, {row} AS k FROM {t}) r "
            f"JOIN (SELECT {row} AS k, -_ivm_n AS n FROM {chg} WHERE _ivm_n < 0) d ON r.k = d.k) x "
            "WHERE x.rn <= x.n) z WHERE t.ctid = z.c"
        )

    def _progress_sql(self, lsn: str, txns: int) -> str:
        parse_lsn(lsn)  # only an LSN goes into the statement
        slot = self.slot.replace("'", "''")
        return (
            f"INSERT INTO {self._t('_ivm_progress')} VALUES ('{slot}', '{lsn}'::pg_lsn, {int(txns)}, now()) "
            "ON CONFLICT (slot) DO UPDATE SET lsn = excluded.lsn, "
            "source_txns = _ivm_progress.source_txns + excluded.source_txns, committed_at = now()"
        )

    def _signature(self, name: str) -> tuple[list[str], list[str], list[str]] | None:
        rows = self.conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (self._t(name),),
        ).fetchall()
        if not rows:
            return None
        pk = self.conn.execute(
            "SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(n, o) JOIN pg_attribute a "
            "ON a.attnum = k.n WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
            "AND a.attrelid = i.indrelid ORDER BY k.o",
            (self._t(name),),
        ).fetchall()
        return [r[0] for r in rows], [r[1] for r in rows], [r[0] for r in pk]

    def _copy(self, v: ViewTarget, rows: pa.Table, counts) -> None:
        """A view's changed rows with their counts into its change table."""
        chg = self._change_table(v)
        data = rows.append_column("_ivm_n", pa.array(counts, pa.int64()))
        for i, f in enumerate(data.schema):
            if pa.types.is_duration(f.type):  # an interval as PostgreSQL reads one: its days, then the time
                data = data.set_column(i, f.name, _interval_text(data.column(i)))
        buf = io.BytesIO()
        pacsv.write_csv(data, buf, pacsv.WriteOptions(include_header=False))
        cols = ", ".join(quote(x) for x in [*v.columns, "_ivm_n"])
        with self.conn.cursor().copy(f"COPY {chg} ({cols}) FROM STDIN (FORMAT csv)") as cp:
            cp.write(buf.getbuffer())


def _interval_text(col: pa.ChunkedArray) -> pa.Array:
    """Intervals (microseconds: days of 24 hours and a time of day, as ivm holds ``timestamp - timestamp``) as
    text PostgreSQL reads as the same interval: ``1 days 3600000000 microseconds``."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    micros = np.asarray(arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    days = np.where(micros < 0, -(-micros // 86_400_000_000), micros // 86_400_000_000)
    rest = micros - days * 86_400_000_000
    text = pc.binary_join_element_wise(
        pc.cast(pa.array(days), pa.string()),
        " days ",
        pc.cast(pa.array(rest), pa.string()),
        " microseconds",
        "",
    )
    return pc.if_else(arr.is_valid(), text, pa.nulls(len(arr), pa.string()))
