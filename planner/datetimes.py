"""Vectorized evaluation of the date and time functions of ``sql.datetimes``: EXTRACT of dates, timestamps
and intervals, ``to_char``, ``to_date`` and ``to_timestamp`` (PostgreSQL's templates, ``sql.templates``),
and ``to_timestamp(seconds)``.

Dates are days and timestamps microseconds since 1970-01-01 (UTC for TIMESTAMP WITH TIME ZONE, the session's
zone). Every function works on whole arrays: the calendar by numpy's datetime64, ``to_char`` once per
distinct value with Arrow joining the pieces, ``to_date``/``to_timestamp`` once per distinct string with the
strings as a matrix of bytes read by all rows at once, node by node of the template, as PostgreSQL's
``DCH_from_char`` reads one.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.engine.calendar import DAY_MICROS, date_parts
from ivm.engine.strings import POOL
from sql.logical import Call

__all__ = [
    "DAY_MICROS",
    "split_ts",
    "date_parts",
    "days_from_civil",
    "extract",
    "to_char",
    "parse_templated",
    "epoch_to_ts",
]

_HOUR = 3_600_000_000
_MINUTE = 60_000_000
_SECOND = 1_000_000
_INT_MAX = 2**31 - 1

Value = tuple[np.ndarray, np.ndarray | None]


def _error(message: str):
    from ivm.engine.operators.basic import EvaluationError

    return EvaluationError(message)


def split_ts(ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps (microseconds) as days since the epoch and microseconds into the day."""
    day = np.floor_divide(ts, DAY_MICROS)
    return day, ts - day * DAY_MICROS


def _jan1(year: np.ndarray) -> np.ndarray:
    return (year - 1970).astype("datetime64[Y]").astype("datetime64[D]").astype(np.int64)


def _iso(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ISO 8601 (day of week 1 = Monday .. 7, week, week-numbering year) of days since the epoch."""
    isodow = (days + 3) % 7 + 1  # 1970-01-01 was a Thursday
    thursday = days - isodow + 4
    isoyear = date_parts(thursday)[0]
    week = (thursday - _jan1(isoyear)) // 7 + 1
    return isodow, week, isoyear


def _pg_year(year: np.ndarray) -> np.ndarray:
    """A proleptic year as PostgreSQL's EXTRACT gives it: 1 BC is -1 (no year 0)."""
    return np.where(year <= 0, year - 1, year)


def _c_div(a: np.ndarray, b: int) -> np.ndarray:
    """C's integer division (toward zero)."""
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)


def _c_rem(a: np.ndarray, b: int) -> np.ndarray:
    return a - _c_div(a, b) * b


def extract(e: Call, args: list[Value], n: int) -> Value:
    """EXTRACT(field FROM x) of a date (days), timestamp (microseconds) or interval (microseconds), in the
    scaled integers of ``e.type``."""
    ((a, m),) = args
    field = e.param
    kind = e.args[0].type.kind
    a = a.astype(np.int64)
    if kind == "interval":
        return _extract_interval(field, a), m
    if kind == "timestamp":
        days, tod = split_ts(a)
    else:
        days, tod = a, np.zeros_like(a)
    if field == "hour":
        return tod // _HOUR, m
    if field == "minute":
        return tod // _MINUTE % 60, m
    if field in ("second", "millisecond", "microsecond"):  # DECIMAL(8,6), DECIMAL(8,3) scaled, or INTEGER
        return tod % _MINUTE if field != "millisecond" else tod % _MINUTE, m
    if field == "epoch":
        return (a if kind == "timestamp" else days * 86_400), m
    if field == "dow":
        return (days + 4) % 7, m
    if field in ("isodow", "week", "isoyear"):
        isodow, week, isoyear = _iso(days)
        return {"isodow": isodow, "week": week, "isoyear": _pg_year(isoyear)}[field], m
    year, month, day = date_parts(days)
    if field == "doy":
        return days - _jan1(year) + 1, m
    if field == "quarter":
        return (month - 1) // 3 + 1, m
    if field in ("year", "decade", "century", "millennium"):
        y = _pg_year(year)
        if field == "year":
            return y, m
        if field == "decade":
            return np.where(y >= 0, _c_div(y, 10), -_c_div(8 - (y - 1), 10)), m
        size = 100 if field == "century" else 1000
        return np.where(y > 0, _c_div(y + size - 1, size), -_c_div(size - 1 - (y - 1), size)), m
    return {"month": month, "day": day}[field], m


def _extract_interval(field: str, a: np.ndarray) -> np.ndarray:
    """Fields of intervals without months (a number of microseconds: days of 24 hours, then the time)."""
    days = _c_div(a, DAY_MICROS)
    time = a - days * DAY_MICROS
    if field == "epoch":
        return a
    if field == "day":
        return days
    if field == "hour":
        return _c_div(time, _HOUR)
    if field == "minute":
        return _c_rem(_c_div(time, _MINUTE), 60)
    if field in ("second", "millisecond", "microsecond"):
        return _c_rem(time, _MINUTE)
    if field == "quarter":
        return np.ones_like(a)  # months / 3 + 1, PostgreSQL's quarter of an interval
    return np.zeros_like(a)  # year, month, decade, century, millennium: no months


# -- to_char ----------------------------------------------------------------------------------------------

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
_ROMAN = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII"]


class _Fields:
    """The calendar fields of timestamps, computed when first asked for."""

    def __init__(self, ts: np.ndarray) -> None:
        self.days, self.tod = split_ts(ts)
        self._cache: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str) -> np.ndarray:
        cache = self.__dict__["_cache"]
        if name not in cache:
            cache.update(self._compute(name))
        return cache[name]

    def _compute(self, name: str) -> dict[str, np.ndarray]:
        days, tod = self.days, self.tod
        if name in ("year", "month", "mday"):
            y, mo, d = date_parts(days)
            return {"year": y, "month": mo, "mday": d}
        if name in ("isodow", "isoweek", "isoyear"):
            a, b, c = _iso(days)
            return {"isodow": a, "isoweek": b, "isoyear": c}
        if name == "wday":
            return {"wday": (days + 4) % 7}
        if name == "yday":
            return {"yday": days - _jan1(self.year) + 1}
        if name == "hour":
            return {"hour": tod // _HOUR}
        if name == "minute":
            return {"minute": tod // _MINUTE % 60}
        if name == "sec":
            return {"sec": tod // _SECOND % 60}
        if name == "usec":
            return {"usec": tod % _SECOND}
        raise AttributeError(name)


def _number(values: np.ndarray, width: int) -> pa.Array:
    """Integers written as C's ``%0*d`` writes them (``width`` 0: as they are)."""
    text = pc.cast(pa.array(np.abs(values)), pa.string())
    if width > 1:
        text = pc.utf8_lpad(text, width=width - (0 if (values >= 0).all() else 1), padding="0")
    if (values < 0).any():
        text = pc.if_else(pa.array(values < 0), pc.binary_join_element_wise("-", text, ""), text)
    return text


def _names(names: list[str], index: np.ndarray, pad: int) -> pa.Array:
    """``names[index]``, padded on the right with spaces to ``pad`` characters (0: not padded)."""
    table = [name.ljust(pad) for name in names] if pad else names
    return pa.array(table, pa.string()).take(pa.array(index))


def _adjusted(year: np.ndarray) -> np.ndarray:
    """PostgreSQL's ADJUST_YEAR: a year before 1 as its number BC."""
    return np.where(year <= 0, 1 - year, year)


def _piece(node, f: _Fields) -> pa.Array | str:
    """What ``to_char`` writes for one pattern of the template."""
    name, fm = node.name, node.fm

    def num(values: np.ndarray, width: int) -> pa.Array:
        return _number(values, 0 if fm else width)

    cased = {"UPPER": str.upper, "lower": str.lower}
    if name in ("MONTH", "Month", "month", "MON", "Mon", "mon", "DAY", "Day", "day", "DY", "Dy", "dy"):
        full = name.upper() in ("MONTH", "DAY")
        source = _MONTHS if name.upper().startswith("MON") else _DAYS
        case = "UPPER" if name.isupper() else "lower" if name.islower() else "Title"
        names = [cased.get(case, str)(x if full else x[:3]) for x in source]
        index = f.month - 1 if source is _MONTHS else f.wday
        return _names(names, index, 9 if full and not fm else 0)
    if name in ("RM", "rm"):
        names = _ROMAN if name == "RM" else [r.lower() for r in _ROMAN]
        return _names(names, f.month - 1, 0 if fm else 4)
    if name.upper().replace(".", "") in ("AM", "PM"):
        dotted = "." in name
        words = ["A.M.", "P.M."] if dotted else ["AM", "PM"]
        if name.islower():
            words = [w.lower() for w in words]
        return _names(words, (f.hour >= 12).astype(np.int64), 0)
    if name.upper().replace(".", "") in ("AD", "BC"):
        words = ["A.D.", "B.C."] if "." in name else ["AD", "BC"]
        if name.islower():
            words = [w.lower() for w in words]
        return _names(words, (f.year <= 0).astype(np.int64), 0)
    year = _adjusted(f.year)
    simple = {
        "YYYY": lambda: num(year, 4),
        "YYY": lambda: num(year % 1000, 3),
        "YY": lambda: num(year % 100, 2),
        "Y": lambda: num(year % 10, 1),
        "IYYY": lambda: num(_adjusted(f.isoyear), 4),
        "IYY": lambda: num(_adjusted(f.isoyear) % 1000, 3),
        "IY": lambda: num(_adjusted(f.isoyear) % 100, 2),
        "I": lambda: num(_adjusted(f.isoyear) % 10, 1),
        "MM": lambda: num(f.month, 2),
        "DD": lambda: num(f.mday, 2),
        "DDD": lambda: num(f.yday, 3),
        "D": lambda: _number(f.wday + 1, 0),
        "ID": lambda: _number(np.where(f.wday == 0, 7, f.wday), 0),
        "IW": lambda: num(f.isoweek, 2),
        "WW": lambda: num((f.yday - 1) // 7 + 1, 2),
        "W": lambda: _number((f.mday - 1) // 7 + 1, 0),
        "Q": lambda: _number((f.month - 1) // 3 + 1, 0),
        "J": lambda: _number(f.days + 2_440_588, 0),
        "HH": lambda: num(np.where(f.hour % 12 == 0, 12, f.hour % 12), 2),
        "HH12": lambda: num(np.where(f.hour % 12 == 0, 12, f.hour % 12), 2),
        "HH24": lambda: num(f.hour, 2),
        "MI": lambda: num(f.minute, 2),
        "SS": lambda: num(f.sec, 2),
        "MS": lambda: _number(f.usec // 1000, 3),
        "US": lambda: _number(f.usec, 6),
        "SSSS": lambda: _number(f.tod // _SECOND, 0),
        "SSSSS": lambda: _number(f.tod // _SECOND, 0),
    }
    if name in simple:
        return simple[name]()
    if name.startswith("FF"):
        digits = int(name[2])
        return _number(f.usec // 10 ** (6 - digits), digits)
    if name == "CC":
        y = f.year
        century = np.where(y > 0, (y + 99) // 100, _c_div(y, 100) - 1)
        if fm:
            return _number(century, 0)
        return pc.if_else(pa.array(np.abs(century) > 99), _number(century, 0), _number(century, 2))
    if name == "Y,YYY":
        thousands = year // 1000
        return pc.binary_join_element_wise(_number(thousands, 0), _number(year - thousands * 1000, 3), ",")
    if name == "FX":
        return ""
    raise AssertionError(name)


def _ordinal(text: pa.Array, upper: bool) -> pa.Array:
    """Numbers written with their English ordinal suffix, as PostgreSQL's TH (``upper``) or th: 1st, 2nd,
    3rd, 11th, 12th, 13th, 21st..."""
    last = pc.utf8_slice_codeunits(text, start=-1)
    tens = pc.utf8_slice_codeunits(text, start=-2, stop=-1)
    suffix = pc.if_else(
        pc.equal(tens, "1"),
        "th",
        pc.if_else(
            pc.equal(last, "1"),
            "st",
            pc.if_else(pc.equal(last, "2"), "nd", pc.if_else(pc.equal(last, "3"), "rd", "th")),
        ),
    )
    return pc.binary_join_element_wise(text, pc.utf8_upper(suffix) if upper else suffix, "")


def to_char(e: Call, args: list[Value], n: int) -> Value:
    """``to_char(timestamp, template)``: the template's text with each pattern's value, once per distinct
    timestamp."""
    ((a, m),) = args
    out = np.zeros(n, dtype=np.int64)
    sel = np.flatnonzero(m) if m is not None else np.arange(n)
    if not len(sel):
        return out, m
    uniq, inv = np.unique(a[sel], return_inverse=True)
    f = _Fields(uniq.astype(np.int64))
    pieces: list[pa.Array | str] = []
    text = ""
    for node in e.param[1]:
        if node.kind != "pattern":
            text += node.name
            continue
        if text:
            pieces.append(text)
            text = ""
        piece = _piece(node, f)
        pieces.append(_ordinal(piece, node.th == "TH") if node.th else piece)
    if text:
        pieces.append(text)
    arrays = [p for p in pieces if not isinstance(p, str)]
    if not arrays:
        joined = pa.array(["".join(pieces)] * len(uniq), pa.string())
    else:
        parts = [pa.scalar(p, pa.string()) if isinstance(p, str) else p for p in pieces]
        joined = pc.binary_join_element_wise(*parts, pa.scalar("", pa.string()))
    out[sel] = POOL.encode_arrow(joined.cast(pa.large_string()))[inv.reshape(-1)]
    return out, m


def epoch_to_ts(e: Call, args: list[Value], n: int) -> Value:
    """``to_timestamp(seconds)``: seconds since 1970-01-01 00:00 UTC (a double) as microseconds, rounded as
    PostgreSQL rounds them; NaN and values beyond the range of timestamps fail."""
    ((a, m),) = args
    live = np.ones(n, dtype=bool) if m is None else m
    with np.errstate(invalid="ignore", over="ignore"):
        micros = np.rint(a * 1e6)
        bad = ~np.isfinite(micros) | (np.abs(micros) >= 9.2e18)
    if (bad & live).any():
        value = a[np.flatnonzero(bad & live)[0]]
        if np.isnan(value):
            raise _error("timestamp cannot be NaN")
        raise _error(f'timestamp out of range: "{value!r}"')
    return np.where(bad, 0, micros).astype(np.int64), m


# -- to_date and to_timestamp -----------------------------------------------------------------------------

_MONTHS_FULL_LOWER = [x.lower().encode() for x in _MONTHS]
_MONTHS_LOWER = [x[:3].lower().encode() for x in _MONTHS]
_DAYS_FULL_LOWER = [x.lower().encode() for x in _DAYS]
_DAYS_LOWER = [x[:3].lower().encode() for x in _DAYS]
_MERIDIEM = [b"am", b"pm", b"am", b"pm"]
_MERIDIEM_DOTTED = [b"a.m.", b"p.m.", b"a.m.", b"p.m."]
_NUMBER_WIDTH = {
    "YYYY": 4, "YYY": 3, "YY": 2, "Y": 1, "MM": 2, "DD": 2, "DDD": 3, "D": 1, "Q": 1, "HH": 2, "HH12": 2,
    "HH24": 2, "MI": 2, "SS": 2, "MS": 3, "US": 6, "SSSS": 4, "SSSSS": 5,
    "FF1": 1, "FF2": 2, "FF3": 3, "FF4": 4, "FF5": 5, "FF6": 6,
}  # fmt: skip
_FIELD_OF = {
    "YYYY": "year", "YYY": "year", "YY": "year", "Y": "year", "MM": "mm", "DD": "dd", "DDD": "ddd", "D": "d",
    "HH": "hh", "HH12": "hh", "HH24": "hh", "MI": "mi", "SS": "ss", "MS": "ms", "US": "us", "SSSS": "ssss",
    "SSSSS": "ssss", "FF1": "us", "FF2": "us", "FF3": "us", "FF4": "us", "FF5": "us", "FF6": "us",
}  # fmt: skip
_FIELDS = ("year", "mm", "dd", "ddd", "d", "hh", "mi", "ss", "ms", "us", "ssss", "pm")


class _Reader:
    """Distinct strings as a matrix of bytes, each read at its own position, all rows at once."""

    def __init__(self, strings: pa.Array) -> None:
        strings = strings.cast(pa.large_string())
        buffers = strings.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64)[strings.offset : strings.offset + len(strings) + 1]
        data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
        self.k = len(strings)
        self.length = np.diff(offsets)
        width = int(self.length.max()) if self.k else 0
        self.width = width + 8
        self.mat = np.zeros((self.k, self.width), dtype=np.uint8)
        rows = np.repeat(np.arange(self.k), self.length)
        cols = np.arange(int(self.length.sum())) - np.repeat(offsets[:-1] - offsets[0], self.length)
        self.mat[rows, cols] = data[offsets[0] : offsets[-1]]
        self.rows = np.arange(self.k)
        self.strings = strings

    def at(self, pos: np.ndarray) -> np.ndarray:
        return self.mat[self.rows, np.minimum(pos, self.width - 1)]

    def text(self, row: int) -> str:
        return self.strings[row].as_py()


def _space(b: np.ndarray) -> np.ndarray:
    return (b == 32) | ((b >= 9) & (b <= 13))


def _digit(b: np.ndarray) -> np.ndarray:
    return (b >= 48) & (b <= 57)


def _separator(b: np.ndarray) -> np.ndarray:
    alpha = ((b >= 65) & (b <= 90)) | ((b >= 97) & (b <= 122))
    return (b > 32) & (b < 127) & ~alpha & ~_digit(b)


def _mblen(b: np.ndarray) -> np.ndarray:
    return np.where(b >= 0xF0, 4, np.where(b >= 0xE0, 3, np.where(b >= 0xC0, 2, 1)))


def _next_separator(nodes, i: int) -> bool:
    """PostgreSQL's is_next_separator: whether what follows pattern ``i`` cannot be a digit of it."""
    if i + 1 >= len(nodes):
        return True
    nxt = nodes[i + 1]
    if nxt.kind == "pattern":
        return not nxt.digit
    return not nxt.name.isdigit()


class _Parse:
    """The state of reading every distinct string through one template (PostgreSQL's DCH_from_char)."""

    def __init__(self, reader: _Reader, function: str) -> None:
        self.r = reader
        k = reader.k
        self.pos = np.zeros(k, dtype=np.int64)
        self.extra = np.zeros(k, dtype=np.int64)
        self.failed = np.zeros(k, dtype=bool)
        self.messages: dict[int, str] = {}
        self.f = {name: np.zeros(k, dtype=np.int64) for name in _FIELDS}
        self.clock12 = np.zeros(k, dtype=bool)
        self.function = function

    def live(self) -> np.ndarray:
        return ~self.failed & (self.pos < self.r.length)

    def fail(self, rows: np.ndarray, message) -> None:
        """Rows (a boolean selection) that failed, with the message for each (text, or made from a row)."""
        rows = rows & ~self.failed
        for row in np.flatnonzero(rows)[:1]:
            self.messages[int(row)] = message(int(row)) if callable(message) else message
        self.failed |= rows

    def skip_spaces(self, rows: np.ndarray, count: bool) -> None:
        while True:
            step = rows & _space(self.r.at(self.pos)) & (self.pos < self.r.length)
            if not step.any():
                return
            self.pos += step
            if count:
                self.extra += step

    def set(self, field: str, rows: np.ndarray, value: np.ndarray, name: str) -> None:
        """PostgreSQL's from_char_set_int: a field set twice to different values is an error."""
        dest = self.f[field]
        clash = rows & (dest != 0) & (dest != value)
        self.fail(clash, f'conflicting values for "{name}" field in formatting string')
        ok = rows & ~clash
        dest[ok] = value[ok]

    def integer(self, rows: np.ndarray, width: int, slurp: bool, name: str) -> tuple[np.ndarray, np.ndarray]:
        """PostgreSQL's from_char_parse_int_len: (value, characters used) at each row's position."""
        r = self.r
        init = self.pos.copy()
        p1 = init.copy()
        while True:  # strspace_len
            step = rows & _space(r.at(p1)) & (p1 < r.length)
            if not step.any():
                break
            p1 += step
        if slurp:
            start, stop = p1, r.length
        else:
            start, stop = p1, np.minimum(p1 + width, r.length)
            short = rows & (stop - start < width)
            self.fail(
                short,
                lambda row: (
                    f'source string too short for "{name}" formatting field (Field requires {width} '
                    f"characters, but only {int(stop[row] - start[row])} remain.)"
                ),
            )
            rows = rows & ~short
        q = start.copy()
        while True:  # strtol's own leading blanks (inside the copy, for a fixed width)
            step = rows & _space(r.at(q)) & (q < stop)
            if not step.any():
                break
            q += step
        b = r.at(q)
        sign = np.where(rows & (q < stop) & (b == 45), -1, 1)
        q = q + (rows & (q < stop) & ((b == 43) | (b == 45)))
        digits_start = q.copy()
        value = np.zeros(r.k, dtype=np.int64)
        while True:
            step = rows & (q < stop) & _digit(r.at(q))
            if not step.any():
                break
            value = np.where(step, np.minimum(value * 10 + (r.at(q).astype(np.int64) - 48), 2**40), value)
            q += step
        found = q > digits_start
        used = np.where(found, q - start, 0)
        if not slurp:
            partial = rows & found & (used < width)
            self.fail(
                partial,
                lambda row: (
                    f'invalid value "{_slice(r, row, start[row], width)}" for "{name}" (Field requires '
                    f"{width} characters, but only {int(used[row])} could be parsed.)"
                ),
            )
            rows = rows & ~partial
        end = np.where(found, q, init if slurp else start)
        none = rows & (end == init)
        self.fail(
            none,
            lambda row: (
                f'invalid value "{_slice(r, row, start[row], width)}" for "{name}" (Value must be an integer.)'
            ),
        )
        rows = rows & ~none
        value = value * sign
        out_of_range = rows & ((value > _INT_MAX) | (value < -_INT_MAX - 1))
        self.fail(out_of_range, f'value for "{name}" in source string is out of range')
        rows = rows & ~out_of_range
        self.pos = np.where(rows, end, self.pos)
        return value, np.where(rows, end - init, -1)

    def search(self, rows: np.ndarray, names: list[bytes], name: str) -> np.ndarray:
        """PostgreSQL's seq_search_ascii: the index of the first of ``names`` the text at each row's
        position starts with (ASCII case ignored), the position moved past it."""
        r = self.r
        found = np.full(r.k, -1, dtype=np.int64)
        size = np.zeros(r.k, dtype=np.int64)
        for i, word in enumerate(names):
            match = rows & (found < 0) & (self.pos + len(word) <= r.length)
            for j, ch in enumerate(word):
                b = r.at(self.pos + j)
                low = np.where((b >= 65) & (b <= 90), b + 32, b)
                match &= low == ch
            found[match] = i
            size[match] = len(word)
        missing = rows & (found < 0)
        self.fail(
            missing,
            lambda row: (
                f'invalid value "{_word(r, row, self.pos[row])}" for "{name}" (The given value did not '
                "match any of the allowed values for this field.)"
            ),
        )
        self.pos += np.where(rows & ~missing, size, 0)
        return found


def _slice(r: _Reader, row: int, start: int, width: int) -> str:
    raw = bytes(r.mat[row, int(start) : min(int(start) + width, int(r.length[row]))])
    return raw.decode("utf-8", "replace")


def _word(r: _Reader, row: int, start: int) -> str:
    raw = bytes(r.mat[row, int(start) : int(r.length[row])]).decode("utf-8", "replace")
    return raw.split()[0] if raw.split() else raw


def _read(reader: _Reader, nodes, function: str) -> _Parse:
    """Every string read through the template's nodes, as PostgreSQL's DCH_from_char reads one."""
    s = _Parse(reader, function)
    fx = False
    for i, node in enumerate(nodes):
        live = s.live()
        if not live.any():
            break
        if not fx and not (node.kind == "pattern" and node.name == "FX") and (node.kind == "pattern" or i == 0):
            s.skip_spaces(live, count=True)
        if node.kind in ("separator", "space"):
            b = reader.at(s.pos)
            if fx:
                s.pos = np.minimum(s.pos + np.where(live, _mblen(b), 0), reader.length)
            else:
                s.extra -= live
                hit = live & (s.pos < reader.length) & (_space(b) | _separator(b))
                s.pos += hit
                s.extra += hit
            continue
        if node.kind == "char":
            b = reader.at(s.pos)
            if fx:
                s.pos = np.minimum(s.pos + np.where(live, _mblen(b), 0), reader.length)
            else:
                kept = live & (s.extra > 0)
                s.extra -= kept
                moved = live & ~kept
                s.pos = np.minimum(s.pos + np.where(moved, _mblen(b), 0), reader.length)
            continue
        name = node.name
        if name == "FX":
            fx = True
        elif name in _NUMBER_WIDTH:
            width = _NUMBER_WIDTH[name]
            slurp = node.fm or _next_separator(nodes, i)
            value, used = s.integer(live, width, slurp, node.text)
            ok = live & (used >= 0)
            field = _FIELD_OF.get(name)
            if name in ("YYY", "YY", "Y"):
                s.set("year", ok, value, node.text)
                adjusted = np.where(
                    value < 70,
                    value + 2000,
                    np.where(value < 100, value + 1900, np.where(value < 520, value + 2000, value + 1000)),
                )
                adjusted = np.where(value < 1000, adjusted, value)
                s.f["year"] = np.where(ok & ~s.failed & (used < 4), adjusted, s.f["year"])
            elif name == "MS":
                s.set("ms", ok, value, node.text)
                scale = np.where(used == 1, 100, np.where(used == 2, 10, 1))
                s.f["ms"] = np.where(ok & ~s.failed, s.f["ms"] * scale, s.f["ms"])
            elif field == "us":
                s.set("us", ok, value, node.text)
                scale = np.choose(np.clip(used, 1, 6) - 1, [100_000, 10_000, 1_000, 100, 10, 1])
                s.f["us"] = np.where(ok & ~s.failed, s.f["us"] * scale, s.f["us"])
            elif field is not None:
                s.set(field, ok, value, node.text)
            if name in ("HH", "HH12"):
                s.clock12 |= ok
        elif name.upper() in ("MONTH", "MON"):
            words = _MONTHS_FULL_LOWER if name.upper() == "MONTH" else _MONTHS_LOWER
            found = s.search(live, words, node.text)
            ok = live & (found >= 0)
            s.set("mm", ok, found + 1, node.text)
        elif name.upper() in ("DAY", "DY"):
            words = _DAYS_FULL_LOWER if name.upper() == "DAY" else _DAYS_LOWER
            found = s.search(live, words, node.text)
            ok = live & (found >= 0)
            s.set("d", ok, found, node.text)
            s.f["d"] = np.where(ok & ~s.failed, s.f["d"] + 1, s.f["d"])
        else:  # AM, PM and their spellings
            words = _MERIDIEM_DOTTED if "." in name else _MERIDIEM
            found = s.search(live, words, node.text)
            ok = live & (found >= 0)
            s.set("pm", ok, found % 2, node.text)
            s.clock12 |= ok
        if not fx:
            s.extra = np.where(live, 0, s.extra)
            s.skip_spaces(live & ~s.failed, count=True)
    return s


_YSUM = (
    np.array([0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365]),
    np.array([0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335, 366]),
)


def days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of the proleptic Gregorian dates (year, month, day), element-wise."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def parse_templated(e: Call, args: list[Value], n: int) -> Value:
    """``to_date(text, template)`` (days) and ``to_timestamp(text, template)`` (microseconds, UTC), once per
    distinct string; a string that does not read fails as PostgreSQL's does."""
    ((a, m),) = args
    _, nodes = e.param
    timestamp = e.op == "to_timestamp"
    out = np.zeros(n, dtype=np.int64)
    sel = np.flatnonzero(m) if m is not None else np.arange(n)
    if len(sel):
        uniq, inv = np.unique(a[sel], return_inverse=True)
        strings = POOL.strings(uniq)
        values = np.zeros(len(uniq), dtype=np.int64)
        for part in _by_length(strings):  # strings of like lengths together, the matrix of bytes bounded
            values[part] = _assemble(_read(_Reader(strings.take(pa.array(part))), nodes, e.op), e.op)
        out[sel] = values[inv.reshape(-1)]
    return (out if timestamp else out.astype(np.int32)), m


_MATRIX_BYTES = 1 << 24


def _by_length(strings: pa.Array) -> list[np.ndarray]:
    """Positions of ``strings`` in groups, shortest first, each of at most ``_MATRIX_BYTES`` when every string
    of the group is padded to the group's longest."""
    size = np.asarray(pc.binary_length(strings).fill_null(0), dtype=np.int64) + 8
    order = np.argsort(size, kind="stable")
    groups, start = [], 0
    while start < len(order):
        stop = start + 1  # a string longer than the bound alone
        while stop < len(order) and (stop - start + 1) * int(size[order[stop]]) <= _MATRIX_BYTES:
            stop += 1
        groups.append(order[start:stop])
        start = stop
    return groups


def _assemble(s: _Parse, function: str) -> np.ndarray:
    """The dates or timestamps the fields read make, checked as PostgreSQL's do_to_timestamp checks them."""
    r, f = s.r, s.f
    ok = ~s.failed
    hour = np.where(f["ssss"] != 0, f["ssss"] // 3600, 0)
    minute = np.where(f["ssss"] != 0, f["ssss"] % 3600 // 60, 0)
    sec = np.where(f["ssss"] != 0, f["ssss"] % 60, 0)
    sec = np.where(f["ss"] != 0, f["ss"], sec)
    minute = np.where(f["mi"] != 0, f["mi"], minute)
    hour = np.where(f["hh"] != 0, f["hh"], hour)
    bad12 = ok & s.clock12 & ((hour < 1) | (hour > 12))
    s.fail(
        bad12,
        lambda row: (
            f'hour "{int(hour[row])}" is invalid for the 12-hour clock (Use the 24-hour clock, or give '
            "an hour between 1 and 12.)"
        ),
    )
    ok &= ~bad12
    hour = np.where(s.clock12 & (f["pm"] != 0) & (hour < 12), hour + 12, hour)
    hour = np.where(s.clock12 & (f["pm"] == 0) & (hour == 12), 0, hour)
    year = np.where(f["year"] < 0, f["year"] + 1, f["year"])
    has_year = f["year"] != 0
    has_month = f["mm"] != 0
    has_day = f["dd"] != 0
    month = np.where(has_month, f["mm"], 1)
    mday = np.where(has_day, f["dd"], 1)
    ddd = f["ddd"]
    by_doy = (ddd != 0) & ((month <= 1) | (mday <= 1))
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    ysum = np.where(leap[:, None], _YSUM[1][None, :], _YSUM[0][None, :])
    i = np.sum(ddd[:, None] > ysum[:, 1:], axis=1) + 1  # the month of the day of the year (13: beyond)
    month = np.where(by_doy & (month <= 1), i, month)
    mday = np.where(by_doy & (mday <= 1), ddd - ysum[np.arange(r.k), i - 1], mday)
    has_month |= by_doy
    has_day |= by_doy
    month_days = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[np.clip(month, 1, 12) - 1] + (
        (np.clip(month, 1, 12) == 2) & leap
    )
    fsec = f["ms"] * 1000 + f["us"]
    bad = (
        (has_month & ((month < 1) | (month > 12)))
        | (has_day & ((mday < 1) | (mday > 31)))
        | (has_year & has_month & has_day & (mday > month_days))
        | (hour < 0)
        | (hour >= 24)
        | (minute < 0)
        | (minute >= 60)
        | (sec < 0)
        | (sec >= 60)
        | (fsec < 0)
        | (fsec >= 1_000_000)
    )
    s.fail(ok & bad, lambda row: f'date/time field value out of range: "{r.text(row)}"')
    ok &= ~bad
    bc = ok & (year <= 0)  # PostgreSQL's answer is a date BC, which ivm does not hold
    s.fail(
        bc,
        lambda row: (
            f"{function}() of {r.text(row)!r}: a year before 1 AD (the year 1 BC when the text has none) "
            "is not supported"
        ),
    )
    ok &= ~bc
    too_far = ok & (year > (294_276 if function == "to_timestamp" else 5_874_897))
    s.fail(
        too_far,
        lambda row: f'{"timestamp" if function == "to_timestamp" else "date"} out of range: "{r.text(row)}"',
    )
    ok &= ~too_far
    if s.failed.any():
        row = int(np.flatnonzero(s.failed)[0])
        raise _error(s.messages.get(row, f'invalid value for {function}(): "{r.text(row)}"'))
    days = days_from_civil(year, np.clip(month, 1, 12), mday)
    if function == "to_date":
        return days
    return days * DAY_MICROS + ((hour * 60 + minute) * 60 + sec) * _SECOND + fsec
