"""Pattern matching: LIKE and ILIKE (with ESCAPE), and POSIX regular expressions (``~``, ``~*``, ``!~``,
``!~*``), as PostgreSQL matches them in a database of the C locale (which ivm's byte-order text is).

Patterns are constants. Each is translated here into a regular expression of RE2's syntax (Arrow's engine),
written so that RE2 means what PostgreSQL means: the match runs once per distinct string of a batch
(``planner.expr``).

- LIKE: ``%`` any text, ``_`` any one character, the escape character (a backslash, or ESCAPE's; none with
  ``ESCAPE ''``) makes the next character stand for itself. A CHAR(n) value is matched padded to n, by LIKE
  and by regular expressions alike (PostgreSQL has operators of each for ``character``).
- Regular expressions: PostgreSQL's advanced regular expressions (AREs) and RE2 agree on literals, ``.``
  (which matches a newline: ``(?s)``), ``^`` and ``$`` (the ends of the text), bracket expressions with
  ranges and POSIX classes, grouping, ``|``, and the quantifiers ``* + ? {m} {m,} {m,n}`` and their lazy forms
  (greed does not change whether a text matches). PostgreSQL's escapes are written in RE2's terms: ``\\d \\s
  \\w`` as the ASCII classes the C locale gives them (``\\s`` includes the vertical tab, which RE2's does
  not), ``\\y \\Y`` as RE2's ``\\b \\B``, ``\\b`` as a backspace, ``\\Z`` as ``\\z``, character escapes as the
  characters. Case-insensitive matching (``~*``, ILIKE) folds ASCII letters only, as the C locale does (RE2's
  ``(?i)`` would fold others). What RE2 cannot do is refused by name: back references (``\\1``), lookahead
  and lookbehind constraints (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), ``\\m`` and ``\\M``, ``[[:<:]]``, collating
  elements and equivalence classes, embedded options and directors (``(?i)``, ``***:``).
"""

from __future__ import annotations

import re

from sqlglot import exp

from sql.errors import DataError, error_at
from sql.logical import Call, Const, Expr
from sql.types import BOOL

__all__ = ["translate_match", "like_regex", "posix_regex", "replace_regex", "replacement"]


def translate_match(node: exp.Expression, resolve) -> Expr:
    """``x [NOT] LIKE/ILIKE pattern [ESCAPE 'c']`` or ``x ~ pattern`` / ``x ~* pattern`` as a match call."""
    from sql.scalar import translate_scalar

    escape = "\\"
    escape_node = None
    if isinstance(node, exp.Escape):
        escape_node = node.expression
        node = node.this
        if not isinstance(node, (exp.Like, exp.ILike)):
            raise error_at(node, f"{node.key.upper()} ... ESCAPE is not supported", unsupported=True)
        if not (isinstance(escape_node, exp.Literal) and escape_node.is_string):
            raise error_at(escape_node, "ESCAPE needs a constant string", unsupported=True)
        escape = escape_node.this
        if len(escape) > 1:
            raise error_at(
                escape_node,
                "invalid escape string (Escape string must be empty or one character.)",
                cls=DataError,
            )
    if node.args.get("negate"):  # x NOT LIKE p ESCAPE 'c'
        positive = node.copy()
        positive.set("negate", False)
        inner = exp.Escape(this=positive, expression=escape_node) if escape_node is not None else positive
        return Call("not", (translate_match(inner, resolve),), BOOL)
    x = translate_scalar(node.this, resolve)
    pat = node.expression
    regex = isinstance(node, (exp.RegexpLike, exp.RegexpILike))
    what = {exp.Like: "LIKE", exp.ILike: "ILIKE", exp.RegexpLike: "~", exp.RegexpILike: "~*"}[type(node)]
    insensitive = isinstance(node, (exp.ILike, exp.RegexpILike))
    if isinstance(pat, exp.Null):
        return Const(None, BOOL)
    if not (isinstance(pat, exp.Literal) and pat.is_string):
        raise error_at(pat, f"{what} needs a constant pattern", unsupported=True)
    if x.type.kind != "text" and not (isinstance(x, Const) and x.value is None):
        op = {"LIKE": "~~", "ILIKE": "~~*"}.get(what, what)
        raise error_at(node, f"operator does not exist: {x.type.pg_name} {op} unknown ({what} needs text)")
    if isinstance(x, Const) and x.value is None:
        return Const(None, BOOL)
    if regex:
        # a CHAR(n) value is matched padded to n, as PostgreSQL's operators for character match it
        return Call("regex", (x,), BOOL, (pat.this, what, posix_regex(pat.this, insensitive, pat), x.type.pad))
    if escape and _ends_escaped(pat.this, escape):
        raise error_at(pat, "LIKE pattern must not end with escape character", cls=DataError)
    regex_of = like_regex(pat.this, escape, insensitive)
    # a CHAR(n) value is matched padded to n, as PostgreSQL stores it
    return Call("like", (x,), BOOL, (pat.this, what, escape, regex_of, x.type.pad))


def _ends_escaped(pattern: str, escape: str) -> bool:
    """Whether a LIKE pattern ends with its escape character escaping nothing."""
    trailing = len(pattern) - len(pattern.rstrip(escape))
    return trailing % 2 == 1


_META = frozenset("\\.^$|?*+()[]{}")


def _literal(ch: str, insensitive: bool) -> str:
    """A character standing for itself in RE2's syntax; an ASCII letter either case when ``insensitive``."""
    if insensitive and ch.isascii() and ch.isalpha():
        return f"[{ch.lower()}{ch.upper()}]"
    if ch in _META:
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    return ch


def like_regex(pattern: str, escape: str = "\\", insensitive: bool = False) -> str:
    """A LIKE pattern as a whole-text regular expression of RE2's syntax.

    >>> like_regex("a%b_c")
    '(?s)^a.*b.c$'
    >>> like_regex("50!%", "!", True)
    '(?s)^50%$'
    """
    out = []
    escaped = False
    for ch in pattern:
        if not escaped and escape and ch == escape:
            escaped = True
            continue
        if not escaped and ch == "%":
            out.append(".*")
        elif not escaped and ch == "_":
            out.append(".")
        else:
            out.append(_literal(ch, insensitive))
        escaped = False
    return "(?s)^" + "".join(out) + "$"


# PostgreSQL's class escapes in the C locale, as RE2 bracket contents
_CLASSES = {"d": "0-9", "s": "\\t\\n\\x0b\\f\\r ", "w": "0-9A-Za-z_"}
_CHAR_ESCAPES = {"a": "\x07", "b": "\x08", "e": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\x0b"}
_POSIX = frozenset(
    {
        "alpha",
        "digit",
        "alnum",
        "upper",
        "lower",
        "space",
        "punct",
        "xdigit",
        "print",
        "graph",
        "cntrl",
        "blank",
    }
)
_BOUND = re.compile(r"\{(\d+)(,(\d*))?\}")


class _Refused(Exception):
    def __init__(self, message: str, unsupported: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.unsupported = unsupported


def posix_regex(pattern: str, insensitive: bool = False, node: exp.Expression | None = None) -> str:
    """PostgreSQL's regular expression ``pattern`` in RE2's syntax, meaning the same (see the module's text);
    NotSupportedError naming what RE2 cannot do, DataError for what PostgreSQL refuses too."""
    return _checked(_Translator(pattern, insensitive), node, "regular expressions")


def replace_regex(
    pattern: str, insensitive: bool, every: bool, node: exp.Expression | None = None
) -> tuple[str, int]:
    """REGEXP_REPLACE's ``pattern`` in RE2's syntax, and its number of capturing groups.

    A match replaced must be the one PostgreSQL finds: at the leftmost place the pattern matches, the longest
    match (a pattern without non-greedy quantifiers is greedy as a whole), its groups each as long as they can
    be, earlier ones first. RE2 takes the first match by the order of alternatives and the greed of each
    quantifier, as Perl does. The two agree on patterns made of characters, classes and bracket expressions
    each quantified greedily, unquantified groups of them and the anchors ^ $ \\A \\Z: each greedy choice
    leaves the most for the atoms after it. Alternation, non-greedy quantifiers, quantified groups and word
    boundaries are refused by name. With ``every`` (the g flag), a pattern that can match the empty text is
    refused too: PostgreSQL takes an empty match just after another match, RE2 does not."""
    translator = _Translator(pattern, insensitive, replacing=True)
    out = _checked(translator, node, "regexp_replace's pattern")
    if every and not translator.required:
        raise error_at(
            node, "regexp_replace with the g flag and a pattern that matches empty text is not supported", True
        )
    return out, translator.groups


def replacement(text: str, groups: int) -> str:
    """REGEXP_REPLACE's replacement text as RE2's rewrite: ``\\1`` to ``\\9`` the groups (nothing for a group
    the pattern has not), ``\\&`` the whole match, ``\\\\`` one backslash, and a backslash before anything else
    itself, as PostgreSQL reads it.
    """
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if ch != "\\":
            out.append(ch)
            continue
        nxt = text[i] if i < len(text) else ""
        if nxt.isdigit() and nxt != "0":
            out.append(f"\\{nxt}" if int(nxt) <= groups else "")
            i += 1
        elif nxt == "&":
            out.append("\\0")
            i += 1
        elif nxt == "\\":
            out.append("\\\\")
            i += 1
        else:
            out.append("\\\\")
    return "".join(out)


def _checked(translator: _Translator, node: exp.Expression | None, where: str) -> str:
    try:
        body = translator.translate()
    except _Refused as err:
        if err.unsupported:
            raise error_at(node, f"{err.message} is not supported in {where}", unsupported=True) from None
        raise error_at(node, f"invalid regular expression: {err.message}", cls=DataError) from None
    out = "(?s)" + body
    try:
        import pyarrow as pa
        import pyarrow.compute as pc

        pc.match_substring_regex(pa.array([""], pa.string()), pattern=out)
    except Exception as err:  # noqa: BLE001 - RE2's own refusal of what PostgreSQL refuses too
        said = str(err)
        why = next((pg for re2, pg in _RE2_ERRORS if re2 in said), said)
        raise error_at(node, f"invalid regular expression: {why}", cls=DataError) from None
    return out


# RE2's words for what PostgreSQL also refuses, and PostgreSQL's
_RE2_ERRORS = [
    ("missing )", "parentheses () not balanced"),
    ("unexpected )", "parentheses () not balanced"),
    ("repetition operator", "quantifier operand invalid"),
    ("bad repetition", "quantifier operand invalid"),
]


class _Translator:
    """PostgreSQL's pattern to RE2's. With ``replacing``, it also keeps to the patterns whose match RE2 finds
    as PostgreSQL does (see ``replace_regex``): it counts the capturing groups and the characters the pattern
    needs at least (``groups``, ``required``)."""

    def __init__(self, pattern: str, insensitive: bool, replacing: bool = False) -> None:
        self.p = pattern
        self.i = 0
        self.insensitive = insensitive
        self.replacing = replacing
        self.groups = 0
        self.required = 0
        self.last = ""  # what came last: "atom" (not yet known to be optional), "quantifier", "group" or ""

    def translate(self) -> str:
        p = self.p
        if p.startswith("***"):
            raise _Refused("a director (***: or ***=)")
        out = []
        while self.i < len(p):
            ch = p[self.i]
            self.i += 1
            if ch == "\\":
                piece = self._escape()
                self._next("atom" if piece not in ("\\A", "\\z", "\\b", "\\B") else "")
                if piece in ("\\b", "\\B") and self.replacing:
                    raise _Refused("\\y and \\Y (word boundaries)")
                out.append(piece)
            elif ch == "[":
                out.append(self._bracket())
                self._next("atom")
            elif ch == "(":
                self._next("")
                if p.startswith("?", self.i):
                    if p.startswith("?:", self.i):
                        out.append("(?:")
                        self.i += 2
                        continue
                    ahead = p[self.i : self.i + 3]
                    if ahead.startswith(("?=", "?!", "?<=", "?<!")):
                        raise _Refused("lookahead and lookbehind constraints (?= (?! (?<= (?<!")
                    raise _Refused("embedded options ((?...))")
                self.groups += 1
                out.append("(")
            elif ch == "{":
                m = _BOUND.match(p, self.i - 1)
                if m is None:
                    out.append("\\{")
                    self._next("atom")
                    continue
                low, high = m.group(1), m.group(3)
                if int(low) > 255 or (high and int(high) > 255) or (high and int(high) < int(low)):
                    raise _Refused("invalid repetition count(s)", unsupported=False)
                self._quantifier(int(low))
                out.append(m.group(0))
                self.i = m.end()
            elif ch in "*+?":
                self._quantifier(1 if ch == "+" else 0)
                out.append(ch)
            elif ch in ".^$|)":
                if ch == "|" and self.replacing:
                    raise _Refused("alternation (|)")
                self._next({".": "atom", ")": "group"}.get(ch, ""))
                out.append(ch)
            else:
                out.append(_literal(ch, self.insensitive))
                self._next("atom")
        self._next("")
        return "".join(out)

    def _next(self, what: str) -> None:
        """A token other than a quantifier, ``what`` it is: the atom before it, if any, was needed once."""
        if self.last == "atom":
            self.required += 1
        self.last = what

    def _quantifier(self, least: int) -> None:
        if self.replacing and self.last == "quantifier":
            raise _Refused("non-greedy quantifiers (*? +? ?? {m,n}?)")
        if self.replacing and self.last == "group":
            raise _Refused("a quantified group")
        if self.last == "atom" and least > 0:
            self.required += 1
        self.last = "quantifier"

    def _escape(self) -> str:
        p = self.p
        if self.i >= len(p):
            raise _Refused("invalid escape \\ sequence", unsupported=False)
        ch = p[self.i]
        self.i += 1
        if ch in _CLASSES:
            return f"[{_CLASSES[ch]}]"
        if ch.lower() in _CLASSES:
            return f"[^{_CLASSES[ch.lower()]}]"
        if ch == "y":
            return "\\b"
        if ch == "Y":
            return "\\B"
        if ch == "A":
            return "\\A"
        if ch == "Z":
            return "\\z"
        if ch in "mM":
            raise _Refused(f"\\{ch} (the start or end of a word)")
        if ch.isdigit():
            raise _Refused(f"back references (\\{ch})" if ch != "0" else "\\0")
        char = self._character(ch)
        if char is not None:
            return _literal(char, self.insensitive)
        if ch.isalnum():
            raise _Refused("invalid escape \\ sequence", unsupported=False)
        return _literal(ch, self.insensitive)

    def _character(self, ch: str) -> str | None:
        """The character a character escape stands for (``\\n``, ``\\x41``, ``\\u00e9``), else None."""
        p = self.p
        if ch in _CHAR_ESCAPES:
            return _CHAR_ESCAPES[ch]
        if ch == "x":
            m = re.compile(r"[0-9A-Fa-f]+").match(p, self.i)
            if m is None:
                raise _Refused("invalid escape \\ sequence", unsupported=False)
            self.i = m.end()
            return self._code(int(m.group(0), 16))
        if ch in "uU":
            width = 4 if ch == "u" else 8
            digits = p[self.i : self.i + width]
            if len(digits) != width or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
                raise _Refused("invalid escape \\ sequence", unsupported=False)
            self.i += width
            return self._code(int(digits, 16))
        if ch == "c":
            raise _Refused("\\c (control characters)")
        return None

    @staticmethod
    def _code(code: int) -> str:
        if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise _Refused("invalid escape \\ sequence", unsupported=False)
        return chr(code)

    def _bracket(self) -> str:
        """A bracket expression, from after its ``[`` to its ``]``."""
        p = self.p
        out = []
        negate = p.startswith("^", self.i)
        if negate:
            self.i += 1
        first = True
        items: list[str] = []
        while True:
            if self.i >= len(p):
                raise _Refused("brackets [] not balanced", unsupported=False)
            ch = p[self.i]
            if ch == "]" and not first:
                self.i += 1
                break
            first = False
            if p.startswith("[:", self.i):
                end = p.find(":]", self.i + 2)
                name = p[self.i + 2 : end] if end >= 0 else ""
                if name in ("<", ">"):
                    raise _Refused("[[:<:]] and [[:>:]] (word boundaries)")
                if name not in _POSIX:
                    raise _Refused("invalid character class", unsupported=False)
                if self.insensitive and name in ("upper", "lower"):
                    raise _Refused("[:upper:] and [:lower:] in a case-insensitive match")
                items.append(f"[:{name}:]")
                self.i = end + 2
                continue
            if p.startswith(("[.", "[="), self.i):
                raise _Refused("collating elements and equivalence classes ([. .] and [= =])")
            lo = self._bracket_char()
            if isinstance(lo, tuple):  # a class escape
                items.append(lo[0])
                continue
            if p.startswith("-", self.i) and self.i + 1 < len(p) and p[self.i + 1] != "]":
                self.i += 1
                hi = self._bracket_char()
                if isinstance(hi, tuple):
                    raise _Refused("invalid character range", unsupported=False)
                if ord(hi) < ord(lo):
                    raise _Refused("invalid character range", unsupported=False)
                items.append(self._range(lo, hi))
                continue
            items.append(self._one(lo))
        out.append("[^" if negate else "[")
        out.extend(items)
        out.append("]")
        return "".join(out)

    def _bracket_char(self) -> str | tuple[str]:
        """One character of a bracket expression, or a class escape's contents as a 1-tuple."""
        p = self.p
        ch = p[self.i]
        self.i += 1
        if ch != "\\":
            return ch
        if self.i >= len(p):
            raise _Refused("brackets [] not balanced", unsupported=False)
        e = p[self.i]
        self.i += 1
        if e in _CLASSES:
            return (_CLASSES[e],)
        if e.lower() in _CLASSES:
            raise _Refused(f"\\{e} inside brackets")
        if e.isdigit():
            raise _Refused(f"back references (\\{e})" if e != "0" else "\\0")
        char = self._character(e)
        if char is not None:
            return char
        if e == "b":
            return "\x08"
        if e.isalnum():
            raise _Refused("invalid escape \\ sequence", unsupported=False)
        return e

    def _one(self, ch: str) -> str:
        if self.insensitive and ch.isascii() and ch.isalpha():
            return ch.lower() + ch.upper()
        return _bracket_literal(ch)

    def _range(self, lo: str, hi: str) -> str:
        out = f"{_bracket_literal(lo)}-{_bracket_literal(hi)}"
        if not self.insensitive:
            return out
        letters = [c for c in (lo, hi) if c.isascii() and c.isalpha()]
        if not letters:
            if any(chr(c).isascii() and chr(c).isalpha() for c in range(ord(lo), ord(hi) + 1)):
                raise _Refused("a range around letters in a case-insensitive match")
            return out
        if len(letters) != 2 or lo.islower() != hi.islower():
            raise _Refused("a range around letters in a case-insensitive match")
        other = f"{_bracket_literal(lo.swapcase())}-{_bracket_literal(hi.swapcase())}"
        return out + other


def _bracket_literal(ch: str) -> str:
    if ch in "\\]^-[":
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    return ch
