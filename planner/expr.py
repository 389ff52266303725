"""Vectorized evaluation of logical scalar expressions over engine columns, with SQL's NULL semantics.

``compile_exprs`` turns expressions into one function ``(columns, validity) -> (columns, validity)`` for the
engine's map operator; ``compile_predicate`` into a row filter keeping rows whose condition is TRUE. Every
operation works on whole arrays; text functions run once per distinct string code.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.engine.calendar import add_months
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.strings import POOL
from planner import datetimes
from planner.functions import (
    COMPARISONS,
    FUNCTIONS,
    compare_values,
    concat_codes,
    half_away,
    text_ranks,
    times_power_of_ten,
)
from planner.values import encode, parse_engine, to_python
from sql.errors import UnsupportedError
from sql.logical import Call, ColRef, Const, Expr
from sql.types import format_text

__all__ = ["compile_exprs", "compile_predicate", "evaluate", "fold", "fallible"]

Value = tuple[np.ndarray, np.ndarray | None]


def compile_exprs(exprs: Sequence[Expr]):
    exprs = tuple(fold(e) for e in exprs)

    def fn(cols, valid, n):
        out = [evaluate(e, cols, valid, n) for e in exprs]
        return tuple(o[0] for o in out), tuple(o[1] for o in out)

    return fn


def compile_predicate(pred: Expr):
    pred = fold(pred)

    def fn(cols, valid):
        n = len(cols[0]) if cols else 0
        data, mask = evaluate(pred, cols, valid, n)
        return data if mask is None else data & mask

    return fn


def fold(e: Expr) -> Expr:
    """``e`` with every call on constants alone replaced by its value, computed once here rather than for
    every batch (a call that cannot evaluate is left to fail, or not, on the rows it meets)."""
    if not isinstance(e, Call):
        return e
    args = tuple(fold(a) for a in e.args)
    e = Call(e.op, args, e.type, e.param)
    if not all(isinstance(a, Const) for a in args):
        return e
    try:
        data, mask = evaluate(e, (), (), 1)
    except Exception:  # noqa: BLE001 - whatever stops it now is for the rows to meet, as without folding
        return e
    return Const(None if mask is not None and not mask[0] else to_python(data[:1], None, e.type)[0], e.type)


def _operand(e: Expr, cols, valid, n: int) -> Value:
    """An argument's value; a constant that is not NULL as a 0-d array (it broadcasts), which saves filling
    an array of n copies where the operation combines it with a column."""
    if isinstance(e, Const) and e.value is not None:
        return np.asarray(encode(e.value, e.type), dtype=e.type.dtype), None
    return evaluate(e, cols, valid, n)


def _and_masks(*masks):
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out


def evaluate(e: Expr, cols, valid, n: int) -> Value:
    if isinstance(e, ColRef):
        return cols[e.index], valid[e.index]
    if isinstance(e, Const):
        if e.value is None:
            return np.zeros(n, dtype=e.type.dtype), np.zeros(n, dtype=bool)
        return np.full(n, encode(e.value, e.type), dtype=e.type.dtype), None
    return _CALLS[e.op](e, cols, valid, n)


def _args(e: Call, cols, valid, n):
    return [evaluate(a, cols, valid, n) for a in e.args]


def _arith(e: Call, cols, valid, n):
    op = e.op
    if op in ("add", "sub", "mul"):
        if all(isinstance(a, Const) for a in e.args):
            (a, ma), (b, mb) = _args(e, cols, valid, n)
        else:
            (a, ma), (b, mb) = (_operand(x, cols, valid, n) for x in e.args)
        mask = _and_masks(ma, mb)
        with np.errstate(over="ignore", invalid="ignore"):
            out = a + b if op == "add" else a - b if op == "sub" else a * b
        if e.type.kind != "float":
            _check_range(e, op, a, b, out, mask)
        else:
            _check_finite(out, a, b, mask)
        return out, mask
    (a, ma), (b, mb) = _args(e, cols, valid, n)
    mask = _and_masks(ma, mb)
    zero = b == 0
    if zero.any():
        if (zero if mask is None else zero & mask).any():
            raise EvaluationError("division by zero")
        b = np.where(zero, 1, b)
    if e.type.kind == "float":
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            out = a / b if op == "div" else np.fmod(a, b)
        _check_finite(out, a, b, mask)
        return out, mask
    least = (a == _INT64_MIN) & (b == -1)  # its quotient is beyond 64 bits; its remainder is 0
    if op == "div" and least.any() and (least if mask is None else least & mask).any():
        raise EvaluationError(_overflow(e.type))
    b = np.where(least, 1, b)
    q = a // b  # floor; truncation toward zero, as PostgreSQL, where the signs differ and b does not divide a
    q = q + ((q < 0) & (q * b != a))
    if op == "div" and e.type.kind == "int" and e.type.bits < 64:
        _check_width(e.type, q, mask)  # the least value divided by -1
    return (q if op == "div" else a - q * b), mask


_INT64_BOUND = 2.0**63
_INT64_MIN = np.iinfo(np.int64).min


def _check_finite(out: np.ndarray, a, b, mask) -> None:
    """Double precision arithmetic that overflowed (a finite result out of finite operands would be infinite)
    is an error, as in PostgreSQL."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(out).all():
            return
        over = np.isinf(out) & np.isfinite(a) & np.isfinite(b)
    if mask is not None:
        over &= mask
    if over.any():
        raise EvaluationError("value out of range: overflow")


def _check_range(e: Call, op: str, a, b, out: np.ndarray, mask) -> None:
    """Stop the dataflow when 64-bit integer arithmetic wrapped around (on rows whose value is not NULL): a sum
    or difference whose sign is not the one its operands' signs call for, a product that divided by one factor
    is not the other (checked where it comes near 2**63 in floating point)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if op == "mul":
            wrapped = np.abs(np.multiply(a, b, dtype=np.float64)) >= _INT64_BOUND / 2
            if wrapped.any():
                wrapped = _wrapped_products(*np.broadcast_arrays(a, b, out), wrapped)
        else:
            # a sum whose operands share a sign its result lacks; a difference of operands of unlike signs
            # whose result lacks the first's (negating the least value would wrap around itself)
            wrapped = (((a ^ out) & (b ^ out)) if op == "add" else ((a ^ b) & (a ^ out))) < 0
    if mask is not None:
        wrapped = wrapped & mask
    if np.any(wrapped):
        what = _overflow(e.type) if e.type.kind != "decimal" else f"numeric field overflow ({e.type})"
        raise EvaluationError(what)
    if e.type.kind == "int" and e.type.bits < 64:
        _check_width(e.type, out, mask)


def _wrapped_products(a: np.ndarray, b: np.ndarray, out: np.ndarray, near: np.ndarray) -> np.ndarray:
    """Where the products ``out`` of ``a`` and ``b`` (64-bit, wrapping) are not the true ones, among the rows
    ``near`` the bound (an exact product divided by a factor gives the other; -1 times the least value is the
    one wrapped product that does too)."""
    rows = np.flatnonzero(near)
    x, y, p = a[rows], b[rows], out[rows]
    d = np.where(x == 0, 1, x)
    bad = (x != 0) & ((p // d != y) | (p % d != 0) | ((x == -1) & (y == _INT64_MIN)))
    wrapped = np.zeros(len(near), dtype=bool)
    wrapped[rows] = bad
    return wrapped


def _overflow(t) -> str:
    """PostgreSQL's message for a value beyond its type: ``integer out of range`` for an INTEGER."""
    if t.kind in ("timestamp", "interval"):
        return f"{t.kind} out of range"
    return f"{str(t).lower()} out of range" if t.kind == "int" else "numeric field overflow"


def _check_width(t, out: np.ndarray, mask) -> None:
    """An integer result computed in 64 bits checked against its type's narrower width (operands within the
    width make every sum, difference, product and quotient exact in 64 bits)."""
    half = 1 << (t.bits - 1)
    bad = (out < -half) | (out >= half)
    if mask is not None:
        bad &= mask
    if bad.any():
        raise EvaluationError(_overflow(t))


def _neg(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    if a.dtype.kind == "i":
        _no_least(e, a, m)
    return -a, m


def _no_least(e: Call, a: np.ndarray, m) -> None:
    """The least value of an integer's width has no negation (nor absolute value): an error where it is not
    NULL."""
    least = a == (_INT64_MIN if e.type.kind != "int" else -(1 << (e.type.bits - 1)))
    if least.any() and (least if m is None else least & m).any():
        raise EvaluationError(_overflow(e.type))


def _compare(e: Call, cols, valid, n):
    if e.args[0].type.kind != "text" and not all(isinstance(a, Const) for a in e.args):
        (a, ma), (b, mb) = (_operand(x, cols, valid, n) for x in e.args)
        return compare_values(e.op, a, b), _and_masks(ma, mb)
    (a, ma), (b, mb) = _args(e, cols, valid, n)
    if e.args[0].type.kind == "text" and n:
        a, b = POOL.canonical(a), POOL.canonical(b)  # a table may store text under codes not canonical
        if e.op not in ("eq", "ne"):
            a, b = text_ranks([a, b])
    return COMPARISONS[e.op](a, b), _and_masks(ma, mb)


def _truth(data: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(known TRUE, known FALSE) of a boolean value."""
    if mask is None:
        return data, ~data
    return data & mask, ~data & mask


def _and(e: Call, cols, valid, n):
    (a, ma), (b, mb) = _args(e, cols, valid, n)
    if ma is None and mb is None:
        return a & b, None
    ta, fa = _truth(a, ma)
    tb, fb = _truth(b, mb)
    data = ta & tb
    return data, data | fa | fb  # FALSE wins over NULL


def _or(e: Call, cols, valid, n):
    (a, ma), (b, mb) = _args(e, cols, valid, n)
    if ma is None and mb is None:
        return a | b, None
    ta, fa = _truth(a, ma)
    tb, fb = _truth(b, mb)
    data = ta | tb
    return data, data | (fa & fb)  # TRUE wins over NULL


def _not(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    return ~a, m


def _is_null(e: Call, cols, valid, n):
    _, m = evaluate(e.args[0], cols, valid, n)
    return (np.zeros(n, dtype=bool) if m is None else ~m), None


def _is_true(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    out = a if e.op == "is_true" else ~a
    return (out if m is None else out & m), None


def _evaluated(fn):
    """A function of ``planner.functions`` as an evaluator: its arguments evaluated first."""

    def run(e: Call, cols, valid, n):
        return fn(e, _args(e, cols, valid, n), n)

    return run


def _like(e: Call, cols, valid, n):
    """LIKE and ILIKE (as the regular expression ``sql.patterns`` made of the pattern), and the POSIX regular
    expression matches ``~`` and ``~*``, once per distinct string; a CHAR(n) value (width n in the parameter)
    is matched by LIKE padded to n with spaces, as PostgreSQL matches it."""
    a, m = evaluate(e.args[0], cols, valid, n)
    if e.op == "regex":
        regex, width = e.param[2], e.param[3]
    else:
        regex, width = e.param[3], e.param[4]
    if width:
        return POOL.compute(a, lambda s: pc.match_substring_regex(pc.utf8_rpad(s, width), regex), bool), m
    return POOL.compute(a, lambda s: pc.match_substring_regex(s, pattern=regex), bool), m


def _case(e: Call, cols, valid, n):
    """CASE: each row the value of the first branch whose condition is TRUE (else the default); a value that
    can fail (text read as a number) is computed on the rows taking its branch only, as SQL's CASE guards it."""
    k = (len(e.args) - 1) // 2
    takes = []
    done = np.zeros(n, dtype=bool)
    for cond in e.args[:k]:
        c, cm = evaluate(cond, cols, valid, n)
        take = c & ~done if cm is None else c & cm & ~done
        takes.append(take)
        done |= take
    takes.append(~done)
    data = np.zeros(n, dtype=e.type.dtype)
    mask = np.zeros(n, dtype=bool)
    for value, take in zip(e.args[k:], takes, strict=True):
        _fill(value, take, data, mask, cols, valid, n)
    return data, (None if mask.all() else mask)


def _coalesce(e: Call, cols, valid, n):
    """COALESCE: each row its first argument that is not NULL; an argument that can fail is computed on the
    rows still NULL only."""
    data, mask = evaluate(e.args[0], cols, valid, n)
    if mask is None:
        return data, None
    data, mask = data.astype(e.type.dtype), mask.copy()
    for arg in e.args[1:]:
        _fill(arg, ~mask, data, mask, cols, valid, n)
    return data, (None if mask.all() else mask)


def _fill(e: Expr, rows: np.ndarray, data: np.ndarray, mask: np.ndarray, cols, valid, n: int) -> None:
    """``data`` and ``mask`` at ``rows`` (a boolean selection) set to the value of ``e`` there."""
    if not rows.any():
        return
    if fallible(e):
        at = np.flatnonzero(rows)
        v, vm = evaluate(
            e, tuple(c[at] for c in cols), tuple(None if m is None else m[at] for m in valid), len(at)
        )
        data[at] = v
        mask[at] = True if vm is None else vm
    else:
        v, vm = evaluate(e, cols, valid, n)
        data[rows] = v[rows]
        mask[rows] = True if vm is None else vm[rows]


# calls that fail on some values
_FALLIBLE = frozenset(
    {"from_text", "fit_decimal", "fit_int", "div", "mod", "neg", "abs", "float_to_decimal", "div_round"}
    | {"sqrt", "ln", "log10", "log", "exp", "power", "to_date", "to_timestamp", "epoch_to_ts"}
)
_EXACT = frozenset({"add", "sub", "mul"})  # fail beyond 64 bits, or beyond a double's range


@functools.lru_cache(maxsize=4096)
def fallible(e: Expr) -> bool:
    """Whether evaluating ``e`` may fail on some rows (text read as a number, a number too wide for its type,
    a division by zero): it must meet only the rows that the conditions guarding it let through."""
    return isinstance(e, Call) and (e.op in _FALLIBLE or e.op in _EXACT or any(fallible(a) for a in e.args))


def _nullif(e: Call, cols, valid, n):
    (a, ma), (eq, me) = _args(e, cols, valid, n)
    same = eq if me is None else eq & me
    mask = ~same if ma is None else ma & ~same
    return np.where(same, np.zeros(1, dtype=a.dtype), a), mask


def _to_type(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    src, dst = e.param, e.type
    if src.kind == dst.kind and src.kind in ("text", "timestamp"):  # held alike (see ``sql.chars.retype``)
        return a, m
    if src.kind in ("date", "int") and dst.kind == "int":  # days, or an integer in a wider width
        return a.astype(np.int64), m
    if dst.kind == "float":
        out = a.astype(np.float64)
        if src.kind != "decimal" or src.scale == 0:
            return out, m
        out /= 10**src.scale  # one rounding where the scaled integer is exact as a double
        big = np.abs(a) >= 2**53
        if big.any():  # else it would round twice: divided as Python's integers, correctly rounded
            out[big] = (a[big].astype(object) / 10**src.scale).astype(np.float64)
        return out, m
    if dst.kind == "decimal":
        shift = dst.scale - (src.scale if src.kind == "decimal" else 0)
        if shift == 0 and a.dtype == np.int64:  # a wider precision: the same scaled integers
            return a, m
        if shift < 0:  # fewer decimals: rounded half away from zero
            return half_away(a, 10**-shift), m
        what = f"numeric field overflow: a value does not fit in {dst}"
        return times_power_of_ten(a.astype(np.int64), shift, m, what), m
    raise AssertionError(dst)


def _to_int(e: Call, cols, valid, n):
    """A number as an integer, rounded to the nearest: a decimal's halves away from zero, a double's to the
    even neighbour (as PostgreSQL rounds each)."""
    a, m = evaluate(e.args[0], cols, valid, n)
    src = e.param
    if src.kind == "decimal":
        return half_away(a, 10**src.scale).astype(np.int64), m
    out = np.rint(a)
    bad = ~((out >= -_INT64_BOUND) & (out < _INT64_BOUND))  # NaN or beyond 64 bits (-2**63 is within)
    if m is not None:
        bad &= m
    if bad.any():
        raise EvaluationError(f"{_overflow(e.type)}: {a[np.flatnonzero(bad)[0]]!r}")
    return out.astype(np.int64), m


def _round_decimal(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    shift = 10 ** (e.param.scale - e.type.scale)
    return half_away(a, shift).astype(np.int64), m


def _div_round(e: Call, cols, valid, n):
    """``a / b`` of scaled integers (scales ``e.param``) as the exact quotient at the scale of ``e.type``,
    rounded half away from zero: long division, one decimal digit at a time, all in int64; a quotient beyond
    64 bits, or a zero divisor, fails."""
    (a, ma), (b, mb) = _args(e, cols, valid, n)
    mask = _and_masks(ma, mb)
    live = np.ones(n, dtype=bool) if mask is None else mask
    zero = b == 0
    if (zero & live).any():
        raise EvaluationError("division by zero")
    sa, sb = e.param
    k = e.type.scale - sa + sb  # the quotient a / b scaled by 10**k is the result's scaled integer
    negative = (a < 0) != (b < 0)
    a, b = np.abs(a.astype(np.int64)), np.abs(np.where(zero, 1, b).astype(np.int64))
    limit = np.iinfo(np.int64).max
    bad = (a < 0) | (b < 0)  # the least int64 has no absolute value
    if k < 0:  # the divisor scaled up instead
        shift = 10 ** min(-k, 18)
        bad |= (b > limit // shift) | (-k > 18)
        b, k = np.where(bad, 1, b) * shift, 0
    bad |= b > limit // 10  # the remainder times ten must stay in 64 bits
    b = np.where(bad, 1, b)
    q, r = a // b, a % b
    for _ in range(k):
        bad |= q > (limit - 9) // 10
        q = np.where(bad, 0, q)
        r = r * 10
        q, r = q * 10 + r // b, r % b
    q = q + (2 * r >= b)
    if (bad & live).any():
        raise EvaluationError(f"numeric field overflow: a quotient does not fit in {e.type}")
    return np.where(negative, -q, q).astype(np.int64), mask


def _ts_zone(e: Call, cols, valid, n):
    """Timestamps read as the wall time of one zone, as the wall time of another (``e.param``: the two zone
    names); the first is UTC, so each is one instant and its wall time elsewhere is certain."""
    a, m = evaluate(e.args[0], cols, valid, n)
    _, zone = e.param
    instants = pa.array(a.astype(np.int64), pa.int64()).cast(pa.timestamp("us", tz=zone))
    local = pc.local_timestamp(instants)
    return local.cast(pa.int64()).to_numpy(zero_copy_only=False), m


def _float_to_decimal(e: Call, cols, valid, n):
    """A double as a decimal, rounded half away from zero; one beyond 18 digits (or NaN, or infinite) fails."""
    a, m = evaluate(e.args[0], cols, valid, n)
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.sign(a) * np.floor(np.abs(a * 10**e.type.scale) + 0.5)
        bad = ~(np.abs(x) < 10**e.type.precision)
    if m is not None:
        bad &= m
    if bad.any():
        raise EvaluationError(f"numeric field overflow: a value does not fit in {e.type}")
    return np.where(np.isfinite(x), x, 0).astype(np.int64), m


def _fit_decimal(e: Call, cols, valid, n):
    """A decimal checked against its type's precision: a value that does not fit stops the dataflow."""
    a, m = evaluate(e.args[0], cols, valid, n)
    limit = 10**e.type.precision
    bad = (a >= limit) | (a <= -limit)
    if m is not None:
        bad &= m
    if bad.any():
        raise EvaluationError(f"numeric field overflow: a value does not fit in {e.type}")
    return a, m


def _fit_int(e: Call, cols, valid, n):
    """An integer checked against the range of the SMALLINT or INTEGER it is cast to (``param``: name, low,
    high): a value outside stops the dataflow."""
    a, m = evaluate(e.args[0], cols, valid, n)
    name, low, high = e.param
    bad = (a < low) | (a > high)
    if m is not None:
        bad &= m
    if bad.any():
        raise EvaluationError(f"{name} out of range: {int(a[np.flatnonzero(bad)[0]])}")
    return a, m


_split_ts = datetimes.split_ts
_date_parts = datetimes.date_parts
DAY_MICROS = datetimes.DAY_MICROS


def _ts_add(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    months, micros = e.param
    if months:
        day, tod = _split_ts(a)
        day = add_months(day, months)
        a = day * DAY_MICROS + tod
    return a + micros, m


def _date_to_ts(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    return a.astype(np.int64) * DAY_MICROS, m


def _ts_to_date(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    return _split_ts(a)[0].astype(np.int32), m


def _ts_trunc(e: Call, cols, valid, n):
    a, m = evaluate(e.args[0], cols, valid, n)
    unit = e.param
    small = {"day": DAY_MICROS, "hour": 3_600_000_000, "minute": 60_000_000, "second": 1_000_000}
    if unit in small:
        return a - np.mod(a, small[unit]), m
    day = _split_ts(a)[0]
    if unit == "week":  # weeks start on Monday
        return (day - (day + 3) % 7) * DAY_MICROS, m
    months = day.astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)
    if unit == "quarter":
        months -= months % 3
    elif unit == "year":
        months -= months % 12
    return months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64) * DAY_MICROS, m


def _date_add(e: Call, cols, valid, n):
    (a, ma), (d, md) = _args(e, cols, valid, n)
    months = e.param
    out = a.astype(np.int64)
    if months:
        out = add_months(out, months)
    return (out + d).astype(np.int32), _and_masks(ma, md)


def _from_text(e: Call, cols, valid, n):
    """Text read as another type, once per distinct text; a text that is not one stops the dataflow."""
    a, m = evaluate(e.args[0], cols, valid, n)
    t = e.type
    out = np.zeros(n, dtype=t.dtype)
    sel = np.flatnonzero(m) if m is not None else slice(None)

    def parse(text: str):
        try:
            return parse_engine(text, t)
        except (ValueError, UnsupportedError) as err:
            raise EvaluationError(getattr(err, "message", None) or str(err)) from None

    def parse_all(texts: pa.Array) -> pa.Array:
        # plain integers of up to 18 digits (never beyond BIGINT) are read by Arrow; anything else by Python
        if t.kind == "int" and pc.all(pc.match_substring_regex(texts, _PLAIN_INT)).as_py() is not False:
            digits = pc.replace_substring_regex(pc.utf8_trim(texts, characters=" \t\n\r\f"), r"^\+", "")
            return pc.cast(digits, pa.int64())
        return pa.array([parse(x) for x in texts.to_pylist()], pa.from_numpy_dtype(t.dtype))

    out[sel] = POOL.compute(a[sel], parse_all, t.dtype)
    return out, m


_PLAIN_INT = r"^[ \t\n\r\f]*[+-]?[0-9]{1,18}[ \t\n\r\f]*$"


def _to_text(e: Call, cols, valid, n):
    """Values written as text, once per distinct value (integers and booleans by Arrow)."""
    a, m = evaluate(e.args[0], cols, valid, n)
    src = e.param
    out = np.zeros(n, dtype=np.int64)
    sel = np.flatnonzero(m) if m is not None else slice(None)
    values = a[sel]
    if values.dtype.kind == "f":  # by bits: -0.0 and 0.0 are equal, yet written -0 and 0
        uniq, inv = np.unique(values.view(f"i{values.itemsize}"), return_inverse=True)
        uniq = uniq.view(values.dtype)
    else:
        uniq, inv = np.unique(values, return_inverse=True)
    if src.kind in ("int", "bool"):  # Arrow writes these as PostgreSQL does
        codes = POOL.encode_arrow(pc.cast(pa.array(uniq), pa.large_string()))
    else:
        codes = POOL.encode(format_text(v, src) for v in to_python(uniq, None, src))
    out[sel] = codes[inv.reshape(-1)] if len(uniq) else 0
    return out, m


def _concat(e: Call, cols, valid, n):
    (a, ma), (b, mb) = _args(e, cols, valid, n)
    if n == 0:
        return a, _and_masks(ma, mb)
    return concat_codes([a, b]), _and_masks(ma, mb)


_CALLS = {
    "concat": _concat,
    "extract": _evaluated(datetimes.extract),
    "to_char": _evaluated(datetimes.to_char),
    "to_date": _evaluated(datetimes.parse_templated),
    "to_timestamp": _evaluated(datetimes.parse_templated),
    "epoch_to_ts": _evaluated(datetimes.epoch_to_ts),
    "date_add": _date_add,
    "ts_add": _ts_add,
    "from_text": _from_text,
    "fit_int": _fit_int,
    "to_text": _to_text,
    "date_to_ts": _date_to_ts,
    "ts_to_date": _ts_to_date,
    "ts_trunc": _ts_trunc,
    "add": _arith,
    "sub": _arith,
    "mul": _arith,
    "div": _arith,
    "mod": _arith,
    "neg": _neg,
    "and": _and,
    "or": _or,
    "not": _not,
    "is_null": _is_null,
    "like": _like,
    "regex": _like,
    "case": _case,
    "coalesce": _coalesce,
    "nullif": _nullif,
    "to_type": _to_type,
    "to_int": _to_int,
    "round_decimal": _round_decimal,
    "div_round": _div_round,
    "ts_zone": _ts_zone,
    "float_to_decimal": _float_to_decimal,
    "fit_decimal": _fit_decimal,
    "is_true": _is_true,
    "is_false": _is_true,
    **{k: _compare for k in COMPARISONS},
    **{op: _evaluated(fn) for op, fn in FUNCTIONS.items()},
}
