"""How the report words a run's verdicts, shared by the page, summary.json and the exported files: what is tuned,
what keeping the baseline means, the noise verdict, why numbers are not a tuning result, the projection's label."""

from __future__ import annotations

import shlex
from typing import Any

from commprof.report.formatting import finite, fmt_ms, fmt_pct, source_label
from commprof.report.projection import pays_at_any_accept
from commprof.report.ranking import NOISE_RULE
from commprof.report.run_analysis import RunAnalysis


def tuned_name(run: RunAnalysis) -> str:
    """What the environment tunes: NCCL, or gloo on CPU runs."""
    return "gloo" if run.backend == "gloo" else "NCCL"


def keep_text(run: RunAnalysis) -> str:
    """What keeping the baseline means in words: NCCL's defaults, gloo's defaults, or the baseline's settings."""
    base = run.recommendation.baseline if run.recommendation is not None else None
    if base is not None and base["env"]:
        return f"Keep the baseline's settings ({base['settings']})"
    return "Keep the defaults (gloo: no NCCL to tune)" if run.backend == "gloo" else "Keep NCCL's defaults"


def noise_sentence(run: RunAnalysis) -> str:
    """Why the fastest point over every T is, or is not, a result (NOISE_RULE with this run's numbers)."""
    rec = run.recommendation
    if rec is None or rec.fastest is None:
        return ""
    fastest = rec.fastest
    tokens = ", ".join(map(str, fastest["tokens_covered"]))
    if rec.beyond_noise is None:
        return (
            f"Not compared with the baseline {run.baseline}: it has no ok {run.mode}-mode record at every T = {tokens}."
        )
    relation = "below" if rec.beyond_noise else "not below"
    return (
        f"{fastest['point_id']}'s p90 step time summed over T = {tokens} ({fmt_ms(fastest['p90_total_us'])}) "
        f"is {relation} the baseline {run.baseline}'s median summed ({fmt_ms(rec.baseline_total_us)})."
    )


def not_a_result_notes(run: RunAnalysis) -> list[str]:
    """Lines for every recommendation when the numbers cannot be tuning results: the doctor failed checks on
    the box, or ranks shared GPUs."""
    notes = []
    if run.doctor_failed:
        notes.append(
            f"Measured on a box failing doctor checks ({', '.join(run.doctor_failed)}): not a tuning "
            "result; fix the box and measure again before applying this."
        )
    if run.shared_gpus:
        notes.append(
            "Ranks SHARED GPUs (--share-gpus): a functional check, not a tuning result; measure with one "
            "GPU per rank before applying this."
        )
    return notes


def recommend_notes(run: RunAnalysis, per_size_rules: bool = False) -> list[str]:
    """The comment lines of recommend.env: what was chosen and why, with the noise verdict."""
    rec = run.recommendation
    if rec is None or rec.fastest is None:
        return []
    return not_a_result_notes(run) + _recommend_notes(run, per_size_rules)


def _recommend_notes(run: RunAnalysis, per_size_rules: bool) -> list[str]:
    rec = run.recommendation
    fastest = rec.fastest
    tokens = ", ".join(map(str, fastest["tokens_covered"]))
    if rec.keeps_baseline:
        if fastest["point_id"] == run.baseline:
            return [f"{keep_text(run)}: no point was faster than the baseline {run.baseline} over T = {tokens}."]
        return [
            f'{keep_text(run)}: the fastest point, {fastest["point_id"]} "{fastest["label"]}" '
            f"({fastest['settings']}), was {fmt_pct(rec.saved_pct)} faster over T = {tokens} but within "
            "measurement noise.",
            f"Beyond noise: no. {noise_sentence(run)}",
            f"Rule: {NOISE_RULE}. Re-measure with more iterations before changing anything.",
        ]
    notes = [
        f'Point {fastest["point_id"]} "{fastest["label"]}" (impl {fastest["impl"]}): least total '
        f"{run.mode}-mode step time over T = {tokens}: {fmt_ms(fastest['total_us'])} "
        f"vs {fmt_ms(rec.baseline_total_us)} for the baseline {run.baseline}.",
        f"Beyond noise: {'unknown' if rec.beyond_noise is None else 'yes'}. {noise_sentence(run)}",
    ]
    if per_size_rules:
        notes.append(
            "The fastest point differs by T: nccl_tuner.conf has per-size rules "
            "(use it instead of NCCL_ALGO / NCCL_PROTO, not with them)."
        )
    return notes


def export_line(env: dict[str, str]) -> str:
    """`export A=1 B='0 0'`: the settings as one line a shell accepts."""
    return "export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(env.items()))


def break_even_text(ratio: Any) -> str:
    """A break-even accept length as shown: below 1 it is not an accept length, speculation pays at any."""
    if not finite(ratio):
        return "—"
    return "pays at any accept length" if pays_at_any_accept(float(ratio)) else f"{float(ratio):.2f}"


def draft_text(run: RunAnalysis) -> str:
    return (
        f"draft time {run.options.draft_ms:g} ms"
        if run.options.draft_ms is not None
        else "draft time not given (taken as 0: an upper bound)"
    )


def spec_label(run: RunAnalysis) -> str:
    """How to read the projection: an estimate with compute, communication-only without it."""
    draft = draft_text(run)
    if not run.options.compute.given:
        return (
            "ESTIMATE, communication only: compute time not given (--compute-ms), so tokens/s are upper "
            f"bounds and break-even lengths count collectives alone; {draft}."
        )
    return (
        f"Estimate: compute {run.options.compute.describe()} (given) + {run.mode}-mode communication "
        f"({source_label(run.source)}); {draft}."
    )
