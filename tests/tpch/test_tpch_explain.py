"""EXPLAIN of the 22 TPC-H queries, each made as its view is created after the ones before it in one database,
compared with golden files (tests/tpch/explain/qNN.txt): a change to what the planner builds or shares shows
up as a diff of these files."""

from pathlib import Path

import pytest

import ivm
from tests.golden import assert_golden, explain_as_created
from tpch import SCHEMA
from tpch.queries import QUERIES, query

GOLDEN = Path(__file__).parent / "explain"


@pytest.fixture(scope="module")
def explained() -> dict[str, list[str]]:
    db = ivm.connect()
    db.execute(SCHEMA)
    return explain_as_created(db, {q: query(q) for q in QUERIES})


@pytest.mark.parametrize("q", QUERIES)
def test_explain_matches_golden(explained, q):
    assert_golden(GOLDEN / f"{q}.txt", explained[q])
