"""EXPLAIN: the dataflow of a plan as an indented tree, each arrangement marked built or reused.

The text names columns, keys and relations only (no object identities), so it is deterministic and can be used
as a golden file for sharing and join choices.
"""

from __future__ import annotations

from planner.compile import one_group
from planner.simplify import renames
from sql.logical import (
    Aggregate,
    Call,
    Canon,
    ColRef,
    Const,
    Distinct,
    Expr,
    Filter,
    FixpointResult,
    Join,
    Negate,
    Plan,
    Positive,
    Project,
    RecRef,
    Scan,
    SemiJoin,
    TopK,
    UnionAll,
)
from sql.types import sql_literal

__all__ = ["explain"]


def explain(plan: Plan, used: list[tuple[Plan, tuple[int, ...], str]]) -> list[str]:
    """Lines of the tree of ``plan``; ``used`` says, per (plan, key), whether compiling built or reused it."""
    how: dict[tuple, str] = {}
    for p, k, h in used:
        how.setdefault((p, k), h)
    out: list[str] = []
    _node(plan, 0, how, out)
    return out


def _arranged(child: Plan, key: tuple[int, ...], depth: int, how: dict, out: list[str]) -> None:
    names = [child.columns[i].name for i in key]
    state = "the input's" if renames(child) else how.get((child, key), "built")
    if state == "built" and isinstance(child, Aggregate) and key == tuple(range(len(child.group))) and key:
        state = "the aggregate's"  # the reduction's output, arranged by the group anyway
    if state == "built" and isinstance(child, Distinct) and key == tuple(range(len(child.columns))):
        state = "the reduction's"  # the distinct rows are the output of a reduction arranged by them
    out.append("  " * depth + f"ArrangeBy key=[{', '.join(names)}] ({state})")
    _node(child, depth + 1, how, out)


def _node(plan: Plan, depth: int, how: dict, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(plan, Scan):
        out.append(f"{pad}Scan {plan.table}")
        return
    if isinstance(plan, Filter):
        out.append(f"{pad}Filter {_expr(plan.predicate, plan.input)}")
        _node(plan.input, depth + 1, how, out)
        return
    if isinstance(plan, Project):
        items = ", ".join(
            c.name
            if isinstance(e, ColRef) and plan.input.columns[e.index].name == c.name
            else f"{_expr(e, plan.input)} AS {c.name}"
            for e, c in zip(plan.exprs, plan.columns, strict=True)
        )
        out.append(f"{pad}Project {items}")
        _node(plan.input, depth + 1, how, out)
        return
    if isinstance(plan, Join):
        on = ", ".join(
            f"{plan.left.columns[a].name} = {plan.right.columns[b].name}"
            for a, b in zip(plan.left_keys, plan.right_keys, strict=True)
        )
        out.append(f"{pad}Join {plan.kind}" + (f" on {on}" if on else " (cross)"))
        _arranged(plan.left, plan.left_keys, depth + 1, how, out)
        _arranged(plan.right, plan.right_keys, depth + 1, how, out)
        return
    if isinstance(plan, SemiJoin):
        out.append(f"{pad}{'AntiJoin' if plan.anti else 'SemiJoin'} on all columns")
        full = tuple(range(len(plan.columns)))
        _arranged(plan.left, full, depth + 1, how, out)
        _arranged(plan.right, full, depth + 1, how, out)
        return
    if isinstance(plan, Aggregate):
        args = ["*" if a.arg is None else plan.input.columns[a.arg].name for a in plan.aggs]
        aggs = ", ".join(
            f"{a.func}({'DISTINCT ' if a.distinct else ''}{arg})"
            for a, arg in zip(plan.aggs, args, strict=True)
        )
        group = [plan.input.columns[i].name for i in plan.group]
        line = f"{pad}Aggregate group=[{', '.join(group)}] aggs=[{aggs}]"
        if how.get((plan, tuple(range(len(plan.group))))) == "reused":
            out.append(f"{line} (reused)")  # another view's result: nothing below is built
            return
        group_key = plan.group if plan.group else (0,)
        if how.get((plan.input if plan.group else one_group(plan.input), group_key)) == "running":
            out.append(f"{line} (running state per group)")  # no arrangement of the input
            _node(plan.input, depth + 1, how, out)
            return
        out.append(line)
        if plan.group:
            _arranged(plan.input, plan.group, depth + 1, how, out)
        else:
            _node(plan.input, depth + 1, how, out)
        return
    if isinstance(plan, Distinct):
        if how.get((plan, tuple(range(len(plan.columns))))) == "reused":
            out.append(f"{pad}Distinct (reused)")
            return
        full = tuple(range(len(plan.columns)))
        if how.get((plan.input, full)) == "running":
            out.append(f"{pad}Distinct (running count per row)")  # no arrangement of the input
            _node(plan.input, depth + 1, how, out)
            return
        out.append(f"{pad}Distinct")
        _arranged(plan.input, full, depth + 1, how, out)
        return
    if isinstance(plan, UnionAll):
        out.append(f"{pad}UnionAll")
        for p in plan.inputs:
            _node(p, depth + 1, how, out)
        return
    if isinstance(plan, Canon):
        out.append(f"{pad}Canonical text [{', '.join(plan.columns[i].name for i in plan.positions)}]")
        _node(plan.input, depth + 1, how, out)
        return
    if isinstance(plan, (Negate, Positive)):
        out.append(f"{pad}{type(plan).__name__}")
        _node(plan.input, depth + 1, how, out)
        return
    if isinstance(plan, TopK):
        nulls = {(False, True): " NULLS FIRST", (True, False): " NULLS LAST"}
        order = ", ".join(
            plan.columns[i].name + (" DESC" if d else "") + nulls.get((d, f), "") for i, d, f in plan.order
        )
        group = ", ".join(plan.columns[i].name for i in plan.group)
        per = f" per=[{group}]" if plan.group else ""
        out.append(f"{pad}TopK{per} order=[{order}] limit={plan.limit} offset={plan.offset}")
        _node(plan.input, depth + 1, how, out)
        return
    if isinstance(plan, RecRef):
        out.append(f"{pad}Recursive {plan.name}")
        return
    if isinstance(plan, FixpointResult):
        fx = plan.fixpoint
        name = fx.names[plan.index]
        if ("fixpoint", fx) in how:
            out.append(f"{pad}Fixpoint {name} (above)")
            return
        how[("fixpoint", fx)] = "shown"
        limit = f"{'return' if fx.on_limit == 'return' else 'error'} at {fx.limit} rounds"
        out.append(f"{pad}Fixpoint {name} ({limit})")
        for n, body in zip(fx.names, fx.bodies, strict=True):
            out.append(f"{pad}  Recursive {n} :=")
            _node(body, depth + 2, how, out)
        return
    out.append(f"{pad}{type(plan).__name__}")


def _expr(e: Expr, src: Plan) -> str:
    if isinstance(e, ColRef):
        return src.columns[e.index].name
    if isinstance(e, Const):
        return sql_literal(e.value, e.type)
    if isinstance(e, Call):
        args = ", ".join(_expr(a, src) for a in e.args)
        return f"{e.op}({args})"
    return "?"
