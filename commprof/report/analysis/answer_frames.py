"""The per-T tables of the answer (a) chose: baseline against the best per T (the headline), table 1's choices and
the other implementations that are (b). decide() builds them once from the point whose NCCL environment (a) exports;
nothing builds them before it has chosen. Pure."""

from __future__ import annotations

import pandas as pd

from commprof.report.analysis import choices as ch
from commprof.report.analysis import ranking as rk
from commprof.report.analysis.run_analysis import RunAnalysis


def answer_frames(run: RunAnalysis, point: str | None) -> dict[str, pd.DataFrame]:
    """The headline, choices and alternatives of the answer whose NCCL environment is `point`'s (None: nothing
    passed and the baseline's is kept)."""
    if run.steps.empty or run.baseline is None:
        return {}
    ranked = run.ok_ranked
    family, evidence = run.baseline_family, run.evidence
    return {
        "headline": rk.headline(ranked, run.baseline, run.mode, evidence, point, family),
        "choices": ch.choices_per_tokens(ranked, run.baseline, run.mode, evidence, point, family),
        "alternatives": ch.alternatives(ranked, point or run.baseline, run.mode, evidence, family),
    }
