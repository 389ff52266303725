"""Postgres CDC sidecar: a snapshot and logical replication in, views maintained by ivm, Postgres tables out.

Run it with ``ivm sidecar --source DSN --views FILE`` (see ``sidecar.main``), or from Python with
``Sidecar(source_dsn, views_sql).run()``.
"""

from connectors.postgres.sidecar import Sidecar, main

__all__ = ["Sidecar", "main"]
