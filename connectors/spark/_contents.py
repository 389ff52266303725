"""Contents of several views committed together: one micro-batch's files named by a manifest.

Layout of a ``ParquetContentsSet`` folder::

    manifest.json                      {"batch_id": 7, "views": {"ByCust": "ByCust/batch-000000000007.parquet",
                                        "top": "top/batch-000000000003.parquet"}, "previous": {...}, ...}
    ByCust/batch-000000000007.parquet  a view's whole contents, written at the micro-batch that changed it
    top/batch-000000000003.parquet

With shards (``view_sink(..., shards=N)``) a view's contents are in parts, one per task, each written by
its task when the view changed; the manifest names the list of parts that make the view's contents at that
micro-batch (a view unchanged keeps its older files)::

    ByCust/batch-000000000007/part-00000.parquet
    ByCust/batch-000000000005/part-00001.parquet

After each micro-batch that changed some views, their new contents go to new files named by batch id; once
all are written, the manifest is replaced in one piece (a rename locally, one object elsewhere), naming for
every view the file that holds its contents at that micro-batch (an unchanged view keeps its older file). A
reader takes the manifest, then the files it names: whatever moment it reads at, crash or not, these all
belong to one micro-batch. Files named by neither of the newest two manifests are deleted, so a reader that
took a manifest has one more micro-batch's time to read its files (``read_contents`` starts again should they
be gone). The manifest also keeps the one before it and the files deleted after it, so a micro-batch written
again (Spark's replay after a failure) writes the same manifest and deletes the same files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from connectors.spark._outputs import Output, ViewBatch, stamped
from connectors.spark._state import (
    joined,
    location,
    read_bytes,
    read_parquet,
    remove,
    remove_tree,
    write_atomically,
    write_bytes_atomically,
)
from sql.errors import SqlError

__all__ = ["ParquetContentsSet", "read_contents", "MANIFEST", "contents_part", "part_folder"]

MANIFEST = "manifest.json"
_EMPTY = {"batch_id": -1, "views": {}}


class ParquetContentsSet(Output):
    """Keep the current contents of ``views`` (default: every view of the sink) in the folder ``folder``, all
    of one micro-batch at any moment: a Parquet file per view and micro-batch that changed it, and a manifest
    naming for each view the file of the newest micro-batch written whole. Read them with ``read_contents``.

    The first micro-batch a process applies writes every view's file, changed or not; later ones only those
    of the views they changed (none at all: the manifest stays). A folder whose manifest is of a later
    micro-batch than the one being written belongs to another query and is refused."""

    def __init__(self, folder: str | os.PathLike, views: Sequence[str] | None = None) -> None:
        self.folder = location(folder)
        self.views = None if views is None else list(views)
        self.manifest: dict | None = None  # the manifest in the folder, as last read or written
        self.batch_id: int | None = None  # the micro-batch being written
        self.base: dict = _EMPTY  # the manifest it follows (batch_id, views)
        self.seen: set[str] = set()  # views written to in this micro-batch, changed or not
        self.staged: dict[str, str | list[str]] = {}  # view -> file (or parts) written in this micro-batch
        self.written: set[str] = set()  # views whose files this process wrote into a manifest

    def parts_to_write(self, view: str, tasks: int) -> bool:
        """With shards, at the micro-batch begun by ``start``: whether every part of ``view`` must be written
        (this process has not written the view yet, or the manifest has no ``tasks`` parts of it to keep)."""
        held = self.base["views"].get(view)
        return view not in self.written or not isinstance(held, list) or len(held) != tasks

    def write_parts(self, view: str, written: list[bool | None]) -> None:
        """With shards: the tasks wrote the parts of ``view`` marked True into ``part_folder`` (by part number),
        left those marked False as they were; None marks a part whose shards hold the view in error, and then
        the view's last contents computed whole stay named."""
        self.seen.add(view)
        folder = part_folder(view, self.batch_id)
        if None in written:  # parts that changed meanwhile go unnamed: the next micro-batch writes them all
            self.written.discard(view)
            if not any(n.startswith(folder + "/") for n in _named((self.manifest or _EMPTY)["views"])):
                remove_tree(str(joined(self.folder, folder)), whole=True)  # what this micro-batch wrote
            return
        if not any(written):
            return
        held = self.base["views"].get(view)
        parts = []
        for k, new in enumerate(written):
            if new:
                parts.append(f"{folder}/{contents_part(k)}")
            elif isinstance(held, list) and len(held) == len(written):
                parts.append(held[k])
            else:
                raise RuntimeError(f"part {k} of view {view!r} was neither written nor held")
        self.staged[view] = parts

    def start(self, batch_id: int) -> None:
        """Start writing micro-batch ``batch_id`` (again, after a failure): find the manifest it follows."""
        if self.manifest is None:
            self.manifest = _load(self.folder) or _EMPTY
        current = self.manifest
        if current["batch_id"] > batch_id:
            raise SqlError(
                f"the contents folder {str(self.folder)!r} holds micro-batch {current['batch_id']}, later than "
                f"micro-batch {batch_id} being written: it belongs to another query (or the state directory "
                "was replaced); give this query a folder of its own, or empty it"
            )
        if current["batch_id"] == batch_id:  # a micro-batch whose manifest was written, applied again
            self.base = current["previous"]
            # the files it named are written again, so that the manifest comes out the same
            self.written -= {v for v, name in current["views"].items() if _of_batch(v, name, batch_id)}
        else:
            self.base = {"batch_id": current["batch_id"], "views": current["views"]}
        self.batch_id, self.seen, self.staged = batch_id, set(), {}

    def write(self, batch: ViewBatch) -> None:
        if batch.batch_id != self.batch_id:
            self.start(batch.batch_id)
        view = batch.view
        self.seen.add(view)
        if not batch.diffs.num_rows and view in self.written and view in self.base["views"]:
            return
        if batch.error is not None:
            return  # in error: the last contents computed whole (if any) stay named
        name = _file(view, batch.batch_id)
        write_atomically(stamped(batch.contents(), batch), joined(self.folder, name))
        self.staged[view] = name

    def finish(self, batch_id: int) -> None:
        """Replace the manifest once every view's file of ``batch_id`` is written, then delete the files that
        the newest two manifests do not name."""
        if batch_id != self.batch_id or not self.staged:
            return  # nothing changed: the manifest in place holds for this micro-batch too
        current = self.manifest or _EMPTY
        views = {v: self.base["views"][v] for v in sorted(self.seen) if v in self.base["views"]}
        views.update(self.staged)
        if current["batch_id"] == batch_id:
            obsolete = current["obsolete"]  # written before, then the micro-batch failed: the same again
        else:
            older = _named(current.get("previous", _EMPTY)["views"])
            obsolete = sorted(older - _named(views) - _named(self.base["views"]))
        manifest = {"batch_id": batch_id, "views": views, "previous": self.base, "obsolete": obsolete}
        write_bytes_atomically(json.dumps(manifest, indent=1).encode(), joined(self.folder, MANIFEST))
        self.manifest = manifest
        self.written.update(self.staged)
        for name in obsolete:
            remove(joined(self.folder, name))
        kept = {name.rsplit("/", 1)[0] for name in _named(views) | _named(self.base["views"])}
        for folder in sorted({name.rsplit("/", 1)[0] for name in obsolete if name.count("/") > 1} - kept):
            remove_tree(str(joined(self.folder, folder)), whole=True)  # a micro-batch's parts, all gone


def _file(view: str, batch_id: int) -> str:
    """The file of ``view``'s contents written at micro-batch ``batch_id``, relative to the folder."""
    return f"{view}/batch-{batch_id:012d}.parquet"


def contents_part(task: int) -> str:
    """With shards: the name of task ``task``'s part of a view's contents, in its ``part_folder``."""
    return f"part-{task:05d}.parquet"


def part_folder(view: str, batch_id: int) -> str:
    """With shards: the folder of the parts of ``view``'s contents written at ``batch_id``, relative to the
    contents folder."""
    return f"{view}/batch-{batch_id:012d}"


def _of_batch(view: str, entry: str | list[str], batch_id: int) -> bool:
    """Whether a manifest's entry for ``view`` names files written at ``batch_id``."""
    if isinstance(entry, list):
        return any(name.startswith(part_folder(view, batch_id) + "/") for name in entry)
    return entry == _file(view, batch_id)


def _named(views: dict) -> set[str]:
    """The files a manifest's views name (a view's whole contents, or its parts)."""
    return {name for entry in views.values() for name in (entry if isinstance(entry, list) else [entry])}


def _load(folder: Path | str) -> dict | None:
    """The manifest in ``folder``, or None if there is none."""
    try:
        return json.loads(read_bytes(joined(folder, MANIFEST)))
    except FileNotFoundError:
        return None


def read_contents(folder: str | os.PathLike, attempts: int = 5) -> tuple[int, dict[str, pa.Table]]:
    """The contents of the views of a ``ParquetContentsSet`` folder, all of one micro-batch: its batch id and
    each view's rows. Should the sink delete a file between reading the manifest and the file (it moved on by
    two micro-batches meanwhile), the manifest is read again, up to ``attempts`` times."""
    where = location(folder)
    for attempt in range(attempts):
        manifest = _load(where)
        if manifest is None:
            raise FileNotFoundError(f"no {MANIFEST} in {os.fspath(folder)!r}: no micro-batch was written there")
        try:
            tables = {v: _read(where, entry) for v, entry in manifest["views"].items()}
        except OSError:
            if attempt == attempts - 1 or (_load(where) or _EMPTY)["batch_id"] == manifest["batch_id"]:
                raise  # not a file deleted by a newer micro-batch
            continue
        return manifest["batch_id"], tables
    raise AssertionError("unreachable")


def _read(folder, entry: str | list[str]) -> pa.Table:
    """A view's contents: its one file, or its parts together."""
    if not isinstance(entry, list):
        return read_parquet(joined(folder, entry))
    return pa.concat_tables([read_parquet(joined(folder, name)).replace_schema_metadata() for name in entry])
