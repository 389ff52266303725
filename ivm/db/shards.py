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

import pickle
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from ivm.db.arrow import arrow_type, converter
from ivm.db.connection import Connection, connect
from ivm.db.parsing import parse
from ivm.db.storage import Versions
from ivm.engine.exchange import Collective, ShardGroup, Sharding, shard_of
from ivm.engine.strings import StringPool
from ivm.errors import Error, InternalError, NotSupportedError, OperationalError
from sql.catalog import Table

__all__ = ["Shards", "shards_of_rows", "portable_error"]


class Shards:
    """``count`` connections in lockstep, each one shard of every table and view.

    All of them live here unless ``hosted`` names the range of shards this process holds, the others being in
    other processes reached through ``collective`` (``ivm.engine.exchange.Collective``); then every process
    runs the same calls in the same order, and each decision (commit or roll back, which relations every
    shard made) is agreed among all of them."""

    def __init__(self, count: int, hosted: range | None = None, collective: Collective | None = None) -> None:
        if count < 1:
            raise ValueError("a sharded database needs at least one shard")
        self.count = count
        self.group = ShardGroup(count, hosted, collective)
        self.hosted = self.group.hosted
        if not self.hosted:
            raise ValueError("a process of a sharded database hosts at least one shard")
        self.shards: list[Connection] = [connect() for _ in self.hosted]
        for i, db in zip(self.hosted, self.shards, strict=True):
            db.engine.sharding = Sharding(i, count, self.group.transport(i))
        self.broken: str | None = None

    def _together(self, fn: Callable[[int, Connection], Any]) -> tuple[list[Any], Error | None]:
        """``fn(i, shard)`` in every hosted shard at once: their results, and the error of the first shard
        (of all processes) whose call failed. An unexpected error breaks the group, and is raised: the
        shards' states can no longer be trusted."""
        if self.broken is not None:
            raise InternalError(f"the sharded database cannot be used any more: {self.broken}")
        out: list[Any] = [None] * len(self.shards)
        errors: list[BaseException | None] = [None] * len(self.shards)

        def run(local: int) -> None:
            try:
                out[local] = fn(self.hosted[local], self.shards[local])
            except BaseException as err:
                errors[local] = err
                if not isinstance(err, Error):
                    self.group.abort()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(self.shards))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for err in errors:
            if err is not None and (self.group.broken or not isinstance(err, Error)):
                self.broken = f"{type(err).__name__}: {err}"
                raise err
        return out, self._first([e for e in errors if e is not None])

    def _first(self, errors: list[Error]) -> Error | None:
        """The first of every process's ``errors`` (this process's, in shard order)."""
        if self.group.collective is None:
            return errors[0] if errors else None
        every = self.group.collective.all_gather(pickle.dumps(portable_error(errors[0]) if errors else None))
        return next((e for e in map(pickle.loads, every) if e is not None), None)

    def _all(self, fn: Callable[[int, Connection], Any]) -> list[Any]:
        """``_together``, raising the first error."""
        out, err = self._together(fn)
        if err is not None:
            raise err
        return out

    def _agreed(self, values: list[Any]) -> list[Any]:
        """Every process's ``values`` (small, picklable), in shard order."""
        if self.group.collective is None:
            return values
        return [v for m in self.group.collective.all_gather(pickle.dumps(values)) for v in pickle.loads(m)]

    def execute(self, sql: str, dialect="postgres") -> None:
        """Run ``sql`` in every shard: DDL, or a change every shard makes to the rows it holds (a DELETE or
        an UPDATE that keeps each row's key), committed only if every shard accepts it. New rows go to the
        shards of their keys through ``insert_arrow``. ``dialect`` is ``Connection.execute``'s: a CREATE VIEW
        may be read as Spark SQL."""
        statements = parse(sql) if dialect == "postgres" else []  # Spark SQL: a CREATE VIEW
        if any(s.find(exp.ForeignKey, exp.Reference) for s in statements):
            raise NotSupportedError(
                "a sharded database has no foreign keys: the rows they read lie in other shards"
            )
        if any(isinstance(s, (exp.Insert, exp.Copy)) for s in statements):
            raise NotSupportedError("a sharded database takes new rows by insert_arrow, not INSERT or COPY")
        if any(isinstance(s, (exp.Update, exp.Delete)) for s in statements):
            self._transaction(lambda i, db: db.execute(sql))
            return
        _, err = self._together(lambda i, db: db.execute(sql, dialect=dialect))
        if err is not None:
            self._reconcile()
            raise err

    def _reconcile(self) -> None:
        """After DDL some shards refused (a view whose rows are in error in some shards only), the relations
        it made in the others are dropped there, so that every shard holds the same ones again."""
        for kind, held in (
            ("VIEW", self._agreed([sorted(db.views) for db in self.shards])),
            ("TABLE", self._agreed([sorted(db.tables) for db in self.shards])),
        ):
            everywhere = set.intersection(*map(set, held))
            for db, names in zip(self.shards, held[self.hosted.start : self.hosted.stop], strict=True):
                for name in sorted(set(names) - everywhere):
                    db.execute(f"DROP {kind} {exp.to_identifier(name).sql(dialect='postgres')}")

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Insert the rows of ``data``, each in the shard of its key."""
        self.change([(table, "insert", data)])

    def delete_arrow(self, table: str, data: pa.Table) -> None:
        """Delete the rows of ``data`` (whole rows), each in the shard of its key."""
        self.change([(table, "delete", data)])

    def _transaction(self, change: Callable[[int, Connection], Any]) -> None:
        """``change`` in one transaction in every shard: committed together if every shard made it, else
        rolled back everywhere (the first error raised)."""

        def attempt(i: int, db: Connection) -> None:
            db.execute("BEGIN")
            change(i, db)

        _, err = self._together(attempt)
        if err is not None:
            self._all(lambda i, db: db.execute("ROLLBACK"))
            raise err
        self._all(lambda i, db: db.execute("COMMIT"))

    def _route(self, table: str, data: pa.Table) -> list[pa.Table]:
        """``data`` split by the shard of each row's key."""
        t = self.shards[0].catalog.tables.get(table)
        if t is None:
            raise ValueError(f"table {table!r} does not exist")
        dest = shards_of_rows(t, data, self.count)
        return [data.take(pa.array(np.flatnonzero(dest == i))) for i in range(self.count)]

    def change(self, writes: list[tuple[str, str, pa.Table]], whole: bool = True) -> None:
        """Make ``writes`` (table, ``"insert"`` or ``"delete"``, rows) in one transaction, each row in the shard
        of its key. Every process may be given all the rows (``whole``), each keeping those of its shards;
        else each row must belong to a shard of this process (routed by ``shards_of_rows`` already)."""
        parts = []
        for table, kind, data in writes:
            if kind not in ("insert", "delete"):
                raise ValueError(f"a write is an insert or a delete, not {kind!r}")
            routed = self._route(table, data)
            elsewhere = sum(p.num_rows for i, p in enumerate(routed) if i not in self.hosted)
            if elsewhere and not whole:
                raise InternalError(f"{elsewhere} rows of {table!r} were routed to the wrong process")
            parts.append((table, kind, routed))

        def write(i: int, db: Connection) -> None:
            for table, kind, routed in parts:
                if routed[i].num_rows:
                    (db.insert_arrow if kind == "insert" else db.delete_arrow)(table, routed[i])

        self._transaction(write)

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema of ``table``'s rows, as ``insert_arrow`` takes them. (A shard's connection is not
        to be queried alone: its engine steps only together with the other shards.)"""
        t = self.shards[0].catalog.tables.get(table)
        if t is None:
            raise ValueError(f"table {table!r} does not exist")
        return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in t.columns])

    def contents(self, relation: str) -> pa.Table:
        """The rows of a table or view in the hosted shards: the union of their parts (of the whole, when
        every shard is here). A query over the parts would not be one over the whole (an aggregate would give
        a row per shard): make it a view."""
        db = self.shards[0]
        if relation not in db.tables and relation not in db.views:
            raise ValueError(f"relation {relation!r} does not exist")
        name = exp.to_identifier(relation).sql(dialect="postgres")
        return pa.concat_tables(self._all(lambda i, db: db.execute(f"SELECT * FROM {name}").fetch_arrow()))

    def save(self, versions: list[Versions], number: int) -> None:
        """Checkpoint each hosted shard's state as ``number`` in its ``Versions`` (in hosted order)."""
        self._all(lambda i, db: versions[i - self.hosted.start].save(db, number))

    def load(self, versions: list[Versions], at_most: int) -> int | None:
        """Give the shards (new, empty) the state of the newest checkpoint numbered at most ``at_most`` that
        every shard of every process holds whole: its number, or None if there is none (the shards stay
        empty). Shards whose newest checkpoints differ (one damaged, or never written) are refused."""
        start = self.hosted.start
        picked = self._all(lambda i, db: versions[i - start].newest(at_most))
        numbers = self._agreed([p[1] if p is not None else None for p in picked])
        if len(set(numbers)) > 1:
            paths = [v.store.path for v in versions]
            raise OperationalError(
                f"the shards' newest checkpoints are of different steps ({numbers}, in shard order; "
                f"this process's: {paths}): the state cannot be loaded"
            )
        if numbers[0] is None:
            return None
        self._all(lambda i, db: versions[i - start].load(db, *picked[i - start]))
        return numbers[0]

    def close(self) -> None:
        for db in self.shards:
            db.close()


def portable_error(err: Error) -> Error:
    """``err`` as it can cross to another process (its class and message, where it does not pickle)."""
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:
        return type(err)(str(err)) if isinstance(err, Error) else InternalError(str(err))
    return err


def shards_of_rows(table: Table, data: pa.Table | pa.RecordBatch, count: int) -> np.ndarray:
    """The shard (0 .. count - 1) of each row of ``data`` (rows of ``table``): the shard of its key, the
    primary key or else all columns, as the engine holds its values (any process computes the same)."""
    key = table.primary_key or tuple(range(len(table.columns)))
    names = data.schema.names
    cols, valid, texts = [], [], []
    with StringPool().active():  # text is hashed by its strings, whatever pool codes it
        for j, p in enumerate(key):
            c = table.columns[p]
            if c.name not in names:
                raise ValueError(f"the rows lack key column {c.name!r}")
            arr = data.column(c.name)
            col, mask = converter(arr.type, c.type, c.name)(arr)
            cols.append(col)
            valid.append(mask)
            if c.type.kind == "text":
                texts.append(j)
        return shard_of(cols, valid, texts, count, data.num_rows)
