"""Whether a run finished what its sweep planned: points planned vs done per stage, and the stages that never ran,
rebuilt from the sweep in meta.json and the records (the stages' points are a pure function of the earlier
records: SweepSpec.refine). An interrupted run is reported as such and recommends nothing unless asked to. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from commprof.errors import UsageError
from commprof.proposable import interconnect_of
from commprof.records.schema import MODES


@dataclass(frozen=True)
class StageProgress:
    """One stage: its name, the points it planned (None: not known, its stage before did not finish) and done."""

    index: int
    name: str
    planned: int | None
    done: int
    unit: str = "points"  # a crossover stage counts its searches (setting x mode), finished or not

    @property
    def title(self) -> str:
        return f'stage {self.index} "{self.name}"' if self.index else "stage 0"


@dataclass(frozen=True)
class Completeness:
    """What a run planned and what it finished."""

    run_dir_hint: str  # how to resume it
    stages: tuple[StageProgress, ...]

    @property
    def complete(self) -> bool:
        return all(s.planned is not None and s.done >= s.planned for s in self.stages)

    @property
    def planned(self) -> int:
        """Points planned (a crossover stage's searches are no points)."""
        return sum(s.planned or 0 for s in self.stages if s.unit == "points")

    @property
    def done(self) -> int:
        return sum(s.done for s in self.stages if s.unit == "points")

    @property
    def not_run(self) -> list[str]:
        return [s.name for s in self.stages if s.done == 0 and s.planned != 0]

    def summary(self) -> str:
        """ "12 of 30 points done (stage 0 "axes": 12 of 30); stages not run: channels, confirm"."""
        parts = [
            f"{s.title}: {s.done} of {s.planned if s.planned is not None else '?'}"
            + (f" {s.unit}" if s.unit != "points" else "")
            for s in self.stages
            if s.done or s.planned
        ]
        text = f"{self.done} of {self.planned}{'+' if any(s.planned is None for s in self.stages) else ''} points done"
        text += f" ({'; '.join(parts)})" if parts else ""
        if self.not_run:
            text += f"; stages not run: {', '.join(self.not_run)}"
        return text

    def sentence(self, allow_partial: bool) -> str:
        """The line every recommendation of an incomplete run carries."""
        if allow_partial:
            return (
                f"INCOMPLETE RUN: {self.summary()}. Recommended from what finished (--allow-partial): a later "
                f"stage might have changed it. Resume with --resume {self.run_dir_hint} to finish it."
            )
        return (
            f"INCOMPLETE RUN: {self.summary()}. Nothing is recommended from an unfinished run: {self.how_to_finish()}."
        )

    def how_to_finish(self) -> str:
        """What would let the run answer."""
        return (
            f"resume it with --resume {self.run_dir_hint}, or report with --allow-partial to recommend from what "
            "finished"
        )


def completeness(meta: dict, records: list[dict], run_dir: str) -> Completeness | None:
    """The run's progress against its sweep (None when meta.json holds no sweep to compare with, e.g. imports)."""
    from commprof.sweep.config import parse_sweep
    from commprof.sweep.resume import completed_point_ids
    from commprof.sweep.staging import refine

    sweep = meta.get("sweep") if isinstance(meta.get("sweep"), dict) else {}
    if not sweep.get("content"):
        return None
    plan = meta.get("plan") or {}
    try:
        spec = parse_sweep(sweep["content"], sweep.get("path"))
        if plan.get("tokens"):
            spec = spec.with_overrides(tokens=plan["tokens"])
    except (UsageError, TypeError, ValueError):
        return None
    steps = [r for r in records if r.get("kind") == "step" and r.get("point_id")]
    modes = {r.get("mode") for r in steps} or set(MODES)
    done = completed_point_ids(steps, len(spec.tokens) * len(modes))
    stages = [StageProgress(0, "stage 0", len(spec.points), sum(p.point_id in done for p in spec.points))]
    finished = stages[0].done >= len(spec.points)
    for index, stage in enumerate(spec.stages, start=1):
        if stage.kind == "crossover":
            stages.append(_searches_progress(spec, stage, records, meta) if finished else _unknown(stage, "searches"))
            finished = stages[-1].planned is not None and stages[-1].done >= stages[-1].planned
            continue
        ran = {r["point_id"] for r in steps if str(r["point_id"]).startswith(f"s{index}-")}
        planned = None
        if finished:
            try:
                planned = len(refine(spec, index, records, interconnect_of(meta.get("topology"))))
            except (UsageError, ValueError, KeyError):
                planned = None
        stages.append(StageProgress(index, stage.name or f"stage {index}", planned, len(ran & done)))
        finished = planned is not None and stages[-1].done >= planned
    return Completeness(run_dir, tuple(stages))


def _unknown(stage, unit: str) -> StageProgress:
    return StageProgress(stage.index, stage.name or f"stage {stage.index}", None, 0, unit)


def _searches_progress(spec, stage, records: list[dict], meta: dict) -> StageProgress:
    """A crossover stage: its searches (setting x mode) and how many ran to their end (replayed from records)."""
    from commprof.sweep.crossover_stage import finished, plan_sizes, searches

    plan = meta.get("plan") or {}
    try:
        sizes = plan_sizes(spec, int(plan.get("tp") or spec.tp or meta.get("world_size") or 1))
    except (UsageError, TypeError, ValueError):
        return _unknown(stage, "searches")
    backend = str(meta.get("backend") or "nccl")
    found = [(s, mode) for s in searches(stage, records, backend) for mode in s.modes]
    done = sum(finished(records, s, mode, stage, sizes) for s, mode in found)
    return StageProgress(stage.index, stage.name or f"stage {stage.index}", len(found), done, "searches")
