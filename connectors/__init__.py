"""Connectors: Postgres, Spark and files."""
