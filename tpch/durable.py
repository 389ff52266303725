"""Durable TPC-H: ``python -m tpch.bench --durable [--sf 1] [--json]``.

One database directory holding the 22 TPC-H views, on one machine in one run:
(a) the time to reopen it after a clean stop and after SIGKILL (with commits in the log to replay), against
    the time to build it from the data (load every table, compute every view); run as root, also after
    emptying the page cache, as after a reboot (``reopen_cold_seconds``);
(b) resident memory of a process right after reopening, against the building process's before its stop;
(c) the checkpoint's write rate at the clean stop, against a plain sequential write of as many bytes to the
    same disk;
(d) p50/p99 of one small transaction (an order with its lineitems inserted, or deleted) with the log on
    (synced at each commit) and off; then, with a checkpoint every 256 KB of log written in the background,
    the longest a commit waited for one (``checkpoint_stall_ms_max``) and the slowest transaction;
(e) bytes on disk per byte of arrangement in memory.
Reopening runs in fresh processes, so that (a) and (b) count everything a restart does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import ivm
from ivm.engine.files import Written
from tpch import SCHEMA
from tpch.data import TABLES, generate, refresh_stream
from tpch.queries import QUERIES, query

__all__ = ["run"]

ROOT = Path(__file__).resolve().parent.parent


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _disk_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _apply(db, txn) -> None:
    db.execute("BEGIN")
    for table, rows, sign in txn:
        (db.insert_arrow if sign > 0 else db.delete_arrow)(table, rows)
    db.execute("COMMIT")


def _small(held: dict, i: int) -> list:
    """The i-th small transaction: add a held-back order with its lineitems, then delete it again."""
    orders, lineitem = held["orders"], held["lineitem"]
    okeys = orders.column("o_orderkey").to_numpy()
    j = (i // 2) % len(okeys)
    o = orders.slice(j, 1)
    li = lineitem.filter(pa.array(lineitem.column("l_orderkey").to_numpy() == okeys[j]))
    return [("orders", o, 1), ("lineitem", li, 1)] if i % 2 == 0 else [("lineitem", li, -1), ("orders", o, -1)]


def _latencies(db, held: dict, n: int, start: int) -> list[float]:
    out = []
    for i in range(start, start + n):
        txn = _small(held, i)
        t0 = time.perf_counter()
        _apply(db, txn)
        out.append(time.perf_counter() - t0)
    return out


def _reopen(path: str, kill_after: int | None, sf: float) -> dict:
    """Open ``path`` in a new process: its open time and resident memory; with ``kill_after``, that process
    then commits that many small transactions and is SIGKILLed (its figures then come from the journal)."""
    out = os.path.join(path, "..", "reopen.json")
    cmd = [sys.executable, "-m", "tpch.durable", "--child", path, out, str(sf), str(kill_after or 0)]
    child = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if kill_after:
        if child.returncode != -signal.SIGKILL:
            raise RuntimeError(f"the child was to be killed: {child.stderr[-2000:]}")
    elif child.returncode:
        raise RuntimeError(child.stderr[-2000:])
    with open(out) as f:
        return json.load(f)


def _child(path: str, out: str, sf: float, kill_after: int) -> None:
    t0 = time.perf_counter()
    db = ivm.connect(path)
    opened = time.perf_counter() - t0
    figures = {"open_seconds": opened, "rss_bytes": _rss_bytes()}
    with open(out, "w") as f:
        json.dump(figures, f)
    if kill_after:
        tables = generate(sf)
        stream = refresh_stream(tables, fraction=0.1, batches=10, seed=1)
        held = {t: pa.concat_tables([b[t][0] for b in stream.batches]) for t in ("orders", "lineitem")}
        # commits that the next open replays from the log, then a crash
        _latencies(db, held, kill_after, 10_000)
        os.kill(os.getpid(), signal.SIGKILL)
    db.close()


def _sequential_write_rate(directory: str, nbytes: int) -> float:
    """Bytes per second of writing ``nbytes`` to one new file in ``directory`` and syncing it."""
    block = np.random.default_rng(0).integers(0, 255, 1 << 24, dtype=np.uint8).tobytes()
    path = os.path.join(directory, "sequential.bin")
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)
        f.flush()
        os.fsync(f.fileno())
    rate = nbytes / (time.perf_counter() - t0)
    os.remove(path)
    return rate


def _drop_page_cache() -> bool:
    """Empty the OS page cache (root only, Linux); whether it was done."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


def run(sf: float, txns: int, as_json: bool, directory: str | None = None) -> dict:
    from tpch.bench import _changes, _transactions, memory_bytes

    tables = generate(sf)
    stream = refresh_stream(tables, fraction=0.1, batches=10, seed=1)
    held = {t: pa.concat_tables([b[t][0] for b in stream.batches]) for t in ("orders", "lineitem")}
    work = tempfile.mkdtemp(prefix="ivm-durable-", dir=directory)
    path = os.path.join(work, "db")
    res: dict = {"sf": sf}
    try:
        # build: every table loaded and every view computed, in transactions of 10,000 rows
        t0 = time.perf_counter()
        db = ivm.connect(path, synchronous=False)
        db.execute(SCHEMA)
        for q in QUERIES:
            db.execute(f"CREATE MATERIALIZED VIEW {q} AS {query(q)}")
        loaded = [(t, stream.initial[t], 1) for t in TABLES]
        for txn in _transactions(loaded, 10_000):
            _apply(db, txn)
        res["build_seconds"] = time.perf_counter() - t0
        del loaded
        _ = _changes  # the load alone: the refresh batches are the small transactions' source
        # (d) small transactions with the log on (synced) and off, alternating by insert-and-delete pair so
        # that neither side gets the warmer half
        store = db.store
        # the build's log was written without syncs, and a checkpoint of it may be under way: (d) measures the
        # log of small transactions, not the flush of the build's writes, so those go to disk first
        store.wait()
        os.sync()
        store.synchronous = store.log.synchronous = True
        # at least 1,000 transactions on each side: the difference of two medians of a disk's sync times
        # needs that many to be steady; a bare append-and-sync of a log-sized record in the same directory,
        # interleaved too, says what the disk alone costs
        on, off, bare = [], [], []
        probe = os.open(os.path.join(work, "sync-probe"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for pair in range(2 * max(txns, 500)):
                db.store = store if pair % 2 == 0 else None
                (on if pair % 2 == 0 else off).extend(_latencies(db, held, 2, 2 * pair))
                t0 = time.perf_counter()
                os.write(probe, b"\0" * 4096)
                os.fdatasync(probe)
                bare.append(time.perf_counter() - t0)
        finally:
            os.close(probe)
        db.store = store
        res["disk_sync_ms_p50"] = float(np.percentile(bare, 50) * 1e3)
        res["txn_ms_p50_log_on"] = float(np.percentile(on, 50) * 1e3)
        res["txn_ms_p99_log_on"] = float(np.percentile(on, 99) * 1e3)
        res["txn_ms_p50_log_off"] = float(np.percentile(off, 50) * 1e3)
        res["txn_ms_p99_log_off"] = float(np.percentile(off, 99) * 1e3)
        res["log_overhead_ms_p50"] = res["txn_ms_p50_log_on"] - res["txn_ms_p50_log_off"]
        # the longest stall: small transactions while checkpoints (every 256 KB of log) run in the background
        store.checkpoint_bytes, s0 = 256 << 10, len(store.stalls)
        during = np.array(_latencies(db, held, 2 * txns, 2 * txns)) * 1e3
        store.wait()
        store.checkpoint_bytes = 64 << 20
        res["background_checkpoints"] = len(store.stalls) - s0
        res["checkpoint_stall_ms_max"] = max(store.stalls[s0:], default=0.0) * 1e3
        res["txn_ms_p99_with_checkpoints"] = float(np.percentile(during, 99))
        res["txn_ms_max_with_checkpoints"] = float(during.max())
        # the small transactions run without the log must reach it: a checkpoint takes them
        store.checkpoint(db)
        state = memory_bytes(db)
        res["state_bytes"] = state
        res["rss_before_stop_bytes"] = _rss_bytes()
        # (c) the clean stop's checkpoint writes everything (the files written so far are forgotten)
        for f in Path(path, "data").iterdir():
            f.unlink()
        store.written = Written()
        t0 = time.perf_counter()
        store.checkpoint(db)
        seconds = time.perf_counter() - t0
        written = _disk_bytes(os.path.join(path, "data"))
        db.close()
        del db
        res["checkpoint_bytes"] = written
        res["checkpoint_seconds"] = seconds
        res["checkpoint_write_rate"] = written / seconds
        res["disk_bytes"] = _disk_bytes(path)
        res["disk_bytes_per_state_byte"] = res["disk_bytes"] / state
        # (a), (b): reopen after the clean stop, then after SIGKILL with commits in the log
        clean = _reopen(path, None, sf)
        res["reopen_clean_seconds"] = clean["open_seconds"]
        res["rss_after_reopen_bytes"] = clean["rss_bytes"]
        res["rss_after_reopen_over_before"] = clean["rss_bytes"] / res["rss_before_stop_bytes"]
        _reopen(path, 50, sf)
        killed = _reopen(path, None, sf)
        res["reopen_after_kill_seconds"] = killed["open_seconds"]
        res["reopen_speedup_vs_build"] = res["build_seconds"] / killed["open_seconds"]
        res["reopen_clean_speedup_vs_build"] = res["build_seconds"] / clean["open_seconds"]
        if _drop_page_cache():  # as after a reboot: every file read from the disk
            cold = _reopen(path, None, sf)
            res["reopen_cold_seconds"] = cold["open_seconds"]
            res["reopen_cold_speedup_vs_build"] = res["build_seconds"] / cold["open_seconds"]
        # last, so that its bytes do not push the state's files out of the page cache before the reopens
        res["sequential_write_rate"] = _sequential_write_rate(work, written)
        res["checkpoint_write_ratio"] = res["checkpoint_write_rate"] / res["sequential_write_rate"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if as_json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:32s} {v:,.3f}" if isinstance(v, float) else f"{k:32s} {v:,}")
    return res


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
