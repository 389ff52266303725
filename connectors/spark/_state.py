"""The sink's state directory: the engine's tables and views as an ivm database, and what they belong to.

Layout::

    definition.json     the schema and views the state belongs to
    db/                 an ivm database directory (``ivm.connect``): checkpoints of the arrangements and the
                        write-ahead log of the commits after them

Each micro-batch is one commit group of that database (``Connection.commit_group``), whose commits carry the
batch id in ``db.positions[RECORD]``: a restart finds every micro-batch whose group was written whole and none
of the one that was under way, so the state is that of the last recorded batch and the one before it is kept
until the next is recorded (the database keeps its last two checkpoints, the log after the older).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ivm.engine import files
from ivm.engine.files import join, listdir, resolve, sync_dir
from sql.errors import SqlError

__all__ = [
    "RECORD",
    "StateDir",
    "location",
    "joined",
    "write_atomically",
    "write_bytes_atomically",
    "read_bytes",
    "read_parquet",
    "remove_tree",
    "remove",
]

RECORD = "spark"  # the key of the sink's record in ``db.positions``: {"batch": the last micro-batch applied}


def location(path: str | os.PathLike) -> Path | str:
    """Where an output goes: a local path (also for a ``file://`` URI), or the URI of another file system
    ``pyarrow.fs`` knows (``s3a://`` is read as ``s3://``)."""
    text = os.fspath(path)
    if "://" not in text:
        return Path(text)
    scheme, rest = text.split("://", 1)
    if scheme == "file":
        return Path(urllib.parse.unquote(urllib.parse.urlparse(text).path))
    return f"s3://{rest}" if scheme == "s3a" else text


def joined(base: Path | str, name: str) -> Path | str:
    return base / name if isinstance(base, Path) else join(base, name)


def write_atomically(table: pa.Table, path: Path | str) -> None:
    """Write ``table`` as the Parquet file ``path``, replacing any previous file at once: locally in one
    rename, elsewhere as one object written whole."""
    _replace(path, lambda f: pq.write_table(table, f))


def write_bytes_atomically(data: bytes, path: Path | str) -> None:
    """Write ``data`` as the file ``path``, replacing any previous file at once (as ``write_atomically``)."""
    _replace(path, lambda f: f.write(data))


def _replace(path: Path | str, fill: Callable[[BinaryIO], object]) -> None:
    """Write the file ``path`` through ``fill(stream)``: locally to a temporary file, synced and renamed into
    place (the folder synced too); elsewhere as one object, which an object store shows only once whole."""
    if not isinstance(path, Path):
        fs, inner = resolve(path)
        fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(inner) as out:
            fill(out)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        fill(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_dir(str(path.parent))


def read_bytes(path: Path | str) -> bytes:
    """The whole file ``path`` (local or a URI); ``FileNotFoundError`` if there is none."""
    if isinstance(path, Path):
        return path.read_bytes()
    fs, inner = resolve(path)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        raise FileNotFoundError(path)
    with fs.open_input_stream(inner) as f:
        return f.read()


def read_parquet(path: Path | str) -> pa.Table:
    """The Parquet file ``path`` (local or a URI); ``FileNotFoundError`` if there is none."""
    if isinstance(path, Path):
        return pq.read_table(path)
    fs, inner = resolve(path)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        raise FileNotFoundError(path)
    return pq.read_table(inner, filesystem=fs)


def remove(path: Path | str) -> None:
    """Delete the file ``path`` if it is there."""
    files.remove(str(path))


def remove_tree(path: str, whole: bool = False) -> None:
    """Delete what the directory ``path`` holds (and the directory too, if ``whole``)."""
    fs, local = resolve(path)
    if whole:
        if fs.get_file_info(local).type != pafs.FileType.NotFound:
            fs.delete_dir(local)
    else:
        fs.delete_dir_contents(local, missing_dir_ok=True)


class StateDir:
    """A state directory, checked to belong to one definition (schema and views): a local folder, or a place
    on any file system ``pyarrow.fs`` knows (``s3://``, ``s3a://``), since an ivm database may be on either."""

    def __init__(self, path: str | os.PathLike, definition: dict) -> None:
        self.path = location(path)
        self.database = str(joined(self.path, "db"))
        names = listdir(str(self.path))
        if "log" in names or any(n.startswith("snapshot-") for n in names):
            raise SqlError(
                f"the state directory {str(self.path)!r} holds a sink state of an earlier ivm (a log of "
                "micro-batches and snapshots); this ivm keeps an engine database there: start the query with "
                "a new checkpoint and a new state directory"
            )
        meta = joined(self.path, "definition.json")
        text = json.dumps(definition, sort_keys=True, indent=1)
        try:
            saved = json.loads(read_bytes(meta))
        except FileNotFoundError:
            write_bytes_atomically(text.encode(), meta)
            return
        if saved != json.loads(text):
            raise SqlError(
                f"the state directory {str(self.path)!r} belongs to other tables or views; "
                "use a new state directory (and a new checkpoint) for a changed definition"
            )
