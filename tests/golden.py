"""Golden files: text a test expects, kept under tests/ and compared whole.

``IVM_UPDATE_GOLDEN=1 make test`` (or pytest) writes the files anew instead of comparing; review the diff
before committing it.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

UPDATE = os.environ.get("IVM_UPDATE_GOLDEN") == "1"


def assert_golden(path: Path, lines: list[str]) -> None:
    """``lines`` must be the golden file ``path``, line for line."""
    text = "".join(line + "\n" for line in lines)
    if UPDATE:
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing: IVM_UPDATE_GOLDEN=1 writes it"
    expected = path.read_text()
    if text != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), lines, f"{path.name} (golden)", f"{path.name} (now)", lineterm=""
        )
        raise AssertionError("\n".join(diff))


def read_golden(path: Path) -> list[str]:
    """The lines of golden file ``path``."""
    return path.read_text().splitlines()


def explain_as_created(db, views: dict[str, str]) -> dict[str, list[str]]:
    """Each view's EXPLAIN, made just before it is created in ``db`` after the ones before it (so that what it
    reuses of them shows)."""
    out = {}
    for name, sql in views.items():
        out[name] = [r[0] for r in db.execute(f"EXPLAIN CREATE VIEW {name} AS {sql}").fetchall()]
        db.execute(f"CREATE VIEW {name} AS {sql}")
    return out
