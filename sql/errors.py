"""Errors of the SQL layer: each names what went wrong and, where the text shows it, the line and column.

The classes are those of ``ivm.errors`` (PEP 249); ``SqlError`` is any database error and
``UnsupportedError`` valid SQL that ivm does not implement.
"""

from __future__ import annotations

from sqlglot import exp

from ivm.errors import (
    DatabaseError,
    DataError,
    IntegrityError,
    InternalError,
    NotSupportedError,
    ProgrammingError,
)

__all__ = [
    "SqlError",
    "UnsupportedError",
    "DataError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "position",
    "error_at",
]

SqlError = DatabaseError
UnsupportedError = NotSupportedError


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


def error_at(
    node: exp.Expression | None, message: str, unsupported: bool = False, cls: type | None = None
) -> DatabaseError:
    """An error at ``node``'s position: ``cls`` when given, else NotSupportedError for ``unsupported`` SQL
    and ProgrammingError (a statement that is wrong as written) otherwise."""
    line, col = position(node)
    if cls is None:
        cls = UnsupportedError if unsupported else ProgrammingError
    return cls(message, line, col)
