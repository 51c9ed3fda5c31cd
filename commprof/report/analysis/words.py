"""How the report words a run's verdicts, shared by the page, summary.json and the exported files: what is tuned,
what keeping the baseline means, the verdict against the evidence's uncertainty (noise or model error), why numbers
are not a tuning result, the projection's label."""

from __future__ import annotations

from typing import Any

from commprof.env_names import is_export_name, shell_value
from commprof.report.analysis.formatting import finite, fmt_ms, fmt_pct, sentence
from commprof.report.analysis.projection import pays_at_any_accept
from commprof.report.analysis.run_analysis import RunAnalysis

# How to get a calibration for the uncalibrated model: one nccl-tests run on the user's own box.
CALIBRATE_HOWTO = (
    "all_reduce_perf -b 8K -e 1G -f 2 -g 1 on every GPU of your box (mpirun -np <GPUs>, nccl-tests), then "
    "commprof import-nccl-tests <log> and commprof calibrate runs/<import> --out calibration.toml, and simulate again "
    "with --calibration calibration.toml"
)


def only_baseline(run: RunAnalysis) -> str | None:
    """Why nothing could beat the baseline when nothing else was measured, with how to measure more; else None."""
    if run.steps.empty or run.steps["point_id"].nunique() > 1:
        return None
    return (
        "only the baseline ran: nothing to compare it with (sweep settings with --sweep FILE, e.g. "
        "sweeps/pcie8-verify.toml on GPUs or sweeps/cpu-smoke.toml on CPU ranks)"
    )


def tuned_name(run: RunAnalysis) -> str:
    """What the environment tunes: NCCL, or the backend measured (gloo on CPU runs)."""
    return "NCCL" if run.backend in (None, "nccl") else str(run.backend)


def defaults_name(run: RunAnalysis) -> str:
    """The baseline's settings in words: "NCCL defaults", or the backend's defaults where NCCL did not run."""
    return f"{tuned_name(run)} defaults"


def keep_text(run: RunAnalysis) -> str:
    """What keeping the baseline means in words: the backend's defaults, or the baseline's settings."""
    base = run.nccl_choice.baseline if run.nccl_choice is not None else None
    if base is not None and base["env"]:
        return f"Keep the baseline's settings ({base['settings']})"
    return f"Keep {tuned_name(run)}'s defaults"


def verdict_sentence(run: RunAnalysis) -> str:
    """Why the fastest point over every T is, or is not, a result, with this run's numbers and evidence."""
    rec = run.nccl_choice
    if rec is None or rec.fastest is None:
        return ""
    fastest = rec.fastest
    tokens = ", ".join(map(str, fastest["tokens_covered"]))
    if rec.beyond_uncertainty is None:
        return (
            f"Not compared with the baseline {run.baseline}: it has no ok {run.mode}-mode record at every T = {tokens}."
        )
    evidence = run.evidence
    if evidence.simulated:
        verdict = evidence.beyond if rec.beyond_uncertainty else evidence.within
        error = evidence.model_error.band if evidence.model_error else "unknown"
        return (
            f"{fastest['point_id']}'s predicted step time summed over T = {tokens} ({fmt_ms(fastest['total_us'])}) "
            f"is {fmt_pct(rec.saved_pct)} below the baseline {run.baseline}'s ({fmt_ms(rec.baseline_total_us)}): "
            f"{verdict} (expected error {error})."
        )
    below = evidence.beats(fastest["total_us"], fastest["p90_total_us"], rec.baseline_total_us)
    relation = "below" if below else "not below"
    lowered = f" lowered by {evidence.margin_pct:.1f} %" if evidence.margin_pct else ""
    sentence = (
        f"{fastest['point_id']}'s p90 step time summed over T = {tokens} ({fmt_ms(fastest['p90_total_us'])}) "
        f"is {relation} the baseline {run.baseline}'s median summed ({fmt_ms(rec.baseline_total_us)}){lowered}."
    )
    return sentence + (f" {rec.confirmation[0].upper()}{rec.confirmation[1:]}." if rec.confirmation else "")


def how_to_firm_up(run: RunAnalysis) -> str:
    """What would turn a difference inside the uncertainty into evidence."""
    if run.evidence.simulated:
        if run.evidence.uncalibrated:
            return f"Calibrate the model against your own box: {CALIBRATE_HOWTO}; or measure with a sweep."
        return "Measure on the box with a sweep before changing anything."
    return "Re-measure with more iterations before changing anything."


def not_a_result_notes(run: RunAnalysis) -> list[str]:
    """Lines for every recommendation when the numbers cannot be tuning results: the doctor failed checks on
    the box, ranks shared GPUs, the run is incomplete."""
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
    if run.completeness is not None and not run.completeness.complete:
        notes.append(run.completeness.sentence(run.options.allow_partial))
    elif run.completeness is not None and not run.completeness.plan_known:
        notes.append(f"Progress: {run.completeness.summary()}; a stage cut short would not show here.")
    if run.drift is not None and run.drift.exceeded:
        notes.append(run.drift.sentence() + ".")
    return notes


def recommend_notes(run: RunAnalysis, withdrawn: bool = False) -> list[str]:
    """The comment lines of recommend.env: the evidence, what was chosen and why, with the verdict (marked as a
    withdrawn prediction where an observation the model does not explain withdrew it: `withdrawn`)."""
    rec = run.nccl_choice
    lines = [f"Evidence: {run.evidence.label}. Rule: {run.evidence.rule}."]
    if rec is None or rec.fastest is None:
        return lines + not_a_result_notes(run)
    chosen = _recommend_notes(run)
    if withdrawn:
        chosen = [f"Predicted, and withdrawn by the engine's observed step time: {line}" for line in chosen]
    return lines + not_a_result_notes(run) + chosen


def _recommend_notes(run: RunAnalysis) -> list[str]:
    rec = run.nccl_choice
    fastest = rec.fastest
    tokens = ", ".join(map(str, fastest["tokens_covered"]))
    if rec.keeps_baseline:
        if fastest["point_id"] == run.baseline:
            return [f"{keep_text(run)}: no point was faster than the baseline {run.baseline} over T = {tokens}."]
        if rec.withheld and rec.beyond_uncertainty:
            return [
                f"{keep_text(run)} for now: {fastest['point_id']} was faster {run.evidence.beyond}, but {rec.withheld}."
            ]
        return [
            f'{keep_text(run)}: the fastest point, {fastest["point_id"]} "{fastest["label"]}" '
            f"({fastest['settings']}), was {fmt_pct(rec.saved_pct)} faster over T = {tokens}, "
            f"{run.evidence.within}.",
            f"{sentence(run.evidence.beyond)}: no. {verdict_sentence(run)}",
            how_to_firm_up(run),
        ]
    point = run.recommended
    if not rec.dropped:
        return [
            f'Point {fastest["point_id"]} "{fastest["label"]}" (impl {fastest["impl"]}): least total '
            f"{run.mode}-mode step time over T = {tokens}: {fmt_ms(fastest['total_us'])} "
            f"vs {fmt_ms(rec.baseline_total_us)} for the baseline {run.baseline}.",
            f"{sentence(run.evidence.beyond)}: yes. {verdict_sentence(run)}",
        ]
    # The file exports the minimal point: every figure it states is that point's, never the fastest's.
    total = point.get("total_us")
    saved = 100.0 * (rec.baseline_total_us - total) / rec.baseline_total_us if finite(total) else None
    error = run.evidence.model_error.band if run.evidence.simulated and run.evidence.model_error else None
    return [
        f'Point {point["point_id"]} "{point["label"]}" ({point["settings"]}, impl {point["impl"]}): its '
        f"{run.mode}-mode step time summed over T = {tokens} is {fmt_ms(total)} vs {fmt_ms(rec.baseline_total_us)} "
        f"for the baseline {run.baseline}: {fmt_pct(saved)} less, {run.evidence.beyond}"
        + (f" (expected error {error})." if error else "."),
        f"Not exported: {', '.join(rec.dropped)}. The fastest point, {fastest['point_id']}, sets "
        f"{'it' if len(rec.dropped) == 1 else 'them'} too and did not beat {point['point_id']} {run.evidence.beyond}.",
    ]


def export_line(env: dict[str, str]) -> str:
    """`export A=1 B='0 0'`: the settings as one line a shell accepts."""
    return "export " + " ".join(f"{k}={shell_value(str(v))}" for k, v in sorted(env.items()) if is_export_name(k))


def break_even_text(ratio: Any, within: bool = False, tokens: int | None = None, withdrawn: bool = False) -> str:
    """A break-even accept length as shown: below 1 it is not an accept length, speculation pays at any; above T
    no accept length reaches it: it never pays at this T; where the rule cannot tell (`within`) nothing is said;
    where an observation the model does not explain withdrew the prediction (`withdrawn`), it says so."""
    if withdrawn:
        return "withdrawn (the model does not explain the engine's observed step)"
    if within:
        return "not told apart (the model's expected error is unknown)"
    if not finite(ratio):
        return "—"
    if tokens is not None and float(ratio) > tokens:
        return f"never pays at T = {tokens}"
    return "pays at any accept length" if pays_at_any_accept(float(ratio)) else f"{float(ratio):.2f}"


def draft_text(run: RunAnalysis) -> str:
    return (
        f"draft time {run.options.draft_ms:g} ms"
        if run.options.draft_ms is not None
        else "draft time not given (taken as 0: an upper bound)"
    )


def compute_text(run: RunAnalysis) -> str:
    """The compute figure and where it comes from."""
    if not run.options.compute.given:
        return "compute not given (--compute-ms): communication only"
    return f"compute {run.options.compute.describe()} ({run.options.compute_source})"


def spec_label(run: RunAnalysis) -> str:
    """How to read the projection: an estimate with compute, communication-only without it."""
    draft = draft_text(run)
    if not run.options.compute.given:
        return (
            "ESTIMATE, communication only: compute time not given (--compute-ms), so tokens/s are upper "
            f"bounds and break-even lengths count collectives alone; {draft}."
        )
    return f"Estimate: {compute_text(run)} + {run.mode}-mode communication ({run.evidence.label}); {draft}."
