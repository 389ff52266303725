"""End-to-end benchmark of the sidecar: ``python -m connectors.bench postgres [--json] [options]``.

Client threads run the workload's multi-statement transactions (``connectors.postgres.workload``) against a
Postgres (a throwaway local cluster unless ``--dsn`` is given) for ``--seconds`` while the sidecar maintains
the workload's seven views into the same database. Reported:

- ``changes_per_s``: the sidecar's saturation point. The load runs while the sidecar is held after its first
  target commit (the slot keeps the WAL); then it is let go, and this is the source row changes it applied
  (into the target, committed) per second from then until it had caught up. Measured so because the client
  threads, Postgres and the sidecar share the machine: run together, the load is what bounds the rate;
- ``changes_per_s_live``, ``latency_p50_ms`` / ``latency_p99_ms``: the load and the sidecar run together;
  changes applied per second from the start of the load until the sidecar has caught up with its last
  transaction, and per source transaction the time from its commit in the source (the commit timestamp in
  the replication stream) to the commit of the target transaction that contains it;
- then the same load paced at ``--paced`` changes per second (default 1,000): ``latency_p50_ms_paced`` and
  ``latency_p99_ms_paced``, the latency a source below saturation sees.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time

import numpy as np
import psycopg

from connectors.postgres.cluster import LocalCluster
from connectors.postgres.sidecar import Sidecar
from connectors.postgres.workload import VIEWS, Load, bump_marker, setup, wait_for_marker

__all__ = ["main", "run"]

NAME = "ivm_bench"  # the slot, publication and target schema the benchmark (re)creates


def run(dsn: str, seconds: float, threads: int, pause: float, rate: float | None = None) -> dict:
    """One measurement against the database ``dsn``: its workload tables and the ``ivm_bench`` slot,
    publication and schema are recreated."""
    _fresh(dsn)
    latencies: list[np.ndarray] = []
    applied = [0]

    def on_batch(txns, committed_at: float) -> None:
        latencies.append(committed_at - np.array([t.commit_ts_us for t in txns], dtype=np.float64) / 1e6)
        applied[0] += sum(t.rows for t in txns)

    car = Sidecar(dsn, VIEWS, slot=NAME, publication=NAME, schema=NAME, on_batch=on_batch)
    with car.in_thread():
        wait_for_marker(dsn, 0, NAME, timeout=120)
        latencies.clear()
        applied[0] = 0
        load = Load(dsn, threads=threads, pause=pause, seed=7, rate=rate).start()
        start = time.monotonic()
        time.sleep(seconds)
        load.stop()
        marker = bump_marker(dsn)
        wait_for_marker(dsn, marker, NAME, timeout=600)
        elapsed = time.monotonic() - start
    lat = np.concatenate(latencies) * 1000 if latencies else np.zeros(1)
    return {
        "changes_per_s": round(applied[0] / elapsed, 1),
        "latency_p50_ms": round(float(np.percentile(lat, 50)), 2),
        "latency_p99_ms": round(float(np.percentile(lat, 99)), 2),
        "source_transactions": load.commits,
        "source_changes": applied[0],
        "load_seconds": seconds,
        "seconds_to_catch_up": round(elapsed, 2),
        "client_threads": threads,
        "views": VIEWS.count("CREATE MATERIALIZED VIEW"),
    }


def backlog(dsn: str, seconds: float, threads: int) -> dict:
    """The sidecar's own saturation point: the load runs for ``seconds`` while the sidecar is held after its
    first target commit (the slot keeps the WAL), then the sidecar is let go and drains the backlog with the
    machine to itself. The rate is the changes it applied over the time from its release until it had
    caught up with a marker written after the load."""
    _fresh(dsn)
    held, release = threading.Event(), threading.Event()
    applied = [0]

    def on_batch(txns, committed_at: float) -> None:
        if held.is_set() and not release.is_set():
            release.wait(seconds * 10 + 60)
        elif release.is_set():
            applied[0] += sum(t.rows for t in txns)

    car = Sidecar(dsn, VIEWS, slot=NAME, publication=NAME, schema=NAME, on_batch=on_batch)
    with car.in_thread():
        wait_for_marker(dsn, 0, NAME, timeout=120)
        held.set()
        load = Load(dsn, threads=threads, pause=0.0, seed=11).start()
        time.sleep(seconds)
        load.stop()
        marker = bump_marker(dsn)
        start = time.monotonic()
        release.set()
        wait_for_marker(dsn, marker, NAME, timeout=600)
        elapsed = time.monotonic() - start
    return {
        "changes_per_s": round(applied[0] / elapsed, 1),
        "backlog_changes": applied[0],
        "backlog_transactions": load.commits,
        "seconds_to_drain": round(elapsed, 2),
    }


def _fresh(dsn: str) -> None:
    """The workload's tables made afresh, and the benchmark's slot, publication and schema dropped."""
    setup(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {NAME} CASCADE")
        c.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (NAME,)
        )
        c.execute(f"DROP PUBLICATION IF EXISTS {NAME}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m connectors.bench postgres", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--dsn", help="an existing Postgres with wal_level=logical (default: a temporary cluster)")
    p.add_argument("--seconds", type=float, default=10.0, help="how long the write load runs (default 10)")
    p.add_argument("--threads", type=int, default=3, help="client threads writing (default 3)")
    p.add_argument("--pause", type=float, default=0.0, help="seconds each client waits between transactions")
    p.add_argument(
        "--paced", type=float, default=1000.0, help="then a run paced at this many changes/s (0: none)"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    def both(dsn: str) -> dict:
        drained = backlog(dsn, args.seconds, args.threads)
        result = run(dsn, args.seconds, args.threads, args.pause)
        result["changes_per_s_live"] = result["changes_per_s"]
        result.update(drained)
        if args.paced:
            paced = run(dsn, args.seconds, args.threads, 0.0, rate=args.paced)
            result["paced_changes_per_s"] = args.paced
            result["paced_measured_changes_per_s"] = paced["changes_per_s"]
            result["latency_p50_ms_paced"] = paced["latency_p50_ms"]
            result["latency_p99_ms_paced"] = paced["latency_p99_ms"]
        return result

    if args.dsn:
        result = both(args.dsn)
    else:
        with LocalCluster() as cluster:
            result = both(cluster.dsn)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"sidecar, {result['views']} views, {args.threads} client threads for {args.seconds:g}s")
        print(f"  changes/s, backlog     {result['changes_per_s']:>10.1f}  (saturation: backlog drained)")
        print(f"  changes/s end to end   {result['changes_per_s_live']:>10.1f}  (load and sidecar together)")
        print(f"  latency p50 (ms)       {result['latency_p50_ms']:>10.2f}")
        print(f"  latency p99 (ms)       {result['latency_p99_ms']:>10.2f}")
        print(f"  source transactions    {result['source_transactions']:>10d}")
        print(f"  source row changes     {result['source_changes']:>10d}")
        if args.paced:
            print(f"paced at {args.paced:g} changes/s ({result['paced_measured_changes_per_s']:.1f} measured)")
            print(f"  latency p50 (ms)       {result['latency_p50_ms_paced']:>10.2f}")
            print(f"  latency p99 (ms)       {result['latency_p99_ms_paced']:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
