"""ivm: incremental view maintenance on differential dataflow with shared arrangements.

``ivm.connect()`` opens an embedded database (PEP 249). The dataflow engine underneath is ``ivm.engine``,
usable from Python without SQL; its main classes are also reachable here (``ivm.Engine``, ``ivm.Batch``, ...).
Importing ``ivm`` loads only the exception tree: the rest loads on first use.
"""

from __future__ import annotations

import importlib

from ivm.errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)

__all__ = [
    "connect",
    "apilevel",
    "threadsafety",
    "paramstyle",
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

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not a connection
paramstyle = "pyformat"  # %s and %(name)s; ? and $1 are understood too


def connect(path: str | None = None, **options):
    """A new in-memory database, or the durable database in directory ``path`` (see
    ``ivm.db.connection.connect`` for the options)."""
    from ivm.db.connection import connect as _connect

    return _connect(path, **options)


def __getattr__(name: str):
    engine = importlib.import_module("ivm.engine")
    if name in engine.__all__:  # the engine's names: ivm.Engine, ivm.Batch, ...
        return getattr(engine, name)
    raise AttributeError(f"module 'ivm' has no attribute {name!r}")
