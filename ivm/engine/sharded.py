"""Stepping the shards of a sharded engine together, stage by stage.

Every shard holds the same dataflows; each runs them on its part of the data, the way a single engine runs
them (``ivm.engine.scope``), except that an operator must not run at a point before every shard has run
everything it reads there. Operators are therefore grouped into *stages*: an operator's stage is the number
of exchanges on the longest path from the dataflow's inputs to it, so what a stage reads was made in earlier
stages or, inside this shard, earlier in the same stage. At each point the shards agree (one ``gather``) on
the first operator any of them has activated; if it is an ordinary one of stage s, every shard runs all its
activated operators of stage s, and then one ``exchange`` hands each shard the updates sent to it, which
activate receivers of later stages, and tells every shard the first operator activated after it: a point
costs one collective call per stage it runs, and one to begin (shared by every dataflow idle in the step,
``first_orders``). A loop is a stage of its own (after the ordinary operators of the stage it is entered at,
before anything reading its result): the shards run its iterations together, agreeing on the next point any
of them has pending, until none has one.

An error a stage raises in one shard (a loop over its limit, a value a function cannot evaluate) travels with
the exchange that ends the stage, and every shard raises the same one, so the dataflow fails everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator

from ivm.engine.exchange import ReceiveOp, Sharding
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.operators.iterate import EnterOp, IterationLimitError, LeaveOp, LoopOp
from ivm.engine.scope import Operator, Point, Scope

__all__ = ["assign_stages", "first_orders", "run_point", "scopes", "UNKNOWN"]

UNKNOWN = -1  # ``run_point``'s first operator when the shards have not agreed on it yet
INDEX_BITS = 24  # an operator's order: (stage, loop or not) above its index in its scope
_NEXT, _ERROR = -2, -1  # what an exchanged item is when not updates for an exchange of that id
_ERRORS = {"IterationLimitError": IterationLimitError, "EvaluationError": EvaluationError}


def scopes(scope: Scope) -> Iterator[Scope]:
    yield scope
    for op in scope.operators:
        if isinstance(op, LoopOp):
            yield from scopes(op.inner)


def assign_stages(root: Scope) -> None:
    """Give every operator of the dataflow of ``root`` its stage, and order each scope's operators by
    (stage, ordinary before loops, index)."""
    df = root.dataflow
    stages: dict[int, int] = {}

    def stage(op: Operator) -> int:
        s = stages.get(id(op))
        if s is not None:
            return s
        if isinstance(op, LoopOp):
            enters = [o for o in op.inner.operators if isinstance(o, EnterOp)]
            s = max((stage(src) for o in enters for src in o.sources if src.scope.dataflow is df), default=0)
        else:
            s = 0
            for src in op.sources:
                if src.scope.dataflow is df:
                    s = max(s, stage(src) + isinstance(op, ReceiveOp))
            if isinstance(op, LeaveOp):
                s = max(s, stage(op.loop_scope.loop) + 1)
        stages[id(op)] = s
        return s

    for scope in scopes(root):
        for op in scope.operators:
            loop = isinstance(op, LoopOp)
            op.stage = stage(op)
            op.order = (((op.stage << 1) | loop) << INDEX_BITS) | op.index
        scope.reorder()


def _min(values: list) -> object:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def first_orders(roots: list[Scope]) -> list[int | None]:
    """The order of the first operator activated at the root point of each of ``roots`` in any shard: one
    call for them all."""
    if not roots:
        return []
    every = roots[0].dataflow.engine.sharding.transport.gather([s.next_order(()) for s in roots])
    return [_min(list(orders)) for orders in zip(*every, strict=True)]


def run_point(scope: Scope, point: Point, first: int | None = UNKNOWN) -> None:
    """Run ``point`` of ``scope`` in every shard (each calls this at once), starting from the operator of order
    ``first`` when the shards have agreed on it already."""
    sharding = scope.dataflow.engine.sharding
    try:
        if first == UNKNOWN:
            first = _min(sharding.transport.gather(scope.next_order(point)))
        while first is not None:
            stage_loop, index = first >> INDEX_BITS, first & ((1 << INDEX_BITS) - 1)
            if stage_loop & 1:
                loop = scope.operators[index]
                scope.take(loop, point)
                _run_loop(loop, point)
                first = _min(sharding.transport.gather(scope.next_order(point)))
                continue
            error = None
            try:
                scope.run_until(point, ((stage_loop | 1) << INDEX_BITS))
            except (IterationLimitError, EvaluationError) as err:
                error = err
            first = _exchange(sharding, error, scope, point)
    except (IterationLimitError, EvaluationError):
        raise  # raised in every shard at once
    except BaseException:
        sharding.transport.abort()  # the others must not wait for this shard
        raise
    finally:
        scope.end_point()


def _run_loop(loop: LoopOp, point: Point) -> None:
    """The iterations of ``loop`` at outer ``point``, in every shard, until no shard has one pending."""
    sharding = loop.scope.dataflow.engine.sharding
    n = len(point)
    while True:
        pending = [p for p in loop.inner.pending_points() if p[:n] == point]
        nxt = _min(sharding.transport.gather(min(pending) if pending else None))
        if nxt is None:
            return
        run_point(loop.inner, nxt)


def _exchange(sharding: Sharding, error: Exception | None, scope: Scope, point: Point) -> int | None:
    """End a stage: every shard gets the updates sent to it, and the stage's errors; the result is the order of
    the first operator any shard has activated at ``point`` of ``scope`` then, so that the next stage needs no
    call of its own to agree on it.

    Each shard can tell it alone for its side: the first of what it has activated itself and of the receivers
    its updates go to at ``point`` (they are the same operators in every shard, and an update delivered always
    activates its receiver). Each sends that with its updates to every shard, and every shard takes the least.
    """
    outgoing: list[list] = [[] for _ in range(sharding.count)]
    mine = scope.next_order(point)
    for op in sharding.sending:
        receiver = op.receiver
        for dest, at, rb in op.outbox:
            outgoing[dest].append((op.id, at, rb))
            if at == point and receiver.scope is scope and (mine is None or receiver.order < mine):
                mine = receiver.order
        op.outbox = []
    sharding.sending = []
    for out in outgoing:
        out.append((_NEXT, mine, None))
        if error is not None:
            out.append((_ERROR, type(error).__name__, str(error)))
    errors, orders = [], []
    for ident, at, rb in sharding.transport.exchange(outgoing):
        if ident == _NEXT:
            orders.append(at)
        elif ident == _ERROR:
            errors.append((at, rb))
        else:
            sharding.exchanges[ident].deliver(at, rb)
    if errors:
        kind, message = min(errors)
        raise _ERRORS[kind](message)
    return _min(orders)
