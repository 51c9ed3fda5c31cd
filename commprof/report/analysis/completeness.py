"""Whether a run finished what its sweep planned: points planned vs done per stage, and the stages that never ran,
counted from the plan the sweep wrote as it planned (plan.jsonl) and the records. An interrupted run is reported
as such and recommends nothing unless asked to. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from commprof.records.plan_file import PLAN_FILE, Plan
from commprof.records.run_meta import RunMeta


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
    plan_known: bool = True  # False: the run folder has no plan (a sweep before plans were recorded)
    recorded: int = 0  # without a plan: the points with a record

    @property
    def complete(self) -> bool:
        """Every planned point and search done; a run without a plan is not known to be incomplete (its note says
        the planned count is unknown)."""
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
        if not self.plan_known:
            return (
                f"{self.recorded} points recorded of a planned count unknown: the run folder has no {PLAN_FILE} "
                "(written by a commprof that did not record what its sweep planned)"
            )
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


def completeness(meta: RunMeta, records: list[dict], run_dir: str, plan: Plan | None) -> Completeness | None:
    """The run's progress against what its sweep planned (plan.jsonl); None when the run had no sweep (imports).
    A sweep's run folder without a plan (written before sweeps recorded one) has its planned counts unknown."""
    if plan is None:
        swept = meta.sweep is not None and meta.sweep.content
        return Completeness(run_dir, (), plan_known=False, recorded=_recorded(records)) if swept else None
    done_per_stage = _finished_points(records, plan)
    stages = [_points_progress(0, "stage 0", plan, done_per_stage)]
    for index, (name, unit) in sorted(plan.stages.items()):
        if unit == "searches":
            found = plan.searches.get(index)
            done = sum((index, point_id, mode) in plan.ended for point_id, mode in found or ())
            stages.append(StageProgress(index, name, None if found is None else len(found), done, "searches"))
        else:
            stages.append(_points_progress(index, name, plan, done_per_stage))
    return Completeness(run_dir, tuple(stages))


def _points_progress(index: int, name: str, plan: Plan, done: dict[int, set[str]]) -> StageProgress:
    point_ids, _ = plan.points.get(index, (None, 0))
    if point_ids is None:  # never planned: the stage before did not finish
        return StageProgress(index, name, None, 0)
    return StageProgress(index, name, len(point_ids), len(done.get(index, set()) & set(point_ids)))


def _finished_points(records: list[dict], plan: Plan) -> dict[int, set[str]]:
    """Per stage, its points whose every (T, mode) record is on disk (as a resumed sweep counts them)."""
    keys: dict[str, set] = {}
    for record in records:
        if record.get("kind") == "step" and record.get("point_id"):
            keys.setdefault(record["point_id"], set()).add((record.get("tokens"), record.get("mode")))
    return {
        index: {p for p in point_ids if len(keys.get(p, ())) >= per_point}
        for index, (point_ids, per_point) in plan.points.items()
    }


def _recorded(records: list[dict]) -> int:
    return len({r["point_id"] for r in records if r.get("kind") == "step" and r.get("point_id")})
