"""Errors of the SQL layer: each names what went wrong and, where the text shows it, the line and column."""

from __future__ import annotations

from sqlglot import exp

__all__ = ["SqlError", "UnsupportedError", "position"]


class SqlError(Exception):
    """A statement that cannot be executed: bad syntax, unknown names, type errors, constraint violations."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None) -> None:
        self.message = message
        self.line = line
        self.col = col
        where = f" (line {line}, column {col})" if line is not None else ""
        super().__init__(message + where)


class UnsupportedError(SqlError):
    """Valid SQL that ivm does not maintain (yet); raised instead of ever giving a wrong answer."""


def position(node: exp.Expression | None) -> tuple[int | None, int | None]:
    """The line and column where ``node`` starts in the statement text, when sqlglot recorded it."""
    best = None
    if node is None:
        return None, None
    for n in node.walk():
        meta = getattr(n, "_meta", None) or {}
        if "line" in meta and "start" in meta and (best is None or meta["start"] < best["start"]):
            best = meta
    if best is None:
        return None, None
    return best["line"], best["col"] - (best["end"] - best["start"])  # sqlglot's col is the token's last


def error_at(node: exp.Expression | None, message: str, unsupported: bool = False) -> SqlError:
    line, col = position(node)
    cls = UnsupportedError if unsupported else SqlError
    return cls(message, line, col)
