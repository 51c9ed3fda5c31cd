"""A crossover stage predicted by the cost model: the same search as on GPUs, on predicted times of one all-reduce
per size, its records labelled simulated with both models' expected errors. Pure.

The implementation's time comes from its kernel model where that covers the size (else NCCL's, as the engines
fall back), the baseline's from NCCL's model; graph mode is eager minus the preset's launch overhead, and
whether the setting captures is not tested. Whether a predicted crossover is beyond model error is the report's
call (report/analysis/crossovers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from commprof.costmodel.alternatives import kernel_model
from commprof.costmodel.calibrated_sizes import OUTSIDE
from commprof.costmodel.latency import predict
from commprof.costmodel.simulate import (
    SimulatedRun,
    kernel_eager_us,
    nccl_model_error,
    nccl_setting,
    params_for,
    pricing,
)
from commprof.errors import UsageError
from commprof.impls.registry import runs_on_nccl
from commprof.records.plan_file import PlannedSearch, ended_line, searches_line
from commprof.records.schema import CrossoverRecord
from commprof.sweep.planning import crossover as cx
from commprof.sweep.planning.crossover_stage import RecordOrigin, Search, plan_sizes, searches, size_record
from commprof.sweep.planning.spec import CrossoverStage, SweepPoint, SweepSpec

GRAPH_NOTE = "graph mode = eager minus the topology's assumed launch overhead per op; capture not tested"


@dataclass(frozen=True)
class Prediction:
    """One all-reduce of one setting at one size, as the cost model predicts it."""

    eager_us: float
    graph_us: float
    error_pct: float | None  # the model's expected error (None: unknown)
    basis: str
    calibration: str


def all_reduce_prediction(point: SweepPoint, nbytes: int, run: SimulatedRun, ranks: int) -> Prediction | str:
    """The prediction, or why the model cannot make one (one line). A size outside the calibration's judged sizes is
    predicted by the prior, with its error."""
    topology = run.topology
    try:
        setting = nccl_setting(topology, point.env, ranks)
        params, name = params_for(topology, setting, run.calibration, ranks)
        prices = pricing(topology, point.env, ranks, params, name, run)
    except UsageError as exc:
        return f"NCCL would refuse this configuration: {exc}"
    stated = None
    if not runs_on_nccl(point.impl):
        stated = kernel_model(point.impl, topology)
        if stated is None:
            return f"the cost model has no latency for {point.impl!r} on {topology.name}"
    if stated is not None and stated.covers(nbytes):
        eager = kernel_eager_us(stated, topology, point, nbytes, ranks)
        error, basis = stated.expected_error_pct, stated.describe()["error_basis"]
    elif prices.outside(nbytes):
        prior = prices.prior
        choice = predict(prior, "all_reduce", nbytes, ranks, setting.algos["all_reduce"], setting.protos["all_reduce"])
        eager, error, name = choice.time_us, prices.prior_error.pct, "nccl-prior"
        basis = (
            f"{OUTSIDE} ({prices.judged.describe()}): priced by NCCL's uncalibrated model, {prices.prior_error.basis}"
        )
    else:
        choice = predict(params, "all_reduce", nbytes, ranks, setting.algos["all_reduce"], setting.protos["all_reduce"])
        eager = choice.time_us
        model = nccl_model_error(params, name, topology)
        error, basis = model["expected_error_pct"], model["error_basis"]
    return Prediction(eager, max(eager - topology.launch_overhead_us, 0.0), error, basis, name)


def simulate_crossover_stage(
    spec: SweepSpec, stage: CrossoverStage, run: SimulatedRun, records: list[dict]
) -> tuple[list[CrossoverRecord], list[dict]]:
    """Every search of the stage over the records so far, one record per size predicted (or per search that
    cannot be predicted), and the stage's plan lines (plan.jsonl) as a sweep writes them."""
    topology = run.topology
    ranks = spec.tp or topology.gpus
    sizes = plan_sizes(spec, ranks)
    origin = RecordOrigin("simulated", run.run_id, "nccl", ranks, spec.dtype, run.now)
    out: list[CrossoverRecord] = []
    found = searches(stage, records, "nccl")
    planned = [PlannedSearch(point_id=s.point.point_id, mode=m, sizes=sizes) for s in found for m in s.modes]
    # a predicted search always runs to its end
    plan = [searches_line(stage.index, planned), *(ended_line(stage.index, s["point_id"], s["mode"]) for s in planned)]
    for search in found:
        for mode in search.modes:
            out += _search(
                search,
                mode,
                stage,
                sizes,
                lambda p, n: all_reduce_prediction(p, n, run, ranks),
                origin,
            )
        for mode, why in search.skipped.items():
            entry = {"status": "unsupported", "message": why}
            out.append(size_record(search, stage, mode, entry, origin))
    return out, plan


def _search(
    search: Search, mode: str, stage: CrossoverStage, sizes: list[int], predicted, origin: RecordOrigin
) -> list[CrossoverRecord]:
    """One search on predicted times: a record per size it asked for, with the round that asked."""
    found: dict[int, tuple[Prediction, Prediction, int]] = {}
    refusals: list[str] = []
    calls = [0]

    def measure(_impl: str, wanted: list[int]) -> dict[int, tuple[float, float]]:
        calls[0] += 1
        times = {}
        for nbytes in wanted:
            mine, base = predicted(search.point, nbytes), predicted(search.baseline, nbytes)
            if isinstance(mine, str) or isinstance(base, str):
                refusals.append(mine if isinstance(mine, str) else base)
                continue
            found[nbytes] = (mine, base, calls[0])
            times[nbytes] = (getattr(mine, f"{mode}_us"), getattr(base, f"{mode}_us"))
        return times

    cx.search(search.point.label, mode, measure, sizes, cx.SearchBounds.of(stage))
    if refusals and not found:
        entry = {"status": "unsupported", "message": refusals[0]}
        return [size_record(search, stage, mode, entry, origin)]
    out = []
    for nbytes, (mine, base, search_round) in sorted(found.items()):
        entry = {
            "bytes": nbytes,
            "status": "ok",
            "message": GRAPH_NOTE if mode == "graph" else None,
            "impl_us": getattr(mine, f"{mode}_us"),
            "baseline_us": getattr(base, f"{mode}_us"),
        }
        error = {
            "impl_pct": mine.error_pct,
            "baseline_pct": base.error_pct,
            "basis": f"{mine.basis}; baseline: {base.basis}",
            **({"outside_calibration": True} if OUTSIDE in base.basis else {}),
        }
        out.append(
            size_record(
                search,
                stage,
                mode,
                {**entry, "search_round": search_round, "model_error": error},
                replace(origin, calibration=base.calibration),
            )
        )
    return out
