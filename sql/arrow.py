"""Arrow columns to and from the engine's representation, whole columns at a time."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.strings import POOL
from sql.errors import SqlError
from sql.types import SqlType

__all__ = ["to_engine_column", "to_arrow_column", "arrow_type"]


def to_engine_column(
    arr: pa.Array | pa.ChunkedArray, t: SqlType, name: str, stored: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """An engine column and validity mask from an Arrow array of a compatible type. ``stored``: text may get
    codes that are not canonical yet (``StringPool.encode_arrow``)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    valid = None
    nulls = arr.null_count
    if nulls:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    at = arr.type
    k = t.kind
    try:
        if k == "text":
            if not (pa.types.is_string(at) or pa.types.is_large_string(at) or pa.types.is_string_view(at)):
                raise TypeError
            data = POOL.encode_arrow(
                arr if pa.types.is_string(at) or pa.types.is_large_string(at) else arr.cast(pa.string()),
                stored,
            )
        elif k == "decimal":
            if pa.types.is_integer(at):
                data = _numbers(arr, nulls, 0).astype(np.int64) * 10**t.scale
            elif pa.types.is_decimal(at):
                # every decimal128 holds 16-byte words whatever its precision: only the scale must agree
                exact = (
                    arr
                    if pa.types.is_decimal128(at) and at.scale == t.scale
                    else arr.cast(pa.decimal128(38, t.scale))
                )
                if nulls:
                    exact = exact.fill_null(0)
                words = np.frombuffer(exact.buffers()[1], dtype=np.int64).reshape(-1, 2)
                words = words[exact.offset : exact.offset + len(exact)]
                low = words[:, 0]
                # every value fits in 64 bits (high word the sign of the low) and in the type's precision;
                # a valid Arrow decimal fits its own precision, so a precision no wider needs no look
                fits = exact is arr and at.precision <= min(t.precision, 18)
                if not fits and len(low):
                    limit = 10**t.precision
                    high = words[:, 1]
                    if int(low.max()) >= limit or int(low.min()) <= -limit or (high != (low >> 63)).any():
                        raise SqlError(f"a value of column {name!r} does not fit in {t}")
                data = low.copy()
            else:
                raise TypeError
        elif k == "int":
            if not pa.types.is_integer(at):
                raise TypeError
            data = _numbers(arr, nulls, 0)
        elif k == "float":
            if not (pa.types.is_floating(at) or pa.types.is_integer(at) or pa.types.is_decimal(at)):
                raise TypeError
            data = _numbers(arr if at == pa.float64() else arr.cast(pa.float64()), nulls, 0)
        elif k == "date":
            if not pa.types.is_date32(at):
                raise TypeError
            data = _numbers(arr.view(pa.int32()), nulls, 0)
        elif k == "timestamp":
            if not pa.types.is_timestamp(at):
                raise TypeError
            us = arr if at == pa.timestamp("us") else arr.cast(pa.timestamp("us"))
            data = _numbers(us.view(pa.int64()), nulls, 0)
        elif k == "bool":
            if not pa.types.is_boolean(at):
                raise TypeError
            data = (arr.fill_null(False) if nulls else arr).to_numpy(zero_copy_only=False)
        else:
            raise TypeError
    except (TypeError, pa.ArrowInvalid) as err:
        raise SqlError(f"column {name!r}: cannot load Arrow type {at} as {t}") from err
    return np.ascontiguousarray(data, dtype=t.dtype), valid


def _numbers(arr: pa.Array, nulls: int, fill) -> np.ndarray:
    """A numeric Arrow array as numpy (without copying when there are no NULLs; NULLs read as ``fill``)."""
    if nulls:
        arr = arr.fill_null(fill)
    return arr.to_numpy(zero_copy_only=False)


def to_arrow_column(data: np.ndarray, valid: np.ndarray | None, t: SqlType) -> pa.Array:
    """An Arrow array of an engine column (decimals as decimal128, text decoded, dates as date32)."""
    mask = None if valid is None else ~valid
    k = t.kind
    if k == "text":
        if len(data) == 0:
            return pa.array([], pa.string())
        strings = POOL.strings(data).cast(pa.string())
        return (
            strings if mask is None else pc.if_else(pa.array(mask), pa.nulls(len(data), pa.string()), strings)
        )
    if k == "decimal":
        words = np.empty((len(data), 2), dtype=np.int64)
        words[:, 0] = data
        words[:, 1] = np.where(data < 0, -1, 0)
        validity = None if valid is None else pa.array(valid).buffers()[1]
        nulls = 0 if valid is None else int((~valid).sum())
        return pa.Array.from_buffers(
            pa.decimal128(max(t.precision, 18), t.scale),
            len(data),
            [validity, pa.py_buffer(words.tobytes())],
            nulls,
        )
    if k == "date":
        return pa.array(data.astype(np.int32), mask=mask).cast(pa.date32())
    if k == "timestamp":
        return pa.array(data.astype(np.int64), mask=mask).cast(pa.timestamp("us"))
    return pa.array(data, mask=mask)


def arrow_type(t: SqlType) -> pa.DataType:
    """The Arrow type files are converted to when loaded into a column of type ``t``."""
    return {
        "int": pa.int64(),
        "decimal": pa.decimal128(max(t.precision, 1), t.scale),
        "float": pa.float64(),
        "text": pa.string(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us"),
        "bool": pa.bool_(),
    }[t.kind]
