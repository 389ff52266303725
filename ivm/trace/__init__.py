"""Traces: arrangements of a collection by key, as a spine of immutable sorted batches."""

from ivm.trace.batch import TraceBatch
from ivm.trace.handle import TraceHandle
from ivm.trace.spine import Spine

__all__ = ["TraceBatch", "Spine", "TraceHandle"]
