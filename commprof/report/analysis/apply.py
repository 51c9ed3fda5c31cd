"""What to apply from a run: exactly one of recommend.env and nccl_tuner.conf (or nothing), why, and the other as
an alternative whose lines are commented out, so the two never act together (NCCL_ALGO / NCCL_PROTO in the
environment override a tuner). Pure: a RunAnalysis in, an ApplyPlan out."""

from __future__ import annotations

from commprof.report.analysis.nccl_choice import NcclChoice
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.tuner_rules import (
    TUNER_VARIABLES,
    ApplyPlan,
    measured_ranges,
    rule_inputs,
    tuner_rules,
)
from commprof.report.analysis.words import only_baseline
from commprof.report.decision.types import RECOMMEND_ENV, TUNER_CONF


def apply_plan(run: RunAnalysis, rec: NcclChoice | None) -> ApplyPlan:
    """Decide between recommend.env (one setting over every T, `rec`'s) and nccl_tuner.conf (per-size rules, when
    the fastest NCCL setting differs by size beyond the evidence's uncertainty and a tuner can express it)."""
    point = rec.chosen if rec is not None else None
    env = dict(point["env"]) if point is not None and rec is not None and rec.recommends else {}
    if run.backend != "nccl":
        return ApplyPlan(
            RECOMMEND_ENV if env else None,
            _nothing(run, rec) if not env else "one setting is the fastest over every T",
            env,
            no_rule=f"NCCL did not run ({run.evidence.label}): there is nothing to tune in it here.",
        )
    winners = run.tuner_winners(str(point["point_id"]) if point is not None else None)
    inputs = rule_inputs(winners)
    ranges = measured_ranges(inputs) if not inputs.empty else {}
    won = winners[[v is True for v in winners.get("beyond_uncertainty", [])]] if not winners.empty else winners
    rules, no_rule = _rules(run, rec, inputs, won)
    exported = {str(point["point_id"])} if env else set()
    per_size = sorted(set(won["point_id"]) - exported) if rules else []
    if per_size and set(env) <= TUNER_VARIABLES:
        return ApplyPlan(TUNER_CONF, _per_size_why(won), env, rules, inputs, ranges, no_rule, _at(won))
    if env:
        why = "one setting is the fastest over every T" + (
            "; nccl_tuner.conf says the same per size" if rules and not per_size else ""
        )
        return ApplyPlan(RECOMMEND_ENV, why, env, [] if per_size else rules, inputs, ranges, no_rule)
    return ApplyPlan(None, _nothing(run, rec), env, [], inputs, ranges, no_rule)


def _per_size_why(won) -> str:
    by_tokens = ", ".join(f"T = {int(r.tokens)}: {r.point_id}" for r in won.itertuples())
    return (
        f"the fastest NCCL setting differs by message size ({by_tokens}), which one environment cannot express; the "
        "rules cover the measured sizes only"
    )


def _at(won) -> dict[int, str]:
    """T -> the point the rules run there."""
    return {int(r.tokens): str(r.point_id) for r in won.itertuples()}


def _nothing(run: RunAnalysis, rec: NcclChoice | None) -> str:
    """Why nothing is applied."""
    if rec is None or rec.fastest is None:
        return "no point passed at every T in this run: nothing to recommend"
    if rec.withheld and run.completeness is not None:
        return f"the run is incomplete: {run.completeness.summary()}"
    return only_baseline(run) or f"nothing beat the baseline by more than {run.evidence.uncertainty}"


def _rules(run: RunAnalysis, rec: NcclChoice | None, inputs, won) -> tuple[list, str]:
    """The tuner's rules for the per-size winners, or none and why."""
    if rec is not None and rec.withheld:
        return [], f"no rule while the run is incomplete ({rec.withheld})"
    rules = tuner_rules(inputs)
    untunable = sorted({k for e in won.get("env", []) for k in e if k not in TUNER_VARIABLES})
    if rules and untunable:
        return [], (
            f"the winning settings also set {', '.join(untunable)}, which a tuner cannot: per-size rules would not "
            "reproduce what was measured"
        )
    if not rules:
        return [], (
            f"no size has a setting faster than the baseline by more than {run.evidence.uncertainty} with a known "
            "algorithm and protocol: NCCL keeps its own choice everywhere"
        )
    return rules, ""
