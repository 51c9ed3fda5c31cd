"""The routing plan's candidates: per collective, mode and message size, every implementation setting's per-op
time read from the records (`op_us`), how far it can be trusted, and whether it beats the baseline there. Pure.

At a size, an implementation takes it from the baseline only beyond the evidence's uncertainty:
- measured: its p90 is below the baseline's median (nine in ten of its ops were faster than the baseline's
  typical op), the report's noise rule per size;
- simulated: its predicted time raised by its model's expected error is still below the baseline's lowered by
  the baseline model's expected error; an unknown error on either side decides nothing.
A run for a graph-mode engine (any GPU run: SGLang and vLLM replay the verify step as a CUDA graph) is routed on
graph-mode times only: its eager candidates are shown, labelled, and never take a size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from commprof.evidence import LEVEL_OF_SOURCE, MEASURED, SIMULATED, Evidence
from commprof.floor.model import FloorFigures
from commprof.impls.registry import BACKEND_IMPLS, fuses_rmsnorm, resolve_impl_name, unfused_reference
from commprof.records.op_sizes import op_times_per_size
from commprof.records.run_meta import RunMeta
from commprof.records.schema import FUSED
from commprof.stats import median

WIN_BEYOND = {MEASURED: "beyond noise", SIMULATED: "beyond model error"}
WITHIN = {MEASURED: "within noise", SIMULATED: "within model error"}
NO_FLOOR = "no floor figures: run `commprof floor --out floor.json` on the box (or simulate on a preset with [floor])"
UNJUDGED = "not judged: the model's expected error is unknown"
EAGER_ONLY = "eager only: not routed for a graph-mode engine"
EAGER_HOST = "eager: includes each implementation's host issue cost; not routed for a graph-mode engine"
RULES = {
    MEASURED: "an implementation takes a size when its p90 per-op time is below the baseline's median there",
    SIMULATED: (
        "an implementation takes a size when its predicted time raised by its model's expected error is still "
        "below the baseline's predicted time lowered by the baseline model's; an unknown error decides nothing"
    ),
}


@dataclass(frozen=True)
class Candidate:
    """One implementation setting at one size and mode, with how far its time can be trusted."""

    collective: str  # "all_reduce", "all_gather", or FUSED
    mode: str
    nbytes: int
    impl: str
    options: dict[str, Any]
    point_id: str
    label: str
    median_us: float
    p90_us: float
    level: str  # MEASURED / SIMULATED / IMPORTED
    error_pct: float | None = None  # simulated: the model's expected error (None: unknown)
    error_basis: str = ""
    baseline: bool = False
    # Set where the time is from a mode the engine does not run: the label it is shown with, never routed.
    not_routed: str = ""

    def key(self) -> tuple[str, str]:
        return self.impl, json.dumps(self.options, sort_keys=True)


def candidates(records: Iterable[dict], baseline_point: str) -> list[Candidate]:
    """Every (collective, mode, size, implementation setting) with ok per-op times, the latest measurement of each
    setting, the baseline point's and the unfused reference's marked as baselines. A simulated time carries its
    model's expected error: the record's kernel model where it covers the size, else its NCCL model's (the run's
    expected error: run_analysis.with_run_error)."""
    records = list(records)
    reference = unfused_reference()
    latest, baseline_config = _latest_per_setting(records, baseline_point)
    found: dict[tuple, Candidate] = {}
    for (config, _tokens, mode), record in latest.items():
        point = record.get("point") or {}
        impl, env, options = point.get("impl") or "default", point.get("env") or {}, point.get("options") or {}
        is_baseline = config == baseline_config
        if (env or impl in BACKEND_IMPLS) and not is_baseline:
            continue  # the backend under other settings (its defaults too) is the NCCL environment's, not a route
        level = LEVEL_OF_SOURCE.get(record.get("source"), MEASURED)
        fused = fuses_rmsnorm(impl) or bool(record.get("fused_rmsnorm"))
        sizes = op_times_per_size(record, fused, baseline=is_baseline, reference=impl == reference)
        for (collective, nbytes), values in sizes.items():
            error, basis = _model_error(record, collective, nbytes) if level == SIMULATED else (None, "")
            marked = is_baseline or (collective == FUSED and impl == reference)
            candidate = Candidate(
                collective=collective,
                mode=str(mode),
                nbytes=nbytes,
                impl=resolve_impl_name(impl, record.get("backend") or "nccl"),
                options=dict(options),
                point_id=str(record.get("point_id")),
                label=str(point.get("label") or record.get("point_id")),
                median_us=median([v[0] for v in values]),
                p90_us=median([v[1] for v in values]),
                level=level,
                error_pct=error,
                error_basis=basis,
                baseline=marked,
            )
            found[(collective, str(mode), nbytes, candidate.key(), marked)] = candidate
    if engine_runs_graphs(records):
        graphed = {(c.collective, c.nbytes, c.key()) for c in found.values() if c.mode == "graph"}
        for key, c in found.items():
            if c.mode != "graph":
                words = EAGER_HOST if (c.collective, c.nbytes, c.key()) in graphed else EAGER_ONLY
                found[key] = replace(c, not_routed=words)
    return sorted(found.values(), key=lambda c: (c.collective, c.mode, c.nbytes, not c.baseline, c.impl))


def engine_runs_graphs(records: Iterable[dict]) -> bool:
    """Whether the routes are for an engine that replays the step as a CUDA graph: any step record off CPU ranks
    (gloo cannot capture; its eager routes show the method, and no engine line is made from them)."""
    return any(r.get("kind", "step") == "step" and r.get("backend") != "gloo" for r in records)


def _latest_per_setting(records: Iterable[dict], baseline_point: str) -> tuple[dict[tuple, dict], tuple | None]:
    """The latest ok step record of each (setting, tokens, mode), and the baseline point's setting."""
    latest: dict[tuple, dict] = {}
    baseline_config = None
    configs: dict[int, tuple] = {}  # by point: a file's records share their point's (records.files)
    for record in records:
        if record.get("kind", "step") != "step" or record.get("status") != "ok" or not record.get("op_us"):
            continue
        point = record.get("point") or {}
        if (config := configs.get(id(point))) is None:
            config = configs[id(point)] = _setting(point)
        if record.get("point_id") == baseline_point:
            baseline_config = config
        key = (config, record.get("tokens"), record.get("mode"))
        if key not in latest or _stage(record) >= _stage(latest[key]):
            latest[key] = record
    return latest, baseline_config


def _model_error(record: dict, collective: str, nbytes: int) -> tuple[float | None, str]:
    """A simulated time's expected error and its basis: the kernel model's where it covers the size, else NCCL's."""
    kernel = record.get("kernel_model") or {}
    covered = (
        kernel and collective != "all_gather" and (kernel.get("max_bytes") is None or nbytes <= kernel["max_bytes"])
    )
    if covered:
        return kernel.get("expected_error_pct"), kernel.get("error_basis", "")
    nccl_model = record.get("nccl") or {}
    return nccl_model.get("expected_error_pct"), (
        nccl_model.get("error_basis") or "unknown: the record states no NCCL model error"
    )


def verdict(candidate: Candidate, baseline: Candidate) -> tuple[bool, str]:
    """Whether `candidate` takes the size from `baseline` beyond the evidence's uncertainty, and the words why."""
    if candidate.not_routed:
        return False, candidate.not_routed
    if candidate.level == MEASURED:
        wins = candidate.p90_us < baseline.median_us
        return wins, WIN_BEYOND[MEASURED] if wins else WITHIN[MEASURED]
    if candidate.level != SIMULATED:
        return False, f"not judged: {candidate.level} times are not compared per size"
    if candidate.error_pct is None or baseline.error_pct is None:
        faster = candidate.median_us < baseline.median_us
        return False, UNJUDGED + (" (predicted faster)" if faster else "")
    errors = (candidate.error_pct, baseline.error_pct)
    wins = Evidence(SIMULATED).beats(candidate.median_us, candidate.median_us, baseline.median_us, errors) is True
    return wins, WIN_BEYOND[SIMULATED] if wins else WITHIN[SIMULATED]


def _setting(point: dict) -> tuple:
    """A setting's identity: its implementation, its env as sorted pairs (names and values are strings), its
    options."""
    options = point.get("options")
    return (
        point.get("impl"),
        tuple(sorted((point.get("env") or {}).items())),
        json.dumps(options, sort_keys=True) if options else "{}",
    )


def _stage(record: dict) -> tuple:
    point = record.get("point") or {}
    stage = point.get("stage")
    return (stage if isinstance(stage, int) else 0, record.get("iterations") or 0)


def missing_floor(meta: RunMeta) -> str:
    """Why a run has no floor and how to get one, as its meta.json says (commprof.floor.record), else in general."""
    entry = meta.floor
    if entry is None or not entry.why:
        return NO_FLOOR
    return f"floor not measured: {entry.why}" + (f"; {entry.how}" if entry.how else "")


def floor_of(meta: RunMeta) -> FloorFigures | None:
    """The floor figures a run carries: measured by `commprof floor` (meta.json's floor), else its topology
    preset's."""
    measured = meta.floor.figures if meta.floor else None
    for table in (measured, meta.topology.floor if meta.topology else None):
        if table is not None:
            try:
                return FloorFigures(**{k: getattr(table, k) for k in FloorFigures.__dataclass_fields__})
            except (TypeError, ValueError):
                continue
    return None
