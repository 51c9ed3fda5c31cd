"""Where a run's numbers come from, in words: the head of every exported file and the page's hardware line."""

from __future__ import annotations

from commprof.evidence import IMPORTED, SIMULATED
from commprof.records.run_meta import RunMeta
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.formatting import env_text


def provenance(run: RunAnalysis) -> list[str]:
    """Where a number came from, for the head of every exported file."""
    meta = run.meta
    versions = meta.named_versions
    lines = [f"commprof report of run {run.run_id}: {run.evidence.label}"]
    if run.simulated:
        error = run.evidence.model_error
        lines.append(
            f"SIMULATED by the cost model (calibration: {run.evidence.calibration}): not measured on any machine; "
            f"expected error {error.band if error else 'unknown'}"
            + (f" ({error.basis})" if error else "")
            + ". Nothing ran: CUDA-graph capture and correctness are not tested."
        )
    if run.observed is not None and run.observed["explained"] is False:
        lines.append(f"NOT CONFIRMED ON YOUR BOX: {run.observed['verdict']} ({run.observed['source']})")
    if run.shared_gpus:
        lines.append("SHARED GPUs: ranks shared GPUs (--share-gpus): a functional check, not a tuning result.")
    host, created, world = meta.hostname or "unknown", meta.created or "date unknown", meta.world_size
    if run.evidence.level == IMPORTED:
        # The host and date are the import's; the logs came from the box they describe.
        lines.append(
            f"Imported from nccl-tests logs of: {hardware_text(meta, run.backend)}, world size {world or '?'}, "
            f"backend NCCL; imported on host {host}, {created}"
        )
    else:
        where = "Simulated for" if run.evidence.level == SIMULATED else "Measured on"
        lines.append(
            f"{where}: {hardware_text(meta, run.backend)}, host {host}, {created}, world size {world or '?'}, "
            f"backend {run.backend or '?'}"
        )
    if versions:
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    launch_env = {k: v for k, v in (meta.env or {}).items() if k.startswith("NCCL_") and not k.startswith("NCCL_DEBUG")}
    if launch_env:
        lines.append("On top of the launch environment: " + env_text(launch_env))
    return lines


def hardware_text(meta: RunMeta, backend: str | None) -> str:
    """ "8 x NVIDIA ..." from meta.json's GPUs, or the simulated topology's description; CPU ranks said as such (a
    gloo run has no GPU to name)."""
    if meta.gpus:
        return f"{len(meta.gpus)} x {' / '.join(meta.gpu_names)}"
    topology = meta.topology
    if topology is not None and topology.simulated and topology.description:
        if topology.box is not None:  # read from the user's doctor bundle: the description names it
            return topology.description
        return f"{topology.description} (topology preset {topology.name or '?'})"
    if backend == "gloo":
        return "CPU ranks (gloo backend), no GPUs"
    return "GPUs not recorded"
