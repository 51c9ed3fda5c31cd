"""summary.json: the headline numbers of each run and each cost-model check, machine-readable."""

from __future__ import annotations

from typing import Any

import pandas as pd

from commprof.records.run_meta import meta_view
from commprof.report.analysis.compared import CostModelCheck
from commprof.report.analysis.costmodel_check import PREDICTION_BAND
from commprof.report.analysis.decision import decided_fusion
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import not_a_result_notes, spec_label
from commprof.report.exports.engine_hints import hints_as_dicts
from commprof.report.exports.files import RunExports


def summary(run: RunAnalysis, exports: RunExports) -> dict[str, Any]:
    """The headline numbers, machine-readable (summary.json)."""
    decision = exports.decision
    routing = decision.routing
    answer = decision.nccl_answer
    point = answer.point if answer is not None else None
    fastest = answer.fastest if answer is not None else None
    return {
        "run_id": run.run_id,
        "name": run.name,
        "source": run.source,
        "evidence": run.evidence.to_dict(),
        "simulated": run.simulated,
        # null where no sweep planned the run, or its plan was not recorded
        "complete": run.completeness.complete if run.completeness and run.completeness.plan_known else None,
        "progress": run.completeness.summary() if run.completeness is not None else None,
        "shared_gpus": run.shared_gpus,
        "not_a_tuning_result": not_a_result_notes(run),
        "baseline_drift": run.drift.to_dict() if run.drift is not None else None,
        "interleaved": run.interleaved.to_dict() if run.interleaved is not None else None,
        "spacing": run.spacing,
        "mode": run.mode if not run.steps.empty else None,
        "mode_note": run.mode_reason,
        "baseline_point_id": run.baseline,
        "model": _first_value(run.steps, "model"),
        "tp": _first_value(run.steps, "tp"),
        "world_size": run.meta_view.world_size,
        "records": len(run.frame),
        "status_counts": run.status_counts,
        "failed": run.failed_count,
        "all_failed": run.all_failed,
        "headline": _rows(run, run.headline),
        "fusion": decided_fusion(run.fusion, decision, run.mode).to_dict("records") if not run.fusion.empty else [],
        "beyond_uncertainty": {"beyond error": True, "inside error": False}.get(answer.verdict)
        if answer is not None
        else None,
        "rule": run.evidence.rule,
        "apply": {
            "file": exports.plan.choice,
            "why": exports.plan.why,
            "alternative": exports.plan.alternative,
            "tuner_rules": [rule.csv() for rule in exports.plan.rules],
            "sizes": {k: list(v) for k, v in exports.plan.ranges.items()},
        },
        "recommended": None
        if point is None
        else {
            "point_id": point["point_id"],
            "label": point["label"],
            "impl": point["impl"],
            "env": point["env"],
            "total_us": point.get("total_us"),
            "keeps_baseline": answer.keeps_baseline,
            "dropped": list(answer.dropped),
            "withheld": answer.withheld,
        },
        "fastest": None
        if fastest is None
        else {
            "point_id": fastest["point_id"],
            "label": fastest["label"],
            "impl": fastest["impl"],
            "env": fastest["env"],
            "total_us": fastest["total_us"],
            "p90_total_us": fastest.get("p90_total_us"),
            "tokens": fastest.get("tokens_covered"),
        },
        "baseline_total_us": answer.baseline_total_us if answer is not None else None,
        "choices": _rows(run, run.choices.drop(columns=["env"]) if not run.choices.empty else run.choices),
        "alternatives": run.alternatives.to_dict("records") if not run.alternatives.empty else [],
        "without_result": run.without_result.to_dict("records") if not run.without_result.empty else [],
        "remeasured": run.superseded,
        "compute_ms": run.options.compute.describe(),
        "draft_ms": run.options.draft_ms,
        "accepts": list(run.options.accepts),
        "projection_label": spec_label(run) if not run.projection.empty else None,
        "projection": run.projection.to_dict("records") if not run.projection.empty else [],
        "decision": decision.to_dict(),
        "routing": routing.get("bands", []),
        "routing_floor": {"ranks": routing.get("ranks"), "figures": routing.get("floor")} if routing else None,
        "routing_rules": routing.get("rules", {}),
        "routing_gaps": routing.get("gaps", []),
        "routing_curves": routing.get("curves", []),
        "crossovers": run.crossovers,
        "engine_hints": hints_as_dicts(exports.hints),
        "files": exports.files,
        "observed": run.observed,
        "box": box_transports(run.meta),
    }


def box_transports(meta: dict) -> dict[str, Any] | None:
    """A run simulated from a doctor bundle: per GPU pair, its transport under each P2P setting and where that
    comes from (the bundle's line and NCCL's rule, or the NCCL log's line), as meta.json records it."""
    topology = meta_view(meta).topology or {}
    box = topology.get("box")
    if not isinstance(box, dict):
        return None
    return {
        "origin": box.get("origin"),
        "nccl_log": box.get("nccl_log"),
        "transport_rule": box.get("transport_rule"),
        "pairs": box.get("pairs", []),
        "assumptions": box.get("assumptions", []),
    }


def _first_value(frame: pd.DataFrame, column: str) -> Any:
    if frame.empty or column not in frame:
        return None
    values = frame[column].dropna()
    return values.iloc[0] if not values.empty else None


def check_summary(check: CostModelCheck) -> dict[str, Any]:
    """summary.json's record of one check."""
    keep = [
        c
        for c in (
            "label",
            "point_id_measured",
            "point_id_simulated",
            "impl",
            "settings",
            "collective",
            "bytes",
            "world_size",
            "tokens",
            "mode",
            "measured_us",
            "simulated_us",
            "ratio",
            "error_pct",
            "within_band",
        )
        if c in check.pairs
    ]
    return {
        "measured": check.measured.name,
        "measured_source": check.measured.source,
        "simulated": check.simulated.name,
        "calibration": check.calibration,
        "kind": check.kind,
        "mode": check.mode,
        "band": PREDICTION_BAND,
        **check.summary,
        "pairs_table": check.pairs[keep].to_dict("records"),
    }


# A prediction has no spread: a simulated run's p90, tail and CV would read as a perfectly steady measurement.
SPREAD_SUFFIXES = ("p90_us", "tail_us", "tail_stat", "cv")


def _rows(run: RunAnalysis, frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A table's rows as records; a simulated run's spread columns null."""
    if frame.empty:
        return []
    if run.simulated:
        frame = frame.assign(**{c: None for c in frame.columns if str(c).endswith(SPREAD_SUFFIXES)})
    return frame.to_dict("records")
