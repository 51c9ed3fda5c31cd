"""What a crossover stage searches, from the records of the stages before it, and the records it writes. Pure.

A search is one implementation setting in one mode against its baseline: the sweep's baseline, or the unfused
reference for kinds that fuse residual add + RMSNorm. By default every setting of another implementation that
ran ok in the sweep is searched (variants of NCCL's own variables are the NCCL recommendation's business), in
each mode where it ran without failing: graph mode only where the setting captured, and never on CPU ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from commprof.impls.registry import BACKEND_IMPLS, fuses_rmsnorm, unfused_reference
from commprof.planner.plan import build_step_plan
from commprof.records import point_ids
from commprof.records.point_ids import stage_of
from commprof.records.schema import FAILED_STATUSES, FUSED, MODES, CrossoverRecord, Source, crossover_record
from commprof.sweep.planning import crossover as cx
from commprof.sweep.planning.points import auto_label, baseline
from commprof.sweep.planning.spec import CrossoverStage, SweepPoint, SweepSpec, point_key
from commprof.sweep.planning.staging import point_from_record

GRAPH_NEEDS_GPUS = "CUDA graphs need GPUs: on {backend} ranks the search runs in eager mode only"


@dataclass(frozen=True)
class Search:
    """One implementation setting searched against its baseline, in the modes it can run."""

    point: SweepPoint  # the setting, under the stage's own point id (sN-pNNN)
    baseline: SweepPoint
    collective: str  # "all_reduce", or FUSED against the unfused reference
    modes: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)  # mode -> why it is not searched

    def to_dict(self) -> dict[str, Any]:
        return {
            "point": self.point.to_dict(),
            "baseline": self.baseline.to_dict(),
            "collective": self.collective,
            "modes": list(self.modes),
            "skipped": dict(self.skipped),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Search:
        return cls(
            SweepPoint(**data["point"]),
            SweepPoint(**data["baseline"]),
            data["collective"],
            tuple(data["modes"]),
            dict(data["skipped"]),
        )


def searches(stage: CrossoverStage, results: list[dict], backend: str) -> list[Search]:
    """The stage's searches, in the order their settings first ran (named implementations that never ran: last,
    with no options)."""
    steps = [
        r
        for r in results
        if r.get("kind", "step") == "step" and r.get("point_id") and stage_of(r["point_id"]) < stage.index
    ]
    settings: dict[str, list[dict]] = {}
    for record in steps:
        settings.setdefault(point_from_record(record).key(), []).append(record)
    reference = unfused_reference()
    chosen: list[tuple[SweepPoint, list[dict]]] = []
    for records in settings.values():
        point = point_from_record(records[0])
        if point.env or point.impl in BACKEND_IMPLS or point.impl == reference:
            continue
        if stage.impls:
            if point.impl in stage.impls:
                chosen.append((point, records))
        elif any(_mode_refusal(mode, records, "nccl") is None for mode in MODES):
            chosen.append((point, records))
    ran = {point.impl for point, _ in chosen}
    for name in stage.impls:
        if name not in ran:
            chosen.append((SweepPoint("p000", auto_label(name, {}, {}), name, {}, {}), []))
    base = next((point_from_record(r[0]) for r in settings.values() if point_from_record(r[0]).is_baseline), None)
    base = base or baseline()
    out = []
    for index, (point, records) in enumerate(chosen):
        fused = fuses_rmsnorm(point.impl) or any(r.get("fused_rmsnorm") for r in records)
        against = SweepPoint(base.point_id, reference, reference, {}, {}) if fused else base
        for other in settings.values():
            candidate = point_from_record(other[0])
            if fused and point_key(reference, {}, {}) == candidate.key():
                against = candidate
        modes, skipped = [], {}
        for mode in stage.modes:
            why = _mode_refusal(mode, records, backend)
            if why:
                skipped[mode] = why
            else:
                modes.append(mode)
        label = point.label or auto_label(point.impl, point.env, point.options)
        own = SweepPoint(
            point_ids.point_id(index, stage.index), label, point.impl, {}, dict(point.options), stage.index
        )
        out.append(Search(own, against, FUSED if fused else "all_reduce", tuple(modes), skipped))
    return out


def _mode_refusal(mode: str, records: list[dict], backend: str) -> str | None:
    if mode == "graph" and backend != "nccl":
        return GRAPH_NEEDS_GPUS.format(backend=backend)
    here = [r for r in records if r.get("mode") == mode]
    if not here:
        return None  # never ran in the sweep: the search tries it
    statuses = {str(r.get("status")) for r in here}
    if "ok" not in statuses or statuses & set(FAILED_STATUSES):
        return f"its {mode}-mode replay in the sweep was not ok ({', '.join(sorted(statuses))})"
    return None


def plan_sizes(spec: SweepSpec, tp: int) -> list[int]:
    """The all-reduce sizes of the sweep's steps, over its T values: searched beside the powers of two."""
    model = spec.model_shape
    sizes = set()
    for tokens in spec.tokens:
        plan = build_step_plan(model, tp, tokens, spec.phase, spec.dtype, spec.plan_options)
        sizes.update(op.bytes for op in plan.ops if op.collective == "all_reduce")
    return sorted(sizes)


def measured(results: list[dict], search: Search, mode: str) -> dict[int, tuple[float, float]]:
    """Sizes this search already timed in this run (a resumed run does not time them again)."""
    out = {}
    for record in results:
        if (
            record.get("kind") == "crossover"
            and record.get("point_id") == search.point.point_id
            and record.get("mode") == mode
            and record.get("status") == "ok"
            and record.get("bytes")
        ):
            out[int(record["bytes"])] = (float(record["impl_us"]), float(record["baseline_us"]))
    return out


def finished(results: list[dict], search: Search, mode: str, stage: CrossoverStage, sizes: list[int]) -> bool:
    """Whether this search ran to its end in this run: replayed from its records, it asks for no size that has
    none (a search is a pure function of its times, so an interrupted one asks for more)."""
    times = measured(results, search, mode)
    tried = {
        r.get("bytes")
        for r in results
        if r.get("kind") == "crossover" and r.get("point_id") == search.point.point_id and r.get("mode") == mode
    }
    if None in tried:
        return True  # it could not run in this mode, and its record says why
    missing: list[int] = []

    def replay(_impl: str, wanted: list[int]) -> dict[int, tuple[float, float]]:
        missing.extend(n for n in wanted if n not in tried)
        return {n: times[n] for n in wanted if n in times}

    cx.search(search.point.label, mode, replay, sizes, cx.SearchBounds.of(stage))
    return not missing


def recorded_modes(results: list[dict], search: Search) -> set[str]:
    """Modes of this search that already have a record (a resumed run does not repeat a skipped mode's)."""
    return {
        str(r.get("mode"))
        for r in results
        if r.get("kind") == "crossover" and r.get("point_id") == search.point.point_id
    }


@dataclass(frozen=True)
class RecordOrigin:
    """What every size record of one search shares: measured or predicted, in which run, on what, in what dtype."""

    source: Source
    run_id: str
    backend: str | None
    world_size: int | None
    dtype: str | None
    time: str | None = None  # ISO-8601 UTC; None: when the record is built
    calibration: str | None = None  # simulated: the calibration behind the prediction


def size_record(
    search: Search, stage: CrossoverStage, mode: str, entry: dict[str, Any], origin: RecordOrigin
) -> CrossoverRecord:
    """One measured (or predicted, or failed) size of a search; an entry without "bytes": the search not run.
    `entry`: status, message, bytes, impl_us, baseline_us, and search_round and model_error where known."""
    return crossover_record(
        source=origin.source,
        run_id=origin.run_id,
        point_id=search.point.point_id,
        point=search.point.to_dict(),
        backend=origin.backend,
        world_size=origin.world_size,
        status=entry["status"],
        message=entry.get("message"),
        time=origin.time,
        calibration=origin.calibration,
        collective=search.collective,
        mode=mode,
        bytes=entry.get("bytes"),
        dtype=origin.dtype,
        impl_us=entry.get("impl_us"),
        baseline_us=entry.get("baseline_us"),
        baseline=search.baseline.to_dict(),
        search_round=entry.get("search_round"),
        step_bytes=stage.step_bytes,
        rounds=stage.rounds,
        warmup=stage.warmup,
        model_error=entry.get("model_error"),
    )
