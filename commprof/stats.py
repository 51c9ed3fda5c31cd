"""Summary statistics of latency samples, the same for every stage that reports a latency, and the one word
for each: every output names a statistic through `tail` / `tail_word` and takes medians from `median`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

STAT_FIELDS = ("n", "min", "median", "mean", "p90", "p99", "max", "cv")
# Below this many samples the 99th percentile is (about) the largest one: it is shown as "max of n" instead.
P99_MIN_SAMPLES = 100


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already-sorted values; q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    """The median: the middle value, or the mean of the two middle values of an even count."""
    return percentile(sorted(float(v) for v in values), 50)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """n, min, median, mean, p90, max, coefficient of variation (population std / mean) and, from
    P99_MIN_SAMPLES samples on, p99."""
    values = sorted(float(v) for v in samples)
    if not values:
        raise ValueError("summary of no samples")
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    out = {
        "n": n,
        "min": values[0],
        "median": percentile(values, 50),
        "mean": mean,
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": values[-1],
        "cv": std / mean if mean else 0.0,
    }
    if n < P99_MIN_SAMPLES:
        del out["p99"]
    return out


def summarize_columns(rows: Sequence[Sequence[float]]) -> dict[str, list[float]]:
    """Column-wise summaries of a [samples x columns] table, columnar: {"median": [...], ...}."""
    columns = list(zip(*rows))
    summaries = [summarize(column) for column in columns]
    return {field: [s[field] for s in summaries] for field in STAT_FIELDS if field != "n" and field in summaries[0]}


def tail_word(n: int) -> str:
    """The word for the slow tail of n samples: "p99" from P99_MIN_SAMPLES samples on, else "max of n"."""
    return "p99" if n >= P99_MIN_SAMPLES else f"max of {n}"


def tail(stats: Mapping, n: int | None = None) -> tuple[str, float | None]:
    """A summary's slow tail and its word (tail_word); `n` where the summary holds none (per-op columns). None: a
    record written before `max` was kept has no tail of fewer than P99_MIN_SAMPLES samples."""
    count = int(stats.get("n") or 0) if n is None else int(n)
    word = tail_word(count)
    value = stats.get("p99" if word == "p99" else "max")
    return word, value
