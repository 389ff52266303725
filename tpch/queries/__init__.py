"""The 22 TPC-H queries with the specification's validation parameters, one file each."""

from __future__ import annotations

from pathlib import Path

__all__ = ["QUERIES", "query"]

_DIR = Path(__file__).parent
QUERIES = tuple(f"q{i:02d}" for i in range(1, 23))


def query(name: str) -> str:
    """The SQL text of query ``name`` (``q01`` ... ``q22``)."""
    return (_DIR / f"{name}.sql").read_text()
