"""The per-T tables of the answer the Decision chose: baseline against the best per T (the headline), table 1's
choices, the other implementations that are (b), and the breakdown and projection built on them. decide() builds
them once from the point whose NCCL environment (a) exports; nothing builds them before it has chosen. Pure."""

from __future__ import annotations

from typing import Any

import pandas as pd

from commprof.report.analysis import choices as ch
from commprof.report.analysis import ranking as rk
from commprof.report.analysis.frame import ok_rows
from commprof.report.analysis.projection import ShownPoints, breakdown, projection
from commprof.report.analysis.run_analysis import RunAnalysis


def answer_frames(run: RunAnalysis, point: str | None) -> dict[str, pd.DataFrame]:
    """The RunAnalysis tables (headline, choices, alternatives, breakdown, projection) of the answer whose NCCL
    environment is `point`'s (None: nothing passed and the baseline's is kept)."""
    if run.steps.empty or run.baseline is None:
        return {}
    ranked = ok_rows(run.rankable, run.mode)
    family, evidence = run.baseline_family, run.evidence
    head = rk.headline(ranked, run.baseline, run.mode, evidence, point, family)
    out: dict[str, Any] = {
        "headline": head,
        "choices": ch.choices_per_tokens(ranked, run.baseline, run.mode, evidence, point, family),
        "alternatives": ch.alternatives(ranked, point or run.baseline, run.mode, evidence, family),
    }
    if not head.empty:
        shown = ShownPoints(run.baseline, point or run.baseline)
        parts = breakdown(run.steps, head, shown, run.options.compute, mode=run.mode)
        out["breakdown"] = parts
        out["projection"] = projection(parts, run.options.draft_ms or 0.0, run.options.accepts, evidence)
    return out
