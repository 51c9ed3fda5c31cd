"""The run's per-T tables restated on its decision: beside the baseline and (a), the breakdown and the projection
show the point the answer runs at each T ("answer"), never a fastest point the answer did not choose, and only what
its files set live: where they leave an engine switch commented out, the answer's row is the NCCL environment it
sets (the baseline's when it keeps it). Pure."""

from __future__ import annotations

import math
from dataclasses import replace

from commprof.report.analysis.decision import Decision
from commprof.report.analysis.frame import ok_rows
from commprof.report.analysis.projection import ShownPoints, breakdown, projection
from commprof.report.analysis.run_analysis import RunAnalysis


def answered(run: RunAnalysis, decision: Decision) -> RunAnalysis:
    """`run` with its headline carrying the decision's point per T (answer_point_id, answer_us) and its breakdown
    and projection built on it: the one answer every table and card below the first screen names."""
    if run.headline.empty:
        return run
    head = run.headline.copy()
    rows = ok_rows(run.steps, run.mode).drop_duplicates(["source", "point_id", "tokens"])
    times = rows.set_index(["source", "point_id", "tokens"])["median_us"]
    # The rows labelled the answer run what its files set live; route_point_id is the point its routes name (the
    # one table 1 marks (b)), which differs where the engine switch is left commented out.
    head["route_point_id"] = [decision.answer_point(int(t), run.mode) for t in head["tokens"]]
    points = [decision.live_point(int(t), run.mode) for t in head["tokens"]]
    head["answer_point_id"] = points
    head["answer_us"] = [
        times.get((source, point, tokens), math.nan) if point is not None else math.nan
        for source, point, tokens in zip(head["source"], points, head["tokens"])
    ]
    shown = ShownPoints(run.baseline, run.reference, "answer")
    parts = breakdown(run.steps, head, shown, run.options.compute, mode=run.mode)
    spec = projection(parts, run.options.draft_ms or 0.0, run.options.accepts, run.evidence)
    # An observation the model does not explain withdraws every predicted break-even.
    if not spec.empty and decision.unconfirmed and run.evidence.simulated:
        verdicts = [c for c in spec.columns if c.startswith("verdict_at_")]
        spec = spec.assign(withdrawn=True, **{c: "within" for c in verdicts})
    return replace(run, headline=head, breakdown=parts, projection=spec)
