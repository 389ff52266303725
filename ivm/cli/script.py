"""``ivm run [--database DIR] FILE.sql ...``: execute scripts in one database (in memory, or kept in DIR).

Each file's statements run in order, with results printed as the shell prints them. The first error stops the
run with exit status 1; with ``--keep-going`` every statement runs and the status is 1 at the end if any
failed. A script that subscribes keeps printing changes until it is interrupted, or, with ``--until-quiet``,
ends when the scripts are done and no change is left to print.
"""

from __future__ import annotations

import argparse
import sys
import time

from ivm.cli.session import Session
from ivm.cli.shell import open_database

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the scripts named in ``argv``; returns the exit status."""
    ap = argparse.ArgumentParser(prog="ivm run", description=__doc__)
    ap.add_argument("files", nargs="+", metavar="FILE.sql", help="scripts to run in order ('-' for stdin)")
    ap.add_argument("--keep-going", action="store_true", help="run every statement even after an error")
    ap.add_argument("--until-quiet", action="store_true", help="end subscriptions when no change is pending")
    ap.add_argument("--timing", action="store_true", help="print how long each statement takes")
    ap.add_argument("--echo", action="store_true", help="print each statement before its result")
    ap.add_argument("--database", metavar="DIR", help="database directory (default: in memory)")
    args = ap.parse_args(argv)
    conn = open_database(args.database)
    if conn is None:
        return 2
    try:
        return _run(args, Session(conn, timing=args.timing, echo=args.echo))
    finally:
        conn.close()


def _run(args, session: Session) -> int:
    errors = 0
    for name in args.files:
        try:
            if name == "-":
                text = sys.stdin.read()
            else:
                with open(name) as f:
                    text = f.read()
        except OSError as e:
            session.complain(f"ERROR: cannot read {name!r}: {e.strerror}")
            errors += 1
            if not args.keep_going:
                break
            continue
        errors += session.run_text(text, "stdin" if name == "-" else name, keep_going=args.keep_going)
        if (errors and not args.keep_going) or session.quit:
            break
    if session.active:
        if args.until_quiet or errors:
            session.drain()
            session.unsubscribe()
        else:
            _follow(session)
    return 1 if errors else 0


def _follow(session: Session) -> None:
    """Print the subscriptions' changes as they are committed (by other writers to this database) until
    interrupted."""
    try:
        session.complain("following subscriptions; Ctrl-C to stop")
        while True:
            session.drain()
            time.sleep(0.1)
    except KeyboardInterrupt:
        session.unsubscribe()
