"""Text output of the ``ivm`` command: results as aligned tables, and errors with a caret under their position.

Tables are built column by column with Arrow compute (cast to text, pad, join), so even a large result costs a
few vectorized calls plus one final join of its lines.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sql.errors import SqlError
from sql.types import interval_text, justified

__all__ = ["table", "error", "NULL_TEXT"]

NULL_TEXT = "NULL"


def _text_column(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column as display strings: NULL for nulls, true/false for booleans."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks else pa.array([], col.type)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        text = col.cast(pa.string())
    elif pa.types.is_null(col.type):
        text = pa.nulls(len(col), pa.string())
    elif pa.types.is_duration(col.type):  # an interval, as PostgreSQL writes one (once per distinct value)
        micros = np.asarray(col.cast(pa.duration("us")).cast(pa.int64()).fill_null(0), dtype=np.int64)
        uniq, inv = np.unique(micros, return_inverse=True)
        shown = pa.array([interval_text(*justified(int(v))) for v in uniq], pa.string())
        text = pc.if_else(
            col.is_valid(), shown.take(pa.array(inv.reshape(-1))), pa.nulls(len(col), pa.string())
        )
    elif pa.types.is_timestamp(col.type) and col.type.tz is not None:  # in UTC, the session's zone: +00
        text = pc.replace_substring_regex(pc.cast(col, pa.string()), "Z$", "+00")
    else:
        text = pc.cast(col, pa.string())
    return pc.fill_null(text, NULL_TEXT)


def _right_aligned(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def table(data: pa.Table, footer: bool = True) -> str:
    """``data`` as an aligned table: a header, a rule, one line per row (numbers right-aligned), and the row
    count, as psql prints results."""
    names = data.column_names
    n = data.num_rows
    if not names:
        return f"({n} row{'s' if n != 1 else ''})" if footer else ""
    cols = [_text_column(data.column(i)) for i in range(len(names))]
    widths = []
    for name, c in zip(names, cols, strict=True):
        longest = pc.max(pc.utf8_length(c)).as_py() if n else 0
        widths.append(max(len(name), longest or 0))
    header = " | ".join(name.center(w) for name, w in zip(names, widths, strict=True))
    rule = "-+-".join("-" * w for w in widths)
    lines = [" " + header.rstrip(), "-" + rule + "-"]
    if n:
        padded = [
            pc.utf8_lpad(c, w) if _right_aligned(data.schema.field(i).type) else pc.utf8_rpad(c, w)
            for i, (c, w) in enumerate(zip(cols, widths, strict=True))
        ]
        joined = pc.binary_join_element_wise(*padded, " | ")
        body = pc.utf8_rtrim_whitespace(pc.binary_join_element_wise(" ", joined, ""))
        lines.append("\n".join(body.to_pylist()))
    if footer:
        lines.append(f"({n} row{'s' if n != 1 else ''})")
    return "\n".join(lines)


def error(err: Exception, statement: str | None = None, source: str | None = None, line: int = 1) -> str:
    """An error as the user sees it: where (``source`` and the input line), the cause, and the statement's
    offending line with a caret under the position."""
    sql_error = isinstance(err, SqlError)
    msg = (err.message if sql_error else None) or str(err)
    pos_line = err.line if sql_error else None
    pos_col = err.col if sql_error else None
    texts = statement.split("\n") if statement else []
    if pos_line and pos_col and 1 <= pos_line <= len(texts):
        pos_col = _token_start(statement, pos_line, pos_col)
    where = ""
    if source is not None:
        at = line + (pos_line - 1 if pos_line else 0)
        where = f" at {source} line {at}" + (f", column {pos_col}" if pos_col else "")
    kind = "ERROR" if sql_error else "INTERNAL ERROR"
    cause = msg if sql_error else f"{type(err).__name__}: {msg}"
    out = [f"{kind}{where}: {cause}"]
    if texts:
        if pos_line and 1 <= pos_line <= len(texts):
            prefix = f"LINE {pos_line}: " if len(texts) > 1 else ""
            out.append(prefix + texts[pos_line - 1])
            if pos_col:
                out.append(" " * (len(prefix) + pos_col - 1) + "^")
        else:
            out.append(texts[0] + (" ..." if len(texts) > 1 else ""))
    return "\n".join(out)


def _token_start(statement: str, line: int, col: int) -> int:
    """The column where the token covering (``line``, ``col``) starts: sqlglot reports syntax errors at the
    end of the unexpected token, names at their start; the caret goes under the token's first character."""
    from sqlglot.errors import TokenError

    from ivm.cli.statements import tokens

    try:
        toks = tokens(statement)
    except TokenError:
        return col
    for t in toks:
        length = t.end - t.start
        if t.line == line and t.col - length <= col <= t.col:
            return max(t.col - length, 1)
    return col
