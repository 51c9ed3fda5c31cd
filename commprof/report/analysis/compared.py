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


# What the records say of the step a run replays (the frame's columns), each with its name in words. Two runs replay
# the same step where every one both record is equal: the same collectives of the same sizes. The model's name is
# a label (a preset "kimi-k2.5", a config folder "Kimi-K2.5"): compared, case-folded, only where a run does not
# record the plan's shape (hidden size and layers).
STEP_FIELDS = {
    "tp": "TP",
    "phase": "phase",
    "dtype": "dtype",
    "hidden_size": "hidden size",
    "num_layers": "layers",
    "architecture": "architecture",
    "all_reduce_count": "all-reduces per step",
    "all_gather_count": "all-gathers per step",
    "dp_attention": "DP attention",
    "spec": "speculative method",
    "num_steps": "draft steps",
}
SHAPE = ("hidden_size", "num_layers")


def step_shape(run: RunAnalysis) -> dict[str, str] | None:
    """What the records say of the step a run replays, by frame column (the model's name too), each as written;
    None for a run without step records."""
    if run.steps.empty:
        return None
    shape = {}
    for column in ("model", *STEP_FIELDS):
        values = run.steps[column].dropna() if column in run.steps else pd.Series(dtype=object)
        if not values.empty:
            shape[column] = _text(values.iloc[0])
    return shape


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _compared(shapes: list[dict[str, str]]) -> list[str]:
    """The fields these shapes are compared on: those every one records, the model's name where one lacks the
    plan's shape."""
    fields = [f for f in STEP_FIELDS if all(f in shape for shape in shapes)]
    return fields if set(SHAPE) <= set(fields) else [*fields, "model"]


def same_step(a: dict[str, str] | None, b: dict[str, str] | None) -> bool:
    """Whether two runs' shapes (step_shape) are the same replayed step."""
    if a is None or b is None:
        return a is b
    return all(a.get(f, "").casefold() == b.get(f, "").casefold() for f in _compared([a, b]))


def incomparable(runs: list[RunAnalysis]) -> str | None:
    """Why these runs' steps cannot be set side by side: each field that differs, with every run's value ("TP 8 in
    a, TP 4 in b"); or None."""
    shapes = {r.name: shape for r in runs if (shape := step_shape(r)) is not None}
    if all(same_step(a, b) for a in shapes.values() for b in shapes.values()):
        return None
    fields = _compared(list(shapes.values()))
    differ = [f for f in fields if len({shape.get(f, "").casefold() for shape in shapes.values()}) > 1]
    described = "; ".join(
        ", ".join(f"{STEP_FIELDS.get(f, f)} {shape.get(f, 'not recorded')} in {name}" for name, shape in shapes.items())
        for f in differ
    )
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
            same = same_step(step_shape(measured), step_shape(simulated))
            steps = cc.step_comparison(measured.steps, simulated.steps) if same else pd.DataFrame()
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
