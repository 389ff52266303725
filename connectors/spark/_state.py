"""The sink's state directory: what the engine has applied, kept so that a restarted query rebuilds it exactly.

Layout::

    definition.json                   the schema and views the state belongs to
    log/<batch id>.parquet            the change rows of each applied micro-batch, as received
    snapshot-<batch id>/<table>.parquet   the source tables' contents after that batch (optional compaction)

Every file is written under a temporary name, flushed and renamed into place, so a reader finds either the
whole file or none. The last applied batch id is the largest id among the log and the newest snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ivm.engine.files import sync_dir
from sql.errors import SqlError

__all__ = ["StateDir", "write_atomically"]

_ID = "{:012d}"


def write_atomically(table: pa.Table, path: Path) -> None:
    """Write ``table`` as the Parquet file ``path``, replacing any previous file in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        pq.write_table(table, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_dir(str(path.parent))


class StateDir:
    """The log of applied micro-batches and the snapshots that compact it."""

    def __init__(self, path: str | os.PathLike, definition: dict) -> None:
        self.path = Path(path)
        self.log = self.path / "log"
        self.log.mkdir(parents=True, exist_ok=True)
        meta = self.path / "definition.json"
        text = json.dumps(definition, sort_keys=True, indent=1)
        if meta.exists():
            if json.loads(meta.read_text()) != json.loads(text):
                raise SqlError(
                    f"the state directory {str(self.path)!r} belongs to other tables or views; "
                    "use a new state directory (and a new checkpoint) for a changed definition"
                )
        else:
            tmp = meta.with_name(".definition.json.tmp")
            tmp.write_text(text)
            os.replace(tmp, meta)

    # -- reading ----------------------------------------------------------------------------------------
    def snapshot(self) -> tuple[int, Path] | None:
        """The newest complete snapshot: its batch id and folder."""
        found = [
            (int(p.name.split("-", 1)[1]), p)
            for p in self.path.glob("snapshot-*")
            if p.is_dir() and not p.name.endswith(".tmp")
        ]
        return max(found) if found else None

    def logged(self, after: int = -1) -> list[int]:
        """The batch ids in the log greater than ``after``, in order."""
        ids = [int(p.stem) for p in self.log.glob("*.parquet") if not p.name.startswith(".")]
        return sorted(i for i in ids if i > after)

    def read_batch(self, batch_id: int) -> pa.Table:
        return pq.read_table(self.log / f"{_ID.format(batch_id)}.parquet")

    def last_batch(self) -> int:
        """The last batch id applied (-1 if none)."""
        snap = self.snapshot()
        done = snap[0] if snap else -1
        logged = self.logged(done)
        return logged[-1] if logged else done

    # -- writing ----------------------------------------------------------------------------------------
    def record_batch(self, batch_id: int, data: pa.Table) -> None:
        """Record that micro-batch ``batch_id`` (these change rows) is applied."""
        write_atomically(data, self.log / f"{_ID.format(batch_id)}.parquet")

    def write_snapshot(self, batch_id: int, tables: dict[str, pa.Table]) -> None:
        """Store the tables' contents after ``batch_id``, then drop the log and snapshots it makes redundant."""
        final = self.path / f"snapshot-{_ID.format(batch_id)}"
        tmp = self.path / f"snapshot-{_ID.format(batch_id)}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for name, data in tables.items():
            write_atomically(data, tmp / f"{name}.parquet")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        sync_dir(str(self.path))
        for old in self.path.glob("snapshot-*"):
            if old != final and old.is_dir():
                shutil.rmtree(old)
        for i in self.logged():
            if i <= batch_id:
                (self.log / f"{_ID.format(i)}.parquet").unlink()

    @staticmethod
    def read_snapshot(folder: Path) -> dict[str, pa.Table]:
        """The tables of a snapshot."""
        return {p.stem: pq.read_table(p) for p in folder.glob("*.parquet") if not p.name.startswith(".")}
