"""Logical plan to differential dataflow: arrangements, sharing, recursion, EXPLAIN."""
