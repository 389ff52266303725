"""The differential dataflow engine, usable from Python without SQL: build dataflows over inputs, step them,
and read exact output diffs at every logical time.

Times and lattices (``lattice``), batches and consolidation (``batch``), traces and spines (``trace``),
operators (``operators``), scopes and scheduling (``scope``, ``dataflow``) and the string pool (``strings``).
It imports numpy and pyarrow, never SQL.
"""

from ivm.engine.batch import Batch
from ivm.engine.dataflow import Arranged, Capture, Collection, Dataflow, Engine, Input, Loop, Probe
from ivm.engine.lattice import Antichain
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.operators.iterate import IterationLimitError
from ivm.engine.operators.reducers import Aggregate, Groups, Threshold, TopK, distinct

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
]
