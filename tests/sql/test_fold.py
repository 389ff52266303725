"""Calls on constants are computed once when an expression is compiled, with the values, NULLs and errors
they would have had row by row. Constants are SQL values (here Decimal); the engine holds decimals scaled."""

from decimal import Decimal as D

import numpy as np
import pytest

import ivm
from planner.expr import compile_predicate, fold
from sql.errors import SqlError
from sql.logical import Call, ColRef, Const
from sql.types import SqlType

DEC = SqlType("decimal", 18, 2)
INT = SqlType("int")
BOOL = SqlType("bool")


def test_calls_on_constants_fold_to_their_values():
    assert fold(Call("sub", (Const(D("6.00"), DEC), Const(D("1.00"), DEC)), DEC)) == Const(D("5.00"), DEC)
    nested = Call("mul", (Call("add", (Const(2, INT), Const(3, INT)), INT), ColRef(0, INT)), INT)
    assert fold(nested) == Call("mul", (Const(5, INT), ColRef(0, INT)), INT)
    # anything computed from NULL is NULL; a division by zero fails on the rows that reach it, so it stays
    assert fold(Call("add", (Const(None, INT), Const(1, INT)), INT)) == Const(None, INT)
    assert fold(Call("div", (Const(1, INT), Const(0, INT)), INT)) == Call(
        "div", (Const(1, INT), Const(0, INT)), INT
    )
    assert fold(Call("div", (Const(6, INT), Const(4, INT)), INT)) == Const(1, INT)


def test_a_constant_that_cannot_convert_fails_only_on_rows():
    db = ivm.connect()
    with db.pool.active():
        bad = Call("from_text", (Const("abc", SqlType("text")),), INT)
        assert fold(bad) == bad
    db.execute("CREATE TABLE t (a INTEGER)")
    db.execute("CREATE VIEW v AS SELECT a FROM t WHERE a > CAST('a' || 'bc' AS INTEGER)")
    assert db.execute("SELECT * FROM v").fetchall() == []  # no row has met it yet
    db.execute("INSERT INTO t VALUES (1)")  # the row is an error of the view, the write stands
    with pytest.raises(SqlError, match="view 'v' is in error.*invalid input syntax for type integer: \"abc\""):
        db.execute("SELECT * FROM v")
    db.execute("DELETE FROM t")
    assert db.execute("SELECT * FROM v").fetchall() == []


def test_comparisons_with_constants_keep_nulls():
    pred = Call(
        "and",
        (
            Call("ge", (ColRef(0, DEC), Call("sub", (Const(D("6"), DEC), Const(D("1"), DEC)), DEC)), BOOL),
            Call("lt", (Call("mul", (ColRef(1, INT), Const(2, INT)), INT), Const(10, INT)), BOOL),
        ),
        BOOL,
    )
    cols = (np.array([500, 499, 700, 800]), np.array([1, 1, 7, 2]))
    valid = (np.array([True, True, True, False]), None)
    assert compile_predicate(pred)(cols, valid).tolist() == [True, False, False, False]
