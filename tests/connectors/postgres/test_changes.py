"""A table's decoded changes to engine changes, without a server: unsent TOASTed values are filled from the
row's latest version, in the same transaction when it wrote one, else from the engine."""

import ivm
from connectors.postgres._catalog import SourceTable
from connectors.postgres._changes import TableFeed
from connectors.postgres._pgoutput import RelationChanges
from connectors.postgres._types import pg_type


def _update(ch: RelationChanges, values: list) -> None:
    """An update event (no old tuple: the key did not change); ``...`` marks an unsent TOASTed value."""
    ch.ops.append(ord("U"))
    ch.has_old.append(False)
    ch.has_new.append(True)
    for j, v in enumerate(values):
        ch.old[j].append(None)
        ch.new[j].append(None if v is ... else str(v).encode())
        if v is ...:
            ch.unchanged.append((len(ch.ops) - 1, j))


def test_unsent_toasted_values_come_from_the_rows_latest_version():
    table = SourceTable(
        "public",
        "toast",
        1,
        [
            ("id", pg_type(23, -1, "integer"), True),
            ("n", pg_type(23, -1, "integer"), False),
            ("payload", pg_type(25, -1, "text"), False),
        ],
        ["id"],
        "d",
    )
    db = ivm.connect()
    db.execute(table.engine_ddl())
    db.execute("""INSERT INTO "public.toast" VALUES (1, 1, 'committed'), (2, 2, 'kept')""")
    feed = TableFeed(table)
    ch = RelationChanges(3)
    _update(ch, [1, 10, "written in this transaction"])
    _update(ch, [1, 11, ...])  # unsent: the value written just before, not the committed one
    _update(ch, [1, 12, ...])  # unsent again: still that value
    _update(ch, [2, 20, ...])  # unsent, row untouched before: the committed value
    rows, diff, tx = feed.changes(db, [(0, ch)])
    got = sorted(zip(rows.to_pylist(), diff.tolist(), strict=True), key=lambda r: (r[1], r[0]["id"]))
    assert got == [
        ({"id": 1, "n": 1, "payload": "committed"}, -1),
        ({"id": 2, "n": 2, "payload": "kept"}, -1),
        ({"id": 1, "n": 12, "payload": "written in this transaction"}, 1),
        ({"id": 2, "n": 20, "payload": "kept"}, 1),
    ]
    assert set(tx.tolist()) == {0}
