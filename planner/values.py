"""SQL values as the engine holds them: text as codes of the engine's string pool, dates as days and timestamps
as microseconds since 1970-01-01, decimals as integers scaled by 10**scale (see ``sql.types``). Plans hold SQL
values; the planner encodes them where it compiles, and the database decodes what it hands back."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.engine.strings import POOL
from sql.errors import DataError, UnsupportedError
from sql.types import DAY_MICROS, SqlType, interval_value, justified, parse_text, sql_literal, sql_value

__all__ = ["encode", "to_engine_value", "column_from_values", "to_python", "padded_strings", "parse_engine"]

EPOCH = dt.date(1970, 1, 1)
EPOCH_TS = dt.datetime(1970, 1, 1)
EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICRO = dt.timedelta(microseconds=1)


def encode(value: object, t: SqlType) -> object:
    """An SQL value (as ``sql.types.sql_value`` gives it) as the engine holds it; None stays None."""
    if value is None:
        return None
    k = t.kind
    if k == "text":
        return POOL.code(value)
    if k == "decimal":
        return int(decimal.Decimal(value).scaleb(t.scale).to_integral_value(rounding=decimal.ROUND_HALF_UP))
    if k == "date":
        return (value - EPOCH).days
    if k == "timestamp":
        return (value - (EPOCH_TS if value.tzinfo is None else EPOCH_TZ)) // _MICRO
    if k == "interval":
        months, days, micros = interval_value(value)
        if months or justified(days * DAY_MICROS + micros) != (0, days, micros):
            raise UnsupportedError(
                f"the interval {sql_literal((months, days, micros), t)} as a value is not supported: a value "
                "of an interval column has no months and a time of day under 24 hours (as timestamp - "
                "timestamp gives); add it to a date or timestamp, or compare with it"
            )
        return days * DAY_MICROS + micros
    return value


def to_engine_value(value: object, t: SqlType) -> object:
    """One Python value as the engine holds it (raises ValueError/TypeError when it does not fit)."""
    return encode(sql_value(value, t), t)


def column_from_values(values: Sequence[object], t: SqlType) -> tuple[np.ndarray, np.ndarray | None]:
    """An engine column and validity mask from Python values already converted by ``to_engine_value``."""
    mask = np.array([v is not None for v in values], dtype=bool)
    data = np.array([0 if v is None else v for v in values], dtype=t.dtype)
    return data, None if mask.all() else mask


def to_python(data: np.ndarray, mask: np.ndarray | None, t: SqlType, padded: bool = False) -> list[object]:
    """SQL values of an engine column (for fetchall, display and plans; not a hot path). CHAR(n) values are
    held without their trailing spaces; ``padded`` gives them padded to n, as results show them."""
    k = t.kind
    if k == "text" and t.pad and padded and len(data):
        strings, inv = padded_strings(data, t.pad)
        vals = strings.to_pylist() if inv is None else list(np.array(strings.to_pylist(), dtype=object)[inv])
    elif k == "text":
        vals = list(POOL.decode(data))
    elif k == "decimal":
        vals = [decimal.Decimal(int(v)).scaleb(-t.scale) for v in data]
    elif k in ("date", "timestamp"):
        try:
            if k == "date":
                vals = [EPOCH + dt.timedelta(days=int(v)) for v in data]
            else:
                epoch = EPOCH_TZ if t.tz else EPOCH_TS
                vals = [epoch + dt.timedelta(microseconds=int(v)) for v in data]
        except OverflowError:
            raise DataError(f"a {t} beyond the year 9999 has no Python value (fetch_arrow gives it)") from None
    elif k == "interval":
        vals = [dt.timedelta(microseconds=int(v)) for v in data]
    else:
        vals = data.tolist()
    if mask is not None:
        vals = [v if ok else None for v, ok in zip(vals, mask.tolist(), strict=True)]
    return vals


def padded_strings(codes: np.ndarray, width: int) -> tuple[pa.Array, np.ndarray | None]:
    """The strings of text codes padded to ``width`` with spaces, as CHAR(width) values are shown: per row
    (``None``), or, where codes repeat, per distinct code with each row's index among them (padded once each;
    whether they repeat is judged on a sample, so that a column of distinct values is not sorted for
    nothing)."""
    n = len(codes)
    if n >= 64:
        sample = codes[:: max(n // 1024, 1)]
        if 4 * len(np.unique(sample)) <= len(sample):
            uniq, inv = np.unique(codes, return_inverse=True)
            return pc.utf8_rpad(POOL.strings(uniq), width=width, padding=" "), inv.reshape(-1)
    return pc.utf8_rpad(POOL.strings(codes), width=width, padding=" "), None


def parse_engine(text: str, t: SqlType) -> object:
    """A text read as type ``t`` (see ``sql.types.parse_text``), as the engine holds it."""
    return encode(parse_text(text, t), t)
