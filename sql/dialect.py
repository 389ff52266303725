"""ivm's reading of PostgreSQL's SQL: sqlglot's Postgres dialect, with what it would read differently from
PostgreSQL put back, and PostgreSQL's string constants decoded as PostgreSQL decodes them.

sqlglot's Postgres parser turns ``to_char``, ``to_date`` and ``to_timestamp`` into nodes holding their format
translated into C's strftime, which loses what PostgreSQL's template says (``HH`` and ``HH12``, ``FM``, text
in quotes); ``date_part`` into ``EXTRACT``, whose type is NUMERIC where ``date_part``'s is DOUBLE PRECISION;
and ``INTERVAL '1.5 hours'`` into ``INTERVAL '1.5' HOURS``, which PostgreSQL reads otherwise (a field named
after the string keeps only whole hours). Here these functions stay calls by name, with their arguments as
written, and an interval's string stays whole, its unit being only a field named after it (``INTERVAL '2'
HOUR``).

``E'...'`` strings are decoded from their text in the statement (``decode_escape_string``): sqlglot's tokenizer
knows escapes PostgreSQL does not (``\\v``) and makes characters of the bytes that ``\\ooo`` and ``\\xhh``
give, where PostgreSQL puts the bytes together into UTF-8. Dollar-quoted strings are kept as written.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres

from sql.errors import DataError, error_at

__all__ = ["Ivm", "decode_escape_string", "plain_strings"]

# the fields an interval constant may name after its string, as PostgreSQL's grammar has them
_INTERVAL_FIELDS = frozenset({"YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND"})
# functions kept as calls by name (``exp.Anonymous``), their arguments as written
_BY_NAME = ("TO_CHAR", "TO_DATE", "TO_TIMESTAMP", "DATE_PART")


def _by_name(name: str):
    return lambda args: exp.Anonymous(this=name.lower(), expressions=args)


class Ivm(Postgres):
    class Parser(Postgres.Parser):
        ADD_CONSTRAINT_KEYWORDS = {*Postgres.Parser.ADD_CONSTRAINT_KEYWORDS, "CHECK"}  # ALTER TABLE t ADD CHECK
        FUNCTIONS = {
            **Postgres.Parser.FUNCTIONS,
            **{name: _by_name(name) for name in _BY_NAME},
            # the step as written (``sql.series`` reads it; sqlglot's rewriting fails on several units)
            "GENERATE_SERIES": exp.ExplodingGenerateSeries.from_arg_list,
        }
        FUNCTION_PARSERS = {k: v for k, v in Postgres.Parser.FUNCTION_PARSERS.items() if k not in _BY_NAME}

        def _parse_interval_span(self, this, parse_function_unit: bool = True):
            if this is None or not this.is_string:
                return super()._parse_interval_span(this, parse_function_unit)
            unit = None
            if self._curr is not None and self._curr.text.upper() in _INTERVAL_FIELDS:
                unit = self._parse_var(any_token=True, upper=True).update_positions(self._prev)
                if self._match_text_seq("TO"):
                    unit = self.expression(
                        exp.IntervalSpan(this=unit, expression=self._parse_var(any_token=True, upper=True))
                    )
            return self.expression(exp.Interval(this=this, unit=unit))

        def _parse_alter(self):
            if self._curr is not None and self._curr.text.upper() == "MATERIALIZED":
                self._advance()  # ALTER MATERIALIZED VIEW: every view of ivm's is materialized
            return super()._parse_alter()

        def _parse_function_call(self, *args, **kwargs):
            token = self._curr
            out = super()._parse_function_call(*args, **kwargs)
            if out is not None and token is not None and "start" not in out.meta and not out.args.get("this"):
                out.update_positions(token)  # a function without parentheses (current_date): its keyword
            return out

        def _parse_types(self, *args, **kwargs):
            token = self._curr
            out = super()._parse_types(*args, **kwargs)
            if isinstance(out, exp.DataType) and token is not None and "start" not in out.meta:
                out.update_positions(token)  # a type: its first word, where errors about it point
            return out


def plain_strings(statement: exp.Expression, sql: str) -> exp.Expression:
    """``statement`` (parsed from ``sql``) with its ``E'...'`` and dollar-quoted strings as plain string
    constants of the value PostgreSQL reads."""
    for node in list(statement.find_all(exp.ByteString, exp.RawString)):
        meta = node.meta
        if isinstance(node, exp.ByteString):
            if "start" not in meta:
                raise error_at(node, "an E'...' string here is not supported", unsupported=True)
            value = decode_escape_string(sql[meta["start"] : meta["end"] + 1], node)
        else:
            value = node.this
        literal = exp.Literal.string(value)
        literal.meta.update(meta)
        node.replace(literal)
    return statement


_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_OCTAL = "01234567"
_HEX = "0123456789abcdefABCDEF"


def decode_escape_string(text: str, node: exp.Expression | None = None) -> str:
    """The value of PostgreSQL's escape string constant ``text`` (``E'...'`` as written): ``\\b \\f \\n \\r
    \\t``, ``\\o``, ``\\oo``, ``\\ooo`` (octal) and ``\\xh``, ``\\xhh`` (hexadecimal) bytes, ``\\uxxxx`` and
    ``\\Uxxxxxxxx`` characters, a backslash before any other character that character, ``''`` a quote; the
    bytes must make UTF-8, as PostgreSQL's server encoding.

    >>> decode_escape_string(r"E'a\\tb\\x41\\101\\303\\251\\u00e9\\q''\\\\'")
    "a\\tbAAéézq'\\\\"
    """
    body = text[2:-1]
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch == "'":  # a doubled quote
            out += b"'"
            i += 2
            continue
        if ch != "\\" or i + 1 >= n:
            out += ch.encode()
            i += 1
            continue
        nxt = body[i + 1]
        i += 2
        if nxt in _SIMPLE:
            out += _SIMPLE[nxt].encode()
        elif nxt in _OCTAL:
            j = i
            while j < n and j < i + 2 and body[j] in _OCTAL:
                j += 1
            out.append(int(nxt + body[i:j], 8) & 0xFF)
            i = j
        elif nxt == "x" and i < n and body[i] in _HEX:
            j = i + 1 if i + 1 < n and body[i + 1] in _HEX else i
            out.append(int(body[i : j + 1], 16))
            i = j + 1
        elif nxt in "uU":
            width = 4 if nxt == "u" else 8
            digits = body[i : i + width]
            if len(digits) != width or any(c not in _HEX for c in digits):
                raise error_at(node, "invalid Unicode escape (Unicode escapes must be \\uXXXX or \\UXXXXXXXX)")
            code = int(digits, 16)
            i += width
            if 0xD800 <= code <= 0xDBFF:  # the first of a surrogate pair: the second must follow
                low = body[i + 2 : i + 6] if body[i : i + 2] == "\\u" else ""
                if len(low) != 4 or any(c not in _HEX for c in low) or not 0xDC00 <= int(low, 16) <= 0xDFFF:
                    raise error_at(node, "invalid Unicode surrogate pair")
                code = 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                i += 6
            elif 0xDC00 <= code <= 0xDFFF or code == 0 or code > 0x10FFFF:
                raise error_at(node, "invalid Unicode escape value")
            out += chr(code).encode()
        else:
            out += nxt.encode()
    if 0 in out:
        raise error_at(node, 'invalid byte sequence for encoding "UTF8": 0x00', cls=DataError)
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = " ".join(f"0x{b:02x}" for b in out[err.start : err.start + 2])
        raise error_at(node, f'invalid byte sequence for encoding "UTF8": {bad}', cls=DataError) from None
