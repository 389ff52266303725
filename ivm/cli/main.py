"""The ``ivm`` command: an interactive shell, scripts, the TPC-H demonstration, benchmarks, and the Postgres
sidecar. Subcommands load their modules only when chosen."""

from __future__ import annotations

import importlib
import os
import sys

from ivm.engine.allocator import tune_allocator

__all__ = ["main", "COMMANDS"]

# subcommand -> (module whose main(argv) runs it, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "shell": ("ivm.cli.shell", "interactive SQL shell (the default); ivm DIR keeps its database in DIR"),
    "run": ("ivm.cli.script", "run SQL scripts: ivm run FILE.sql ... [--keep-going] [--until-quiet]"),
    "demo": ("ivm.cli.demo", "TPC-H: 22 views maintained under refresh batches against DuckDB's recompute"),
    "bench": ("ivm.bench.engine", "the engine's benchmarks"),
    "sidecar": ("connectors.postgres.sidecar", "maintain views over Postgres logical replication"),
}

USAGE = "usage: ivm [COMMAND] [options]\n\ncommands:\n" + "\n".join(
    f"  {name:<8} {text}" for name, (_, text) in COMMANDS.items()
)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand; returns the exit status."""
    tune_allocator()  # a long-running command: freed memory is kept for the next merge
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["shell"]
    cmd, rest = argv[0], argv[1:]
    if cmd in ("help", "-h", "--help"):
        print(USAGE)
        return 0
    if cmd not in COMMANDS:
        if cmd.endswith(".sql"):
            print(f"ivm: unknown command {cmd!r}; to run a script: ivm run {cmd}\n{USAGE}", file=sys.stderr)
            return 2
        cmd, rest = "shell", argv  # ivm [--timing] [NAME]: the shell's own options and database
    module = importlib.import_module(COMMANDS[cmd][0])
    try:
        status = module.main(rest)
    except KeyboardInterrupt:
        print("ivm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (ivm demo | head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status if isinstance(status, int) else 0
