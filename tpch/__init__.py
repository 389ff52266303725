"""TPC-H schema, the 22 queries, data and refresh-stream generation, and the benchmark harness."""

from pathlib import Path

SCHEMA = (Path(__file__).parent / "schema.sql").read_text()
