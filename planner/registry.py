"""The registry of arrangements: one per (collection, key) across every view of a database.

Compiling a view looks each arrangement it needs up here and imports it when another dataflow built it; what
it builds itself it enters under its own name (the owner). The database keeps the registry in step with its
relations through the methods below, never by editing entries itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ivm.engine.dataflow import Arranged
from planner.canon import arranged_form
from sql.logical import Plan, Scan, unnamed

__all__ = ["Entry", "Registry"]


@dataclass
class Entry:
    arranged: Arranged
    built_by: str


@dataclass
class Registry:
    """Arrangements by (plan with its columns unnamed, key columns), each with the dataflow that built it;
    and, per table, the columns it stores as text under codes that may not be canonical."""

    entries: dict[tuple, Entry] = field(default_factory=dict)
    stored: dict[str, frozenset[int]] = field(default_factory=dict)

    def uninterned(self, relation: str) -> frozenset[int]:
        """Positions of the columns ``relation`` stores under codes that may not be canonical."""
        return self.stored.get(relation, frozenset())

    def lookup(self, plan: Plan, key: tuple[int, ...]) -> Entry | None:
        """The arrangement of ``plan``'s collection (whatever its columns are named) by ``key``, if any."""
        k = (unnamed(plan), key)
        e = self.entries.get(k)
        if e is not None and e.arranged.trace.freed:
            del self.entries[k]
            return None
        return e

    def find(self, plan: Plan, key: tuple[int, ...]) -> Entry | None:
        """The arrangement a new view reading ``plan`` by ``key`` would import: ``plan`` is first put in the
        form arrangements are registered under (text columns in the codes the arrangement holds)."""
        return self.lookup(arranged_form(plan, key, self.uninterned), key)

    def key_of(self, relation: Scan) -> tuple[int, ...]:
        """The key of a relation's own arrangement (a table's primary key or all its columns; a view's
        group columns or all its columns)."""
        scan = unnamed(relation)
        for plan, key in self.entries:
            if plan == scan:
                return key
        raise KeyError(relation.table)

    def add(self, plan: Plan, key: tuple[int, ...], arranged: Arranged, owner: str) -> None:
        self.entries[(unnamed(plan), key)] = Entry(arranged, owner)

    def add_table(self, table: Scan, key: tuple[int, ...], arranged: Arranged, stored: frozenset[int]) -> None:
        """A table's own arrangement, by ``key``; ``stored`` are the columns it keeps text uninterned in."""
        self.add(table, key, arranged, "tables")
        self.stored[table.table] = stored

    def forget(self, owner: str) -> None:
        """Every arrangement ``owner`` built goes (its dataflow was dropped)."""
        self.entries = {k: e for k, e in self.entries.items() if e.built_by != owner}

    def drop_relation(self, name: str) -> None:
        """Relation ``name`` goes: its own arrangement is no longer found under its name (what its dataflow
        built stays for the views that read it, until their owner is forgotten)."""
        self.entries = {
            k: e for k, e in self.entries.items() if not (isinstance(k[0], Scan) and k[0].table == name)
        }
        self.stored.pop(name, None)

    def retire(self, owner: str, new_owner: str) -> None:
        """The arrangements ``owner`` built now belong to ``new_owner`` (a dropped view kept running for the
        views reading them, so that a new relation may take the name)."""
        for e in self.entries.values():
            if e.built_by == owner:
                e.built_by = new_owner
