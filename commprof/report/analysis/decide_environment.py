"""The Decision's first step, the environment: what the run is, where its numbers come from (measured on which
backend, simulated with which calibration and whether it was applied, imported from which logs), the box, the
doctor's verdicts, the engine's observation and whether the model explains it (an observation it does not explain
withdraws every predicted claim made after this step), and the page's notices. Reads the analysed run only. Pure."""

from __future__ import annotations

from typing import Any

import msgspec

from commprof.evidence import Evidence
from commprof.records.meta_sections import MetaCalibration
from commprof.records.meta_topology import MetaTopology
from commprof.records.run_meta import as_written
from commprof.report.analysis.box_view import box_facts, gpus_shown, nccl_note, topology_view
from commprof.report.analysis.provenance import hardware_text, provenance
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import how_to_firm_up, not_a_result_notes
from commprof.report.decision.observation import Observed
from commprof.report.decision.types import CalibrationUse, Environment, EvidenceFacts, Notice, RunFacts

NOT_CONFIRMED = "not confirmed on your box: measure first"


def unconfirmed(run: RunAnalysis) -> str:
    """Why the run's predicted answer may not be recommended: the engine's observed step time lies outside the
    model's expected error ("" when nothing was observed, or the model explains it)."""
    observed = run.observed
    if observed is None or observed.get("explained") is not False:
        return ""
    return f"{NOT_CONFIRMED} (the model does not explain the engine's observed step time)"


def evidence_facts(evidence: Evidence) -> EvidenceFacts:
    error = evidence.model_error
    return EvidenceFacts(
        level=evidence.level,
        label=evidence.label,
        backend=evidence.backend,
        calibration=evidence.calibration,
        expected_error_pct=error.pct if error else None,
        expected_error_basis=error.basis if error else None,
        calibration_boxes=error.boxes if error else None,
        origin=list(evidence.origin),
        drift_pct=evidence.drift_pct,
        noise_floor_pct=evidence.noise_floor_pct,
        rule=evidence.rule,
        uncertainty=evidence.uncertainty,
        measured=evidence.measured,
        measurement=evidence.measurement,
        uncalibrated=evidence.uncalibrated,
    )


def run_facts(run: RunAnalysis, engines: tuple[str, ...]) -> RunFacts:
    steps = run.steps
    progress = run.completeness
    return RunFacts(
        run_id=run.run_id,
        name=run.name,
        source=run.source,
        simulated=run.simulated,
        mode=run.mode if not steps.empty else None,
        mode_reason=run.mode_reason,
        baseline=run.baseline,
        baseline_requested=run.baseline_requested,
        backend=(run.backend if run.evidence.level == "measured" else "nccl") or "nccl",
        model=_first(steps, "model"),
        tp=int(tp) if (tp := _first(steps, "tp")) is not None else None,
        world_size=run.meta.world_size,
        records=len(run.frame),
        status_counts={str(k): int(v) for k, v in run.status_counts.items()},
        failed=run.failed_count,
        all_failed=run.all_failed,
        has_steps=not steps.empty,
        tokens=list(run.tokens),
        complete=progress.complete if progress and progress.plan_known else None,
        progress=progress.summary() if progress is not None else None,
        shared_gpus=run.shared_gpus,
        remeasured=dict(run.superseded),
        compute=run.options.compute.describe(),
        compute_given=run.options.compute.given,
        compute_source=run.options.compute_source,
        draft_ms=run.options.draft_ms,
        accepts=list(run.options.accepts),
        engines=list(engines),
    )


def environment_step(run: RunAnalysis, withdrawn: str) -> Environment:
    """Where the numbers come from and the box they are of."""
    meta = run.meta
    topology = topology_view(meta.topology)
    return Environment(
        evidence=evidence_facts(run.evidence),
        provenance=provenance(run),
        notices=notices(run),
        not_a_result=not_a_result_notes(run),
        calibration=calibration_use(run),
        hardware=hardware_text(meta, run.backend),
        facts=box_facts(run),
        versions=sorted((str(k), str(v)) for k, v in meta.named_versions.items()),
        launch_env=sorted((str(k), str(v)) for k, v in (meta.env or {}).items()),
        gpus=gpus_shown(run),
        topology=topology,
        doctor=run.doctor,
        nccl_title="What NCCL would choose (the cost model's replay of NCCL's tuning, not a log)"
        if run.simulated
        else "What NCCL chose (its INFO log)",
        nccl_note="",
        nccl_choices=[],
        observed=None,
        drift=run.drift.to_dict() if run.drift is not None else None,
        interleaved=run.interleaved.to_dict() if run.interleaved is not None else None,
        spacing=run.spacing,
        box=box_transports(meta.topology),
        untested=dict(run.untested),
        not_measured=settings_not_measured(run),
    )


def with_nccl_shown(
    environment: Environment, run: RunAnalysis, choices: list[dict], observed: Observed | None
) -> Environment:
    """The environment with what NCCL chose for the points the answer shows, and the observation beside them."""
    note = nccl_note(run) if not choices and not run.steps.empty else ""
    return msgspec.structs.replace(environment, nccl_choices=choices, nccl_note=note, observed=observed)


def calibration_use(run: RunAnalysis) -> CalibrationUse | None:
    """A simulation's calibration file: whether its points use it (a calibration is applied whole or not at all),
    and why, as `commprof simulate` recorded it."""
    calibration = run.meta.calibration
    if not run.simulated or not isinstance(calibration, MetaCalibration):
        return None
    name = calibration.file or calibration.source or "calibration"
    used = {str(c) for c in run.frame["calibration"].dropna().unique()} if "calibration" in run.frame else set()
    applied = name in used if calibration.applied is None else calibration.applied
    return CalibrationUse(file=name, applied=applied, why=calibration.reason)


def notices(run: RunAnalysis) -> list[Notice]:
    """The page's banners for one run, in the order they are shown: what makes every number doubtful first."""
    out = [Notice(level=level, text=text) for level, text in _notices(run)]
    order = {"shared": 0, "sim": 0, "fail": 1, "warn": 2, "info": 3}
    return sorted(out, key=lambda n: order.get(n.level, 3))


def _notices(run: RunAnalysis) -> list[tuple[str, str]]:
    out = []
    if run.drift is not None and run.drift.exceeded:
        out.append(("shared", f"{run.name}: {run.drift.sentence()}."))
    if run.spacing is not None:
        out.append(("info", f"{run.name}: {run.spacing['sentence']}"))
    if run.shared_gpus:
        out.append(
            (
                "shared",
                f"SHARED GPUs: in {run.name} several ranks ran on one GPU (--share-gpus). A functional check that "
                "every setting runs and gives the right answer, not a tuning result: its times say nothing about a "
                "box with one GPU per rank.",
            )
        )
    out += _simulation_notices(run)
    out += _failure_notices(run)
    if run.completeness is not None and not run.completeness.complete:
        out.append(("fail", f"{run.name}: {run.completeness.sentence(run.options.allow_partial)}"))
    if not run.steps.empty and run.mode == "eager":
        out.append(("info", f"{run.name}: headline uses {run.mode_reason}."))
    return out


def _simulation_notices(run: RunAnalysis) -> list[tuple[str, str]]:
    if run.source == "nccl-tests":
        return [("info", f"{run.name}: imported from nccl-tests logs.")]
    if not run.simulated:
        return []
    out = [
        (
            "sim",
            f"SIMULATED: {run.name} comes from the cost model ({run.evidence.label}), not from a measurement. Its "
            "answer is a plan of what to measure (confirm.toml): nothing was run, so CUDA-graph capture and "
            "correctness are not tested, and no file sets anything until a sweep on the box measures it.",
        )
    ]
    use = calibration_use(run)
    if use is not None and not use.applied:
        out.append(("sim", f"Calibration {use.file} NOT APPLIED: no point uses it. {use.why}"))
    if run.evidence.uncalibrated:
        out.append(("sim", f"Uncalibrated model: {how_to_firm_up(run)}"))
    return out


def _failure_notices(run: RunAnalysis) -> list[tuple[str, str]]:
    out = []
    doctor = run.doctor
    if doctor and doctor["failed"]:
        out.append(
            (
                "fail",
                f"{run.name}: doctor checks failed ({', '.join(doctor['failed'])}): numbers measured on a box with "
                "failing checks are not tuning results. Fix the box (section 2 says how) and measure again.",
            )
        )
    if run.all_failed:
        out.append(
            ("fail", f"{run.name}: every point failed; no tuning result. See the CUDA-graph compatibility matrix.")
        )
    elif run.failed_count:
        counts = run.failures[run.failures["failed"]]["status"].value_counts()
        detail = ", ".join(f"{k} {v}" for k, v in counts.items())
        out.append(
            (
                "fail",
                f"{run.name}: {run.failed_count} of {len(run.frame)} records failed ({detail}). Failed settings are "
                "excluded from the answer.",
            )
        )
    if doctor and doctor["warned"] and not doctor["failed"]:
        out.append(
            (
                "warn",
                f"{run.name}: doctor warnings ({', '.join(doctor['warned'])}): the box may not reach its best "
                "numbers; see section 2.",
            )
        )
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


def box_transports(topology: MetaTopology | None) -> dict[str, Any] | None:
    """A run simulated from a doctor bundle: per GPU pair, its transport under each P2P setting and where that
    comes from (the bundle's line and NCCL's rule, or the NCCL log's line), as meta.json records it."""
    box = topology.box if topology is not None else None
    if box is None:
        return None
    return {
        "origin": box.origin,
        "nccl_log": box.nccl_log,
        "transport_rule": box.transport_rule,
        "pairs": [as_written(pair) for pair in box.pairs or []],
        "assumptions": box.assumptions or [],
    }


def _first(frame, column: str) -> Any:
    if frame.empty or column not in frame:
        return None
    values = frame[column].dropna()
    value = values.iloc[0] if not values.empty else None
    return value.item() if hasattr(value, "item") else value
