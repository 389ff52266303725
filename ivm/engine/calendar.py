"""Calendar arithmetic on the engine's dates (days since 1970-01-01) and timestamps (microseconds since then),
by numpy's datetime64 on whole arrays: what the planner's date functions and the window frames of calendar
intervals share."""

from __future__ import annotations

import numpy as np

__all__ = ["DAY_MICROS", "date_parts", "add_months"]

DAY_MICROS = 86_400_000_000


def date_parts(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Days since 1970-01-01 as (year, month, day) of the proleptic Gregorian calendar (year 0 is 1 BC)."""
    d = days.astype("datetime64[D]")
    y = d.astype("datetime64[Y]")
    m = d.astype("datetime64[M]")
    year = y.astype(np.int64) + 1970
    month = (m - y).astype(np.int64) + 1
    day = (d - m).astype(np.int64) + 1
    return year, month, day


def add_months(days: np.ndarray, months: int) -> np.ndarray:
    """Days plus whole months, clamped to the last day of the month reached (as PostgreSQL)."""
    year, month, day = date_parts(days)
    total = (year - 1970) * 12 + (month - 1) + months
    first = total.astype("datetime64[M]").astype("datetime64[D]")
    nxt = (total + 1).astype("datetime64[M]").astype("datetime64[D]")
    last_day = (nxt - first).astype(np.int64)
    return first.astype(np.int64) + np.minimum(day, last_day) - 1
