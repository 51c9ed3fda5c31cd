"""Measured vs simulated: wherever the report holds measured numbers (a sweep, or imported nccl-tests rows) and
cost-model predictions of the same configurations, how far the predictions are from them.

Steps pair on configuration (impl + env + options), T and mode (step_comparison); single collectives on settings,
collective, size and rank count (collective_comparison). Pure: DataFrames in, DataFrames out; which runs are set
against which: compared.costmodel_checks.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from commprof.report.analysis.frame import ok_rows

# A prediction counts as close when within ±15 % of the measurement (the cost model's target, docs/cost-model.md).
PREDICTION_BAND = 0.15
COMPARISON_COLUMNS = [
    "label",
    "tokens",
    "mode",
    "measured_us",
    "simulated_us",
    "ratio",
    "error_pct",
    "within_band",
    "calibration",
]


def step_comparison(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """Step records of the same configuration (impl + env + options), T and mode in both frames: measured and
    modelled median step time (µs), ratio model / measured, error % and whether it is within PREDICTION_BAND."""
    keys = ["config", "tokens", "mode"]
    left = ok_rows(measured).drop_duplicates(keys)
    right = ok_rows(simulated).drop_duplicates(keys)
    if left.empty or right.empty:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    both = left[keys + ["point_id", "label", "impl", "settings", "median_us"]].merge(
        right[keys + ["point_id", "median_us", "calibration"]], on=keys, suffixes=("_measured", "_simulated")
    )
    both = both.rename(columns={"median_us_measured": "measured_us", "median_us_simulated": "simulated_us"})
    return _with_errors(both).sort_values(["mode", "tokens", "measured_us"], ignore_index=True)


def collective_comparison(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """Single collectives of the same settings, kind, size and rank count in both frames (nccl-tests imports or
    measured ops vs the cost model's predictions): median time over the rows of each (in / out of place, repeats), µs."""
    keys = ["settings", "collective", "bytes", "world_size"]
    sides = []
    for frame in (measured, simulated):
        ok = frame[(frame["status"] == "ok") & frame["time_us"].notna()] if not frame.empty else frame
        if ok.empty:
            return pd.DataFrame(columns=COMPARISON_COLUMNS)
        grouped = ok.groupby(keys, sort=True)
        sides.append(
            pd.DataFrame(
                {
                    "median_us": grouped["time_us"].median(),
                    "point_id": grouped["point_id"].first(),
                    "calibration": grouped["calibration"].first(),
                }
            ).reset_index()
        )
    both = sides[0].drop(columns="calibration").merge(sides[1], on=keys, suffixes=("_measured", "_simulated"))
    both = both.rename(columns={"median_us_measured": "measured_us", "median_us_simulated": "simulated_us"})
    both["label"] = both["collective"] + " x" + both["world_size"].astype(int).astype(str)
    return _with_errors(both).sort_values(["collective", "world_size", "bytes"], ignore_index=True)


def _with_errors(both: pd.DataFrame) -> pd.DataFrame:
    both["ratio"] = both["simulated_us"] / both["measured_us"]
    both["error_pct"] = 100.0 * (both["ratio"] - 1.0)
    both["within_band"] = (both["ratio"] - 1.0).abs() <= PREDICTION_BAND
    return both


def comparison_summary(both: pd.DataFrame) -> dict[str, Any]:
    """How far the model is from the measurements: pairs, median |error| %, share within PREDICTION_BAND."""
    if both.empty:
        return {"pairs": 0, "median_abs_error_pct": math.nan, "within_band_pct": math.nan}
    return {
        "pairs": int(len(both)),
        "median_abs_error_pct": float(both["error_pct"].abs().median()),
        "within_band_pct": float(100.0 * both["within_band"].mean()),
    }
