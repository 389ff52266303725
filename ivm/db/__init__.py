"""The embedded database: the PEP 249 connection and cursors, DDL, DML, transactions, constraints, Arrow and
COPY in and out, subscriptions and introspection, over the planner and the engine."""
