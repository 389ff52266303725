"""Arrow columns to and from the engine's representation, whole columns at a time."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.engine.strings import POOL
from planner.values import padded_strings
from sql.errors import DataError
from sql.types import SqlType

__all__ = ["to_engine_column", "converter", "to_arrow_column", "arrow_type"]


Converter = Callable[[pa.Array | pa.ChunkedArray], tuple[np.ndarray, "np.ndarray | None"]]


def to_engine_column(
    arr: pa.Array | pa.ChunkedArray, t: SqlType, name: str, stored: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """An engine column and validity mask from an Arrow array of a compatible type. ``stored``: text may get
    codes that are not canonical yet (``StringPool.encode_arrow``)."""
    return converter(arr.type, t, name, stored)(arr)


def converter(at: pa.DataType, t: SqlType, name: str, stored: bool = False) -> Converter:
    """What turns Arrow arrays of type ``at`` into engine columns of type ``t`` (see ``to_engine_column``):
    the type checks and the choice of path made once, for all the batches of one schema."""
    k = t.kind
    if k == "text" and (pa.types.is_string(at) or pa.types.is_large_string(at)):
        values = _texts(stored)
    elif k == "text" and pa.types.is_string_view(at):
        values = _texts(stored, pa.string())
    elif k == "decimal" and pa.types.is_integer(at):
        wide = pa.decimal128(38, t.scale)
        checked = _decimals(wide, t, name)
        values = lambda arr, nulls: checked(arr.cast(wide), nulls)  # noqa: E731 - exact, then checked
    elif k == "int" and at == pa.uint64():
        values = _cast(pa.int64())  # a value beyond BIGINT fails the cast
    elif k == "decimal" and pa.types.is_decimal(at):
        values = _decimals(at, t, name)
    elif (k == "int" and pa.types.is_integer(at)) or (k == "float" and at == pa.float64()):
        values = _numbers
    elif k == "float" and (pa.types.is_floating(at) or pa.types.is_integer(at) or pa.types.is_decimal(at)):
        values = _cast(pa.float64())
    elif k == "date" and pa.types.is_date32(at):
        values = _view(None, pa.int32())
    elif k == "timestamp" and pa.types.is_timestamp(at):  # a zoned one as its UTC time
        values = _view(None if at == pa.timestamp("us") else pa.timestamp("us"), pa.int64())
    elif k == "interval" and pa.types.is_duration(at):
        values = _view(None if at == pa.duration("us") else pa.duration("us"), pa.int64())
    elif k == "bool" and pa.types.is_boolean(at):
        values = _bools
    else:
        raise DataError(f"column {name!r}: cannot load Arrow type {at} as {t}")
    dtype = t.dtype

    def convert(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
        nulls = arr.null_count
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool) if nulls else None
        try:
            data = values(arr, nulls)
        except (TypeError, pa.ArrowInvalid) as err:
            raise DataError(f"column {name!r}: cannot load Arrow type {at} as {t}: {err}") from None
        if data.dtype != dtype or not data.flags.c_contiguous:
            data = np.ascontiguousarray(data, dtype=dtype)
        return data, valid

    return convert


def _texts(stored: bool, cast: pa.DataType | None = None):
    def values(arr: pa.Array, nulls: int) -> np.ndarray:
        return POOL.encode_arrow(arr if cast is None else arr.cast(cast), stored)

    return values


def _decimals(at: pa.DataType, t: SqlType, name: str):
    # every decimal128 holds 16-byte words whatever its precision: only the scale must agree
    same = pa.types.is_decimal128(at) and at.scale == t.scale
    # a valid Arrow decimal fits its own precision, so a precision no wider needs no look at the values
    trusted = same and at.precision <= min(t.precision, 18)
    wide = pa.decimal128(38, t.scale)

    def values(arr: pa.Array, nulls: int) -> np.ndarray:
        exact = arr if same else arr.cast(wide)
        if nulls:
            exact = exact.fill_null(0)
        words = np.frombuffer(exact.buffers()[1], dtype=np.int64).reshape(-1, 2)
        words = words[exact.offset : exact.offset + len(exact)]
        low = words[:, 0]
        # every value fits in 64 bits (high word the sign of the low) and in the type's precision
        if not trusted and len(low):
            limit = 10**t.precision
            high = words[:, 1]
            if int(low.max()) >= limit or int(low.min()) <= -limit or (high != (low >> 63)).any():
                raise DataError(f"a value of column {name!r} does not fit in {t}")
        return low.copy()

    return values


def _numbers(arr: pa.Array, nulls: int) -> np.ndarray:
    """A numeric Arrow array as numpy (without copying when there are no NULLs; NULLs read as 0)."""
    if nulls:
        arr = arr.fill_null(0)
    return arr.to_numpy(zero_copy_only=False)


def _cast(to: pa.DataType):
    def values(arr: pa.Array, nulls: int) -> np.ndarray:
        return _numbers(arr.cast(to), nulls)

    return values


def _view(cast: pa.DataType | None, as_int: pa.DataType):
    def values(arr: pa.Array, nulls: int) -> np.ndarray:
        return _numbers((arr if cast is None else arr.cast(cast)).view(as_int), nulls)

    return values


def _bools(arr: pa.Array, nulls: int) -> np.ndarray:
    return (arr.fill_null(False) if nulls else arr).to_numpy(zero_copy_only=False)


def to_arrow_column(data: np.ndarray, valid: np.ndarray | None, t: SqlType, padded: bool = True) -> pa.Array:
    """An Arrow array of an engine column (decimals as decimal128, text decoded, dates as date32). CHAR(n)
    values are padded to n with spaces, as results show them, unless ``padded`` is False (to order them: a
    CHAR value sorts without its padding)."""
    mask = None if valid is None else ~valid
    k = t.kind
    if k == "text":
        if len(data) == 0:
            return pa.array([], pa.string())
        if t.pad and padded:
            strings, inv = padded_strings(data, t.pad)
            strings = (strings if inv is None else strings.take(inv)).cast(pa.string())
        else:
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
        return pa.array(data.astype(np.int64), mask=mask).cast(pa.timestamp("us", tz="UTC" if t.tz else None))
    if k == "interval":
        return pa.array(data.astype(np.int64), mask=mask).cast(pa.duration("us"))
    if k == "int" and t.bits < 64:  # values are within the width: computed and stored so
        return pa.array(data.astype(np.int32 if t.bits == 32 else np.int16), mask=mask)
    return pa.array(data, mask=mask)


def arrow_type(t: SqlType) -> pa.DataType:
    """The Arrow type files are converted to when loaded into a column of type ``t``."""
    return {
        "int": pa.int64(),  # every width: the range is the table's domain, checked with PostgreSQL's message
        "decimal": pa.decimal128(max(t.precision, 1), t.scale),
        "float": pa.float64(),
        "text": pa.string(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC" if t.tz else None),
        "interval": pa.duration("us"),
        "bool": pa.bool_(),
    }[t.kind]
