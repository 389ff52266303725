"""Engine-wide counters that tests and benchmarks read to check where work goes (e.g. rows sorted)."""

rows_sorted = 0


def reset() -> None:
    """Set every counter back to zero."""
    global rows_sorted
    rows_sorted = 0
