"""Arrow columns to and from the engine's representation, whole columns at a time."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.strings import POOL
from sql.errors import SqlError
from sql.types import SqlType

__all__ = ["to_engine_column"]


def to_engine_column(
    arr: pa.Array | pa.ChunkedArray, t: SqlType, name: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """An engine column and validity mask from an Arrow array of a compatible type."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    valid = None
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    at = arr.type
    k = t.kind
    try:
        if k == "text":
            if not (pa.types.is_string(at) or pa.types.is_large_string(at) or pa.types.is_string_view(at)):
                raise TypeError
            enc = pc.dictionary_encode(arr.cast(pa.string()))
            codes = POOL.encode(enc.dictionary.to_pylist())
            idx = enc.indices.fill_null(0).to_numpy(zero_copy_only=False)
            data = codes[idx] if len(codes) else np.zeros(len(arr), dtype=np.int64)
        elif k == "decimal":
            if pa.types.is_integer(at):
                data = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) * 10**t.scale
            elif pa.types.is_decimal(at):
                exact = arr.cast(pa.decimal128(38, t.scale)).fill_null(0)
                if pc.max(pc.abs(exact)).as_py() is not None and abs(pc.max(pc.abs(exact)).as_py()) >= 10 ** (
                    t.precision - t.scale
                ):
                    raise SqlError(f"a value of column {name!r} does not fit in {t}")
                words = np.frombuffer(exact.buffers()[1], dtype=np.int64)
                data = words[2 * exact.offset : 2 * (exact.offset + len(exact)) : 2].copy()
            else:
                raise TypeError
        elif k == "int":
            if not pa.types.is_integer(at):
                raise TypeError
            data = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        elif k == "float":
            if not (pa.types.is_floating(at) or pa.types.is_integer(at) or pa.types.is_decimal(at)):
                raise TypeError
            data = arr.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False)
        elif k == "date":
            if not pa.types.is_date32(at):
                raise TypeError
            data = arr.fill_null(0).cast(pa.int32()).to_numpy(zero_copy_only=False)
        elif k == "timestamp":
            if not pa.types.is_timestamp(at):
                raise TypeError
            data = arr.cast(pa.timestamp("us")).fill_null(0).cast(pa.int64()).to_numpy(zero_copy_only=False)
        elif k == "bool":
            if not pa.types.is_boolean(at):
                raise TypeError
            data = arr.fill_null(False).to_numpy(zero_copy_only=False)
        else:
            raise TypeError
    except (TypeError, pa.ArrowInvalid) as err:
        raise SqlError(f"column {name!r}: cannot load Arrow type {at} as {t}") from err
    return np.ascontiguousarray(data, dtype=t.dtype), valid
