"""The sweep's axes (impl and each NCCL variable it varies), how much each moves the step time, and the heatmap
pivots over the strongest two."""

from __future__ import annotations

import math

import pandas as pd

from commprof.report.analysis.frame import ok_rows
from commprof.report.decision.formatting import ENV_PREFIX

DEFAULT_ENV_VALUE = "(default)"


def varying_axes(steps: pd.DataFrame) -> list[str]:
    """The sweep's axes: env columns and impl that take more than one value among unfused points."""
    unfused = steps[~steps["fused_rmsnorm"]]
    axes = []
    for column in ["impl"] + [c for c in steps.columns if c.startswith(ENV_PREFIX)]:
        if axis_values(unfused, column).nunique() > 1:
            axes.append(column)
    return axes


def axis_values(steps: pd.DataFrame, axis: str) -> pd.Series:
    """An axis column with "not set" spelled out (the point keeps NCCL's default)."""
    return steps[axis].astype(object).where(steps[axis].notna(), DEFAULT_ENV_VALUE).astype(str)


def axis_strength(steps: pd.DataFrame, mode: str, axes: list[str]) -> pd.Series:
    """Per axis: spread (max − min) of the per-value median step time, relative to the T's median, averaged over T."""
    rows = ok_rows(steps, mode)
    rows = rows[~rows["fused_rmsnorm"]]
    middle = rows.groupby("tokens")["median_us"].median()
    strength = {}
    for axis in axes:
        by_value = rows.groupby([rows["tokens"], axis_values(rows, axis)])["median_us"].median()
        per_tokens = by_value.groupby(level=0)
        spread = (per_tokens.max() - per_tokens.min()) / middle
        spread = spread[(per_tokens.size() > 1) & (middle > 0)]
        strength[axis] = float(spread.mean()) if not spread.empty else 0.0
    return pd.Series(strength, dtype=float).sort_values(ascending=False, kind="stable")


def strongest_axes(steps: pd.DataFrame, mode: str, count: int = 2) -> list[str]:
    """The `count` axes whose values move the step time most."""
    axes = varying_axes(steps)
    return list(axis_strength(steps, mode, axes).index[:count]) if axes else []


def heatmap_pivot(
    steps: pd.DataFrame, tokens: int, mode: str, rows_axis: str, columns_axis: str | None
) -> pd.DataFrame:
    """Best (min over the other axes) ok step time in µs per (rows_axis value, columns_axis value) at T: every
    value of each axis at T, in order (NaN where none of its points is ok).

    The minima taken in one pass over the rows (a pivot_table per T was most of a small run's heatmaps)."""
    at = steps[(steps["tokens"] == tokens) & ~steps["fused_rmsnorm"]]
    if at.empty:
        return pd.DataFrame()
    rows = axis_values(at, rows_axis).tolist()
    columns = axis_values(at, columns_axis).tolist() if columns_axis else ["all"] * len(rows)
    times = at["median_us"].where((at["status"] == "ok") & (at["mode"] == mode)).tolist()
    best: dict[tuple[str, str], float] = {}
    for cell, time in zip(zip(rows, columns), times):
        if not math.isnan(time) and not best.get(cell, math.inf) <= time:
            best[cell] = time
    row_values, column_values = sorted(set(rows)), sorted(set(columns))
    return pd.DataFrame(
        [[best.get((row, column), math.nan) for column in column_values] for row in row_values],
        index=pd.Index(row_values, name="row"),
        columns=pd.Index(column_values, name="column"),
        dtype=float,
    )


def heatmaps(
    family: pd.DataFrame, untested: list[str], tokens: list[int], mode: str, axes: list[str]
) -> list[tuple[int, pd.DataFrame, pd.DataFrame]]:
    """Per T of `tokens`, over the baseline's implementation's records (`family`): the pivot over the strongest
    axes of every point, and of the ranked ones only (without the `untested` points; shaped like the first)."""
    rows_axis, columns_axis = axes[0], (axes[1] if len(axes) > 1 else None)
    read = ("point_id", "tokens", "fused_rmsnorm", "status", "mode", "median_us", rows_axis, columns_axis)
    family = family[list(dict.fromkeys(c for c in read if c))]  # each T's selection copies these columns alone
    ranked = family[~family["point_id"].isin(untested)] if untested and not family.empty else family
    out = []
    for t in tokens:
        every = heatmap_pivot(family, t, mode, rows_axis, columns_axis)
        ranked_only = heatmap_pivot(ranked, t, mode, rows_axis, columns_axis) if untested else every
        out.append((t, every, ranked_only.reindex_like(every)))
    return out
