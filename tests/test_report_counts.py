"""Counts stay integers in every file: results.csv and the page's failed points never say "8.0" or "T=1.0"."""

from __future__ import annotations

import pandas as pd

from commprof.report.analysis.frame import failures
from commprof.report.exports.files import results_csv


def _frame() -> pd.DataFrame:
    # A step record beside a single-collective record that has no step counts: pandas makes the columns float.
    return pd.DataFrame(
        {
            "kind": ["step", "collective"],
            "point_id": ["p025", "p001"],
            "status": ["crashed", "ok"],
            "mode": ["eager", "eager"],
            "tp": [8.0, None],
            "tokens": [1.0, None],
            "hidden_size": [7168.0, None],
            "time_us": [None, 12.5],
        }
    )


def test_results_csv_writes_counts_as_integers():
    text = results_csv(_frame())
    step = text.splitlines()[1]
    assert ",8,1,7168," in step and "8.0" not in step and "7168.0" not in step
    assert "12.5" in text.splitlines()[2]


def test_failed_points_say_whole_t():
    bad = failures(_frame())
    (row,) = bad.itertuples()
    assert f"{row.point_id} T={row.tokens} {row.mode}" == "p025 T=1 eager"
