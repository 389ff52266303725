"""Benchmarks of the engine (``python -m ivm.bench``), of recursive views (``python -m ivm.bench recursion``)
and of SQL views (``python -m ivm.bench sql``)."""
