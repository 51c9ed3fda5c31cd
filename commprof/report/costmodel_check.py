"""Measured vs model: wherever the report holds measured numbers (a sweep, or imported nccl-tests rows) and model
predictions of the same configurations, how far the model is from them, each axis labelled with its source
and the model's calibration. The only place the page puts the two sources side by side.

Steps pair on configuration (impl + env + options), T and mode (analysis.model_comparison); single collectives
on settings, collective, size and rank count (analysis.collective_model_comparison).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from commprof.report import analysis as an
from commprof.report.formatting import escaped, fmt_bytes, fmt_ms, fmt_pct, fmt_us, source_label

if TYPE_CHECKING:
    from commprof.report.render import RunAnalysis


@dataclass
class ModelCheck:
    """One measured run (or source) against one simulated run, on what both hold."""

    measured: RunAnalysis
    model: RunAnalysis
    kind: str  # "step" or "collective"
    mode: str | None  # steps: the mode compared
    pairs: pd.DataFrame  # analysis.model_comparison / collective_model_comparison

    @property
    def calibration(self) -> str:
        values = sorted({str(c) for c in self.pairs["calibration"].dropna()})
        return ", ".join(values) or "unknown"

    @property
    def summary(self) -> dict[str, Any]:
        return an.comparison_summary(self.pairs)


def model_checks(runs: list[RunAnalysis]) -> list[ModelCheck]:
    """Every (measured or imported, simulated) pair of runs that share configurations, steps and collectives."""
    checks = []
    models = [r for r in runs if r.source == "model"]
    for measured in (r for r in runs if r.source != "model"):
        for model in models:
            steps = an.model_comparison(measured.steps, model.steps)
            if not steps.empty:
                modes = set(steps["mode"])
                mode = measured.mode if measured.mode in modes else sorted(modes)[0]
                checks.append(
                    ModelCheck(measured, model, "step", mode, steps[steps["mode"] == mode].reset_index(drop=True))
                )
            collectives = an.collective_model_comparison(measured.collectives, model.collectives)
            if not collectives.empty:
                checks.append(ModelCheck(measured, model, "collective", None, collectives))
    return checks


def axis_labels(check: ModelCheck) -> tuple[str, str]:
    """(x, y): the measured side's source and run, the model's run and calibration, and the unit."""
    what = f"median {check.mode}-mode step time, ms" if check.kind == "step" else "median time per op, µs"
    return (
        f"{source_label(check.measured.source)}: {check.measured.name} ({what})",
        f"model: {check.model.name}, calibration {check.calibration} ({what})",
    )


def check_view(check: ModelCheck, figures) -> dict[str, Any]:
    """The template's view of one check: title, axis labels, summary line, the scatter and the ratio table."""
    x_label, y_label = axis_labels(check)
    stats = check.summary
    band = f"±{an.MODEL_BAND * 100:.0f} %"
    view: dict[str, Any] = {
        "title": (
            f"{check.measured.name} ({source_label(check.measured.source)}) vs {check.model.name} "
            f"(model, calibration {check.calibration})"
        ),
        "kind": check.kind,
        "x_label": x_label,
        "y_label": y_label,
        "band": band,
        "summary": (
            f"{stats['pairs']} {'configuration × T' if check.kind == 'step' else 'size'} pairs; median "
            f"|model − measured| {fmt_pct(stats['median_abs_error_pct'])}; "
            f"{fmt_pct(stats['within_band_pct'])} within {band}."
        ),
        "svg": figures.model_scatter_svg(
            check.pairs,
            x_label,
            y_label,
            an.MODEL_BAND,
            scale=1e-3 if check.kind == "step" else 1.0,
            group="tokens" if check.kind == "step" else "label",
        ),
    }
    if check.kind == "step":
        view.update(step_ratio_table(check.pairs))
    else:
        view["rows"] = [
            {
                "label": r.label,
                "size": fmt_bytes(r.bytes),
                "measured": fmt_us(r.measured_us),
                "model": fmt_us(r.model_us),
                "ratio": f"{r.ratio:.2f}",
                "css": _band_css(r.within_band),
            }
            for r in check.pairs.itertuples()
        ]
    return view


def step_ratio_table(pairs: pd.DataFrame) -> dict[str, Any]:
    """Configurations × T, model / measured per cell (escaped here: hundreds of rows render with autoescape off)."""
    tokens = sorted(int(t) for t in pairs["tokens"].unique())
    rows = []
    for (_config, point_id), group in pairs.groupby(["config", "point_id_measured"], sort=False):
        by_t = group.set_index("tokens")
        first = group.iloc[0]
        cells = []
        for t in tokens:
            if t not in by_t.index:
                cells.append(("—", "", ""))
                continue
            r = by_t.loc[t]
            cells.append(
                (
                    f"{r['ratio']:.2f}",
                    _band_css(r["within_band"]),
                    escaped(f"measured {fmt_ms(r['measured_us'])}, model {fmt_ms(r['model_us'])}"),
                )
            )
        rows.append(
            {
                "point": escaped(f"{point_id} {first['label']}"),
                "impl": escaped(first["impl"]),
                "settings": escaped(first["settings"]),
                "cells": cells,
            }
        )
    return {"tokens": tokens, "rows": rows}


def _band_css(within: Any) -> str:
    return "verdict-ok" if bool(within) else "verdict-warn"


def check_summary(check: ModelCheck) -> dict[str, Any]:
    """summary.json's record of one check."""
    keep = [
        c
        for c in (
            "label",
            "point_id_measured",
            "point_id_model",
            "impl",
            "settings",
            "collective",
            "bytes",
            "world_size",
            "tokens",
            "mode",
            "measured_us",
            "model_us",
            "ratio",
            "error_pct",
            "within_band",
        )
        if c in check.pairs
    ]
    return {
        "measured": check.measured.name,
        "measured_source": check.measured.source,
        "model": check.model.name,
        "calibration": check.calibration,
        "kind": check.kind,
        "mode": check.mode,
        "band": an.MODEL_BAND,
        **check.summary,
        "pairs_table": check.pairs[keep].to_dict("records"),
    }
