"""Refuse, before any process starts, a sweep whose replay tensors, GEMM spacer (or crossover rounds) cannot fit in
the memory each rank has.

A typo such as `--tokens 100000` would otherwise start every point only for each to fail allocating. The need is
the replay layout's own size (commprof.replay.replay_tensors.step_tensor_bytes) at the largest T; the memory is the
smallest GPU's as NVML reports it (without touching CUDA, which a forking sweep must not do before its workers),
or on gloo this host's available memory shared by its ranks.
"""

from __future__ import annotations

import os
from pathlib import Path

from commprof.errors import UsageError
from commprof.units import format_bytes

USABLE = 0.8  # of a rank's memory: the rest is for the backend's own buffers, workspaces and the CUDA context


def check_memory(spec, world_size: int, backend: str) -> None:
    """UsageError in one line when the largest step of `spec` needs more than USABLE of a rank's memory.

    Says nothing where the memory is unknown (no NVML on a GPU box): the sweep then learns it point by point.
    """
    from commprof.planner.plan import build_step_plan
    from commprof.replay.replay_tensors import step_tensor_bytes

    memory, where = rank_memory(backend, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if not memory:
        return
    model = spec.model_shape
    tp = spec.tp or world_size
    tokens = max(spec.tokens)
    plan = build_step_plan(model, tp, tokens, spec.phase, spec.dtype, spec.plan_options)
    need = step_tensor_bytes(plan, tp, fused=True)
    spacer = _gemm_spacer_bytes(spec, plan)
    if spacer and need + spacer > USABLE * memory:
        raise UsageError(
            f'compute = "gemm": its GEMMs at T = {tokens} need {format_bytes(spacer)} per rank (weights per layer, '
            f"MoE layers sized by their experts) besides the replay tensors' {format_bytes(need)}, more than "
            f'{USABLE:.0%} of the {format_bytes(memory)} {where}: use compute = "uniform:<µs>" or lower --tokens'
        )
    if need > USABLE * memory:
        fits = int(tokens * USABLE * memory / need)
        advice = f"the largest T that fits is about {fits}" if fits >= 1 else "not even T = 1 fits"
        raise UsageError(
            f"T = {tokens}: one step's replay tensors need {format_bytes(need)} per rank, more than "
            f"{USABLE:.0%} of the {format_bytes(memory)} {where}: lower --tokens ({advice})"
        )
    _check_crossover_sizes(spec, tp, spec.dtype or model.dtype, memory, where)


def _gemm_spacer_bytes(spec, plan) -> int:
    """What the GEMM spacer allocates per rank at `plan` (commprof.replay.spacers), 0 for any other compute."""
    from commprof.planner.models import DTYPE_BYTES
    from commprof.planner.spacing import gemm_bytes

    if spec.compute.kind != "gemm":
        return 0
    return gemm_bytes(plan, spec.model_shape.intermediate_size, DTYPE_BYTES[plan.model.dtype])


def _check_crossover_sizes(spec, tp: int, dtype: str, memory: int, where: str) -> None:
    """A crossover stage's largest size, as its search replays it (replay.size_timing.size_plan), must fit too."""
    from commprof.replay.replay_tensors import step_tensor_bytes
    from commprof.replay.size_timing import size_plan
    from commprof.sweep.planning.spec import CrossoverStage

    for stage in spec.stages:
        if not isinstance(stage, CrossoverStage):
            continue
        need = step_tensor_bytes(size_plan(stage.max_bytes, tp, dtype), tp, fused=True)
        if need > USABLE * memory:
            fits = int(stage.max_bytes * USABLE * memory / need)
            raise UsageError(
                f"stages[{stage.index - 1}].max_bytes = {stage.max_bytes}: a crossover round of that size needs "
                f"{format_bytes(need)} per rank, more than {USABLE:.0%} of the {format_bytes(memory)} {where}: "
                f"lower max_bytes (about {format_bytes(max(fits, 0))} fits)"
            )


def rank_memory(backend: str, local_ranks: int) -> tuple[int | None, str]:
    """(bytes one rank may use, where that figure comes from); (None, why) where it is unknown."""
    if backend == "gloo":
        available = _host_available()
        if available is None:
            return None, "host memory unknown"
        ranks = max(local_ranks, 1)
        return available // ranks, f"each of this host's {ranks} rank(s) has (its available memory, shared)"
    from commprof.doctor.nvml_health import gather_health

    totals = [g["fb_total_mib"] for g in gather_health() if g.get("fb_total_mib")]
    if not totals:
        return None, "GPU memory unknown (no NVML)"
    return int(min(totals) * 2**20), "each rank has (the smallest GPU, as NVML reports it)"


def _host_available() -> int | None:
    """MemAvailable from /proc/meminfo (what Linux can hand out without swapping), else free pages."""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
