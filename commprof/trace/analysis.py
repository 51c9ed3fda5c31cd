"""The front door over the pure analyses: traces in, one step's account out (collectives, time, overlap, skew)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from commprof.planner.plan import StepPlan
from commprof.trace.collectives import find_collectives
from commprof.trace.events import Trace
from commprof.trace.kernels import engaged_kernels, kernel_groups
from commprof.trace.plan_check import compare_with_plan
from commprof.trace.steps import (
    arrival_lags,
    assign_steps,
    compute_overlap,
    gaps_per_position,
    op_table,
    rank_skew,
    step_times,
    typical_step,
)


class TraceAnalysis:
    """Every rank's collectives, cut into steps; `account()` gives what one typical step costs."""

    def __init__(self, traces: list[Trace]):
        self.traces = traces
        self.collectives: dict[int, pd.DataFrame] = {}
        self.stepped: dict[int, pd.DataFrame] = {}
        self.found_by: dict[int, str] = {}
        for trace in traces:
            found = find_collectives(trace)
            self.collectives[trace.rank] = found
            self.stepped[trace.rank], self.found_by[trace.rank] = assign_steps(found, trace.events)
        self.reference = traces[0].rank
        self.engaged = engaged_kernels(next(t for t in traces if t.rank == self.reference))
        self.step, self.same_steps, self.other_steps = typical_step(self.stepped[self.reference])

    def account(self, plan: StepPlan | None = None) -> dict[str, Any]:
        """The JSON `commprof trace --json` prints."""
        ref = self.stepped[self.reference]
        table = op_table(ref, self.same_steps)
        times = step_times(ref, self.same_steps)
        overlap = {}
        for trace in self.traces:
            ops = self.stepped[trace.rank]
            overlap[trace.rank] = compute_overlap(ops[ops["step"].isin(self.same_steps)], trace.events)
        result: dict[str, Any] = {
            "traces": [t.describe() for t in self.traces],
            "collectives_found": {rank: len(c) for rank, c in self.collectives.items()},
            "steps": {
                "found_by": self.found_by[self.reference],
                "count": len(self.same_steps) + len(self.other_steps),
                "alike": len(self.same_steps),
                "differing": len(self.other_steps),
                "collectives_per_step": len(self.step),
                "reference_rank": self.reference,
            },
            "step": {
                "collectives": _records(table),
                "comm_us_median": _median(times, "comm_us"),
                "span_us_median": _median(times, "span_us"),
            },
            "overlap_pct": overlap,
            "skew": rank_skew(self.stepped, self.same_steps),
            # The step's compute and late ranks, as [run] compute / skew = "trace:<this JSON>" replay them.
            "gaps_us": gaps_per_position(ref, self.same_steps),
            "arrival_lag_us": arrival_lags(self.stepped, self.same_steps),
            # Which implementation ran each communication kernel, per op group (commprof.trace.kernels).
            "kernels": kernel_groups(self.engaged),
        }
        if plan is not None:
            groups = {int(g) for g in ref["group_size"].dropna().unique()}
            result.update(compare_with_plan(self.step, plan, groups))
        return result


def _median(frame: pd.DataFrame, column: str) -> float | None:
    return float(frame[column].median()) if len(frame) else None


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in table.to_dict("records"):
        out.append(
            {
                "kind": row["kind"],
                "bytes_in": None if pd.isna(row["bytes_in"]) else int(row["bytes_in"]),
                "bytes_out": None if pd.isna(row["bytes_out"]) else int(row["bytes_out"]),
                # a size that changes from step to step: bytes_out is its smallest, bytes_out_max its largest
                "bytes_out_max": None if pd.isna(row["bytes_max"]) else int(row["bytes_max"]),
                "dtype": row["dtype"],
                "per_step": int(row["per_step"]),
                "median_us": float(row["median_us"]),
                "p90_us": float(row["p90_us"]),
            }
        )
    return out
