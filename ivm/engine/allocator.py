"""Allocator settings for an engine whose arrays come and go in large, similar sizes.

A merge allocates output arrays of megabytes and frees its inputs moments later. By default glibc maps
fresh pages for every allocation above a threshold and unmaps them on free, so each merge pays the kernel to
map and zero its output; and it returns freed heap memory to the system eagerly, so the next merge faults it
back in. The engine asks instead that arrays up to 32 MB come from the heap and that freed memory be kept for
reuse (up to 1 GB beyond what is in use), as databases usually keep their memory.

Applied once per process by the commands and benchmarks that run long (``ivm``, ``python -m ... bench``,
the sidecar), never by merely creating an engine: a library's host process keeps its own settings. Left
alone when the process set its own ``MALLOC_*`` variables, when ``IVM_TUNE_MALLOC=0``, or when the C
library is not glibc.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["tune_allocator"]

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_SETTINGS = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 64 << 20))
_applied: bool | None = None


def tune_allocator() -> bool:
    """Apply the settings above (once per process); whether they are in effect."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if os.environ.get("IVM_TUNE_MALLOC") == "0" or any(k.startswith("MALLOC_") for k in os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(mallopt(param, value) == 1 for param, value in _SETTINGS)
