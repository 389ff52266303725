"""TPC-H schema, queries, data and refresh streams, benchmark harness."""
