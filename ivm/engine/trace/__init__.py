"""Traces: arrangements of a collection by key, as a spine of immutable sorted batches."""

from ivm.engine.trace.batch import TraceBatch
from ivm.engine.trace.handle import TraceHandle
from ivm.engine.trace.spine import Spine

__all__ = ["TraceBatch", "Spine", "TraceHandle"]
