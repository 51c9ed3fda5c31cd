"""Staged search: rank finished points by their step records and build the next stage around the best.

A point ranks by its median step time in graph mode (eager when no point captured, e.g. on gloo), combined
over every T of the run; a point with any record that is not "ok" (or "unsupported") never ranks. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commprof.evidence import not_proposable
from commprof.records import point_ids
from commprof.records.plan_file import Unit
from commprof.records.point_ids import stage_of
from commprof.sweep.planning.points import auto_label, expand_axes
from commprof.sweep.planning.spec import BASELINE_LABEL, DEFAULT, SweepPoint, SweepSpec, point_key

RANK_BY = ("geomean", "sum")


@dataclass(frozen=True)
class RankedPoint:
    point: SweepPoint
    score_us: float  # geometric mean or sum over T of the median step time, µs
    mode: str  # "graph" or "eager": which records the score comes from
    median_us: dict[int, float]  # T -> median step time
    p90_us: dict[int, float] | None = None  # T -> p90 step time, where every T's record has one


def point_from_record(record: dict) -> SweepPoint:
    point = record.get("point") or {}
    return SweepPoint(
        point_id=record["point_id"],
        label=point.get("label", ""),
        impl=point.get("impl", DEFAULT),
        env=dict(point.get("env") or {}),
        options=dict(point.get("options") or {}),
        stage=stage_of(record["point_id"]),
    )


def _combine(values: list[float], rank_by: str) -> float:
    if rank_by == "sum":
        return sum(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def ranking_mode(steps: list[dict]) -> str:
    """The mode points rank in: graph where any step record captured, else eager (e.g. on gloo)."""
    return "graph" if any(r.get("mode") == "graph" and r.get("status") == "ok" for r in steps) else "eager"


def latest_measurements(steps: list[dict]) -> dict[str, list[dict]]:
    """Point id -> its step records, the latest (most re-measured) point of each configuration only."""
    by_id: dict[str, list[dict]] = {}
    for record in steps:
        by_id.setdefault(record["point_id"], []).append(record)
    latest: dict[str, str] = {}
    for point_id, records in by_id.items():
        key = point_from_record(records[0]).key()
        if key not in latest or (stage_of(point_id), point_id) > (stage_of(latest[key]), latest[key]):
            latest[key] = point_id
    return {point_id: by_id[point_id] for point_id in latest.values()}


def rank_points(
    results: list[dict], tokens: tuple[int, ...], rank_by: str = "geomean", interconnect: str = "pcie"
) -> list[RankedPoint]:
    """Points with a verified median step time at every T, fastest first (ties by point id); never one the
    report may not propose (evidence.not_proposable: e.g. simulated LL128 on PCIe).

    A configuration measured in several stages ranks by its latest (most re-measured) records.
    """
    steps = [
        r
        for r in results
        if r.get("kind", "step") == "step" and r.get("point_id") and not_proposable(r, interconnect) is None
    ]
    mode = ranking_mode(steps)
    ranked = []
    for records in latest_measurements(steps).values():
        if any(r.get("status") not in ("ok", "unsupported") for r in records):
            continue
        medians, p90s = {}, {}
        for record in records:
            stats = record.get("step_us") or {}
            if record.get("mode") == mode and record.get("status") == "ok" and stats.get("median", 0) > 0:
                medians[record.get("tokens")] = float(stats["median"])
                if stats.get("p90") is not None:
                    p90s[record.get("tokens")] = float(stats["p90"])
        if not all(t in medians for t in tokens):
            continue
        values = [medians[t] for t in tokens]
        p90 = {t: p90s[t] for t in tokens} if all(t in p90s for t in tokens) else None
        ranked.append(
            RankedPoint(
                point_from_record(records[0]), _combine(values, rank_by), mode, {t: medians[t] for t in tokens}, p90
            )
        )
    ranked.sort(key=lambda r: (r.score_us, r.point.point_id))
    return ranked


def refine(spec: SweepSpec, stage: int, results: list[dict], interconnect: str = "pcie") -> list[SweepPoint]:
    """The points of `stage` (>= 1): the stage's best `top_k` earlier points crossed with its axes (`interconnect`:
    the box's, which decides what a simulated result may propose)."""
    if not 1 <= stage <= len(spec.stages):
        raise ValueError(f"stage {stage} does not exist (this sweep has stages 1..{len(spec.stages)})")
    stage_spec = spec.stages[stage - 1]
    if stage_spec.kind != "refine":
        raise ValueError(f"stage {stage} is a {stage_spec.kind} stage: it builds no points")
    earlier = [
        r for r in results if r.get("kind", "step") == "step" and r.get("point_id") and stage_of(r["point_id"]) < stage
    ]
    ranked = rank_points(earlier, spec.tokens, stage_spec.rank_by, interconnect)
    if stage_spec.candidates is not None:
        ranked = [r for r in ranked if stage_spec.candidates.matches(r.point)]
    chosen = [r.point for r in ranked[: stage_spec.top_k]]
    measured = {point_from_record(r).key() for r in earlier}
    remeasure = stage_spec.iterations is not None

    new: list[SweepPoint] = []
    seen: set[str] = set()

    def add(impl: str, env: dict, options: dict, label: str, again: bool = remeasure) -> None:
        key = point_key(impl, env, options)
        if key in seen or (key in measured and not again):
            return
        seen.add(key)
        new.append(SweepPoint(point_ids.point_id(len(new), stage), label, impl, env, options, stage))

    if stage_spec.include_baseline:
        add(DEFAULT, {}, {}, BASELINE_LABEL, again=True)
    if stage_spec.axes:
        combos, _ = expand_axes(chosen, stage_spec.axes, spec.excludes)
        for impl, env, options in combos:
            add(impl, env, options, auto_label(impl, env, options))
    else:
        for point in chosen:
            add(point.impl, point.env, point.options, point.label or auto_label(point.impl, point.env, point.options))
    return new


def planned_stages(spec: SweepSpec) -> list[tuple[int, str, Unit]]:
    """The stages after stage 0 as plan.jsonl names them: index, name, and what each plans."""
    return [
        (s.index, s.name or f"stage {s.index}", "searches" if s.kind == "crossover" else "points") for s in spec.stages
    ]
