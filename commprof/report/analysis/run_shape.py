"""What the engines' dispatch and the decision read of a run: its steps' shape (hidden size, dtype, T) and its
box (SM, TP, NVLink, P2P). Pure."""

from __future__ import annotations

from commprof.planner.models import DTYPE_BYTES
from commprof.records.run_meta import meta_view
from commprof.report.analysis.engine_dispatch import Box
from commprof.report.analysis.run_analysis import RunAnalysis


def step_shape(run: RunAnalysis) -> tuple[int | None, int, tuple[int, ...]]:
    """(hidden size, bytes per element, the plan's T) of the run's steps."""
    steps = run.steps
    if steps.empty:
        return None, 2, ()
    hidden = steps["hidden_size"].dropna() if "hidden_size" in steps else []
    dtype = steps["dtype"].dropna() if "dtype" in steps else []
    tokens = tuple(sorted({int(t) for t in steps["tokens"].dropna()})) if "tokens" in steps else ()
    return (
        int(hidden.iloc[0]) if len(hidden) else None,
        DTYPE_BYTES.get(str(dtype.iloc[0]), 2) if len(dtype) else 2,
        tokens,
    )


def compute_capability(meta: dict) -> float | None:
    """The run's GPUs' compute capability (12.0 for SM120), from meta.json's GPUs, probe or topology preset."""
    view = meta_view(meta)
    topology = view.topology or {}
    gpus = view.gpu_list + view.probed_gpus
    for value in [g.get("compute_capability") for g in gpus] + [topology.get("compute_capability")]:
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None


def step_dtype(run: RunAnalysis) -> str:
    dtype = run.steps["dtype"].dropna() if "dtype" in run.steps else []
    return str(dtype.iloc[0]) if len(dtype) else "bfloat16"


def box_of(run: RunAnalysis) -> Box:
    """What the engines' dispatch reads of the box: SM, TP, NVLink and P2P, from the probe's pairs or the preset."""
    topology = run.meta_view.topology or {}
    pairs = [p for p in topology.get("pairs") or [] if isinstance(p, dict)]
    if pairs:
        nvlink = all(bool(p.get("nvlink")) for p in pairs)
        p2p = all((p.get("p2p") or {}).get("read") == "ok" for p in pairs)
    else:
        nvlink = str(topology.get("gpu_path", "")).upper().startswith("NV")
        p2p = bool(topology.get("p2p_supported", False))
    return Box(compute_capability(run.meta), run.ranks, nvlink, p2p)
