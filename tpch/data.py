"""TPC-H data from tpchgen-cli, and refresh streams cut into batches.

The refresh streams follow TPC-H §5.3 in shape: RF1 inserts new orders together with their lineitems, RF2
deletes existing orders together with their lineitems. The new orders of RF1 are orders generated at the chosen
scale factor and held back from the initial load; RF2 deletes orders of the initial load.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["TABLES", "generate", "RefreshStream", "refresh_stream"]

TABLES = ("nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem")


def _tpchgen() -> str:
    exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
    if not os.path.exists(exe):
        raise RuntimeError("tpchgen-cli is not installed (pip install tpchgen-cli)")
    return exe


def generate(sf: float, directory: str | os.PathLike | None = None) -> dict[str, pa.Table]:
    """The eight tables at scale factor ``sf`` (generated once per directory, then read back)."""
    directory = Path(directory or Path(os.environ.get("IVM_TPCH_CACHE", "/tmp/ivm-tpch")) / f"sf{sf:g}")
    if not _complete(directory):
        # generated beside and renamed into place whole: a process reading the cache meanwhile, or one killed
        # while generating, never sees part of the tables
        directory.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory.parent, prefix=f".{directory.name}-") as tmp:
            subprocess.run(
                [_tpchgen(), "parquet", "-s", f"{sf:g}", f"--output-dir={tmp}"],
                check=True,
                capture_output=True,
            )
            if not _complete(directory):
                shutil.rmtree(directory, ignore_errors=True)  # left incomplete by an older generation
            with contextlib.suppress(OSError):  # another process put the same tables there first
                os.rename(tmp, directory)
            Path(tmp).mkdir(exist_ok=True)  # for the clean-up, when renamed away
    return {t: _plain_strings(pq.read_table(directory / f"{t}.parquet")) for t in TABLES}


def _complete(directory: Path) -> bool:
    return all((directory / f"{t}.parquet").exists() for t in TABLES)


def _plain_strings(table: pa.Table) -> pa.Table:
    """String-view columns as plain strings, which every Arrow kernel accepts."""
    fields = [
        pa.field(f.name, pa.string(), f.nullable) if pa.types.is_string_view(f.type) else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields))


@dataclass
class RefreshStream:
    """The initial load and a sequence of refresh batches: each a dict table -> (inserted, deleted) rows."""

    initial: dict[str, pa.Table]
    batches: list[dict[str, tuple[pa.Table | None, pa.Table | None]]]


def refresh_stream(tables: dict[str, pa.Table], fraction: float, batches: int, seed: int = 0) -> RefreshStream:
    """Hold back ``fraction`` of the orders (with their lineitems) for RF1 and pick as many loaded orders for
    RF2; interleave them into ``batches`` batches, each inserting some new orders and deleting some old ones."""
    rng = np.random.default_rng(seed)
    orders, lineitem = tables["orders"], tables["lineitem"]
    keys = orders.column("o_orderkey").to_numpy()
    n_new = max(int(len(keys) * fraction), batches)
    order = rng.permutation(len(keys))
    new_keys = np.sort(keys[order[:n_new]])
    old_keys = np.sort(keys[order[n_new : 2 * n_new]])
    is_new_o = pc.is_in(orders.column("o_orderkey"), pa.array(new_keys))
    is_new_l = pc.is_in(lineitem.column("l_orderkey"), pa.array(new_keys))
    initial = dict(tables)
    initial["orders"] = orders.filter(pc.invert(is_new_o))
    initial["lineitem"] = lineitem.filter(pc.invert(is_new_l))
    out = []
    for new_part, old_part in zip(
        np.array_split(new_keys, batches), np.array_split(old_keys, batches), strict=True
    ):
        new_a, old_a = pa.array(new_part), pa.array(old_part)
        out.append(
            {
                "orders": (
                    orders.filter(pc.is_in(orders.column("o_orderkey"), new_a)),
                    orders.filter(pc.is_in(orders.column("o_orderkey"), old_a)),
                ),
                "lineitem": (
                    lineitem.filter(pc.is_in(lineitem.column("l_orderkey"), new_a)),
                    lineitem.filter(pc.is_in(lineitem.column("l_orderkey"), old_a)),
                ),
            }
        )
    return RefreshStream(initial, out)
