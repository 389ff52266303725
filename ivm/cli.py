"""The ``ivm`` command. Until the SQL layer lands it offers the engine's demonstration and benchmarks."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv.pop(0) if argv else "help"
    if cmd == "demo":
        from ivm.demo import main as demo

        demo(argv)
        return 0
    if cmd == "sidecar":
        from connectors.postgres.sidecar import main as sidecar

        return sidecar(argv)
    if cmd == "bench":
        from ivm.bench import main as bench

        bench(argv)
        return 0
    print("usage: ivm demo [options] | ivm bench [options]", file=sys.stderr)
    return 0 if cmd in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    raise SystemExit(main())
