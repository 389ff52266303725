"""Connector benchmarks: ``python -m connectors.bench postgres|spark|spark-distributed [--json] [options]``."""

from __future__ import annotations

import sys

from ivm.engine.allocator import tune_allocator


def main(argv: list[str] | None = None) -> int:
    tune_allocator()  # a long-running command: freed memory is kept for the next merge
    argv = list(sys.argv[1:] if argv is None else argv)
    which = argv.pop(0) if argv else ""
    if which == "postgres":
        from connectors.postgres.bench import main as run
    elif which == "spark":
        from connectors.spark.bench import main as run
    elif which == "spark-distributed":
        from connectors.spark.bench_distributed import main as run
    else:
        usage = "usage: python -m connectors.bench postgres|spark|spark-distributed [--json] [options]"
        print(usage, file=sys.stderr)
        return 2
    return run(argv) or 0


if __name__ == "__main__":
    raise SystemExit(main())
