"""Benchmarks of the engine (``python -m ivm.bench``) and of recursive views
(``python -m ivm.bench recursion``)."""
