"""Dataflow operators: each consumes whole batches at a point and emits whole batches."""
