"""ivm: incremental view maintenance on differential dataflow with shared arrangements.

The engine (this package) is usable from Python without SQL: build dataflows over inputs, step them, and
read exact output diffs at every logical time.
"""

from ivm.batch import Batch
from ivm.dataflow import Arranged, Capture, Collection, Dataflow, Engine, Input, Loop, Probe
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
from ivm.lattice import Antichain
from ivm.operators.basic import EvaluationError
from ivm.operators.iterate import IterationLimitError
from ivm.operators.reducers import Aggregate, Groups, Threshold, TopK, distinct

__all__ = [
    "Engine",
    "Dataflow",
    "Collection",
    "Arranged",
    "Input",
    "Loop",
    "Capture",
    "Probe",
    "Batch",
    "Antichain",
    "Aggregate",
    "Groups",
    "Threshold",
    "TopK",
    "distinct",
    "IterationLimitError",
    "EvaluationError",
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


def connect():
    """A new in-memory database (see ``ivm.connection``)."""
    from ivm.connection import connect as _connect

    return _connect()
