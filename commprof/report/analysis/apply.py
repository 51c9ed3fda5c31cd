"""What to apply from a run: exactly one of recommend.env and nccl_tuner.conf (or nothing), why, and the other as
an alternative whose lines are commented out, so the two never act together (NCCL_ALGO / NCCL_PROTO in the
environment override a tuner). Pure: a RunAnalysis in, an ApplyPlan out."""

from __future__ import annotations

from commprof.report.analysis.nccl_choice import NcclChoice
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.tuner_rules import (
    RECOMMEND_ENV,
    TUNER_CONF,
    TUNER_VARIABLES,
    ApplyPlan,
    measured_ranges,
    rule_inputs,
    tuner_rules,
)
from commprof.report.analysis.words import only_baseline


def apply_plan(run: RunAnalysis, rec: NcclChoice | None) -> ApplyPlan:
    """Decide between recommend.env (one setting over every T, `rec`'s) and nccl_tuner.conf (per-size rules, when
    the fastest NCCL setting differs by size beyond the evidence's uncertainty and a tuner can express it)."""
    point = rec.chosen if rec is not None else None
    env = dict(point["env"]) if point is not None and rec is not None and rec.recommends else {}
    nothing = (
        "no point passed at every T in this run: nothing to recommend"
        if rec is None or rec.fastest is None
        else f"the run is incomplete: {run.completeness.summary()}"
        if rec.withheld and run.completeness is not None
        else only_baseline(run) or f"nothing beat the baseline by more than {run.evidence.uncertainty}"
    )
    if run.backend != "nccl":
        why = nothing if not env else "one setting is the fastest over every T"
        return ApplyPlan(
            RECOMMEND_ENV if env else None,
            why,
            env,
            no_rule=f"NCCL did not run ({run.evidence.label}): there is nothing to tune in it here.",
        )
    winners = run.tuner_winners(str(point["point_id"]) if point is not None else None)
    inputs = rule_inputs(winners)
    ranges = measured_ranges(inputs) if not inputs.empty else {}
    rules = tuner_rules(inputs)
    won = winners[[v is True for v in winners.get("beyond_uncertainty", [])]] if not winners.empty else winners
    no_rule = ""
    if rec is not None and rec.withheld:
        rules, no_rule = [], f"no rule while the run is incomplete ({rec.withheld})"
    untunable = sorted({k for e in won.get("env", []) for k in e if k not in TUNER_VARIABLES})
    if rules and untunable:
        rules, no_rule = (
            [],
            (
                f"the winning settings also set {', '.join(untunable)}, which a tuner cannot: "
                "per-size rules would not reproduce what was measured"
            ),
        )
    if not rules and not no_rule:
        no_rule = (
            f"no size has a setting faster than the baseline by more than {run.evidence.uncertainty} with a known algorithm and "
            "protocol: NCCL keeps its own choice everywhere"
        )
    per_size = sorted(set(won["point_id"]) - ({str(point["point_id"])} if env else set())) if rules else []
    if rules and per_size and set(env) <= TUNER_VARIABLES:
        by_tokens = ", ".join(f"T = {int(r.tokens)}: {r.point_id}" for r in won.itertuples())
        why = (
            f"the fastest NCCL setting differs by message size ({by_tokens}), which one environment cannot "
            "express; the rules cover the measured sizes only"
        )
        winners = {int(r.tokens): str(r.point_id) for r in won.itertuples()}
        return ApplyPlan(TUNER_CONF, why, env, rules, inputs, ranges, no_rule, winners)
    if env:
        why = "one setting is the fastest over every T" + (
            "; nccl_tuner.conf says the same per size" if rules and not per_size else ""
        )
        return ApplyPlan(RECOMMEND_ENV, why, env, rules if not per_size else [], inputs, ranges, no_rule)
    return ApplyPlan(None, nothing, env, [], inputs, ranges, no_rule)
