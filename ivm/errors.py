"""The exceptions of ivm, named and arranged as PEP 249 (the Python DB-API) names them.

Every error ivm raises on purpose is an ``ivm.Error``; anything else escaping the package is a defect. A
database error about a statement carries where in the statement text it applies (``line`` and ``col``, both
from 1, when known), so that a shell can point a caret at it. This module imports nothing of ivm: every layer
may raise its classes.

    >>> try:
    ...     raise ProgrammingError("column 'x' does not exist", 1, 8)
    ... except DatabaseError as err:
    ...     (err.message, err.line, err.col)
    ("column 'x' does not exist", 1, 8)
"""

from __future__ import annotations

import builtins

__all__ = [
    "Warning",
    "Error",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
]


class Warning(builtins.Warning):  # noqa: A001 - the name PEP 249 gives it
    """An important warning, such as data truncated on insertion; ivm raises none."""


class Error(Exception):
    """The root of every error ivm raises, with the statement position it applies to when known."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None) -> None:
        self.message = message
        self.line = line
        self.col = col
        self.row: int | None = None  # the offending row's position among the statement's rows, when known
        where = f" (line {line}, column {col})" if line is not None else ""
        super().__init__(message + where)

    def __reduce__(self):
        return (type(self), (self.message, self.line, self.col))


class InterfaceError(Error):
    """A misuse of the interface rather than of the database: a closed connection or cursor, a fetch
    without a result."""


class DatabaseError(Error):
    """An error of the database itself: the statement could not be carried out."""


class DataError(DatabaseError):
    """A value that cannot be held or computed: out of range, too long, not a number, a division by zero."""


class OperationalError(DatabaseError):
    """The database could not operate: a file that cannot be read, memory exhausted while committing."""


class IntegrityError(DatabaseError):
    """A constraint would be violated: NOT NULL, PRIMARY KEY, UNIQUE, CHECK, REFERENCES."""


class InternalError(DatabaseError):
    """The database is not in a state to run the statement: the current transaction is aborted."""


class ProgrammingError(DatabaseError):
    """The statement is wrong: bad syntax, an unknown table or column, a type mismatch, a wrong number of
    parameters."""


class NotSupportedError(DatabaseError):
    """Valid SQL that ivm does not implement; raised instead of ever giving a wrong answer."""
