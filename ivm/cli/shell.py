"""The interactive shell: ``ivm`` or ``ivm shell``.

Reads statements with line editing and a history file (``~/.ivm_history``, or ``$IVM_HISTORY``) when the input
is a terminal, or plainly from standard input otherwise. A statement may span lines and ends at ``;``; the
prompt shows ``ivm>`` for a new statement and ``...>`` while one goes on. Errors are printed and the shell
goes on. Ctrl-C discards the statement being typed, or at an empty prompt ends the active subscriptions;
Ctrl-D or ``\\q`` quits.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TextIO

from ivm.cli.session import Session
from ivm.cli.statements import Splitter
from ivm.engine.allocator import tune_allocator

__all__ = ["main", "Shell"]

BANNER = "ivm {version}: {where}.\nStatements end with ';'. \\? lists the commands, \\q quits."
IN_MEMORY = "an in-memory database; nothing is saved when the shell ends (ivm DIR keeps one in DIR)"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ivm")
    except PackageNotFoundError:
        return "(development)"


def _history_path() -> Path:
    return Path(os.environ.get("IVM_HISTORY") or Path.home() / ".ivm_history")


class Shell:
    """A read-execute-print loop over a ``Session``; ``interactive`` turns on prompts, the banner and
    line editing."""

    def __init__(self, session: Session, stdin: TextIO, interactive: bool) -> None:
        self.session = session
        self.stdin = stdin
        self.interactive = interactive
        self.readline = None
        if interactive:
            try:
                import readline
            except ImportError:  # no line editing on this platform: plain input still works
                readline = None
            self.readline = readline

    def _read(self, prompt: str) -> str:
        if self.interactive:
            return input(prompt)
        line = self.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    def loop(self) -> None:
        s = self.session
        history = _history_path()
        if self.readline is not None:
            self.readline.set_auto_history(False)
            self.readline.set_history_length(2000)
            if history.exists():
                with contextlib.suppress(OSError):
                    self.readline.read_history_file(history)
        if self.interactive:
            store = s.conn.store
            where = IN_MEMORY if store is None else f"database {store.path}; every commit is kept there"
            s.say(BANNER.format(version=_version(), where=where))
        splitter = Splitter()
        typed: list[str] = []
        try:
            while not s.quit:
                try:
                    line = self._read("...> " if splitter.pending else "ivm> ")
                except KeyboardInterrupt:
                    s.say("")
                    if not splitter.pending and s.active:
                        s.unsubscribe()
                    splitter = Splitter()
                    typed = []
                    continue
                except EOFError:
                    if self.interactive:
                        s.say("")
                    break
                typed.append(line)
                items = splitter.feed(line)
                if items or not splitter.pending:
                    self._remember(" ".join(x.strip() for x in typed if x.strip()))
                    typed = []
                for item in items:
                    try:
                        s.run(item)
                    except KeyboardInterrupt:
                        s.complain("interrupted")
                    if s.quit:
                        break
            if not s.quit:
                for item in splitter.finish():
                    s.run(item)
        finally:
            if self.readline is not None:
                with contextlib.suppress(OSError):
                    self.readline.write_history_file(history)

    def _remember(self, entry: str) -> None:
        if self.readline is not None and entry:
            self.readline.add_history(entry)


def main(argv: list[str] | None = None) -> int:
    """Run the shell on standard input; returns the exit status."""
    tune_allocator()  # a long-running command: freed memory is kept for the next merge
    import argparse

    ap = argparse.ArgumentParser(prog="ivm shell", description=__doc__)
    ap.add_argument("database", nargs="?", help="a database directory to open or create (default: in memory)")
    ap.add_argument("--timing", action="store_true", help="print how long each statement takes")
    args = ap.parse_args(argv)
    conn = open_database(args.database)
    if conn is None:
        return 2
    session = Session(conn, timing=args.timing)
    shell = Shell(session, sys.stdin, interactive=sys.stdin.isatty())
    try:
        shell.loop()
    finally:
        conn.close()
    return 0


def open_database(path: str | None):
    """A connection to the database in directory ``path`` (in memory without one), or None after saying why
    it cannot be opened."""
    import ivm

    try:
        return ivm.connect(path)
    except ivm.Error as err:
        print(f"ivm: cannot open database {path!r}: {err}", file=sys.stderr)
        return None
