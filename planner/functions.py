"""Vectorized evaluation of the functions of ``sql.functions`` on evaluated arguments.

Each evaluator takes the call and its arguments' values (data, validity) and returns the call's value. Numbers
are computed on whole arrays (decimals as their scaled integers); text functions run once per distinct string
code of the batch, through the string pool.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.engine.strings import POOL
from sql.logical import Call

__all__ = ["FUNCTIONS", "concat_codes", "text_ranks"]

_NOTHING = pa.scalar("", pa.large_string())  # the separator of text joined end to end

Value = tuple[np.ndarray, np.ndarray | None]


def _abs(e: Call, args: list[Value], n: int) -> Value:
    ((a, m),) = args
    if a.dtype.kind == "i":
        from planner.expr import _no_least

        _no_least(e, a, m)
    return np.abs(a), m


def _sign(e: Call, args: list[Value], n: int) -> Value:
    ((a, m),) = args
    if a.dtype.kind == "f":  # as PostgreSQL: 0 for NaN and for -0.0 (np.sign gives NaN and -0.0)
        return np.subtract(a > 0, a < 0, dtype=a.dtype), m
    s = np.sign(a)
    if e.type.kind == "decimal":
        s = s * np.int64(10**e.type.scale)
    return s.astype(a.dtype), m


def half_away(x: np.ndarray, unit: int) -> np.ndarray:
    """Integers ``x`` divided by ``unit`` and rounded half away from zero (from the floor quotient and its
    remainder: nothing wraps around, the least 64-bit value included)."""
    q, r = np.divmod(x, unit)
    return q + ((2 * r > unit) | ((2 * r == unit) & (x >= 0)))


def times_power_of_ten(q: np.ndarray, k: int, m: np.ndarray | None, what: str) -> np.ndarray:
    """``q * 10**k`` (scaled, or rounded to tens, hundreds...), the error ``what`` where a value that is not
    NULL would pass 64 bits."""
    bound = np.iinfo(np.int64).max // 10**k if k <= 18 else 0
    _fail_where((q > bound) | (q < -bound), m, what)
    return q * 10**k


def _round(e: Call, args: list[Value], n: int) -> Value:
    ((a, m),) = args
    places = e.param
    t = e.args[0].type
    if t.kind == "float":
        if places is None:
            return np.rint(a), m
        return _round_double(a, places), m
    scale = t.scale if t.kind == "decimal" else 0
    if scale - places > 18:  # to a unit beyond any 64-bit value: 0, or (from half of it) beyond 64 bits
        half = 5 * 10 ** (scale - places - 1)
        if half < 2**63:
            _fail_where((a >= half) | (a <= -half), m, _out_of_range(e))
        return np.zeros(len(a), dtype=np.int64), m
    unit = 10 ** (scale - places)
    q = half_away(a, unit)
    if places < 0:  # rounded to tens, hundreds...: an integer at scale 0 (or the integer type)
        q = times_power_of_ten(q, -places, m, _out_of_range(e))
    return q.astype(np.int64), m


def _round_double(a: np.ndarray, places: int) -> np.ndarray:
    """Doubles rounded to ``places`` decimals half away from zero, as the shortest decimal that reads back as
    each (its ``repr``) rounds: 2.675 to 2.68, though the double nearest 2.675 lies below it (Spark rounds
    so, through a BigDecimal of that decimal). Scaled in floating point where that is exact enough; the few
    values whose scaled fraction lies within a few units in the last place of a half, or that scaled pass
    2**52 with decimals left, are rounded as decimals."""
    with np.errstate(over="ignore", invalid="ignore"):
        unit = 10.0**places
        y = np.abs(a) * unit
        out = np.sign(a) * np.floor(y + 0.5) / unit + 0.0  # (+ 0.0: a zero has no sign, as a BigDecimal's)
        near = (np.abs(y - np.floor(y) - 0.5) <= 4 * np.spacing(y)) & (y < 2**52)
        if places >= 0:
            whole = np.abs(a) >= (2**53 if places else 2**52)  # whole already, as every double past these is
            out[whole] = a[whole]
            if places:
                near |= (y >= 2**52) & ~whole
    if near.any():
        step = decimal.Decimal(1).scaleb(-places)
        exact = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_UP)
        out[near] = [float(decimal.Decimal(repr(x)).quantize(step, context=exact)) for x in a[near].tolist()]
    return out


def _out_of_range(e: Call) -> str:
    """PostgreSQL's message for a result beyond ``e``'s type."""
    t = e.type
    return f"{str(t).lower()} out of range" if t.kind == "int" else f"numeric field overflow ({t})"


def _fail_where(bad: np.ndarray, m: np.ndarray | None, message: str) -> None:
    """An evaluation error when ``bad`` holds on a row whose value is not NULL."""
    if m is not None:
        bad = bad & m
    if bad.any():
        from ivm.engine.operators.basic import EvaluationError

        raise EvaluationError(message)


def _range_checked(out: np.ndarray, finite: np.ndarray, nonzero: np.ndarray, m) -> np.ndarray:
    """A double result of finite arguments checked as PostgreSQL checks it: infinite is an overflow, zero out
    of a nonzero argument an underflow."""
    _fail_where(np.isinf(out) & finite, m, "value out of range: overflow")
    _fail_where((out == 0) & finite & nonzero, m, "value out of range: underflow")
    return out


def _sqrt(e: Call, args: list[Value], n: int) -> Value:
    ((a, m),) = args
    negative = a < 0
    _fail_where(negative, m, "cannot take square root of a negative number")
    return np.sqrt(np.where(negative, 0.0, a)), m


def _cbrt(e: Call, args: list[Value], n: int) -> Value:
    ((a, m),) = args
    return np.cbrt(a), m


def _logarithm(a: np.ndarray, m: np.ndarray | None) -> np.ndarray:
    """``a`` checked as an argument of a logarithm, with the values that fail replaced by 1."""
    _fail_where(a == 0, m, "cannot take logarithm of zero")
    _fail_where(a < 0, m, "cannot take logarithm of a negative number")
    return np.where(a <= 0, 1.0, a)


def _ln(e: Call, args: list[Value], n: int) -> Value:
    ((a, m),) = args
    a = _logarithm(a, m)
    return (np.log(a) if e.op == "ln" else np.log10(a)), m


def _log(e: Call, args: list[Value], n: int) -> Value:
    """``LOG(b, x)``: the base checked first, as PostgreSQL does; base 1 divides by zero."""
    from planner.expr import _and_masks

    (b, mb), (x, mx) = args
    m = _and_masks(mb, mx)
    b = _logarithm(b, m)
    x = _logarithm(x, m)
    _fail_where(b == 1, m, "division by zero")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(x) / np.log10(np.where(b == 1, 10.0, b)), m


def _exp(e: Call, args: list[Value], n: int) -> Value:
    ((a, m),) = args
    with np.errstate(over="ignore", under="ignore"):
        out = np.exp(a)
    finite = np.isfinite(a)
    return _range_checked(out, finite, finite, m), m


def _power(e: Call, args: list[Value], n: int) -> Value:
    """POWER as PostgreSQL's: zero to a negative power and a negative number to a fractional power are
    errors, and so is a finite result out of range; NaN and infinities as C's pow (which PostgreSQL follows)."""
    from planner.expr import _and_masks

    (a, ma), (b, mb) = args
    m = _and_masks(ma, mb)
    a, b = np.broadcast_to(a, (n,)), np.broadcast_to(b, (n,))
    _fail_where((a == 0) & (b < 0), m, "zero raised to a negative power is undefined")
    with np.errstate(invalid="ignore"):
        fractional = np.floor(b) != b
    _fail_where(
        (a < 0) & fractional & ~np.isnan(b),
        m,
        "a negative number raised to a non-integer power yields a complex result",
    )
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        out = np.power(a, b)
    finite = np.isfinite(a) & np.isfinite(b)
    return _range_checked(out, finite, a != 0, m), m


def _trunc(e: Call, args: list[Value], n: int) -> Value:
    """TRUNC toward zero: a double to an integral double, a scaled integer to ``e.param`` places."""
    ((a, m),) = args
    if a.dtype.kind == "f":
        return np.trunc(a), m
    places = e.param
    t = e.args[0].type
    scale = t.scale if t.kind == "decimal" else 0
    if scale - places > 18:
        return np.zeros(len(a), dtype=np.int64), m
    unit = 10 ** (scale - places)
    q = a // unit
    q = q + ((a < 0) & (q * unit != a))  # toward zero
    if places < 0:
        q = times_power_of_ten(q, -places, m, _out_of_range(e))
    return q.astype(np.int64), m


COMPARISONS = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def compare_values(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a op b`` elementwise, doubles in PostgreSQL's order: NaN equals NaN and is above every other value."""
    if a.dtype.kind != "f" and b.dtype.kind != "f":
        return COMPARISONS[op](a, b)
    na, nb = np.isnan(a), np.isnan(b)
    if not (na.any() or nb.any()):
        return COMPARISONS[op](a, b)
    if op in ("gt", "ge"):
        a, b, na, nb, op = b, a, nb, na, "lt" if op == "gt" else "le"
    eq = (a == b) | (na & nb)
    if op in ("eq", "ne"):
        return eq if op == "eq" else ~eq
    less = (a < b) | (~na & nb)
    return less if op == "lt" else less | eq


def _floor_ceil(e: Call, args: list[Value], n: int) -> Value:
    ((a, m),) = args
    if a.dtype.kind == "f":
        return (np.floor(a) if e.op == "floor" else np.ceil(a)), m
    unit = 10 ** e.args[0].type.scale
    return (a // unit if e.op == "floor" else -((-a) // unit)), m


def _extreme(e: Call, args: list[Value], n: int) -> Value:
    """GREATEST or LEAST: the largest (smallest) argument that is not NULL."""
    values = [a for a, _ in args]
    ranks = text_ranks([POOL.canonical(a) for a in values]) if e.type.kind == "text" else values
    data, mask = args[0][0].copy(), args[0][1]
    best = ranks[0].copy()
    mask = np.ones(n, dtype=bool) if mask is None else mask.copy()
    better = "gt" if e.op == "greatest" else "lt"
    for (v, vm), r in zip(args[1:], ranks[1:], strict=True):
        take = compare_values(better, r, best) | ~mask
        if vm is not None:
            take &= vm
        data[take] = v[take]
        best[take] = r[take]
        mask |= take
    return data, (None if mask.all() else mask)


def text_ranks(codes: list[np.ndarray]) -> list[np.ndarray]:
    """Ranks in string order of the canonical codes of several arrays (comparable across them)."""
    uniq, inv = np.unique(np.concatenate(codes), return_inverse=True)
    order = np.argsort(POOL.decode(uniq).astype(str), kind="stable")
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    return np.split(rank[inv.reshape(-1)], np.cumsum([len(c) for c in codes])[:-1])


def _computed(fn_of: Callable[[Call], Callable[[pa.Array], pa.Array]], dtype=None):
    """A function of text as Arrow compute over the distinct strings met: to text (``dtype`` None), numbers
    or truth values."""

    def evaluate(e: Call, args: list[Value], n: int) -> Value:
        ((a, m),) = args
        return POOL.compute(a, fn_of(e), dtype), m

    return evaluate


def _slice(start: int, stop: int | None = None) -> Callable[[pa.Array], pa.Array]:
    """Characters ``[start:stop]`` of each string, as Python slices them."""
    if stop is None:
        return lambda a: pc.utf8_slice_codeunits(a, start=start)
    return lambda a: pc.utf8_slice_codeunits(a, start=start, stop=stop)


def _upper(a: pa.Array) -> pa.Array:
    """Upper case, character by character as PostgreSQL's UTF-8 locales do: 'ß' stays 'ß' (Unicode's simple
    mapping, which Arrow follows elsewhere, would give 'ẞ')."""
    if not pc.any(pc.match_substring(a, "ß")).as_py():
        return pc.utf8_upper(a)
    parts = pc.split_pattern(a, "ß")
    upper = type(parts).from_arrays(parts.offsets, pc.utf8_upper(parts.flatten()))
    return pc.binary_join(upper, pa.scalar("ß", a.type))


def _trimmer(e: Call) -> Callable[[pa.Array], pa.Array]:
    side, chars = e.param
    trim = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(side, pc.utf8_trim)
    return lambda a: trim(a, characters=chars)


def _substring(e: Call) -> Callable[[pa.Array], pa.Array]:
    start, length = e.param
    lo = max(start - 1, 0)
    return _slice(lo, None if length is None else max(start - 1 + length, lo))


def _left(e: Call) -> Callable[[pa.Array], pa.Array]:
    return _slice(0, e.param)  # a negative count: all but the last -k characters, as s[:k]


def _right(e: Call) -> Callable[[pa.Array], pa.Array]:
    k = e.param  # a negative count: all but the first -k characters
    if k == 0:
        return lambda a: pc.utf8_slice_codeunits(a, start=0, stop=0)
    return _slice(-k)  # the last k characters; or all from character -k on


def _replace(e: Call) -> Callable[[pa.Array], pa.Array]:
    old, new = e.param
    return (lambda a: a) if old == "" else (lambda a: pc.replace_substring(a, pattern=old, replacement=new))


def _regexp_replace(e: Call) -> Callable[[pa.Array], pa.Array]:
    """REGEXP_REPLACE: RE2's pattern and rewrite (see ``sql.patterns``), every match or the first."""
    pattern, rewrite, every = e.param
    most = None if every else 1
    return lambda a: pc.replace_substring_regex(a, pattern=pattern, replacement=rewrite, max_replacements=most)


def _overlay(e: Call, args: list[Value], n: int) -> Value:
    """OVERLAY: the characters before ``start``, the new text, the characters from ``start + count`` on; an
    error for a start below 1 where a value is not NULL, as PostgreSQL's."""
    ((a, m),) = args
    new, start, count = e.param
    if start < 1:
        _fail_where(np.ones(n, dtype=bool), m, "negative substring length not allowed")

    def overlay(s: pa.Array) -> pa.Array:
        head = pc.utf8_slice_codeunits(s, start=0, stop=max(start - 1, 0))
        tail = pc.utf8_slice_codeunits(s, start=max(start - 1 + count, 0))
        return pc.binary_join_element_wise(head, pa.scalar(new, s.type), tail, pa.scalar("", s.type))

    return POOL.compute(a, overlay), m


def _translate(e: Call) -> Callable[[pa.Array], pa.Array]:
    """TRANSLATE: every character mapped at once. Each is first replaced by a character of a private use area
    that neither the texts nor the replacements hold, then that by its replacement, so that a replacement that
    is itself mapped (``ab`` to ``ba``) is not mapped again."""
    pairs = e.param
    targets = "".join(new for _, new in pairs)

    def translate(s: pa.Array) -> pa.Array:
        if not pairs:
            return s
        free = (
            (lo, hi)
            for lo, hi in _PRIVATE
            if not any(lo <= ord(c) <= hi for c in targets)
            and not pc.any(pc.match_substring_regex(s, f"[{chr(lo)}-{chr(hi)}]")).as_py()
        )
        base = next(free, (None, None))[0]
        if base is None:
            from ivm.engine.operators.basic import EvaluationError

            raise EvaluationError(
                "TRANSLATE of texts holding characters of every private use area is not supported"
            )
        for k, (old, _) in enumerate(pairs):
            s = pc.replace_substring(s, pattern=old, replacement=chr(base + k))
        for k, (_, new) in enumerate(pairs):
            s = pc.replace_substring(s, pattern=chr(base + k), replacement=new)
        return s

    return translate


_PRIVATE = ((0xF0000, 0xFFFFD), (0x100000, 0x10FFFD), (0xE000, 0xF8FF))  # Unicode's private use areas


def _pad(e: Call) -> Callable[[pa.Array], pa.Array]:
    """LPAD/RPAD: cut to ``width`` characters, else filled with ``fill`` repeated (cut) on one side."""
    width, fill, left = e.param
    cut = _slice(0, max(width, 0))
    if not fill or width <= 0:
        return cut
    if len(fill) == 1:
        pad = pc.utf8_lpad if left else pc.utf8_rpad
        return lambda a: pad(cut(a), width=width, padding=fill)
    filler = (fill * width)[:width]
    data = np.frombuffer(filler.encode(), dtype=np.uint8)
    ends = np.concatenate(([0], np.cumsum([len(ch.encode()) for ch in filler])))  # bytes of k characters

    def pad_with(a: pa.Array) -> pa.Array:
        a = cut(a)
        need = width - np.asarray(pc.utf8_length(a).to_numpy(zero_copy_only=False), dtype=np.int64)
        size = ends[need]  # each row's padding: the first ``need`` characters of the repeated fill
        offsets = np.concatenate(([0], np.cumsum(size))).astype(np.int64)
        at = np.arange(offsets[-1]) - np.repeat(offsets[:-1], size)
        chars = pa.py_buffer(data[at].tobytes())
        extra = pa.LargeStringArray.from_buffers(len(a), pa.py_buffer(offsets), chars)
        return pc.binary_join_element_wise(*((extra, a) if left else (a, extra)), pa.scalar("", a.type))

    return pad_with


def _split_part(e: Call) -> Callable[[pa.Array], pa.Array]:
    """SPLIT_PART: the index-th field (from the end when negative), '' past the last."""
    sep, index = e.param
    if not sep:
        return (lambda a: a) if index in (1, -1) else (lambda a: pc.utf8_slice_codeunits(a, start=0, stop=0))

    def part(a: pa.Array) -> pa.Array:
        parts = pc.split_pattern(a, sep)
        count = np.diff(np.asarray(parts.offsets))
        i = np.full(len(a), index - 1) if index > 0 else count + index
        inside = (i >= 0) & (i < count)
        at = np.asarray(parts.offsets)[:-1] + np.where(inside, i, 0)
        fields = parts.flatten().take(pa.array(np.where(inside, at, 0)))
        return pc.if_else(pa.array(inside), fields, pa.scalar("", a.type)) if len(a) else a

    return part


def _position(e: Call) -> Callable[[pa.Array], pa.Array]:
    """POSITION: the first match's place in characters from 1, or 0."""
    if not e.param:
        return lambda a: pa.array(np.ones(len(a), dtype=np.int64))

    def position(a: pa.Array) -> pa.Array:
        found = np.asarray(pc.find_substring(a, e.param).to_numpy(zero_copy_only=False)) >= 0
        before = pc.utf8_length(pc.list_element(pc.split_pattern(a, e.param, max_splits=1), 0))
        return pa.array(np.where(found, np.asarray(before.to_numpy(zero_copy_only=False)) + 1, 0))

    return position


def _concat_all(e: Call, args: list[Value], n: int) -> Value:
    """CONCAT: the arguments' text joined, NULLs left out; never NULL."""
    empty = POOL.encode([""])[0]
    cols = [a if m is None else np.where(m, a, empty) for a, m in args]
    if n == 0:
        return np.zeros(0, dtype=np.int64), None
    return concat_codes(cols), None


def _concat_ws(e: Call, args: list[Value], n: int) -> Value:
    """CONCAT_WS: the arguments' text joined by the separator, NULLs left out (with their separators); never
    NULL. Joined by Arrow once per distinct row."""
    if n == 0:
        return np.zeros(0, dtype=np.int64), None
    empty = POOL.encode([""])[0]
    codes = [a if m is None else np.where(m, a, empty) for a, m in args]
    present = [np.ones(n, dtype=np.int64) if m is None else m.astype(np.int64) for _, m in args]
    rows, inv = np.unique(np.stack(codes + present, axis=1), axis=0, return_inverse=True)
    k = len(args)
    kept = rows[:, k:] == 1  # each distinct row's values other than NULL, in order, as one list
    offsets = np.concatenate(([0], np.add.accumulate(kept.sum(axis=1))))
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), POOL.strings(rows[:, :k][kept]))
    joined = pc.binary_join(lists, pa.scalar(e.param, pa.large_string()))
    return POOL.encode_arrow(joined)[inv.reshape(-1)], None


def concat_codes(cols: list[np.ndarray]) -> np.ndarray:
    """The codes of the texts of ``cols`` joined end to end, row by row: joined by Arrow once per distinct
    row."""
    rows, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    joined = pc.binary_join_element_wise(*(POOL.strings(rows[:, j]) for j in range(rows.shape[1])), _NOTHING)
    return POOL.encode_arrow(joined)[inv.reshape(-1)]


def _clipper(e: Call) -> Callable[[pa.Array], pa.Array]:
    """CAST to VARCHAR(n) keeps the first n characters; to CHAR(n) also drops trailing spaces (see
    ``sql.types.Domain``)."""
    n, padded = e.param
    if padded:
        return lambda a: pc.utf8_rtrim(pc.utf8_slice_codeunits(a, start=0, stop=n), characters=" ")
    return _slice(0, n)


FUNCTIONS: dict[str, Callable[[Call, list[Value], int], Value]] = {
    "clip_text": _computed(_clipper),
    "abs": _abs,
    "sign": _sign,
    "round": _round,
    "floor": _floor_ceil,
    "ceil": _floor_ceil,
    "trunc": _trunc,
    "sqrt": _sqrt,
    "cbrt": _cbrt,
    "exp": _exp,
    "ln": _ln,
    "log10": _ln,
    "log": _log,
    "power": _power,
    "greatest": _extreme,
    "least": _extreme,
    "length": _computed(lambda e: pc.utf8_length, np.int64),
    "upper": _computed(lambda e: _upper),
    "lower": _computed(lambda e: pc.utf8_lower),
    "reverse": _computed(lambda e: pc.utf8_reverse),
    "trim": _computed(_trimmer),
    "substring": _computed(_substring),
    "left": _computed(_left),
    "right": _computed(_right),
    "replace": _computed(_replace),
    "regexp_replace": _computed(_regexp_replace),
    "overlay": _overlay,
    "translate": _computed(_translate),
    "pad": _computed(_pad),
    "split_part": _computed(_split_part),
    "position": _computed(_position, np.int64),
    "starts_with": _computed(lambda e: lambda a: pc.starts_with(a, pattern=e.param), bool),
    "concat_all": _concat_all,
    "concat_ws": _concat_ws,
    "repeat": _computed(lambda e: lambda a: pc.binary_repeat(a, e.param)),
}
