"""The command layer shared by the shell and ``ivm run``: one connection, statements and backslash commands in,
text out.

Beyond what the connection executes it handles ``SUBSCRIBE TO view`` / ``SUBSCRIBE (SELECT ...)`` (a
subscription stays active while later statements run and prints the diffs each of them commits, until it is
ended), shows results in their ORDER BY order (views are multisets; the order is applied for display),
and the backslash commands ``\\d``, ``\\d NAME``, ``\\timing``, ``\\unsubscribe``, ``\\i FILE``, ``\\?``
and ``\\q``.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from typing import TextIO

import pyarrow as pa
from sqlglot.tokens import TokenType

import ivm
from ivm.cli import render
from ivm.cli.statements import Item, split, tokens
from ivm.db.connection import Connection, Subscription
from ivm.db.ordering import sorted_table
from sql.errors import SqlError, UnsupportedError

__all__ = ["Session", "HELP"]

HELP = """\
Statements end with ';' and may span lines. Besides SQL:
  SUBSCRIBE TO view;             stream the view's changes (time, diff, columns) as later statements commit
  SUBSCRIBE (SELECT ...);        the same for a query
  \\d                             list tables, views and indexes with their sizes
  \\d NAME                        columns of a relation; for a view, its arrangements and who shares them
  \\timing [on|off]               show how long each statement takes
  \\unsubscribe                   end every subscription (Ctrl-C at an empty prompt does too)
  \\i FILE                        run the statements of a file
  \\q                             quit"""

_NAMING_WORDS = {
    "MATERIALIZED",
    "VIEW",
    "TABLE",
    "INDEX",
    "UNIQUE",
    "OR",
    "REPLACE",
    "TEMP",
    "TEMPORARY",
    "INTO",
}


@dataclass
class _Active:
    """A running subscription: what the user named, and the hidden view made for a query, if any."""

    name: str
    subscription: Subscription
    hidden: str | None


class Session:
    """Runs statements and backslash commands against one connection, printing results to ``out`` and errors
    to ``err``. ``source`` names the input in error messages (a file name; ``None`` in the shell)."""

    def __init__(
        self,
        conn: Connection | None = None,
        out: TextIO | None = None,
        err: TextIO | None = None,
        timing: bool = False,
        echo: bool = False,
    ) -> None:
        self.conn = conn or ivm.connect()
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.timing = timing
        self.echo = echo
        self.active: list[_Active] = []
        self.quit = False
        self._hidden = 0

    # -- output -----------------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def complain(self, text: str) -> None:
        self.out.flush()
        print(text, file=self.err, flush=True)

    # -- items ------------------------------------------------------------------------------------------
    def run(self, item: Item, source: str | None = None) -> bool:
        """Run one statement or backslash command; print its result or its error. Returns whether it
        succeeded."""
        if self.echo:
            self.say(item.text + (";" if item.kind == "sql" else ""))
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always", ivm.Warning)
                if item.kind == "meta":
                    self.meta(item.text, source)
                else:
                    t0 = time.perf_counter()
                    self.statement(item.text)
                    if self.timing:
                        self.say(f"Time: {(time.perf_counter() - t0) * 1e3:.3f} ms")
        except Exception as e:  # the shell goes on after any failure, reporting it plainly
            self.complain(render.error(e, item.text if item.kind == "sql" else None, source, item.line))
            return False
        finally:
            for w in said:
                self.complain(f"WARNING: {w.message}")
            self.drain()
        return True

    def run_text(self, text: str, source: str | None = None, keep_going: bool = True) -> int:
        """Run every item of a script; returns the number of errors (stopping at the first unless
        ``keep_going``)."""
        errors = 0
        for item in split(text):
            if self.quit:
                break
            if not self.run(item, source):
                errors += 1
                if not keep_going:
                    break
        return errors

    # -- statements -------------------------------------------------------------------------------------
    def statement(self, text: str) -> None:
        """Execute one statement and print what it returns."""
        toks = tokens(text)
        if not toks:
            return
        first = toks[0].text.upper()
        if first == "SUBSCRIBE":
            self.subscribe(text, toks)
            return
        if first == "EXPLAIN":
            self.conn.execute(text)
            self.say("\n".join(r[0] for r in self.conn.fetchall()))
            return
        self.conn.execute(text)
        if self.conn.description is None:
            self.say(self.conn.statusmessage or _tag(toks))
            return
        self.say(render.table(self.conn.fetch_arrow()))  # in the query's ORDER BY order

    def subscribe(self, text: str, toks) -> None:
        """``SUBSCRIBE [TO] view`` or ``SUBSCRIBE [TO] (query)``: print the current contents as diffs now,
        and every later change as it is committed."""
        i = 1
        if i < len(toks) and toks[i].text.upper() == "TO":
            i += 1
        if i >= len(toks):
            raise _error_at(text, toks[-1], "SUBSCRIBE needs a view name or a parenthesized query")
        hidden = None
        if toks[i].token_type == TokenType.L_PAREN:
            depth, j = 0, i
            for j in range(i, len(toks)):
                depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(toks[j].token_type, 0)
                if depth == 0:
                    break
            if depth != 0:
                raise _error_at(text, toks[i], "unbalanced parenthesis after SUBSCRIBE")
            start, end = toks[i].end + 1, toks[j].start
            rest = toks[j + 1 :]
            self._hidden += 1
            hidden = f"__subscribe{self._hidden}"
            prefix = f"CREATE VIEW {hidden} AS "
            try:
                self.conn.execute(prefix + text[start:end])
            except SqlError as e:
                raise _shifted(e, text, start, len(prefix)) from None
            name = hidden
            label = " ".join(text[toks[i].start : end + 1].split())
            label = label if len(label) <= 50 else label[:47] + "..."
        else:
            name = toks[i].text
            rest = toks[i + 1 :]
            label = name
        if rest:
            if hidden:
                self.conn.execute(f"DROP VIEW {hidden}")
            raise _error_at(text, rest[0], f"unexpected {rest[0].text!r} after the subscribed relation")
        try:
            sub = self.conn.subscribe(name)
        except SqlError as e:
            raise _error_at(text, toks[i], e.message) from None
        self.active.append(_Active(label, sub, hidden))
        self.say(f"SUBSCRIBE TO {label}")

    def drain(self) -> int:
        """Print the changes every active subscription received since the last drain; returns how many."""
        total = 0
        for a in self.active:
            batches = list(a.subscription)
            if not batches:
                continue
            t = pa.Table.from_batches(batches)
            if t.num_rows == 0:
                continue
            t = t.select(["time", "diff", *t.column_names[:-2]])
            t = sorted_table(t, [(name, False, False) for name in t.column_names])
            total += t.num_rows
            n = t.num_rows
            self.say(render.table(t, footer=False) + f"\n({n} change{'s' if n != 1 else ''} to {a.name})")
        return total

    def unsubscribe(self) -> None:
        """End every subscription, dropping the views made for subscribed queries."""
        for a in self.active:
            if a.hidden is not None:
                self.conn.execute(f"DROP VIEW {a.hidden}")
            self.say(f"subscription to {a.name} ended")
        self.active = []

    # -- backslash commands -----------------------------------------------------------------------------
    def meta(self, text: str, source: str | None = None) -> None:
        word, _, arg = text.partition(" ")
        arg = arg.strip()
        if word in ("\\q", "\\quit"):
            self.quit = True
        elif word == "\\d":
            self.say(self.describe(arg) if arg else self.list_relations())
        elif word == "\\timing":
            if arg not in ("", "on", "off"):
                raise SqlError(f"\\timing takes on or off, not {arg!r}")
            self.timing = (not self.timing) if not arg else arg == "on"
            self.say(f"Timing is {'on' if self.timing else 'off'}.")
        elif word == "\\unsubscribe":
            if not self.active:
                self.say("no active subscription")
            self.unsubscribe()
        elif word == "\\i":
            if not arg:
                raise SqlError("\\i needs a file name")
            try:
                with open(arg) as f:
                    script = f.read()
            except OSError as e:
                raise SqlError(f"cannot read {arg!r}: {e.strerror}") from None
            self.run_text(script, arg)
        elif word in ("\\?", "\\h", "\\help"):
            self.say(HELP)
        else:
            raise SqlError(f"unknown command {word}; \\? lists the commands")

    def list_relations(self) -> str:
        rels = [r for r in self.conn.relations() if not r.name.startswith("__")]
        data = pa.table(
            {
                "name": pa.array([r.name for r in rels], pa.string()),
                "kind": pa.array([r.kind for r in rels], pa.string()),
                "rows": pa.array([r.rows for r in rels], pa.int64()),
                "arrangements": pa.array([r.arrangements for r in rels], pa.int64()),
                "stored updates": pa.array([r.updates for r in rels], pa.int64()),
                "size": pa.array([_size(r.bytes) for r in rels], pa.string()),
            }
        )
        return render.table(data)

    def describe(self, name: str) -> str:
        cat = self.conn.catalog
        if name in cat.indexes:
            rel, key = cat.indexes[name]
            cols = cat.relation_plan(rel, None).columns
            return f"index {name} on {rel} ({', '.join(cols[i].name for i in key)})"
        if name in cat.tables:
            t = cat.tables[name]
            pk = {t.columns[i].name for i in t.primary_key}
            data = pa.table(
                {
                    "column": [c.name for c in t.columns],
                    "type": [str(c.type) for c in t.columns],
                    "nullable": [c.nullable for c in t.columns],
                    "primary key": [c.name in pk for c in t.columns],
                }
            )
            return f"table {name}\n" + render.table(data, footer=False)
        if name in cat.views:
            v = cat.views[name]
            cols = v.plan.columns
            data = pa.table({"column": [c.name for c in cols], "type": [str(c.type) for c in cols]})
            arr = self.conn.arrangements(name)
            arrs = pa.table(
                {
                    "collection": pa.array([a.collection for a in arr], pa.string()),
                    "key": pa.array([", ".join(a.key) for a in arr], pa.string()),
                    "how": pa.array([a.how for a in arr], pa.string()),
                    "built by": pa.array([a.built_by for a in arr], pa.string()),
                    "also read by": pa.array([", ".join(_visible(a.shared_with)) for a in arr], pa.string()),
                }
            )
            return (
                f"view {name}\n"
                + render.table(data, footer=False)
                + "\narrangements:\n"
                + render.table(arrs, footer=False)
            )
        raise SqlError(f"relation {name!r} does not exist")


# -- helpers ----------------------------------------------------------------------------------------------
def _tag(toks) -> str:
    """The command tag printed after a statement without result rows, as psql does (CREATE TABLE, INSERT)."""
    words = [toks[0].text.upper()]
    for t in toks[1:3]:
        if t.text.upper() not in _NAMING_WORDS:
            break
        words.append(t.text.upper())
    if words[-1] == "INTO":
        words.pop()
    return " ".join(words)


def _visible(names) -> list[str]:
    """Names the user made (not the hidden views of subscribed queries)."""
    return [v for v in names if not v.startswith("__")]


def _size(n: int) -> str:
    for unit in ("bytes", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _error_at(text: str, token, message: str) -> SqlError:
    return SqlError(message, token.line, token.col - (token.end - token.start))


def _shifted(e: SqlError, text: str, start: int, prefix: int) -> SqlError:
    """An error in ``prefix + text[start:...]`` positioned in ``text`` instead."""
    cls = UnsupportedError if isinstance(e, UnsupportedError) else SqlError
    if e.line is None or e.col is None:
        return cls(e.message)
    line0 = text.count("\n", 0, start) + 1
    col0 = start - (text.rfind("\n", 0, start) + 1) + 1
    if e.line == 1:
        return cls(e.message, line0, col0 + e.col - 1 - prefix)
    return cls(e.message, line0 + e.line - 1, e.col)
