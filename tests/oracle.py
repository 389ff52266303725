"""Comparison of query results as multisets: decimals exactly, floats to 1e-9 relative."""

import decimal
import math


def _norm(v):
    if isinstance(v, float):
        return ("n", round(v, 6))
    if isinstance(v, decimal.Decimal):
        return ("n", round(float(v), 6))
    return ("v", repr(v))


def _equal(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, decimal.Decimal) or isinstance(b, decimal.Decimal):
        return decimal.Decimal(a) == decimal.Decimal(b)
    if isinstance(a, str) and isinstance(b, str):
        return a.rstrip() == b.rstrip()  # CHAR(n) padding
    return a == b


def same_rows(got, expected) -> bool:
    """Whether two results hold the same rows with the same multiplicities."""
    if len(got) != len(expected):
        return False

    def key(r):
        return tuple(_norm(x) for x in r)

    g, e = sorted(got, key=key), sorted(expected, key=key)
    return all(
        len(rg) == len(re_) and all(_equal(a, b) for a, b in zip(rg, re_, strict=True))
        for rg, re_ in zip(g, e, strict=True)
    )
