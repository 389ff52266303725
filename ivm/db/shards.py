"""A database in N shards: N connections holding one part each of every table and view, stepping together.

Each shard is an ordinary connection whose engine is one shard of a sharded engine (``ivm.engine.exchange``):
a table's rows live in the shard of their key (the primary key, or all columns), and every arrangement a view
builds holds the keys that fall to its shard, the updates crossing between shards as Arrow with text as text.
Every statement runs in every shard at once (one thread each here, one task each under Spark), so the
shards' catalogs, times and dataflows stay the same; a relation's contents are the union of its parts.

A change is routed to the shards of its rows' keys and made in a transaction in every shard; it commits only
if every shard accepted its part (constraints are checked in the shard that holds the key), else every shard
rolls back. This is the local form of the distributed engine; the design is in docs/design/sharding.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from ivm.db.arrow import converter
from ivm.db.connection import Connection, connect
from ivm.db.parsing import parse
from ivm.engine.exchange import LocalGroup, Sharding, shard_of
from ivm.errors import Error, InternalError, NotSupportedError

__all__ = ["Shards"]


class Shards:
    """``count`` connections in lockstep, each one shard of every table and view."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("a sharded database needs at least one shard")
        self.count = count
        self.group = LocalGroup(count)
        self.shards: list[Connection] = [connect() for _ in range(count)]
        for i, db in enumerate(self.shards):
            db.engine.sharding = Sharding(i, count, self.group.transport(i))
        self.broken: str | None = None

    def _together(self, fn: Callable[[int, Connection], Any]) -> list[Any]:
        """``fn(i, shard)`` in every shard at once; the first shard's error is raised (an unexpected one
        breaks the group: the shards' states can no longer be trusted)."""
        if self.broken is not None:
            raise InternalError(f"the sharded database cannot be used any more: {self.broken}")
        out: list[Any] = [None] * self.count
        errors: list[BaseException | None] = [None] * self.count

        def run(i: int) -> None:
            try:
                out[i] = fn(i, self.shards[i])
            except BaseException as err:
                errors[i] = err
                if not isinstance(err, Error):
                    self.group.abort()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(self.count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for err in errors:
            if err is not None and (self.group.broken or not isinstance(err, Error)):
                self.broken = f"{type(err).__name__}: {err}"
                raise err
        for err in errors:
            if err is not None:
                raise err
        return out

    def execute(self, sql: str) -> None:
        """Run ``sql`` in every shard: DDL, or a change every shard makes to the rows it holds (a DELETE or
        an UPDATE that keeps each row's key), committed only if every shard accepts it. New rows go to the
        shards of their keys through ``insert_arrow``."""
        statements = parse(sql)
        if any(isinstance(s, (exp.Insert, exp.Copy)) for s in statements):
            raise NotSupportedError("a sharded database takes new rows by insert_arrow, not INSERT or COPY")
        if any(isinstance(s, (exp.Update, exp.Delete)) for s in statements):
            self._transaction(lambda i, db: db.execute(sql))
        else:
            try:
                self._together(lambda i, db: db.execute(sql))
            except Error:
                self._reconcile()
                raise

    def _reconcile(self) -> None:
        """After DDL some shards refused (a view whose rows are in error in some shards only), the relations
        it made in the others are dropped there, so that every shard holds the same ones again."""
        for kind, held in (
            ("VIEW", [set(db.views) for db in self.shards]),
            ("TABLE", [set(db.tables) for db in self.shards]),
        ):
            everywhere = set.intersection(*held)
            for db, names in zip(self.shards, held, strict=True):
                for name in sorted(names - everywhere):
                    db.execute(f"DROP {kind} {exp.to_identifier(name).sql(dialect='postgres')}")

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Insert the rows of ``data``, each in the shard of its key."""
        self._routed(table, data, lambda db, part: db.insert_arrow(table, part))

    def delete_arrow(self, table: str, data: pa.Table) -> None:
        """Delete the rows of ``data`` (whole rows), each in the shard of its key."""
        self._routed(table, data, lambda db, part: db.delete_arrow(table, part))

    def _routed(self, table: str, data: pa.Table, write: Callable[[Connection, pa.Table], None]) -> None:
        parts = self._route(table, data)
        self._transaction(lambda i, db: write(db, parts[i]) if parts[i].num_rows else None)

    def _transaction(self, change: Callable[[int, Connection], Any]) -> None:
        """``change`` in one transaction in every shard: committed together if every shard made it, else
        rolled back everywhere (the first error raised)."""

        def attempt(i: int, db: Connection) -> BaseException | None:
            db.execute("BEGIN")
            try:
                change(i, db)
            except Error as err:
                return err
            return None

        failed = [e for e in self._together(attempt) if e is not None]
        if failed:
            self._together(lambda i, db: db.execute("ROLLBACK"))
            raise failed[0]
        self._together(lambda i, db: db.execute("COMMIT"))

    def _route(self, table: str, data: pa.Table) -> list[pa.Table]:
        """``data`` split by the shard of each row's key."""
        db = self.shards[0]
        if table not in db.catalog.tables:
            raise ValueError(f"table {table!r} does not exist")
        t = db.catalog.tables[table]
        key = t.primary_key or tuple(range(len(t.columns)))
        names = data.schema.names
        cols, valid, texts = [], [], []
        with db.pool.active():
            for j, p in enumerate(key):
                c = t.columns[p]
                if c.name not in names:
                    raise ValueError(f"the rows lack key column {c.name!r}")
                arr = data.column(c.name)
                col, mask = converter(arr.type, c.type, c.name)(arr)
                cols.append(col)
                valid.append(mask)
                if c.type.kind == "text":
                    texts.append(j)
            dest = shard_of(cols, valid, texts, self.count, data.num_rows)
        return [data.take(pa.array(np.flatnonzero(dest == i))) for i in range(self.count)]

    def contents(self, relation: str) -> pa.Table:
        """The rows of a table or view: the union of every shard's part. (A query over the parts would not
        be one over the whole: an aggregate would give a row per shard. Make it a view.)"""
        db = self.shards[0]
        if relation not in db.tables and relation not in db.views:
            raise ValueError(f"relation {relation!r} does not exist")
        name = exp.to_identifier(relation).sql(dialect="postgres")
        return pa.concat_tables(self._together(lambda i, db: db.execute(f"SELECT * FROM {name}").fetch_arrow()))

    def close(self) -> None:
        for db in self.shards:
            db.close()
