"""COPY table [(columns)] FROM 'file' [WITH] (options): a file's rows as a ``pyarrow.Table``, read the way
PostgreSQL 15 reads them.

A COPY must load what PostgreSQL would load from the same bytes, or fail where it fails: a TEXT value
'007' stays '007', a DECIMAL is read from its digits (never through a float), a bad value stops the load
with the file line and column it is on. So this module does not let a CSV reader infer types: it cuts the
file into lines and fields as PostgreSQL's COPY does (text format with its backslash escapes and ``\\.``
end marker, or CSV with its quotes and escapes; line ends as the first line sets them), then reads every
field with its column's type as PostgreSQL's input function for that type reads it. Both steps are
vectorized: numpy over the file's bytes finds escapes, quotes, delimiters and line ends, and pyarrow
compute kernels check and convert whole columns of fields; where PostgreSQL would stop, the first
offending line is found from those masks and reported with PostgreSQL's message and line number (which,
as PostgreSQL counts them, include the line ends inside quoted CSV fields after the first record).
pyarrow.csv is not used for the splitting because its rules differ from PostgreSQL's where it matters:
a quote only opens a field at its start, its escape character drops itself before any byte (text
format's ``\\n`` would read as ``n``), and it knows neither the end marker nor line-end styles.

Parquet (ivm's extension, ``FORMAT parquet``) is read with pyarrow.parquet, its columns matched by name
and cast to the columns' types only where no value changes.

Only ``ivm.errors`` classes leave ``read_copy``: ProgrammingError for a statement PostgreSQL rejects,
NotSupportedError for what it accepts and ivm does not do, OperationalError for a file that cannot be
read, DataError for a file whose contents do not load.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp

import sql.catalog
from ivm.db.arrow import arrow_type
from ivm.errors import DataError, Error, NotSupportedError, OperationalError, ProgrammingError
from planner.datetimes import days_from_civil
from sql.errors import error_at
from sql.logical import Column
from sql.types import SqlType

__all__ = ["read_copy"]

_LF, _CR, _BACKSLASH, _DOT = 10, 13, 92, 46
_WS = " \t\n\r\v\f"
_S = r"[ \t\n\r\v\f]"
_CHUNK = 1 << 24

_NOT_SUPPORTED = {
    "freeze",
    "default",
    "force_quote",
    "force_not_null",
    "force_null",
    "on_error",
    "log_verbosity",
    "reject_limit",
    "convert_selectively",
}
_SUPPORTED = {"format", "header", "delimiter", "null", "quote", "escape", "encoding"}
_ENCODING_NAMES = """
abc alt big5 euccn eucjis2004 eucjp euckr euctw gb18030 gbk iso88591 iso885910 iso885913 iso885914
iso885915 iso885916 iso88592 iso88593 iso88594 iso88595 iso88596 iso88597 iso88598 iso88599 johab
koi8 koi8r koi8u latin1 latin10 latin2 latin3 latin4 latin5 latin6 latin7 latin8 latin9 mskanji
muleinternal shiftjis shiftjis2004 sjis sqlascii tcvn tcvn5712 uhc unicode utf8 vscii win win1250
win1251 win1252 win1253 win1254 win1255 win1256 win1257 win1258 win866 win874 win932 win936 win949
win950 windows1250 windows1251 windows1252 windows1253 windows1254 windows1255 windows1256
windows1257 windows1258 windows866 windows874 windows932 windows936 windows949 windows950
"""
_ENCODINGS = frozenset(_ENCODING_NAMES.split())


def read_copy(stmt: sqlglot.exp.Copy, table: sql.catalog.Table) -> pa.Table:
    """The rows that ``COPY table [(columns)] FROM 'file' [WITH] (options)`` loads into ``table``.

    The result has the columns the COPY names (all of the table's when it names none), in its order, each
    named as the column and typed ``ivm.db.arrow.arrow_type`` of its type; NOT NULL, keys and integer widths
    narrower than 64 bits are for the caller to check. Text and CSV files are read as PostgreSQL 15 reads
    them (see the module docstring), Parquet files by column name. Raises ProgrammingError for a statement
    PostgreSQL rejects (unknown column, conflicting or invalid options), NotSupportedError for COPY TO, FROM
    STDIN or PROGRAM and for options and values ivm does not implement, OperationalError when the file
    cannot be read, and DataError naming the file line and column of the first value or line that does
    not load."""
    if not stmt.args.get("kind"):
        raise error_at(stmt, "COPY ... TO is not supported", cls=NotSupportedError)
    files = stmt.args.get("files") or []
    if len(files) != 1:
        raise error_at(stmt, "COPY FROM takes one file name", cls=ProgrammingError)
    source = files[0]
    if not (isinstance(source, exp.Literal) and source.is_string):
        raise error_at(
            source, f"COPY FROM {source.sql(dialect='postgres')} is not supported", cls=NotSupportedError
        )
    path = source.this
    columns, named = _columns(stmt, table)
    opts = _options(stmt, path)
    try:
        if opts.format == "parquet":
            return _read_parquet(path, source, table, columns, named)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as err:
            raise error_at(
                source, f'could not open file "{path}" for reading: {err.strerror or err}', cls=OperationalError
            ) from None
        return _read_delimited(data, table.name, columns, opts)
    except Error:
        raise
    except MemoryError:
        raise OperationalError(f'COPY {table.name}: out of memory reading "{path}"') from None
    except Exception as err:
        raise OperationalError(
            f'COPY {table.name}: could not read "{path}": {type(err).__name__}: {err}'
        ) from err


# -- the statement -----------------------------------------------------------------------------------------


def _columns(stmt: exp.Copy, table: sql.catalog.Table) -> tuple[list[Column], bool]:
    target = stmt.this
    if not isinstance(target, exp.Schema):
        return list(table.columns), False
    out: list[Column] = []
    for item in target.expressions:
        ident = item.this if isinstance(item, exp.Column) else item
        name = ident.name
        p = table.position(name)
        if p is None and not (isinstance(ident, exp.Identifier) and ident.quoted):
            p = table.position(name.lower())
        if p is None:
            raise error_at(
                ident, f'column "{name}" of relation "{table.name}" does not exist', cls=ProgrammingError
            )
        if any(c.name == table.columns[p].name for c in out):
            raise error_at(
                ident, f'column "{table.columns[p].name}" specified more than once', cls=ProgrammingError
            )
        out.append(table.columns[p])
    return out, True


@dataclass
class _Options:
    format: str
    header: bool | str = False
    delimiter: str = "\t"
    null: str = "\\N"
    quote: str = '"'
    escape: str = '"'


@dataclass
class _Value:
    """An option's argument as PostgreSQL's grammar hands it over: ``kind`` is none, string, int, number or
    other (a list, ``*``)."""

    kind: str
    text: str = ""


def _value(e: exp.Expression | None) -> _Value:
    if e is None:
        return _Value("none")
    if isinstance(e, exp.Boolean):
        return _Value("string", "true" if e.this else "false")
    if isinstance(e, exp.Literal):
        if e.is_string:
            return _Value("string", e.this)
        return _Value("int" if re.fullmatch(r"[0-9]+", e.this) else "number", e.this)
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        return _Value("number", "-" + e.this.this)
    if isinstance(e, exp.UnicodeString):
        return _Value("string", _unicode_escapes(e.this))
    if isinstance(e, (exp.ByteString, exp.RawString, exp.National)):
        return _Value("string", e.this)
    if isinstance(e, exp.Var):
        return _Value("string", e.name.lower())
    if isinstance(e, (exp.Identifier, exp.Column)):
        ident = e if isinstance(e, exp.Identifier) else e.this
        if isinstance(ident, exp.Identifier):
            return _Value("string", ident.name if ident.quoted else ident.name.lower())
    return _Value("other", e.sql(dialect="postgres"))


def _unicode_escapes(text: str) -> str:
    return re.sub(
        r"\\(\\|\+[0-9A-Fa-f]{6}|[0-9A-Fa-f]{4})",
        lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1).lstrip("+"), 16)),
        text,
    )


def _options(stmt: exp.Copy, path: str) -> _Options:
    """The COPY options checked as PostgreSQL's ProcessCopyOptions checks them, with its messages."""
    items: list[tuple[str, _Value, exp.Expression]] = []
    for p in stmt.args.get("params") or []:
        name = p.this.name.lower() if isinstance(p.this, exp.Expression) else str(p.this).lower()
        value = p.args.get("expression")
        if name == "on" and value is None and items and items[-1][1].kind == "none":
            items[-1] = (items[-1][0], _Value("string", "on"), items[-1][2])  # sqlglot splits "HEADER ON"
            continue
        if name == "csv":  # the pre-9.0 form WITH CSV [HEADER]
            items.append(("format", _Value("string", "csv"), p))
            if isinstance(value, exp.Var) and value.name.lower() == "header":
                items.append(("header", _Value("none"), p))
            elif value is not None:
                raise error_at(
                    value,
                    f"COPY option {value.sql(dialect='postgres')} is not supported",
                    cls=NotSupportedError,
                )
            continue
        if name == "binary" and value is None:
            name, value = "format", exp.Var(this="binary")
        items.append((name, _value(value), p))

    given: dict[str, str | bool] = {}
    for name, v, node in items:
        if name in _NOT_SUPPORTED:
            raise error_at(node, f"COPY option {name.upper()} is not supported", cls=NotSupportedError)
        if name not in _SUPPORTED:
            raise error_at(node, f'option "{name}" not recognized', cls=ProgrammingError)
        if name in given:
            raise error_at(node, "conflicting or redundant options", cls=ProgrammingError)
        if name == "header":
            given[name] = _header_choice(v, node)
            continue
        if v.kind == "none":
            raise error_at(node, f"{name} requires a parameter", cls=ProgrammingError)
        if v.kind == "other":
            raise error_at(node, f"{name} requires a string value", cls=ProgrammingError)
        text = v.text
        if name == "format":
            if text == "binary":
                raise error_at(node, "COPY FORMAT binary is not supported", cls=NotSupportedError)
            if text not in ("text", "csv", "parquet"):
                raise error_at(node, f'COPY format "{text}" not recognized', cls=ProgrammingError)
        elif name == "encoding":
            clean = re.sub(r"[^0-9a-z]", "", text.lower())
            if clean not in _ENCODINGS:
                raise error_at(
                    node, 'argument to option "encoding" must be a valid encoding name', cls=ProgrammingError
                )
            if clean not in ("utf8", "unicode"):
                raise error_at(
                    node, f"COPY ENCODING '{text}' is not supported (only UTF8)", cls=NotSupportedError
                )
        given[name] = text

    fmt = given.get("format")
    if fmt is None:
        low = path.lower()
        fmt = "parquet" if low.endswith(".parquet") else "csv" if low.endswith(".csv") else "text"
    if fmt == "parquet":
        for name, _, node in items:
            if name not in ("format", "encoding"):
                raise error_at(
                    node, f"COPY {name.upper()} is not available for Parquet files", cls=ProgrammingError
                )
        return _Options("parquet")
    csv = fmt == "csv"
    first = items[0][2] if items else stmt

    def fail(message: str, name: str | None = None) -> ProgrammingError:
        node = next((n for k, _, n in items if k == name), first)
        return error_at(node, message, cls=ProgrammingError)

    delimiter = given.get("delimiter", "," if csv else "\t")
    null = given.get("null", "" if csv else "\\N")
    if len(delimiter.encode()) != 1:
        raise fail("COPY delimiter must be a single one-byte character", "delimiter")
    if delimiter in "\r\n":
        raise fail("COPY delimiter cannot be newline or carriage return", "delimiter")
    if "\r" in null or "\n" in null:
        raise fail("COPY null representation cannot use newline or carriage return", "null")
    if not csv and delimiter in "\\.abcdefghijklmnopqrstuvwxyz0123456789":
        raise fail(f'COPY delimiter cannot be "{delimiter}"', "delimiter")
    if not csv and "quote" in given:
        raise fail("COPY quote available only in CSV mode", "quote")
    quote = given.get("quote", '"')
    if csv and len(quote.encode()) != 1:
        raise fail("COPY quote must be a single one-byte character", "quote")
    if csv and delimiter == quote:
        raise fail("COPY delimiter and quote must be different", "delimiter")
    if not csv and "escape" in given:
        raise fail("COPY escape available only in CSV mode", "escape")
    escape = given.get("escape", quote)
    if csv and len(escape.encode()) != 1:
        raise fail("COPY escape must be a single one-byte character", "escape")
    if delimiter in null:
        raise fail("COPY delimiter must not appear in the NULL specification", "null")
    if csv and quote in null:
        raise fail("CSV quote character must not appear in the NULL specification", "null")
    if csv and (quote in "\r\n" or escape in "\r\n"):
        raise error_at(first, "COPY QUOTE or ESCAPE as a line end is not supported", cls=NotSupportedError)
    return _Options(fmt, given.get("header", False), delimiter, null, quote, escape)


def _header_choice(v: _Value, node: exp.Expression) -> bool | str:
    if v.kind == "none":
        return True
    if v.kind == "int" and int(v.text) in (0, 1):
        return int(v.text) == 1
    if v.kind == "string":
        low = v.text.lower()
        if low in ("true", "on"):
            return True
        if low in ("false", "off"):
            return False
        if low == "match":
            return "match"
    raise error_at(node, 'header requires a Boolean value or "match"', cls=ProgrammingError)


# -- cutting the file into lines and fields ----------------------------------------------------------------


@dataclass
class _Split:
    """A file cut into lines and fields: the fields' bytes, unescaped and back to back in ``buf`` (field i
    is ``buf[offsets[i]:offsets[i + 1]]``), which of them are NULL, the number of fields on each line, the
    file line PostgreSQL names for each line, the first line whose fields cannot be taken apart (line
    index, message), and the error that stops reading after the last line (file line, message)."""

    buf: np.ndarray
    offsets: np.ndarray
    null: np.ndarray
    nfields: np.ndarray
    line_no: np.ndarray
    bad_line: tuple[int, str] | None
    stop: tuple[int, str] | None


def _even_in_runs(pos: np.ndarray) -> np.ndarray:
    """Of sorted positions, those at an even offset in their run of consecutive positions (the ones that
    start an escape pair)."""
    return pos[_runs(pos)[0] % 2 == 0]


def _runs(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For sorted positions: each one's offset in its run of consecutive positions, and that run's length."""
    if len(pos) == 0:
        return pos, pos
    idx = np.arange(len(pos))
    start = np.ones(len(pos), dtype=bool)
    start[1:] = pos[1:] != pos[:-1] + 1
    first = np.maximum.accumulate(np.where(start, idx, 0))
    starts = np.flatnonzero(start)
    lengths = np.diff(np.append(starts, len(pos)))
    return idx - first, lengths[np.cumsum(start) - 1]


def _at(raw: np.ndarray, i: int) -> int:
    return int(raw[i]) if 0 <= i < len(raw) else 0


def _invalid_utf8(data: bytes, start: int = 0, end: int | None = None) -> int | None:
    """The position of the first byte in ``data[start:end]`` that PostgreSQL's UTF8 check rejects (an
    invalid sequence or a zero byte), or None."""
    end = len(data) if end is None else end
    nul = data.find(b"\x00", start, end)
    limit = end if nul < 0 else nul
    mv = memoryview(data)
    pos = start
    while pos < limit:
        stop = min(limit, pos + _CHUNK)
        back = stop
        while pos < back < limit and (mv[back] & 0xC0) == 0x80:
            back -= 1
        stop = back if back > pos else stop
        try:
            codecs.utf_8_decode(mv[pos:stop], "strict", True)
        except UnicodeDecodeError as err:
            return pos + err.start
        pos = stop
    return None if nul < 0 else nul


def _bad_bytes(data: bytes | memoryview, at: int, end: int) -> str:
    b0 = data[at]
    size = (
        1
        if b0 < 0x80
        else 2
        if b0 & 0xE0 == 0xC0
        else 3
        if b0 & 0xF0 == 0xE0
        else 4
        if b0 & 0xF8 == 0xF0
        else 1
    )
    shown = " ".join(f"0x{b:02x}" for b in bytes(data[at : min(at + size, end)]))
    return f'invalid byte sequence for encoding "UTF8": {shown}'


@dataclass
class _Cut:
    """The lines of a file: where each starts and ends, the line terminators (``term_len`` bytes each) and
    the error that stops reading (byte position, message)."""

    line_start: np.ndarray
    line_end: np.ndarray
    terms: np.ndarray
    term_len: int
    error: tuple[int, str] | None


def _cut(raw: np.ndarray, data: bytes, eols: np.ndarray, csv: bool, markers) -> _Cut:
    """Lines as PostgreSQL's CopyReadLineText finds them: the first line end sets the style (LF, CR or CRLF)
    that every later one must have; reading stops at a valid end-of-copy marker ``\\.`` (``markers`` gives
    its candidates in order, from the line terminators) or at the first error (a line end of another style,
    a corrupt marker, bytes that are not UTF-8)."""
    n = len(raw)
    word = "unquoted" if csv else "literal"
    eol = None
    if len(eols):
        e0 = int(eols[0])
        eol = "nl" if raw[e0] == _LF else "crnl" if _at(raw, e0 + 1) == _LF else "cr"
    is_cr = raw[eols] == _CR
    events: list[tuple[int, str | None]] = []
    term_len = 1
    if eol == "nl":
        terms = eols[~is_cr]
        bad_cr, bad_lf = eols[is_cr], eols[:0]
    elif eol == "cr":
        terms = eols[is_cr]
        bad_cr, bad_lf = eols[:0], eols[~is_cr]
    elif eol == "crnl":
        cr, lf = eols[is_cr], eols[~is_cr]
        crlf = raw[np.minimum(cr + 1, n - 1)] == _LF
        crlf &= cr + 1 < n
        terms, term_len = cr[crlf], 2
        bad_cr = cr[~crlf]
        bad_lf = lf[~np.isin(lf - 1, terms)]
    else:
        terms = bad_cr = bad_lf = eols[:0]
    if len(bad_cr):
        events.append((int(bad_cr[0]), f"{word} carriage return found in data"))
    if len(bad_lf):
        events.append((int(bad_lf[0]), f"{word} newline found in data"))
    first_end = int(eols[0]) if len(eols) else n
    for m in markers(terms, term_len):
        style = eol if first_end < m else None
        verdict = _marker(raw, m, style, csv)
        if verdict is not None:
            events.append((m, None if verdict == "end" else verdict))
            break
    bad = _invalid_utf8(data)
    if bad is not None:
        events.append((bad, _bad_bytes(data, bad, n)))
    events.sort(key=lambda e: e[0])
    error = None
    end = n
    if events:
        at, message = events[0]
        end = at
        if message is not None:
            error = (at, message)
    terms = terms[terms < end]
    line_start = np.concatenate([[0], terms + term_len]).astype(np.int64)
    line_end = terms.astype(np.int64)
    if error is None and end > line_start[-1]:
        line_end = np.append(line_end, end)
    else:
        line_start = line_start[:-1]
    return _Cut(line_start, line_end, terms, term_len, error)


def _marker(raw: np.ndarray, m: int, eol: str | None, csv: bool) -> str | None:
    """What the end-of-copy marker at ``m`` does: "end" (the data ends there), an error message, or, in CSV
    where it may be data, None."""
    q = m + 2
    if eol == "crnl":
        c2 = _at(raw, q)
        q += 1
        if c2 == _LF:
            return None if csv else "end-of-copy marker does not match previous newline style"
        if c2 != _CR:
            return None if csv else "end-of-copy marker corrupt"
    c2 = _at(raw, q)
    if c2 not in (_CR, _LF):
        return None if csv else "end-of-copy marker corrupt"
    if (eol in ("nl", "crnl") and c2 != _LF) or (eol == "cr" and c2 != _CR):
        return "end-of-copy marker does not match previous newline style"
    return "end"


def _fields(
    raw: np.ndarray, out: np.ndarray, cut: _Cut, delims: np.ndarray, dropped: np.ndarray, null: bytes
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fields between delimiters on each line: the unescaped bytes (``out`` without the ``dropped``
    positions, the delimiters and the line ends), their offsets, which are NULL (the raw field is the
    NULL string), the number of fields per line and the first field of each line."""
    nlines = len(cut.line_end)
    region = int(cut.line_end[-1]) if nlines else 0
    delims = delims[delims < region]
    line_of_delim = np.searchsorted(cut.line_end, delims)
    nfields = np.bincount(line_of_delim, minlength=nlines).astype(np.int64) + 1
    first = np.concatenate([[0], np.cumsum(nfields)]).astype(np.int64)
    total = int(first[-1])
    ended = np.arange(len(delims)) + line_of_delim
    starts = np.empty(total, dtype=np.int64)
    ends = np.empty(total, dtype=np.int64)
    starts[first[:-1]] = cut.line_start
    starts[ended + 1] = delims + 1
    ends[first[1:] - 1] = cut.line_end
    ends[ended] = delims
    keep = np.zeros(len(raw), dtype=bool)
    keep[:region] = True
    keep[delims] = False
    terms = cut.terms[cut.terms < region]
    for k in range(cut.term_len):
        keep[terms + k] = False
    dropped = dropped[dropped < region]
    keep[dropped] = False
    buf = out[keep]
    separators = np.arange(total)
    if cut.term_len > 1:
        separators += np.repeat(np.arange(nlines), nfields) * (cut.term_len - 1)
    offsets = np.append(starts - separators - np.searchsorted(dropped, starts), len(buf)).astype(np.int64)
    is_null = (ends - starts) == len(null)
    cand = np.flatnonzero(is_null)
    for j, b in enumerate(null):
        cand = cand[raw[starts[cand] + j] == b]
    is_null = np.zeros(total, dtype=bool)
    is_null[cand] = True
    return buf, offsets, is_null, nfields, first


def _split_text(raw: np.ndarray, data: bytes, opts: _Options, parse_header: bool) -> _Split:
    """PostgreSQL's text format: a backslash escapes the next byte (``\\t``, ``\\n``, octal ``\\NNN``, hex
    ``\\xHH``, any other byte itself, even a line end); an unescaped ``\\.`` ends the data."""
    n = len(raw)
    starters = _even_in_runs(np.flatnonzero(raw == _BACKSLASH))
    escaped = np.zeros(n + 1, dtype=bool)
    escaped[starters + 1] = True
    escaped = escaped[:n]
    eols = np.flatnonzero((raw == _LF) | (raw == _CR))
    eols = eols[~escaped[eols]]
    dots = starters[(starters + 1 < n) & (raw[np.minimum(starters + 1, max(n - 1, 0))] == _DOT)]
    cut = _cut(raw, data, eols, False, lambda terms, tlen: [int(m) for m in dots[:1]])
    nlines = len(cut.line_end)
    region = int(cut.line_end[-1]) if nlines else 0

    s = starters[starters < region]
    line_end = cut.line_end[np.searchsorted(cut.line_end, s)] if len(s) else s
    c = np.where(s + 1 < line_end, raw[np.minimum(s + 1, n - 1)], 0).astype(np.int64)
    nxt1 = raw[np.minimum(s + 2, n - 1)].astype(np.int64)
    nxt2 = raw[np.minimum(s + 3, n - 1)].astype(np.int64)
    in1, in2 = s + 2 < line_end, s + 3 < line_end
    value = c.copy()
    size = np.full(len(s), 2, dtype=np.int64)
    size[s + 1 >= line_end] = 1
    for letter, byte in zip(b"bfnrtv", b"\b\f\n\r\t\v", strict=True):
        value[c == letter] = byte
    octal = (c >= 48) & (c <= 55)
    o1 = octal & in1 & (nxt1 >= 48) & (nxt1 <= 55)
    o2 = o1 & in2 & (nxt2 >= 48) & (nxt2 <= 55)
    oval = np.where(
        o2, (c - 48) * 64 + (nxt1 - 48) * 8 + (nxt2 - 48), np.where(o1, (c - 48) * 8 + nxt1 - 48, c - 48)
    )
    value[octal] = oval[octal] & 0xFF
    size[octal] += o1[octal].astype(np.int64) + o2[octal].astype(np.int64)
    h1v, h2v = _hex_value(nxt1), _hex_value(nxt2)
    hexa = (c == ord("x")) & in1 & (h1v >= 0)
    h2 = hexa & in2 & (h2v >= 0)
    value[hexa] = np.where(h2, h1v * 16 + h2v, h1v)[hexa]
    size[hexa] += 1 + h2[hexa].astype(np.int64)
    trailing = size == 1
    dropped = [s[trailing]]
    for k in (1, 2, 3):
        dropped.append(s[size > k] + k)
    dropped = np.sort(np.concatenate(dropped)) if len(s) else s
    out = raw.copy()
    out[s[~trailing]] = value[~trailing].astype(np.uint8)

    consumed = np.zeros(n, dtype=bool)
    consumed[dropped] = True
    delims = np.flatnonzero(raw == ord(opts.delimiter))
    delims = delims[~escaped[delims] & ~consumed[delims]]
    buf, offsets, is_null, nfields, first = _fields(raw, out, cut, delims, dropped, opts.null.encode())
    line_no = np.arange(1, nlines + 1, dtype=np.int64)

    bad_line = None
    risky = s[~trailing & ((value == 0) | (value >= 0x80)) & (octal | hexa)]
    if len(risky):
        starts = offsets[:-1]
        raw_starts = np.sort(np.concatenate([cut.line_start, delims[delims < region] + 1]))
        fields = np.unique(np.searchsorted(raw_starts, risky, side="right") - 1)
        fields = fields[~is_null[fields]]
        if not parse_header:
            fields = fields[fields >= (first[1] if nlines else 0)]
        for f in fields.tolist():
            text = buf[starts[f] : offsets[f + 1]].tobytes()
            at = _invalid_utf8(text)
            if at is not None:
                line = int(np.searchsorted(first, f, side="right") - 1)
                bad_line = (line, _bad_bytes(text, at, len(text)))
                break
    stop = None
    if cut.error is not None:
        stop = (nlines + 1, cut.error[1])
    return _Split(buf, offsets, is_null, nfields, line_no, bad_line, stop)


def _hex_value(b: np.ndarray) -> np.ndarray:
    return np.where(
        (b >= 48) & (b <= 57),
        b - 48,
        np.where((b >= 97) & (b <= 102), b - 87, np.where((b >= 65) & (b <= 70), b - 55, -1)),
    )


def _split_csv(raw: np.ndarray, data: bytes, opts: _Options, parse_header: bool) -> _Split:
    """PostgreSQL's CSV format: a quote starts or ends a quoted stretch anywhere in a field; inside one,
    delimiters and line ends are data and the escape (by default the quote itself) makes a following quote
    or escape literal; ``\\.`` alone at the start of a line ends the data."""
    n = len(raw)
    q = ord(opts.quote)
    e = ord(opts.escape) if opts.escape != opts.quote else None
    is_quote = raw == q
    qpos = np.flatnonzero(is_quote)
    nq = len(qpos)
    nxt = raw[np.minimum(qpos + 1, n - 1)] == q
    nxt &= qpos + 1 < n
    dropped = []
    if e is None:
        state = np.bitwise_xor.accumulate(is_quote.view(np.uint8)).view(bool)
        before = state[np.maximum(qpos - 1, 0)] & (qpos > 0)
        dropped.append(qpos[~(before & nxt)])
    else:
        epos = np.flatnonzero(raw == e)
        offset, length = _runs(epos)
        run = np.zeros(nq, dtype=np.int64)
        if len(epos):
            k = np.minimum(np.searchsorted(epos, qpos - 1), len(epos) - 1)
            run = np.where(epos[k] == qpos - 1, offset[k] + 1, 0)
        odd = run % 2 == 1
        idx = np.arange(nq)
        last_odd = np.maximum.accumulate(np.where(odd, idx, -1)) if nq else idx
        evens = np.cumsum(~odd)
        since = evens - np.where(last_odd >= 0, evens[np.maximum(last_odd, 0)], 0)
        after = np.where(last_odd >= 0, since % 2 == 0, since % 2 == 1)
        before = np.concatenate([[False], after[:-1]]) if nq else after
        flips = np.zeros(n, dtype=np.uint8)
        flips[qpos[after != before]] = 1
        state = np.bitwise_xor.accumulate(flips).view(bool)
        dropped.append(qpos[~(odd & before)])
        after_escape = raw[np.minimum(epos + 1, n - 1)] == q
        after_escape &= epos + 1 < n
        pair = (offset % 2 == 0) & ((offset + 1 < length) | ((offset == length - 1) & after_escape))
        dropped.append(epos[state[epos] & pair])

    all_eols = np.flatnonzero((raw == _LF) | (raw == _CR))
    quoted = state[all_eols]
    eols = all_eols[~quoted]
    cut = _cut(raw, data, eols, True, _csv_markers(raw, n))
    nlines = len(cut.line_end)
    dropped = np.sort(np.concatenate(dropped))
    delims = np.flatnonzero((raw == ord(opts.delimiter)) & ~state)
    buf, offsets, is_null, nfields, first = _fields(raw, raw, cut, delims, dropped, opts.null.encode())

    counted = all_eols[quoted]
    first_end = int(eols[0]) if len(eols) else n
    later = _LF if len(eols) and raw[eols[0]] == _LF else _CR
    counted = counted[np.where(counted < first_end, raw[counted] == _CR, raw[counted] == later)]
    line_no = np.arange(1, nlines + 1, dtype=np.int64) + np.searchsorted(counted, cut.line_end)

    bad_line = None
    if (
        nlines
        and (parse_header or nlines > 1)
        and cut.error is None
        and cut.line_end[-1] > 0
        and state[cut.line_end[-1] - 1]
    ):
        bad_line = (nlines - 1, "unterminated CSV quoted field")
    stop = None
    if cut.error is not None:
        at = cut.error[0]
        stop = (nlines + 1 + int(np.searchsorted(counted, at)), cut.error[1])
    return _Split(buf, offsets, is_null, nfields, line_no, bad_line, stop)


def _csv_markers(raw: np.ndarray, n: int):
    def markers(terms: np.ndarray, tlen: int):
        starts = np.concatenate([[0], terms + tlen]).astype(np.int64)
        starts = starts[starts + 1 < n]
        return starts[(raw[starts] == _BACKSLASH) & (raw[starts + 1] == _DOT)].tolist()

    return markers


# -- from fields to rows -----------------------------------------------------------------------------------


def _read_delimited(data: bytes, name: str, columns: list[Column], opts: _Options) -> pa.Table:
    """The rows of a text or CSV file, or the DataError PostgreSQL's COPY stops with, for the same line."""
    raw = np.frombuffer(data, dtype=np.uint8)
    parse_header = opts.header is not True
    split = (_split_csv if opts.format == "csv" else _split_text)(raw, data, opts, parse_header)
    fields = pa.Array.from_buffers(
        pa.large_binary(),
        len(split.null),
        [
            pa.py_buffer(np.packbits(~split.null, bitorder="little")),
            pa.py_buffer(split.offsets),
            pa.py_buffer(split.buf),
        ],
    )
    first = np.concatenate([[0], np.cumsum(split.nfields)]).astype(np.int64)
    nlines = len(split.nfields)

    def fail(line: int, message: str, column: str | None = None, cls: type = DataError):
        where = f"COPY {name}, line {line}" + (f", column {column}" if column is not None else "")
        return cls(f"{where}: {message}")

    def texts(idx: np.ndarray) -> pa.Array:
        return fields.take(pa.array(idx, pa.int64())).view(pa.large_string()).cast(pa.string())

    skip = 1 if opts.header else 0
    if opts.header == "match":
        if split.bad_line is not None and split.bad_line[0] == 0:
            raise fail(int(split.line_no[0]), split.bad_line[1])
        if nlines == 0 and split.stop is not None:
            raise fail(split.stop[0], split.stop[1])
        got = texts(np.arange(first[0], first[1])).to_pylist() if nlines else [None if opts.null == "" else ""]
        line = int(split.line_no[0]) if nlines else 1
        if len(got) != len(columns):
            raise fail(line, f"wrong number of fields in header line: got {len(got)}, expected {len(columns)}")
        for i, (g, c) in enumerate(zip(got, columns, strict=True), 1):
            if g is None:
                raise fail(
                    line,
                    f'column name mismatch in header line field {i}: got null value ("{opts.null}"), '
                    f'expected "{c.name}"',
                )
            if g != c.name:
                raise fail(
                    line, f'column name mismatch in header line field {i}: got "{g}", expected "{c.name}"'
                )

    ncols = len(columns)
    rows = max(nlines - skip, 0)
    nf = split.nfields[skip:]
    stop_row = rows
    reason = "end"
    wrong = np.flatnonzero(nf != ncols)
    if len(wrong):
        stop_row, reason = int(wrong[0]), "shape"
    if split.bad_line is not None and split.bad_line[0] >= skip and split.bad_line[0] - skip <= stop_row:
        stop_row, reason = split.bad_line[0] - skip, "parse"
    partial = reason == "shape" and nf[stop_row] < ncols
    arrays = []
    errors = []
    for j, c in enumerate(columns):
        count = stop_row + (1 if partial and j < nf[stop_row] else 0)
        idx = first[skip : skip + count] + j
        values, bad = _convert(texts(idx), c.type)
        arrays.append(values)
        if bad is not None:
            errors.append((bad.row, j, bad))
    if errors:
        row, j, bad = min(errors, key=lambda e: (e[0], e[1]))
        raise fail(int(split.line_no[skip + row]), bad.message, columns[j].name, bad.cls)
    if reason == "parse":
        raise fail(int(split.line_no[skip + stop_row]), split.bad_line[1])
    if reason == "shape":
        line = int(split.line_no[skip + stop_row])
        if nf[stop_row] > ncols:
            raise fail(line, "extra data after last expected column")
        raise fail(line, f'missing data for column "{columns[int(nf[stop_row])].name}"')
    if split.stop is not None:
        raise fail(split.stop[0], split.stop[1])
    schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in columns])
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass
class _Bad:
    """The first value of a column that does not convert: its row and PostgreSQL's message."""

    row: int
    message: str
    cls: type = DataError


def _convert(arr: pa.StringArray, t: SqlType) -> tuple[pa.Array, _Bad | None]:
    """``arr`` read as type ``t`` by PostgreSQL's input function for it, and the first value it rejects.
    A column whose values all have the plain form (``_FAST``) that Arrow's cast reads exactly as
    PostgreSQL does takes that cast; any other goes through the converter for its type."""
    if t.kind == "text":
        return arr, None
    fast = _FAST.get(t.kind)
    if fast is not None and pc.all(pc.match_substring_regex(arr, fast)).as_py() is not False:
        try:
            return arr.cast(arrow_type(t)), None
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return _CONVERTERS[t.kind](arr, t)


_YEAR = "(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
_FAST = {
    "int": r"^-?[0-9]+$",
    "decimal": r"^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)$",
    "date": rf"^{_YEAR}-[0-9]{{2}}-[0-9]{{2}}$",
    "timestamp": rf"^{_YEAR}-[0-9]{{2}}-[0-9]{{2}}"
    r"(?:[ T][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?)?$",
}


def _np(a: pa.Array | pa.ChunkedArray, fill=False) -> np.ndarray:
    return np.asarray(pc.fill_null(a, fill).to_numpy(zero_copy_only=False))


def _first(mask: np.ndarray) -> int | None:
    return int(np.argmax(mask)) if mask.any() else None


def _trim(arr: pa.Array) -> pa.Array:
    return pc.utf8_trim(arr, characters=_WS)


def _with_nulls(values: np.ndarray, valid: np.ndarray, type_: pa.DataType) -> pa.Array:
    return pa.array(values, type=type_, mask=~valid)


def _to_int(arr: pa.StringArray, t: SqlType) -> tuple[pa.Array, _Bad | None]:
    """PostgreSQL's int8in: blanks, a sign, digits, blanks. As there, a run of digits beyond 2^63 is out of
    range even with junk after it, while 9223372036854775808 itself is judged after the junk."""
    m = pc.extract_regex(arr, rf"(?s)^{_S}*(?P<sign>[+-]?)(?P<digits>[0-9]*)(?P<rest>.*)$")
    sign, digits, rest = pc.struct_field(m, "sign"), pc.struct_field(m, "digits"), pc.struct_field(m, "rest")
    stripped = pc.utf8_ltrim(digits, characters="0")
    width = _np(pc.binary_length(stripped), 0)
    edge = "9223372036854775808"
    scan_over = (width > 19) | ((width == 19) & _np(pc.greater(stripped, edge)))
    end_over = (width == 19) & _np(pc.equal(stripped, edge)) & ~_np(pc.equal(sign, "-"))
    invalid = (_np(pc.binary_length(digits), 0) == 0) | ~_np(
        pc.match_substring_regex(rest, rf"(?s)^{_S}*$"), True
    )
    valid = _np(pc.is_valid(arr))
    over = scan_over | (end_over & ~invalid)
    bad = (over | invalid) & valid
    minus = pc.if_else(pc.equal(sign, "-"), "-", "")
    text = pc.binary_join_element_wise(minus, pc.if_else(pc.equal(stripped, ""), "0", stripped), "")
    values = pc.cast(pc.if_else(pa.array(bad), "0", text), pa.int64())
    row = _first(bad)
    if row is None:
        return values, None
    s = arr[row].as_py()
    if over[row]:
        return values, _Bad(row, f'value "{s}" is out of range for type bigint')
    return values, _Bad(row, f'invalid input syntax for type bigint: "{s}"')


_NUMERIC = (
    rf"(?s)^{_S}*(?P<sign>[+-]?)(?:(?P<int>[0-9]+)(?:\.(?P<f1>[0-9]*))?|\.(?P<f2>[0-9]+))"
    rf"(?:(?P<e>[eE])(?P<exp>{_S}*[+-]?[0-9]+)?)?(?P<rest>.*)$"
)
_NUMERIC_SPECIAL = rf"(?is)^{_S}*(?:(?P<nan>nan)|[+-]?(?:infinity|inf)){_S}*$"


def _to_decimal(arr: pa.StringArray, t: SqlType) -> tuple[pa.Array, _Bad | None]:
    """PostgreSQL's numeric_in then the typmod's rounding (half away from zero) and precision check, on the
    digits as text: the scaled value is the first ``k`` significant digits plus one if the next is 5 or
    more."""
    p, s = t.precision, t.scale
    n = len(arr)
    valid = _np(pc.is_valid(arr))
    m = pc.extract_regex(arr, _NUMERIC)
    parsed = _np(pc.is_valid(m)) & valid
    has_e = _np(pc.binary_length(pc.struct_field(m, "e")), 0) > 0
    no_exponent = has_e & (_np(pc.binary_length(pc.struct_field(m, "exp")), 0) == 0)
    blank = _np(pc.match_substring_regex(pc.struct_field(m, "rest"), rf"(?s)^{_S}*$"))
    ok = parsed & ~no_exponent
    special = pc.extract_regex(arr, _NUMERIC_SPECIAL)
    is_special = _np(pc.is_valid(special)) & valid
    is_nan = is_special & (_np(pc.binary_length(pc.struct_field(special, "nan")), 0) > 0)
    is_inf = is_special & ~is_nan

    exp_text = pc.extract_regex(
        pc.utf8_trim(pc.struct_field(m, "exp"), characters=_WS), r"^(?P<sign>[+-]?)0*(?P<digits>[0-9]*)$"
    )
    exp_digits = pc.struct_field(exp_text, "digits")
    exp_width = _np(pc.binary_length(exp_digits), 0)
    huge = ok & (exp_width > 10)
    safe_digits = pc.if_else(
        pa.array(exp_width > 10), "0", pc.if_else(pc.equal(exp_digits, ""), "0", exp_digits)
    )
    expo = _np(pc.cast(safe_digits, pa.int64()), 0) * np.where(
        _np(pc.equal(pc.struct_field(exp_text, "sign"), "-")), -1, 1
    )
    huge |= ok & (np.abs(expo) >= 1073741823)
    ok &= blank | huge
    invalid = valid & ~ok & ~is_special

    int_part = pc.struct_field(m, "int")
    mantissa = pc.binary_join_element_wise(int_part, pc.struct_field(m, "f1"), pc.struct_field(m, "f2"), "")
    sig = pc.utf8_ltrim(mantissa, characters="0")
    lead = _np(pc.binary_length(mantissa), 0) - _np(pc.binary_length(sig), 0)
    point = _np(pc.binary_length(int_part), 0) + np.where(huge, 0, expo) - lead
    zero = _np(pc.binary_length(sig), 0) == 0
    k = point + s
    scaled = np.zeros(n, dtype=np.int64)
    overflow = ok & ~huge & ~zero & (k > 18)
    todo = ok & ~huge & ~zero & (k >= 0) & (k <= 18)
    for width in np.unique(k[todo]).tolist():
        sel = np.flatnonzero(todo & (k == width))
        digits = sig.take(pa.array(sel))
        head = (
            pc.utf8_rpad(pc.utf8_slice_codeunits(digits, 0, width), width=width, padding="0") if width else None
        )
        v = _np(pc.cast(head, pa.int64()), 0) if width else np.zeros(len(sel), dtype=np.int64)
        up = _np(pc.greater_equal(pc.utf8_slice_codeunits(digits, width, width + 1), "5"))
        scaled[sel] = v + up
    overflow |= todo & (scaled >= 10**p)
    negative = _np(pc.equal(pc.struct_field(m, "sign"), "-"))
    scaled = np.where(negative, -scaled, scaled)

    bad = invalid | huge | overflow | is_inf | is_nan
    row = _first(bad)
    words = np.zeros((n, 2), dtype=np.int64)
    words[:, 0] = np.where(bad, 0, scaled)
    words[:, 1] = words[:, 0] >> 63
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    values = pa.Array.from_buffers(pa.decimal128(max(p, 1), s), n, [validity, pa.py_buffer(words)])
    if row is None:
        return values, None
    text = arr[row].as_py()
    if invalid[row]:
        return values, _Bad(row, f'invalid input syntax for type numeric: "{text}"')
    if huge[row]:
        return values, _Bad(row, "value overflows numeric format")
    if is_nan[row]:
        return values, _Bad(row, f"NaN cannot be stored in {t}: ivm's decimals have no NaN", NotSupportedError)
    digits = p - s
    if is_inf[row]:
        detail = f"A field with precision {p}, scale {s} cannot hold an infinite value."
    else:
        limit = f"10^{digits}" if digits else "1"
        detail = f"A field with precision {p}, scale {s} must round to an absolute value less than {limit}."
    return values, _Bad(row, f"numeric field overflow ({detail})")


_FLOAT_PREFIX = rf"(?s)^{_S}*(?P<num>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)?(?P<rest>.*)$"
_FLOAT_SPECIAL = rf"(?i)^{_S}*[+-]?(?:inf|infinity|nan(?:\([0-9A-Za-z_]*\))?){_S}*$"
_FLOAT_HEX = rf"(?i)^{_S}*[+-]?0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?[0-9]+)?{_S}*$"


def _to_float(arr: pa.StringArray, t: SqlType) -> tuple[pa.Array, _Bad | None]:
    """PostgreSQL's float8in on glibc: strtod's decimal, hexadecimal, infinity and NaN forms between blanks.
    A number that overflows to infinity or underflows to zero is out of range, and that is found before
    junk after the number is, as strtod reports the range error first."""
    n = len(arr)
    valid = _np(pc.is_valid(arr))
    special = _np(pc.match_substring_regex(arr, _FLOAT_SPECIAL)) & valid
    hexa = _np(pc.match_substring_regex(arr, _FLOAT_HEX)) & valid & ~special
    m = pc.extract_regex(arr, _FLOAT_PREFIX)
    num = pc.struct_field(m, "num")
    has_num = (_np(pc.binary_length(num), 0) > 0) & valid & ~special & ~hexa
    blank_rest = _np(pc.match_substring_regex(pc.struct_field(m, "rest"), rf"(?s)^{_S}*$"))
    values = np.zeros(n, dtype=np.float64)
    if has_num.any():
        sel = np.flatnonzero(has_num)
        values[sel] = _np(pc.cast(num.take(pa.array(sel)), pa.float64()), 0.0)
    nonzero = _np(pc.match_substring_regex(num, r"^[^eE]*[1-9]"))
    out_of_range = has_num & (np.isinf(values) | ((values == 0) & nonzero))
    numbers = has_num & (out_of_range | blank_rest)
    if special.any():
        sel = np.flatnonzero(special)
        low = pc.ascii_lower(_trim(arr.take(pa.array(sel))))
        is_nan = _np(pc.match_substring(low, "nan"))
        minus = _np(pc.starts_with(low, "-"))
        values[sel] = np.where(is_nan, np.nan, np.where(minus, -np.inf, np.inf))
    for i in np.flatnonzero(hexa).tolist():
        h = arr[i].as_py().strip(_WS)
        try:
            v = float.fromhex(h)
        except OverflowError:
            out_of_range[i] = True
            continue
        values[i] = v
        mantissa = re.sub(r"(?i)^[+-]?0x|p.*$", "", h)
        out_of_range[i] = v == 0 and re.search(r"[1-9a-f]", mantissa, re.IGNORECASE) is not None
    bad = valid & ~(numbers | special | hexa) | out_of_range
    result = _with_nulls(np.where(bad, 0.0, values), valid, pa.float64())
    row = _first(bad)
    if row is None:
        return result, None
    if out_of_range[row]:
        shown = num[row].as_py() if has_num[row] else arr[row].as_py().strip(_WS)
        return result, _Bad(row, f'"{shown}" is out of range for type double precision')
    return result, _Bad(row, f'invalid input syntax for type double precision: "{arr[row].as_py()}"')


_TRUE = ["t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"]
_FALSE = ["f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0"]


def _to_bool(arr: pa.StringArray, t: SqlType) -> tuple[pa.Array, _Bad | None]:
    """PostgreSQL's boolin: any prefix of true, false, yes or no, on, of[f], 1 or 0, in any case, between
    blanks."""
    valid = _np(pc.is_valid(arr))
    low = pc.ascii_lower(_trim(arr))
    yes = _np(pc.is_in(low, value_set=pa.array(_TRUE)))
    no = _np(pc.is_in(low, value_set=pa.array(_FALSE)))
    bad = valid & ~yes & ~no
    result = _with_nulls(yes, valid, pa.bool_())
    row = _first(bad)
    if row is None:
        return result, None
    return result, _Bad(row, f'invalid input syntax for type boolean: "{arr[row].as_py()}"')


_DATETIME = (
    rf"(?s)^{_S}*(?:(?P<y>[0-9]{{3,7}})-(?P<m>[0-9]{{1,2}})-(?P<d>[0-9]{{1,2}})"
    rf"|(?P<y8>[0-9]{{4}})(?P<m8>[0-9]{{2}})(?P<d8>[0-9]{{2}}))"
    rf"(?:(?:{_S}+|[Tt])(?P<H>[0-9]{{1,2}}):(?P<M>[0-9]{{1,2}})(?::(?P<S>[0-9]{{1,2}})(?:\.(?P<F>[0-9]*))?)?"
    rf"(?:{_S}*(?:(?P<zone>[Zz]|(?i:utc|gmt))"
    rf"|(?P<tzs>[+-])(?P<tzh>[0-9]{{1,2}})(?::?(?P<tzm>[0-9]{{2}})(?::?(?P<tzx>[0-9]{{2}}))?)?))?)?{_S}*$"
)
_UNSUPPORTED_WORDS = ["infinity", "+infinity", "-infinity", "now", "today", "tomorrow", "yesterday", "allballs"]


def _int_field(m: pa.StructArray, *names: str) -> np.ndarray:
    out = np.zeros(len(m), dtype=np.int64)
    for name in names:
        f = pc.struct_field(m, name)
        text = pc.if_else(pc.equal(f, ""), "0", f)
        out += _np(pc.cast(text, pa.int64()), 0)
    return out


def _to_datetime(arr: pa.StringArray, t: SqlType) -> tuple[pa.Array, _Bad | None]:
    """PostgreSQL's date_in / timestamp_in for ISO 8601 input: YYYY-MM-DD or YYYYMMDD, then optionally a
    time HH:MM[:SS[.fraction]] after a blank or T and a zone (Z, UTC, GMT, +HH[:MM[:SS]]) that a type
    without time zone ignores; the fraction rounds to microseconds as PostgreSQL's rint does, 24:00:00 and
    second 60 roll over; a TIMESTAMP WITH TIME ZONE is the instant the zone says (in UTC, the session's
    zone, without one). 'epoch' is 1970-01-01; PostgreSQL's other special words are not supported."""
    kind = "timestamp" if t.kind == "timestamp" else "date"
    valid = _np(pc.is_valid(arr))
    low = pc.ascii_lower(_trim(arr))
    epoch = _np(pc.equal(low, "epoch"))
    words = _np(pc.is_in(low, value_set=pa.array(_UNSUPPORTED_WORDS))) & valid
    m = pc.extract_regex(arr, _DATETIME)
    ok = _np(pc.is_valid(m)) & valid
    y = _int_field(m, "y", "y8")
    mo = _int_field(m, "m", "m8")
    d = _int_field(m, "d", "d8")
    hh, mi, ss = _int_field(m, "H"), _int_field(m, "M"), _int_field(m, "S")
    frac = pc.binary_join_element_wise("0.", pc.struct_field(m, "F"), "")
    fsec = np.rint(_np(pc.cast(pc.if_else(pc.is_valid(frac), frac, "0."), pa.float64()), 0.0) * 1e6).astype(
        np.int64
    )
    tzh, tzm, tzx = _int_field(m, "tzh"), _int_field(m, "tzm"), _int_field(m, "tzx")
    bad_zone = ok & ((tzh > 15) | (tzm > 59) | (tzx > 59))
    leap = (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))
    month_days = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[np.clip(mo, 0, 12)] + (
        (mo == 2) & leap
    )
    bad_date = (y < 1) | (mo < 1) | (mo > 12) | (d < 1) | (d > month_days)
    clock = ((hh * 60 + mi) * 60 + ss) * 1_000_000 + fsec
    bad_time = (hh > 24) | (mi > 59) | (ss > 60) | (fsec > 1_000_000) | (clock > 86_400_000_000)
    bad_field = ok & ~bad_zone & (bad_date | bad_time)
    days = np.where(ok & ~bad_date, days_from_civil(y, mo, d), 0)
    if kind == "date":
        value = days
        too_far = ok & ~bad_zone & ~bad_field & (y > 5874897)
    else:
        last = int(days_from_civil(np.array([294276]), np.array([12]), np.array([31]))[0])
        too_far = ok & ~bad_zone & ~bad_field & ((days > last) | ((days == last) & (clock >= 86_400_000_000)))
        top, rest = divmod(np.iinfo(np.int64).max, 86_400_000_000)
        unheld = ok & ~bad_zone & ~bad_field & ~too_far & ((days > top) | ((days == top) & (clock > rest)))
        value = np.where(too_far | unheld, 0, days) * 86_400_000_000 + clock
        if t.tz:  # the offset written, taken off to give UTC
            sign = np.where(_np(pc.equal(pc.struct_field(m, "tzs"), "-"), False), -1, 1)
            value = value - sign * ((tzh * 60 + tzm) * 60 + tzx) * 1_000_000
    value = np.where(epoch, 0, value)
    invalid = valid & ~ok & ~epoch & ~words
    if kind == "date":
        unheld = np.zeros(len(arr), dtype=bool)
    bad = invalid | words | bad_zone | bad_field | too_far | unheld
    value = np.where(bad | ~valid, 0, value)
    result = _with_nulls(value.astype(np.int32) if kind == "date" else value, valid, arrow_type(t))
    row = _first(bad)
    if row is None:
        return result, None
    text = arr[row].as_py()
    if invalid[row]:
        return result, _Bad(row, f'invalid input syntax for type {t.pg_name}: "{text}"')
    if words[row]:
        return result, _Bad(row, f'{kind} "{text.strip(_WS)}" is not supported', NotSupportedError)
    if bad_zone[row]:
        return result, _Bad(row, f'time zone displacement out of range: "{text}"')
    if bad_field[row]:
        return result, _Bad(row, f'date/time field value out of range: "{text}"')
    if too_far[row]:
        return result, _Bad(row, f'{kind} out of range: "{text}"')
    return result, _Bad(
        row, f'timestamp "{text}" is beyond the range ivm holds (up to 294247-01-10)', NotSupportedError
    )


_CONVERTERS = {
    "int": _to_int,
    "decimal": _to_decimal,
    "float": _to_float,
    "bool": _to_bool,
    "date": _to_datetime,
    "timestamp": _to_datetime,
}


# -- Parquet -----------------------------------------------------------------------------------------------


def _read_parquet(
    path: str, source: exp.Expression, table: sql.catalog.Table, columns: list[Column], named: bool
) -> pa.Table:
    """A Parquet file's columns matched by name: with a column list each named column must be in the file;
    without one, a table column the file lacks comes back NULL and a file column the table lacks is an
    error. Each column is cast to its column's Arrow type only where every value stays the same."""
    try:
        pf = pq.ParquetFile(path)
        schema = pf.schema_arrow
    except (OSError, pa.ArrowException) as err:
        raise error_at(source, f'could not read Parquet file "{path}": {err}', cls=OperationalError) from None
    names = schema.names
    twice = next((c for c in names if names.count(c) > 1), None)
    if twice is not None:
        raise DataError(f'COPY {table.name}: the Parquet file "{path}" has two columns named "{twice}"')
    if named:
        missing = next((c.name for c in columns if c.name not in names), None)
        if missing is not None:
            raise DataError(f'COPY {table.name}: column "{missing}" is not in the Parquet file "{path}"')
    else:
        extra = next((c for c in names if table.position(c) is None), None)
        if extra is not None:
            raise DataError(
                f'COPY {table.name}: the Parquet file "{path}" has column "{extra}", '
                f"which {table.name} does not have"
            )
    present = [c.name for c in columns if c.name in names]
    try:
        data = pf.read(columns=present)
    except (OSError, pa.ArrowException) as err:
        raise error_at(source, f'could not read Parquet file "{path}": {err}', cls=OperationalError) from None
    arrays = []
    for c in columns:
        target = arrow_type(c.type)
        if c.name not in names:
            arrays.append(pa.nulls(data.num_rows, target))
            continue
        arrays.append(_cast_exact(data.column(c.name), c, target, table.name))
    schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in columns])
    return pa.Table.from_arrays(arrays, schema=schema)


_FAMILIES = {
    "int": (pa.types.is_integer, pa.types.is_decimal, pa.types.is_floating),
    "decimal": (pa.types.is_integer, pa.types.is_decimal, pa.types.is_floating),
    "float": (pa.types.is_integer, pa.types.is_decimal, pa.types.is_floating),
    "text": (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view),
    "date": (pa.types.is_date,),
    "timestamp": (lambda at: pa.types.is_timestamp(at) and at.tz is None, pa.types.is_date),
    "timestamptz": (pa.types.is_timestamp, pa.types.is_date),
    "bool": (pa.types.is_boolean,),
}


def _cast_exact(col: pa.ChunkedArray, c: Column, target: pa.DataType, name: str) -> pa.ChunkedArray:
    """``col`` as ``target``, refused (DataError naming the first row) where a value would change."""
    src = col.type
    if pa.types.is_dictionary(src):
        col = col.cast(src.value_type)
        src = col.type
    family = _FAMILIES["timestamptz" if c.type.tz else c.type.kind]
    if not (pa.types.is_null(src) or any(test(src) for test in family)):
        raise DataError(f"COPY {name}, column {c.name}: Parquet type {src} cannot be loaded as {c.type}")
    if src == target:
        return col

    def converts(part: pa.ChunkedArray) -> bool:
        try:
            part.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
        return True

    try:
        out = col.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        lo, hi = 0, len(col)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if converts(col.slice(lo, mid - lo)):
                lo = mid
            else:
                hi = mid
        raise _changed(name, lo, c, col) from None
    if pa.types.is_floating(src) and pa.types.is_floating(target):
        return out
    back = out.cast(src, safe=False)
    changed = _np(pc.not_equal(back, col))
    row = _first(changed)
    if row is not None:
        raise _changed(name, row, c, col)
    return out


def _changed(name: str, row: int, c: Column, col: pa.ChunkedArray) -> DataError:
    return DataError(
        f"COPY {name}, row {row + 1}, column {c.name}: {col[row]} cannot be loaded as {c.type} exactly"
    )
