"""The page's view of the cost-model checks (the Decision report's): per check, axis labels naming both sources, a
summary line, the scatter and the ratio table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from commprof.report.decision.formatting import escaped, fmt_bytes, fmt_ms, fmt_pct, fmt_us
from commprof.report.decision.types import CostModelCheck
from commprof.report.views.drawing import draw


def axis_labels(check: CostModelCheck) -> tuple[str, str]:
    """(x, y): the measured side's source and run, the model's run and calibration, and the unit."""
    what = f"median {check.mode}-mode step time, ms" if check.kind == "step" else "median time per op, µs"
    return (
        f"{check.measured_label}: {check.measured} ({what})",
        f"simulated: {check.simulated}, calibration {check.calibration} ({what})",
    )


def check_view(check: CostModelCheck) -> dict[str, Any]:
    """The template's view of one check: title, axis labels, summary line, the scatter and the ratio table."""
    x_label, y_label = axis_labels(check)
    stats = check.summary
    band = f"±{check.band * 100:.0f} %"
    pairs = pd.DataFrame(check.pairs)
    view: dict[str, Any] = {
        "title": (
            f"{check.measured} ({check.measured_label}) vs {check.simulated} (simulated, calibration {check.calibration})"
        ),
        "step": check.kind == "step",
        "x_label": x_label,
        "y_label": y_label,
        "band": band,
        "summary": (
            f"{stats['pairs']} {'configuration × T' if check.kind == 'step' else 'size'} pairs; median "
            f"|model − measured| {fmt_pct(stats['median_abs_error_pct'])}; "
            f"{fmt_pct(stats['within_band_pct'])} within {band}."
        ),
        "svg": draw(
            "figures.costmodel_scatter_svg",
            pairs,
            x_label,
            y_label,
            check.band,
            scale=1e-3 if check.kind == "step" else 1.0,
            group="tokens" if check.kind == "step" else "label",
        ),
    }
    if check.kind == "step":
        view.update(step_ratio_table(pairs))
    else:
        view["rows"] = [
            {
                "label": r.label,
                "size": fmt_bytes(r.bytes),
                "measured": fmt_us(r.measured_us),
                "simulated": fmt_us(r.simulated_us),
                "ratio": f"{r.ratio:.2f}",
                "css": _band_css(r.within_band),
            }
            for r in pairs.itertuples()
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
                    escaped(f"measured {fmt_ms(r['measured_us'])}, model {fmt_ms(r['simulated_us'])}"),
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
