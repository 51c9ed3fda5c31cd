"""Rank 0's record of a run before its first point: meta.json with versions, sweep, topology, the box's floor and
the doctor's verdicts."""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from commprof.doctor import doctor_summary, has_failures, run_doctor
from commprof.doctor.result import CheckResult
from commprof.doctor.topology_probe import probe_topology
from commprof.errors import UsageError
from commprof.floor.fresh import PROBE_TIMEOUT_S
from commprof.floor.record import file_floor, not_measured
from commprof.records.files import META_FILE
from commprof.records.run_meta import launch_facts, run_meta, write_meta
from commprof.sweep.planning.spec import SweepSpec

# The quick doctor's limit as a whole: its all-GPU test (90 s), pair rounds (45 s each) and controls on a box whose
# NCCL hangs can add up past any wait; past this, its verdict is that it hung.
DOCTOR_BUDGET_S = 300.0
# The most rank 0's pre-flight takes before the other ranks hear from it: the floor probe's limit, the doctor's,
# and the topology probe, graph files and meta.json (commands limited to 20 s each).
PREFLIGHT_S = PROBE_TIMEOUT_S + DOCTOR_BUDGET_S + 180.0

if TYPE_CHECKING:  # both import torch.distributed; this module runs before it is needed
    from commprof.sweep.running.console import SweepConsole
    from commprof.sweep.running.runner import SweepOptions


def prepare_run_folder(
    run_dir: Path, backend: str, spec: SweepSpec, options: SweepOptions, with_doctor: bool, console: SweepConsole
) -> None:
    """Write meta.json (kept as it is on --resume); with --strict, refuse a box whose doctor finds a failure."""
    meta_path = run_dir / META_FILE
    if options.resume and meta_path.exists():
        return
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    topology = probe_topology()
    floor = run_floor(run_dir, backend, options, console)
    sections: dict = {"topology": topology, "floor": floor}
    if backend == "nccl":
        from commprof.sweep.running.graph_run import prepare_graphs

        graphs = prepare_graphs(run_dir, spec.points, topology, floor)
        if graphs is not None:
            sections["nccl_graphs"] = graphs
    if with_doctor:
        sections["doctor"] = _doctor(console, floor)
    meta = run_meta(
        **launch_facts(options.argv),
        run_id=run_dir.name,
        source="measured",
        world_size=world_size,
        backend=backend,
        plan={
            "model": spec.model,
            "tp": spec.tp or world_size,
            "phase": spec.phase,
            "dtype": spec.dtype,
            "tokens": list(spec.tokens),
            "iterations": spec.iterations,
            "warmup": spec.warmup,
            "point_timeout_s": spec.point_timeout_s,
            "layout": spec.layout,
            "compute": spec.compute.text,  # the file's, or --compute in its place
            "skew": spec.skew.text,
            **asdict(spec.plan_options),
        },
        sweep={
            "path": spec.path,
            "name": spec.name,
            "content": spec.content,
            "sha256": hashlib.sha256(spec.content.encode()).hexdigest(),
            "report": spec.report,
        },
        shared_gpus=options.share_gpus,  # ranks shared GPUs: a functional check, not a tuning result
        **sections,
    )
    write_meta(run_dir, meta)
    failed = meta.failed_checks
    if with_doctor and options.strict and failed:
        raise UsageError(
            f"doctor found failing checks ({', '.join(failed)}); "
            "fix them or drop --strict (details: python -m commprof doctor)"
        )


def run_floor(run_dir: Path, backend: str, options: SweepOptions, console: SweepConsole) -> dict:
    """meta.json's floor: the --floor file, a quick probe of this node's GPUs, or why there is none."""
    if options.floor is not None:
        return file_floor(options.floor, options.floor_file)
    gpus = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if backend != "nccl":
        return not_measured(f"this run's ranks are CPU processes on {backend}: there are no GPU peer copies to time")
    if options.share_gpus:
        return not_measured("ranks share GPUs (--share-gpus): the floor of peer copies needs one GPU per rank")
    if gpus < 2:
        return not_measured("one rank on this node: an all-reduce inside a node of one GPU has no peer to copy to")
    from commprof.floor.fresh import measure_floor

    console.note(f"floor: measuring peer copies between {gpus} GPUs (commprof floor --quick) ...")
    entry = measure_floor(gpus, run_dir / "floor.json")
    if entry["figures"] is None:
        console.note(f"floor: not measured: {entry['why']}", style="yellow")
    else:
        console.note(f"floor: {entry['figures']['source']}")
    return entry


def _doctor(console: SweepConsole, floor: dict) -> dict:
    results = _doctor_within(DOCTOR_BUDGET_S, floor)
    summary = doctor_summary(results)
    summary["failed"] = [r.id for r in results if r.status == "fail"]
    if has_failures(results):
        console.note(
            "doctor: failing checks "
            + ", ".join(summary["failed"])
            + " — numbers measured on this box may not be tuning results (python -m commprof doctor)",
            style="red",
        )
    return summary


def _doctor_within(budget_s: float, floor: dict) -> list[CheckResult]:
    """The quick doctor's verdicts, or one failing verdict when it gives none within `budget_s` (a GPU test that
    hangs on this box: its processes end at their own limits, the sweep goes on)."""
    done: dict = {}

    def run() -> None:
        try:
            done["results"] = run_doctor(quick=True, floor=floor)
        except Exception as exc:  # a doctor that breaks is a verdict too, never the end of the sweep
            done["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"

    worker = threading.Thread(target=run, name="commprof-doctor", daemon=True)
    worker.start()
    worker.join(budget_s)
    if "results" in done:
        return done["results"]
    why = f"it raised {done['error']}" if "error" in done else f"it gave no verdict within {budget_s:g} s (a hang)"
    return [
        CheckResult(
            "doctor",
            "The quick doctor finishes",
            "fail",
            f"The doctor did not finish: {why}; NCCL may hang on this box.",
            fix="python -m commprof doctor (on its own, to see which test hangs)",
        )
    ]
