"""PostgreSQL's date/time formatting templates (``to_char``, ``to_date``, ``to_timestamp``), read as its
``parse_format`` reads them: at each place an optional ``FM`` prefix, then the longest template pattern
spelled there (case matters: ``Month``, ``MONTH`` and ``month`` differ, ``mm`` is ``MM``), then an optional
suffix; text in double quotes is copied (a backslash quotes the next character), a backslash before a double
quote outside them quotes it, and every other character is copied too (in ``to_date``, a space or a
separator, which is any ASCII punctuation, matches one of either in the input, other characters skip one).

A pattern ivm does not compute is refused by name, never copied as text: its time zone patterns (ivm's time
zone is UTC), the ``SP`` suffix, and in ``to_date`` and ``to_timestamp`` the ``TH`` suffix, the ``TM`` prefix
and the patterns that take a year from a week or a century (the ISO week date, ``WW``, ``CC``, ``J``). ``TH``
after a number in ``to_char`` adds its English ordinal suffix; ``TM`` before a name writes it in the
session's language, English (ivm's locale is C), without padding.
"""

from __future__ import annotations

from dataclasses import dataclass

from sql.errors import UnsupportedError

__all__ = ["Node", "KEYWORDS", "parse_template", "FORMATTED", "PARSED"]

# PostgreSQL's DCH_keywords, in its order (the first that the template spells at a place is taken), each with
# whether it is a number (which decides how ``to_date`` reads the field before it)
KEYWORDS: tuple[tuple[str, bool], ...] = tuple(
    (name, digit)
    for name, digit in [
        ("A.D.", False), ("A.M.", False), ("AD", False), ("AM", False), ("B.C.", False), ("BC", False),
        ("CC", True), ("DAY", False), ("DDD", True), ("DD", True), ("DY", False), ("Day", False),
        ("Dy", False), ("D", True), ("FF1", False), ("FF2", False), ("FF3", False), ("FF4", False),
        ("FF5", False), ("FF6", False), ("FX", False), ("HH24", True), ("HH12", True), ("HH", True),
        ("IDDD", True), ("ID", True), ("IW", True), ("IYYY", True), ("IYY", True), ("IY", True), ("I", True),
        ("J", True), ("MI", True), ("MM", True), ("MONTH", False), ("MON", False), ("MS", True),
        ("Month", False), ("Mon", False), ("OF", False), ("P.M.", False), ("PM", False), ("Q", True),
        ("RM", False), ("SSSSS", True), ("SSSS", True), ("SS", True), ("TZH", False), ("TZM", True),
        ("TZ", False), ("US", True), ("WW", True), ("W", True), ("Y,YYY", True), ("YYYY", True),
        ("YYY", True), ("YY", True), ("Y", True), ("a.d.", False), ("a.m.", False), ("ad", False),
        ("am", False), ("b.c.", False), ("bc", False), ("cc", True), ("day", False), ("ddd", True),
        ("dd", True), ("dy", False), ("d", True), ("ff1", False), ("ff2", False), ("ff3", False),
        ("ff4", False), ("ff5", False), ("ff6", False), ("fx", False), ("hh24", True), ("hh12", True),
        ("hh", True), ("iddd", True), ("id", True), ("iw", True), ("iyyy", True), ("iyy", True),
        ("iy", True), ("i", True), ("j", True), ("mi", True), ("mm", True), ("month", False), ("mon", False),
        ("ms", True), ("of", False), ("p.m.", False), ("pm", False), ("q", True), ("rm", False),
        ("sssss", True), ("ssss", True), ("ss", True), ("tzh", False), ("tzm", True), ("tz", False),
        ("us", True), ("ww", True), ("w", True), ("y,yyy", True), ("yyyy", True), ("yyy", True),
        ("yy", True), ("y", True),
    ]
)  # fmt: skip
_DIGIT = dict(KEYWORDS)

# the patterns whose case does not matter (PostgreSQL lists them in both cases for one meaning)
_NAMED_CASES = frozenset(
    {"DAY", "Day", "day", "DY", "Dy", "dy", "MONTH", "Month", "month", "MON", "Mon", "mon", "RM", "rm"}
    | {"A.D.", "a.d.", "AD", "ad", "A.M.", "a.m.", "AM", "am", "B.C.", "b.c.", "BC", "bc"}
    | {"P.M.", "p.m.", "PM", "pm", "TZ", "tz"}
)

# what to_char computes, and what to_date and to_timestamp read (by the pattern's canonical name)
FORMATTED = frozenset(
    {"YYYY", "YYY", "YY", "Y", "Y,YYY", "IYYY", "IYY", "IY", "I", "MM", "DD", "DDD", "D", "ID", "IW", "WW", "W"}
    | {"Q", "CC", "J", "HH", "HH12", "HH24", "MI", "SS", "MS", "US", "SSSS", "SSSSS", "FX"}
    | {"FF1", "FF2", "FF3", "FF4", "FF5", "FF6"}
    | _NAMED_CASES - {"TZ", "tz"}
)
PARSED = frozenset(
    {"YYYY", "YYY", "YY", "Y", "MM", "DD", "DDD", "D", "Q", "HH", "HH12", "HH24", "MI", "SS", "MS", "US"}
    | {"SSSS", "SSSSS", "FX", "FF1", "FF2", "FF3", "FF4", "FF5", "FF6"}
    | {"DAY", "Day", "day", "DY", "Dy", "dy", "MONTH", "Month", "month", "MON", "Mon", "mon"}
    | {"A.M.", "a.m.", "AM", "am", "P.M.", "p.m.", "PM", "pm"}
)
# the patterns to_char writes as words, which the TH suffix leaves alone
_WORDS = _NAMED_CASES | {"FX"}
_PREFIXES = ("FM", "fm", "TM", "tm")
_SUFFIXES = ("TH", "th", "SP")


@dataclass(frozen=True)
class Node:
    """One item of a template: ``kind`` is ``pattern`` (``name`` its canonical spelling, ``fm`` the FM
    prefix, ``digit`` whether it is a number), or ``char``, ``separator`` or ``space`` (``name`` the
    character)."""

    kind: str
    name: str
    fm: bool = False
    digit: bool = False
    text: str = ""  # the pattern as the template spells it (``mm``), for messages
    th: str = ""  # ``TH`` or ``th``: the number followed by its English ordinal suffix (``1st``, ``2ND``)


def _canonical(name: str) -> str:
    return name if name in _NAMED_CASES else name.upper()


def _separator(ch: str) -> bool:
    """PostgreSQL's is_separator_char: printable ASCII that is neither a letter nor a digit."""
    return 0x20 < ord(ch) < 0x7F and not ch.isalnum()


def parse_template(text: str, allowed: frozenset[str], function: str) -> tuple[Node, ...]:
    """The nodes of template ``text``; NotSupportedError naming a pattern ``function`` does not implement
    (``allowed``)."""
    out: list[Node] = []
    i, n = 0, len(text)
    while i < n:
        prefix = next((p for p in _PREFIXES if text.startswith(p, i)), None)
        if prefix is not None:
            i += len(prefix)
        keyword = next((k for k, _ in KEYWORDS if text.startswith(k, i)), None) if i < n else None
        if keyword is not None:
            name = _canonical(keyword)
            if prefix in ("TM", "tm") and function != "to_char()":
                raise UnsupportedError(
                    f"{function}: the template prefix TM (translated names) is not supported"
                )
            if name not in allowed:
                raise UnsupportedError(f"{function}: the template pattern {keyword!r} is not supported")
            i += len(keyword)
            suffix = next((s for s in _SUFFIXES if text.startswith(s, i)), None)
            if suffix is not None and (suffix == "SP" or function != "to_char()"):
                raise UnsupportedError(f"{function}: the template suffix {suffix!r} is not supported")
            i += len(suffix or "")
            th = suffix if suffix in ("TH", "th") and name not in _WORDS else ""  # of a number: its ordinal
            # TM: the names of the session's language (English, ivm's), not padded; on anything else, nothing
            fm = prefix in ("FM", "fm") or (prefix in ("TM", "tm") and name.upper() in ("MONTH", "DAY"))
            out.append(Node("pattern", name, fm, _DIGIT[keyword], keyword, th))
        elif i < n and text[i] == '"':
            i += 1
            while i < n:
                if text[i] == '"':
                    i += 1
                    break
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                out.append(Node("char", text[i]))
                i += 1
        elif i < n:
            if text[i] == "\\" and i + 1 < n and text[i + 1] == '"':
                i += 1
            ch = text[i]
            kind = "separator" if _separator(ch) else "space" if ch.isspace() and ch.isascii() else "char"
            out.append(Node(kind, ch))
            i += 1
    return tuple(out)
