"""The report's first screen: what to set, each answer built from the points of table 1
(choices.choices_per_tokens); with how much faster the verify step gets and whether speculative decoding pays
(views/verify_answers.py), the first screen's answers.

"What do I set?" has three parts, each judged by the run's evidence
(beyond noise when measured, beyond the model's expected error when simulated):
(a) the environment to export: the fastest setting of the baseline's implementation (NCCL) over every T if it
    beats the baseline, else keep the baseline; with its effect per T and the one file to apply;
(b) another all-reduce implementation, where it beats (a) (for which T, by how much) and what that takes in an
    engine: its flag where one exists, else engine work;
(c) fused all-reduce + residual + RMSNorm kinds against their unfused reference (nccl+rmsnorm).
Pure: a RunAnalysis in, formatted strings and dicts for the template out.
"""

from __future__ import annotations

from typing import Any

from commprof.report.analysis.decision import Decision, decided_fusion
from commprof.report.analysis.formatting import fmt_bytes, fmt_ms, fmt_pct, range_pct, sentence, tokens_text
from commprof.report.analysis.ranking import UNFUSED_REFERENCE_IMPL
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import (
    export_line,
    how_to_firm_up,
    not_a_result_notes,
    only_baseline,
    tuned_name,
)
from commprof.report.exports.engine_hints import engine_hints
from commprof.report.views.verify_answers import faster_answer, routed_bands, spec_answer

MAX_REASON_CHARS = 160
NOT_CONFIRMED_CAVEAT = (
    "Not confirmed on your box: the model does not explain what the engine measured (above), so this predicted "
    "answer may not hold; run the checks named there first."
)


def _reason(message: Any) -> str:
    text = " ".join(str(message or "no message").split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def env_answer(run: RunAnalysis, decision: Decision) -> dict[str, Any]:
    """(a): the export line (or what to keep), why, its effect per T against the baseline, and the one file to
    apply with the other as its alternative; all as the decision judged it (withdrawn where it withdrew it)."""
    name = tuned_name(run)
    evidence = run.evidence
    plan = decision.plan
    out: dict[str, Any] = {
        "title": f"(a) {name} environment",
        "unconfirmed": NOT_CONFIRMED_CAVEAT if decision.unconfirmed else "",
        "code": "",
        "lines": [],
        "notes": [],
        "rows": [],
        "warnings": [],
        "apply": "",
    }
    answer = decision.nccl_answer
    point, fastest = (answer.point, answer.fastest) if answer is not None else (None, None)
    if answer is None or point is None:
        out["lines"].append(f"No single {name} setting passed at every T; see table 1.")
    elif answer.keeps_baseline:
        out["lines"].append(answer.keep)
        if only_baseline(run):
            out["notes"].append(sentence(only_baseline(run)) + ".")
        elif fastest["point_id"] == run.baseline:
            out["notes"].append(f"No other setting was faster than the baseline ({run.evidence.label}).")
        elif answer.withheld and answer.verdict == "beyond error":
            out["notes"].append(f"{fastest['point_id']} was faster {evidence.beyond}, but {answer.withheld}.")
        else:
            out["notes"].append(
                f"The fastest, {fastest['point_id']} {fastest['label']}, was "
                f"{fmt_pct(answer.saved_pct)} faster over every T, {evidence.within}: "
                f"{answer.reason} Not a result. {how_to_firm_up(run)}"
            )
    elif not point["env"]:
        out["lines"].append(f"Keep {name}'s defaults: no {name} setting beat them.")
    else:
        line = export_line(point["env"])
        if decision.unconfirmed:
            out["lines"].append(f"Withdrawn ({decision.unconfirmed}); the model predicted: {line}")
        else:
            out["code"] = line
        out["notes"].append(
            ("Withdrawn prediction: p" if decision.unconfirmed else "P")
            + f"oint {point['point_id']} {point['label']}: the least total {run.mode}-mode step "
            f"time over every T, {evidence.beyond} ({evidence.label})."
        )
        if answer.dropped:
            out["notes"].append(
                f"{', '.join(answer.dropped)} left out: {fastest['point_id']} (with "
                f"{'it' if len(answer.dropped) == 1 else 'them'}) did not beat {point['point_id']} {evidence.beyond}."
            )
        chosen = run.choices[[("recommended" in roles) for roles in run.choices["roles"]]]
        for r in chosen.itertuples():
            out["rows"].append(
                {
                    "tokens": int(r.tokens),
                    "baseline": fmt_ms(r.baseline_us),
                    "time": fmt_ms(r.median_us),
                    "saved": fmt_pct(r.saved_pct),
                    "noise": r.beyond_uncertainty is not True or bool(decision.unconfirmed),
                    "why": "withdrawn"
                    if decision.unconfirmed
                    else ""
                    if r.beyond_uncertainty is True
                    else evidence.within,
                }
            )
    reasons: dict[str, list[str]] = {}
    for point_id, reason in run.untested.items():
        reasons.setdefault(reason, []).append(point_id)
    for reason, ids in reasons.items():
        out["notes"].append(f"Not ranked ({len(ids)} point{'s' if len(ids) != 1 else ''}, e.g. {ids[0]}): {reason}.")
    for reason, ids in settings_not_measured(run).items():
        how = " Measure them on GPUs, where the sweep runs on NCCL." if "NCCL does not run here" in reason else ""
        out["notes"].append(
            f"Not measured ({len(ids)} point{'s' if len(ids) != 1 else ''}, e.g. {ids[0]}): {reason}.{how}"
        )
    if plan.choice:
        out["apply"] = f"Apply {plan.choice}: {plan.why}." + (
            f" {plan.alternative} holds the alternative, commented out: use one, never both."
            if plan.alternative
            else ""
        )
    else:  # the why once: a card that has just said it (e.g. only the baseline ran) says only the consequence
        said = " ".join(out["lines"] + out["notes"]).lower()
        out["apply"] = "Nothing to apply." if plan.why.lower() in said else f"Nothing to apply: {plan.why}."
    out["warnings"] = not_a_result_notes(run)
    return out


def settings_not_measured(run: RunAnalysis) -> dict[str, list[str]]:
    """Why points of (a)'s implementation never ran (every record unsupported, e.g. NCCL variables on gloo) -> their
    ids."""
    steps = run.all_steps
    if steps.empty:
        return {}
    family = steps.loc[steps["impl"].isin(list(run.baseline_family)), ["point_id", "status", "message"]]
    unsupported = family["status"] == "unsupported"
    if not unsupported.any():  # the common case, decided without grouping 100,000 records
        return {}
    refused = unsupported.groupby(family["point_id"]).all()
    rows = family[family["point_id"].isin(refused[refused].index)].drop_duplicates("point_id")
    out: dict[str, list[str]] = {}
    for point_id, message in rows[["point_id", "message"]].itertuples(index=False):
        out.setdefault(str(message or "unsupported"), []).append(str(point_id))
    return out


def alternative_answer(run: RunAnalysis, decision: Decision) -> dict[str, Any]:
    """(b): where the decision routes sizes to another all-reduce implementation than (a), by how much, and
    what it takes in SGLang / vLLM (the decision's engine settings, or engine work where none exists); the
    per-T rows show the step times behind it."""
    name = tuned_name(run)
    reference = "(a)" if decision.nccl_point != run.baseline else f"{name}'s baseline"
    alt = run.alternatives
    absent = (
        run.without_result[~run.without_result["fused_rmsnorm"].astype(bool)]
        if not run.without_result.empty
        else run.without_result
    )
    not_run = [f"{r.impl}: {r.status}: {_reason(r.message)}" for r in absent.itertuples()]
    out: dict[str, Any] = {"lines": [], "rows": [], "engine": [], "not_run": "; ".join(not_run)}
    if alt.empty:
        out["lines"].append(
            "No other all-reduce implementation ran in this sweep" + (" (see below why)." if not_run else ".")
        )
        return out
    for r in alt.itertuples():
        route = decision.route("all_reduce", run.mode, int(r.bytes)) if r.bytes == r.bytes else None
        wins = route is not None and not route.kept and route.impl == r.impl
        loses = not wins and r.slower_beyond_uncertainty is True and not decision.unconfirmed
        out["rows"].append(
            {
                "tokens": int(r.tokens),
                "size": fmt_bytes(r.bytes),
                "reference": fmt_ms(r.reference_us),
                "impl": r.impl,
                "time": fmt_ms(r.median_us),
                "wins": wins,
                "versus": f"−{fmt_pct(r.saved_pct)}"
                if wins
                else "slower"
                if loses
                else "withdrawn"
                if decision.unconfirmed
                else run.evidence.within,
            }
        )
    routed = routed_bands(decision, run.mode)
    if not routed:
        out["lines"].append(
            f"No other implementation takes any T from {reference} {run.evidence.beyond}: stay with {name}."
        )
        return out
    verb = "is predicted to beat" if run.evidence.simulated else "beats"
    taken = set()
    for route in routed:
        taken |= set(route.tokens)
        out["lines"].append(
            f"{route.impl} {verb} {reference} {run.evidence.beyond} at T = {tokens_text(route.tokens)} "
            f"({fmt_bytes(route.min_bytes)} – {fmt_bytes(route.max_bytes)} per all-reduce): "
            f"{fmt_pct(route.margin_pct)} less time per all-reduce."
        )
    rest = sorted({int(t) for t in alt["tokens"]} - taken)
    if rest:
        out["lines"].append(f"Not at T = {tokens_text(rest)}: keep {name} for those sizes.")
    for setting in decision.engine:
        shown = " ".join(f"{k}={v}" for k, v in setting.variables)
        out["engine"].append(
            {
                "engine": setting.engine,
                "setting": shown,
                "version": setting.version,
                "text": "" if setting.live else setting.why,
            }
        )
    for impl in sorted({r.impl for r in routed} - {s.impl for s in decision.engine}):
        for engine in [e for e in ("SGLang", "vLLM") if decision.names_engine(e)]:
            out["engine"].append(
                {"engine": engine, "setting": "", "version": "—", "text": f"no setting runs {impl}: engine work"}
            )
    return out


def fusion_answer(run: RunAnalysis, decision: Decision) -> dict[str, Any]:
    """(c): fused all-reduce + RMSNorm kinds against their unfused reference, per T, judged as the decision routes
    them, and the engine flags."""
    absent = (
        run.without_result[
            run.without_result["fused_rmsnorm"].astype(bool) & (run.without_result["impl"] != UNFUSED_REFERENCE_IMPL)
        ]
        if not run.without_result.empty
        else run.without_result
    )
    not_run = [f"{r.impl}: {r.status}: {_reason(r.message)}" for r in absent.itertuples()]
    out: dict[str, Any] = {"lines": [], "engine": [], "not_run": "; ".join(not_run)}
    fusion = decided_fusion(run.fusion, decision, run.mode)
    if fusion.empty:
        out["lines"].append(
            "No fused kind ran in this sweep."
            if not_run
            else 'No fused kind in this sweep (add impl = "flashinfer-fused" and its reference '
            f'"{UNFUSED_REFERENCE_IMPL}" to measure it).'
        )
        return out
    if fusion["reference_us"].isna().any():
        missing = fusion[fusion["reference_us"].isna()]
        out["lines"].append(
            f"No {UNFUSED_REFERENCE_IMPL} reference ran at T = {tokens_text(missing['tokens'])}: "
            f'add impl = "{UNFUSED_REFERENCE_IMPL}" to the sweep to compare there.'
        )
    verdicts = (
        ("beats", [v is True for v in fusion["beyond_uncertainty"]]),
        ("is slower than", [v is True for v in fusion["slower_beyond_uncertainty"]]),
    )
    for verb, mask in verdicts:
        rows = fusion[mask]
        if not rows.empty:
            saved = rows["saved_pct"].abs()
            out["lines"].append(
                f"{rows['impl'].iloc[0]} {verb} {UNFUSED_REFERENCE_IMPL} {run.evidence.beyond} at "
                f"T = {tokens_text(rows['tokens'])}: {range_pct(saved)} "
                f"{'less' if verb == 'beats' else 'more'} time per step."
            )
    for reason in dict.fromkeys(r for r in fusion["not_judged"] if r):
        rows = fusion[fusion["not_judged"] == reason]
        out["lines"].append(f"Not judged at T = {tokens_text(rows['tokens'])}: {reason}.")
    within = fusion[
        [
            b is False and s is False and not n
            for b, s, n in zip(fusion["beyond_uncertainty"], fusion["slower_beyond_uncertainty"], fusion["not_judged"])
        ]
    ]
    if not within.empty:
        out["lines"].append(
            f"{sentence(run.evidence.within)} of {UNFUSED_REFERENCE_IMPL} at T = {tokens_text(within['tokens'])}."
        )
    fused_measured = bool((run.steps["fused_rmsnorm"] & (run.steps["impl"] != UNFUSED_REFERENCE_IMPL)).any())
    for hint in engine_hints(fusion, fused_measured, None, run.evidence, fusion_refused=decision.fusion_refused):
        if not decision.names_engine(hint.engine):
            continue
        out["engine"].append(
            {"engine": hint.engine, "setting": hint.setting, "version": hint.version, "text": hint.untested}
        )
    return out


def headline_answers(run: RunAnalysis, decision: Decision) -> dict[str, Any]:
    """The first screen's answers, each rendering the run's decision: how much faster, (a), (b), (c), and
    whether speculative decoding pays."""
    answers: dict[str, Any] = {
        "empty": "",
        "env": None,
        "alt": None,
        "fused": None,
        "faster": faster_answer(run, decision),
        "spec": spec_answer(run, decision),
    }
    if run.steps.empty:
        answers["empty"] = "No replayed steps in this run: nothing to recommend."
    elif run.all_failed:
        answers["empty"] = "Nothing: every point failed. See the CUDA-graph compatibility matrix below."
    else:
        answers.update(
            env=env_answer(run, decision), alt=alternative_answer(run, decision), fused=fusion_answer(run, decision)
        )
    return answers
