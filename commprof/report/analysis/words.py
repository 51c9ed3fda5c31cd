"""How the Decision words what it decided about a run (its claims are worded by decision/formatting.claim_words):
what is tuned, what keeping the baseline means, how to firm up a difference inside the uncertainty, why numbers
are not a tuning result."""

from __future__ import annotations

from commprof.report.analysis.nccl_choice import NcclChoice
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


def keep_text(run: RunAnalysis, rec: NcclChoice | None) -> str:
    """What keeping the baseline means in words: the backend's defaults, or the baseline's settings."""
    base = rec.baseline if rec is not None else None
    if base is not None and base["env"]:
        return f"Keep the baseline's settings ({base['settings']})"
    return f"Keep {tuned_name(run)}'s defaults"


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
