"""Summary statistics of latency samples, the same for every stage that reports a latency."""

from __future__ import annotations

import math
from collections.abc import Sequence

STAT_FIELDS = ("n", "min", "median", "mean", "p90", "p99", "cv")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already-sorted values; q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """n, min, median, mean, p90, p99 and coefficient of variation (population std / mean) of samples."""
    values = sorted(float(v) for v in samples)
    if not values:
        raise ValueError("summary of no samples")
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    return {
        "n": n,
        "min": values[0],
        "median": percentile(values, 50),
        "mean": mean,
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "cv": std / mean if mean else 0.0,
    }


def summarize_columns(rows: Sequence[Sequence[float]]) -> dict[str, list[float]]:
    """Column-wise summaries of a [samples x columns] table, columnar: {"median": [...], ...}."""
    columns = list(zip(*rows))
    summaries = [summarize(column) for column in columns]
    return {field: [s[field] for s in summaries] for field in STAT_FIELDS if field != "n"}
