"""The ``ivm`` command: the interactive shell, scripts, the TPC-H demonstration and the sidecar, on top of the
embedded database (``ivm.db``)."""

from ivm.cli.main import COMMANDS, main

__all__ = ["COMMANDS", "main"]
