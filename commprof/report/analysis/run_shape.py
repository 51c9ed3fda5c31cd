"""What the engines' dispatch and the decision read of a run: its steps' shape (hidden size, dtype, T) and its
box (SM, TP, NVLink, P2P). Pure."""

from __future__ import annotations

from commprof.planner.models import DTYPE_BYTES, PRESETS, load_model
from commprof.planner.speculative import DRAFT_METHODS
from commprof.records.meta_topology import MetaTopology, TopologyLink
from commprof.records.run_meta import RunMeta
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


def compute_capability(meta: RunMeta) -> float | None:
    """The run's GPUs' compute capability (12.0 for SM120), from meta.json's GPUs, probe or topology preset."""
    listed = [g.compute_capability for g in meta.gpus or []] + [g.compute_capability for g in meta.probed_gpus]
    preset = meta.topology.compute_capability if meta.topology else None
    return next((float(value) for value in [*listed, preset] if value is not None), None)


def step_dtype(run: RunAnalysis) -> str:
    dtype = run.steps["dtype"].dropna() if "dtype" in run.steps else []
    return str(dtype.iloc[0]) if len(dtype) else "bfloat16"


def box_of(run: RunAnalysis) -> Box:
    """What the engines' dispatch reads of the box: SM, TP, NVLink, P2P and NVLink multicast, from the probe's pairs
    or the preset, and the nodes the run had; and of the server: the model's architecture, DP attention, the GPUs'
    memory and tokens per request (the engines' own defaults follow them)."""
    topology = run.meta.topology or MetaTopology()
    pairs = topology.pairs or []
    if pairs:
        nvlink = all(bool(p.nvlink) for p in pairs)
        p2p = all(p.p2p is not None and p.p2p.read == "ok" for p in pairs)
    else:
        nvlink = str(topology.gpu_path or "").upper().startswith("NV")
        p2p = bool(topology.p2p_supported)
    memory = [g.memory_gib for g in run.meta.gpus or []]
    return Box(
        compute_capability(run.meta),
        run.ranks,
        nvlink,
        p2p,
        multicast=_multicast(topology, nvlink) if pairs or topology.gpu_path else None,
        nodes=run.meta.nnodes or 1,
        architecture=step_architecture(run),
        dp_attention=bool(_first(run, "dp_attention")),
        gpu_mem_gib=min(memory) if memory and all(isinstance(m, (int, float)) for m in memory) else None,
        tokens_per_request=_tokens_per_request(run),
    )


def _multicast(topology: MetaTopology, nvlink: bool) -> bool | None:
    """NVLink multicast for the TP group (an NVSwitch's, which NVLS, torch symmetric memory's multimem and MNNVL
    need): none without NVLink between every pair; on an NVLink box, what its topology's NVLS channels say (a
    preset's [links.nvlink] nvls_channels: NCCL builds NVLS channels only where multicast works); unknown where
    nothing says it (a probed NVLink box: NVML's pairs do not; a run that knows no GPU pair or path at all)."""
    if not nvlink:
        return False
    link = (topology.links or {}).get("nvlink")
    channels = link.nvls_channels if isinstance(link, TopologyLink) else None
    return None if channels is None else channels > 0


def _first(run: RunAnalysis, column: str):
    values = run.steps[column].dropna() if column in run.steps else []
    return values.iloc[0] if len(values) else None


def step_architecture(run: RunAnalysis) -> str:
    """The served model's architecture (its config's architectures[0]) as the run's plan records it; for a run
    recorded before plans named it, the bundled preset's of the same name; "" when unknown."""
    recorded = _first(run, "architecture")
    if recorded:
        return str(recorded)
    name = str(_first(run, "model") or "").lower()
    if name in PRESETS:
        return load_model(name).served_architecture
    return ""


def _tokens_per_request(run: RunAnalysis) -> int:
    """Rows one request adds to a decode batch: K + 1 for a draft of K steps (EAGLE, MTP), else 1."""
    steps = _first(run, "num_steps")
    return int(steps) + 1 if _first(run, "spec") in DRAFT_METHODS and steps else 1
