"""Runs set side by side: each measured run against each simulated one on what both hold (costmodel_checks), and
why several runs' steps cannot be compared (incomparable). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from commprof.report.analysis import costmodel_check as cc
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.types import CostModelCheck as CheckFacts


@dataclass
class CostModelCheck:
    """One measured run (or source) against one simulated run, on what both hold."""

    measured: RunAnalysis
    simulated: RunAnalysis
    kind: str  # "step" or "collective"
    mode: str | None  # steps: the mode compared
    pairs: pd.DataFrame  # step_comparison / collective_comparison

    @property
    def calibration(self) -> str:
        values = sorted({str(c) for c in self.pairs["calibration"].dropna()})
        return ", ".join(values) or "unknown"

    @property
    def summary(self) -> dict[str, Any]:
        return cc.comparison_summary(self.pairs)


def step_shape(run: RunAnalysis) -> tuple[str, str, str] | None:
    """(model, TP, phase) of the step a run replays; None for a run without step records."""
    if run.steps.empty:
        return None

    def first(column: str) -> str:
        values = run.steps[column].dropna() if column in run.steps else pd.Series(dtype=object)
        return str(values.iloc[0]) if not values.empty else "?"

    return first("model"), first("tp"), first("phase")


def incomparable(runs: list[RunAnalysis]) -> str | None:
    """Why these runs' steps cannot be set side by side (different model, TP or phase), or None."""
    shapes = {r.name: step_shape(r) for r in runs if step_shape(r) is not None}
    if len(set(shapes.values())) <= 1:
        return None
    described = "; ".join(f"{name}: {m}, TP {tp}, {phase}" for name, (m, tp, phase) in shapes.items())
    return (
        f"these runs replay different steps ({described}): their step times are not comparable, and no "
        "measured-vs-model check is made across them"
    )


def costmodel_checks(runs: list[RunAnalysis]) -> list[CostModelCheck]:
    """Every (measured or imported, simulated) pair of runs that share configurations, steps (of the same model,
    TP and phase) and collectives."""
    checks = []
    simulated_runs = [r for r in runs if r.simulated]
    for measured in (r for r in runs if not r.simulated):
        for simulated in simulated_runs:
            same_step = step_shape(measured) == step_shape(simulated)
            steps = cc.step_comparison(measured.steps, simulated.steps) if same_step else pd.DataFrame()
            if not steps.empty:
                modes = set(steps["mode"])
                mode = measured.mode if measured.mode in modes else sorted(modes)[0]
                checks.append(
                    CostModelCheck(
                        measured, simulated, "step", mode, steps[steps["mode"] == mode].reset_index(drop=True)
                    )
                )
            collectives = cc.collective_comparison(measured.collectives, simulated.collectives)
            if not collectives.empty:
                checks.append(CostModelCheck(measured, simulated, "collective", None, collectives))
    return checks


def check_facts(check: CostModelCheck) -> CheckFacts:
    """One check as the Decision's report holds it: both runs named, its summary and every pair."""
    keep = [c for c in check.pairs.columns if c not in ("env", "options", "kernel_model", "nccl")]
    pairs = check.pairs[keep].astype(object).where(check.pairs[keep].notna(), None)
    return CheckFacts(
        measured=check.measured.name,
        measured_source=check.measured.source,
        measured_label=check.measured.evidence.label,
        simulated=check.simulated.name,
        calibration=check.calibration,
        kind=check.kind,
        mode=check.mode,
        band=cc.PREDICTION_BAND,
        summary={k: (v if v == v else None) for k, v in check.summary.items()},
        pairs=pairs.to_dict("records"),
    )
