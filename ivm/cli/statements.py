"""Cutting SQL input into statements and backslash commands, as the shell and ``ivm run`` read it.

A statement ends at a ``;`` that sqlglot's tokenizer sees as a token, so semicolons inside strings, quoted
names and comments do not end one. A line starting with ``\\`` while no statement is pending is a backslash
command (``\\d``, ``\\q``, ...). Input arrives line by line; the text is only tokenized when a line holds a
``;``, so long multi-line statements cost linear time.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

__all__ = ["Item", "Splitter", "split", "tokens"]


@dataclass(frozen=True)
class Item:
    """A statement (``kind == "sql"``, text without its ``;``) or a backslash command (``"meta"``), with the
    1-based line of the input where it starts."""

    kind: str
    text: str
    line: int


def tokens(text: str) -> list[Token]:
    """The tokens of ``text`` (Postgres dialect); raises ``sqlglot.errors.TokenError`` if a string or comment is
    left open."""
    return Postgres().tokenizer().tokenize(text)


class Splitter:
    """Collects input lines and hands out complete statements and backslash commands."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.start = 1  # input line of the first pending line
        self.next_line = 1

    @property
    def pending(self) -> bool:
        """Whether part of a statement has been read (anything but blank lines and ``--`` comments)."""
        return bool(self.lines)

    def feed(self, line: str) -> list[Item]:
        """Add one input line (without its newline); returns the items it completes."""
        number = self.next_line
        self.next_line += 1
        if not self.pending and line.lstrip().startswith("\\"):
            self.lines = []
            return [Item("meta", line.strip(), number)]
        if not self.lines:
            if not line.strip() or line.lstrip().startswith("--"):
                return []
            self.start = number
        self.lines.append(line)
        if ";" not in line:
            return []
        text = "\n".join(self.lines)
        try:
            toks = tokens(text)
        except TokenError:
            return []  # an open string or comment: the statement goes on
        ends = [t for t in toks if t.token_type == TokenType.SEMICOLON]
        if not ends:
            return []
        out, begin = [], 0
        for semi in ends:
            piece = text[begin : semi.start]
            if piece.strip() and _has_tokens(piece):
                out.append(Item("sql", _trim(piece), self.start + _leading_lines(text, begin, piece)))
            begin = semi.end + 1
        rest = text[begin:]
        consumed = text.count("\n", 0, begin)
        self.lines = [rest] if rest.strip() and _has_tokens(rest) else []
        self.start += consumed
        return out

    def finish(self) -> list[Item]:
        """The statement left at the end of the input without a ``;``, if any."""
        text = "\n".join(self.lines)
        self.lines = []
        if not text.strip() or not _has_tokens(text):
            return []
        return [Item("sql", _trim(text), self.start + _leading_lines(text, 0, text))]


def split(text: str) -> list[Item]:
    """Every statement and backslash command of a whole script, in order."""
    sp = Splitter()
    out: list[Item] = []
    for line in text.split("\n"):
        out.extend(sp.feed(line))
    return out + sp.finish()


def _has_tokens(text: str) -> bool:
    try:
        return bool(tokens(text))
    except TokenError:
        return True


def _leading_lines(text: str, begin: int, piece: str) -> int:
    """Lines between the start of the pending text and the first non-blank character of ``piece``."""
    skipped = len(piece) - len(piece.lstrip())
    return text.count("\n", 0, begin + skipped)


def _trim(piece: str) -> str:
    return piece.strip()
