"""The logical plan: a small relational algebra the planner turns into dataflows.

Plans are trees of frozen dataclasses; every node knows its output columns (name and SqlType). Scalar
expressions refer to input columns by position. Two plans that are equal as values compute the same collection,
which is how the planner finds sub-plans that different views can share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache

from sql.types import SqlType

__all__ = [
    "Expr",
    "ColRef",
    "Const",
    "Call",
    "Plan",
    "Scan",
    "Filter",
    "Project",
    "Join",
    "SemiJoin",
    "Aggregate",
    "AggCall",
    "Distinct",
    "UnionAll",
    "Negate",
    "Positive",
    "TopK",
    "WindowCall",
    "Window",
    "Canon",
    "Values",
    "Series",
    "RecRef",
    "Fixpoint",
    "FixpointResult",
    "Column",
    "children",
    "is_recursive",
    "unnamed",
    "substitute",
]


@dataclass(frozen=True)
class Column:
    name: str
    type: SqlType
    nullable: bool = True


# -- scalar expressions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColRef:
    index: int
    type: SqlType


@dataclass(frozen=True)
class Const:
    """A constant: an SQL value (see ``sql.types.sql_value``; ``None`` is NULL)."""

    value: object
    type: SqlType


@dataclass(frozen=True)
class Call:
    """An operator or function: ``op`` names it (add, eq, and, is_null, like, case, coalesce, cast, ...)."""

    op: str
    args: tuple[Expr, ...]
    type: SqlType
    param: object = None  # e.g. the pattern of LIKE, the target type of CAST


Expr = ColRef | Const | Call


# -- plans -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scan:
    table: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Filter:
    input: Plan
    predicate: Expr
    columns: tuple[Column, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", self.input.columns)


@dataclass(frozen=True)
class Project:
    input: Plan
    exprs: tuple[Expr, ...]
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Join:
    """``kind`` in inner, left, right, full; equality of ``left_keys`` and ``right_keys`` (positions in each
    input), NULL meeting NULL with ``nulls_match`` (``IS NOT DISTINCT FROM``); output columns are the left's
    then the right's."""

    kind: str
    left: Plan
    right: Plan
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    nulls_match: bool = False
    columns: tuple[Column, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        left = self.left.columns
        right = self.right.columns
        if self.kind in ("right", "full"):
            left = tuple(Column(c.name, c.type, True) for c in left)
        if self.kind in ("left", "full"):
            right = tuple(Column(c.name, c.type, True) for c in right)
        object.__setattr__(self, "columns", left + right)


@dataclass(frozen=True)
class SemiJoin:
    """The rows of ``left`` equal (all columns, NULL equal to NULL) to some row of ``right`` (the distinct rows
    to look for), or with ``anti`` those equal to none."""

    left: Plan
    right: Plan
    anti: bool
    columns: tuple[Column, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", self.left.columns)


@dataclass(frozen=True)
class AggCall:
    """``func`` in count_star, count, sum, avg, min, max, string_agg; ``arg`` a position of the input.
    STRING_AGG's ``param`` is ``(separator, order)``: the values joined by the separator in the order of
    ``order``'s ``(position, descending, NULLs first)`` keys, ties (and everything, without keys) by value, so
    that the result never depends on the order rows arrived in."""

    func: str
    arg: int | None
    distinct: bool
    type: SqlType
    param: object = None

    @property
    def reads(self) -> tuple[int, ...]:
        """The input positions the call reads: its argument and its ordering keys."""
        own = () if self.arg is None else (self.arg,)
        if self.func == "string_agg":
            return own + tuple(p for p, _, _ in self.param[1])
        return own

    def moved(self, m: dict[int, int]) -> AggCall:
        """The call reading input position ``m[i]`` where it read ``i``."""
        param = self.param
        if self.func == "string_agg":
            sep, order = param
            param = (sep, tuple((m[p], desc, first) for p, desc, first in order))
        arg = None if self.arg is None else m[self.arg]
        return AggCall(self.func, arg, self.distinct, self.type, param)


@dataclass(frozen=True)
class Aggregate:
    """Groups by the ``group`` positions; output columns are the group columns then one per aggregate. Without
    group columns the result has exactly one row, also over empty input (SQL's global aggregate)."""

    input: Plan
    group: tuple[int, ...]
    aggs: tuple[AggCall, ...]
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Distinct:
    input: Plan
    columns: tuple[Column, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", self.input.columns)


@dataclass(frozen=True)
class UnionAll:
    inputs: tuple[Plan, ...]
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Negate:
    input: Plan
    columns: tuple[Column, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", self.input.columns)


@dataclass(frozen=True)
class Positive:
    """Each row with multiplicity max(m, 0): what set difference needs."""

    input: Plan
    columns: tuple[Column, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", self.input.columns)


@dataclass(frozen=True)
class TopK:
    """The rows ranked ``[offset, offset + limit)`` by ``order``: (position, descending, NULLs first); with
    ``group``, those of each group of rows equal in the columns at those positions (DISTINCT ON)."""

    input: Plan
    order: tuple[tuple[int, bool, bool], ...]
    limit: int | None
    offset: int
    group: tuple[int, ...] = ()
    columns: tuple[Column, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", self.input.columns)


@dataclass(frozen=True)
class WindowCall:
    """A window function: ``func`` (row_number, rank, dense_rank, percent_rank, cume_dist, ntile, lag, lead,
    first_value, last_value, nth_value, count_star, count, sum, avg, min, max) of the input column ``arg``.
    ``frame`` is ``(mode, start, end, exclude)`` with mode rows, range or groups, each bound ``(kind, offset)``,
    kind in unbounded, preceding, current, following (offsets of RANGE in the ORDER BY column's stored units,
    or ``(kind, microseconds, months, dates)`` for an interval of months: see ``sql.windows``), and
    ``exclude`` None or what EXCLUDE takes out of the frame (current row, group, ties);
    ``param`` is NTILE's buckets, LAG's and LEAD's offset or NTH_VALUE's n; ``default`` LAG's and LEAD's
    default value (None for NULL)."""

    func: str
    arg: int | None
    frame: tuple
    param: int | None
    default: object
    type: SqlType


@dataclass(frozen=True)
class Window:
    """Every row of ``input`` followed by one column per window function of ``calls``, computed over the rows
    equal in the ``partition`` columns, ordered by ``order`` ((position, descending, NULLs first), ties broken
    by every column)."""

    input: Plan
    partition: tuple[int, ...]
    order: tuple[tuple[int, bool, bool], ...]
    calls: tuple[WindowCall, ...]
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Canon:
    """``input`` with the text of the columns at ``positions`` under canonical codes. A table may store text
    under codes that equal strings do not share (the engine's string pool); what compares such text reads it
    through this step."""

    input: Plan
    positions: tuple[int, ...]
    columns: tuple[Column, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", self.input.columns)


@dataclass(frozen=True)
class Values:
    """A constant relation: ``rows`` of SQL values (``None`` is NULL)."""

    rows: tuple[tuple, ...]
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Series:
    """Each row of ``input`` once for each value of PostgreSQL's ``generate_series(start, stop, step)`` over
    it (expressions of the row: integers, or timestamps and a step of microseconds), that value after the
    row's columns, then with ``ordinality`` its number from 1: no row for a NULL argument or a step that moves
    away from ``stop``. With ``outer``, a row without values is kept once, the value NULL (``LEFT JOIN
    LATERAL generate_series(...) ON true``)."""

    input: Plan
    start: Expr
    stop: Expr
    step: Expr
    columns: tuple[Column, ...]
    ordinality: bool = False
    outer: bool = False


@dataclass(frozen=True)
class RecRef:
    """Inside the body of a ``Fixpoint``, the current value of its definition ``name``."""

    name: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Fixpoint:
    """Definitions ``names`` that start empty and are all recomputed from each other's previous values by their
    ``bodies`` (which read them as ``RecRef``s) until none changes: the least fixed point for monotone bodies,
    the iterated value otherwise. More than ``limit`` rounds is an error, or with ``on_limit == "return"`` the
    values after ``limit`` rounds."""

    names: tuple[str, ...]
    bodies: tuple[Plan, ...]
    limit: int
    on_limit: str = "error"


@dataclass(frozen=True)
class FixpointResult:
    """The value definition ``index`` of ``fixpoint`` converges to."""

    fixpoint: Fixpoint
    index: int
    columns: tuple[Column, ...]


Plan = (
    Scan
    | Filter
    | Project
    | Join
    | SemiJoin
    | Aggregate
    | Distinct
    | UnionAll
    | Negate
    | Positive
    | TopK
    | Window
    | Canon
    | Values
    | Series
    | RecRef
    | FixpointResult
)


def children(plan: Plan) -> tuple[Plan, ...]:
    """The plans ``plan`` reads (a fixpoint result reads its fixpoint's bodies)."""
    if isinstance(plan, (Filter, Project, Aggregate, Distinct, Negate, Positive, TopK, Window, Canon, Series)):
        return (plan.input,)
    if isinstance(plan, (Join, SemiJoin)):
        return (plan.left, plan.right)
    if isinstance(plan, UnionAll):
        return plan.inputs
    if isinstance(plan, FixpointResult):
        return plan.fixpoint.bodies
    return ()


def is_recursive(plan: Plan, names: frozenset[str] | None = None) -> bool:
    """Whether ``plan`` reads a recursive definition (one of ``names``, or any) not bound inside it, so that it
    changes from one round of its fixpoint to the next."""
    free = _free(plan)
    return bool(free if names is None else free & names)


@lru_cache(maxsize=4096)
def _free(plan: Plan) -> frozenset[str]:
    if isinstance(plan, RecRef):
        return frozenset((plan.name,))
    if isinstance(plan, FixpointResult):
        return frozenset().union(*map(_free, plan.fixpoint.bodies)) - set(plan.fixpoint.names)
    return frozenset().union(*map(_free, children(plan)))


def substitute(plan: Plan, replace: Callable[[Plan], Plan | None]) -> Plan:
    """``plan`` with every sub-plan for which ``replace`` gives a plan (of the same columns) replaced by it."""
    new = replace(plan)
    if new is not None:
        return new
    changed = {}
    for f in fields(plan):
        if not f.init:
            continue
        value = getattr(plan, f.name)
        if isinstance(value, _PLANS):
            out = substitute(value, replace)
        elif isinstance(value, tuple) and value and isinstance(value[0], _PLANS):
            out = tuple(substitute(v, replace) for v in value)
        else:
            continue
        if out != value:
            changed[f.name] = out
    if not changed:
        return plan
    return type(plan)(**{f.name: changed.get(f.name, getattr(plan, f.name)) for f in fields(plan) if f.init})


def unnamed(plan: Plan) -> Plan:
    """``plan`` with every column named "": expressions refer to columns by position, so names only label the
    output, and plans equal under this compute the same collection (what a registry of arrangements is keyed
    by, so that views naming the same rows differently share them)."""
    return _unnamed(plan)


_PLANS = (
    Scan,
    Filter,
    Project,
    Join,
    SemiJoin,
    Aggregate,
    Distinct,
    UnionAll,
    Negate,
    Positive,
    TopK,
    Window,
    Canon,
    Values,
    Series,
    RecRef,
    FixpointResult,
    Fixpoint,
)


@lru_cache(maxsize=4096)
def _unnamed(node):
    return type(node)(**{f.name: _unnamed_field(getattr(node, f.name)) for f in fields(node) if f.init})


def _unnamed_field(value):
    if isinstance(value, Column):
        return Column("", value.type, value.nullable)
    if isinstance(value, _PLANS):
        return _unnamed(value)
    if isinstance(value, tuple) and value and isinstance(value[0], (Column, *_PLANS)):
        return tuple(_unnamed_field(v) for v in value)
    return value
