"""A crossover stage on one controller: every search of the stage, each measure() round in fresh worker processes.

Rank 0 decides the searches from the records so far and shares them; per round, every controller forks a worker
(commprof.replay.trial.run_crossover_round) with the setting's environment, the controllers agree on the round's status,
rank 0 appends one record per size to results.jsonl at once and shares the times, so every rank's copy of the
search asks for the same sizes next. A resumed run replays each search from the sizes already on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from commprof.records.files import RESULTS_FILE, append_plan, append_records, read_records
from commprof.records.folder import make_folders
from commprof.records.plan_file import PlannedSearch, ended_line, searches_line
from commprof.sweep.planning import crossover as cx
from commprof.sweep.planning.crossover_stage import (
    RecordOrigin,
    Search,
    measured,
    plan_sizes,
    recorded_modes,
    searches,
    size_record,
)
from commprof.sweep.planning.spec import CrossoverStage
from commprof.sweep.running.measure import (
    ControllerContext,
    SweepRun,
    agree,
    all_gather_json,
    point_env,
    run_point,
    trial_request,
)
from commprof.units import format_bytes


class Interrupted(Exception):
    """The sweep was interrupted between two rounds."""


@dataclass(frozen=True)
class StageRun:
    """What every search of one crossover stage runs with on this controller."""

    sweep: SweepRun  # the controller, the sweep and its model and TP
    stage: CrossoverStage  # the stage being searched
    sizes: list[int]  # the step's all-reduce sizes, searched beside the powers of two
    dtype: str  # the sweep's dtype (the model's unless the sweep names one)


def run_crossover_stage(run: SweepRun, stage: CrossoverStage, progress) -> None:
    """Run every search of `stage`; failures become statuses in the records, an interrupt stops after a round."""
    ctx, spec, model, tp = run.ctx, run.spec, run.model, run.tp
    results_path = ctx.run_dir / RESULTS_FILE
    shared = None
    if ctx.is_writer:
        results = read_records(results_path)
        found = searches(stage, results, ctx.backend)
        shared = {
            "searches": [s.to_dict() for s in found],
            "done": {s.point.point_id: {m: measured(results, s, m) for m in s.modes} for s in found},
            "recorded": {s.point.point_id: sorted(recorded_modes(results, s)) for s in found},
        }
    shared = all_gather_json(shared, ctx.world_size)[0]
    found = [Search.from_dict(s) for s in shared["searches"]]
    sizes = plan_sizes(spec, tp)
    dtype = model["dtype"] if spec.dtype is None else spec.dtype
    if ctx.is_writer:
        planned = [PlannedSearch(point_id=s.point.point_id, mode=m, sizes=sizes) for s in found for m in s.modes]
        append_plan(ctx.run_dir, [searches_line(stage.index, planned)])
        progress.add_points(sum(len(s.modes) for s in found))
        if not found:
            progress.note(f'crossover stage "{stage.name}": no implementation other than the baseline ran ok: nothing')
    for search in found:
        if ctx.is_writer:
            skipped = [
                size_record(search, stage, mode, {"status": "unsupported", "message": why}, _origin(ctx, dtype))
                for mode, why in search.skipped.items()
                if mode not in shared["recorded"][search.point.point_id]
            ]
            append_records(results_path, skipped)
            for mode, why in search.skipped.items():
                progress.note(f"  crossover {search.point.label}: {mode} mode not searched: {why}")
        for mode in search.modes:
            done = {int(k): tuple(v) for k, v in shared["done"][search.point.point_id][mode].items()}
            if ctx.is_writer:
                progress.point_started(f"crossover {search.point.label} ({mode})")
            try:
                found_here = _search(StageRun(run, stage, sizes, dtype), search, mode, done)
            except Interrupted:
                ctx.interrupted = True
                return
            if ctx.is_writer:
                append_plan(ctx.run_dir, [ended_line(stage.index, search.point.point_id, mode)])
                label = f"crossover {search.point.label} ({mode})"
                progress.point_done(label, "ok" if found_here.times else "no size timed")
                progress.note(f"    {search_summary(found_here)}")


def _search(run: StageRun, search: Search, mode: str, done: dict) -> cx.Crossover:
    """One search in one mode: each measure() round in fresh workers, the sizes `done` already timed reused."""
    ctx, stage = run.sweep.ctx, run.stage
    results_path = ctx.run_dir / RESULTS_FILE
    point_dir = make_folders(ctx.run_dir, "points", search.point.point_id)
    rounds = {"n": 0}

    def measure(_impl: str, wanted: list[int]) -> dict[int, tuple[float, float]]:
        rounds["n"] += 1
        cached = {n: done[n] for n in wanted if n in done}
        missing = [n for n in wanted if n not in done]
        if not missing:
            return cached
        entries = _round(run, search, mode, missing, rounds["n"], point_dir)
        if any(all_gather_json(ctx.interrupted, ctx.world_size)):
            raise Interrupted  # a round cut short is no result: it runs again on resume
        times = None
        if ctx.is_writer:
            append_records(
                results_path,
                [
                    size_record(search, stage, mode, {**e, "search_round": rounds["n"]}, _origin(ctx, run.dtype))
                    for e in entries
                ],
            )
            times = {e["bytes"]: (e["impl_us"], e["baseline_us"]) for e in entries if e["status"] == "ok"}
        times = all_gather_json(times, ctx.world_size)[0]
        return cached | {int(n): tuple(t) for n, t in times.items()}

    return cx.search(
        search.point.label,
        mode,
        measure,
        plan_sizes=run.sizes,
        bounds=cx.SearchBounds.of(stage),
    )


def _round(run: StageRun, search: Search, mode: str, sizes: list[int], number: int, point_dir: Path) -> list[dict]:
    """One measure() round on this rank, in a fresh worker; rank 0 returns one entry per size (failures too)."""
    ctx, server, stage = run.sweep.ctx, run.sweep.server, run.stage
    request = trial_request(run.sweep, search.point, point_dir)
    request = replace(
        request,
        store_prefix=f"{request.store_prefix}/{mode}/r{number}",
        result_path=str(point_dir / f"{mode}.r{number}.rank{ctx.rank}.jsonl"),
        modes=[mode],
        crossover={
            "baseline": search.baseline.to_dict(),
            "sizes": sizes,
            "mode": mode,
            "rounds": stage.rounds,
            "warmup": stage.warmup,
        },
    )
    Path(request.result_path).unlink(missing_ok=True)
    outcome = run_point(ctx, server, request, point_env(ctx, search.point, None, ""), point_dir)
    status, message = agree(all_gather_json({"status": outcome.status, "message": outcome.message}, ctx.world_size))
    if not ctx.is_writer:
        return []
    by_size = {int(e["bytes"]): e for e in outcome.entries if "bytes" in e}
    entries = []
    for nbytes in sizes:
        entry = by_size.get(nbytes)
        if entry is None or (status != "ok" and entry["status"] == "error"):
            entry = {"bytes": nbytes, "status": "error" if status == "ok" else status}
            entry["message"] = message if status != "ok" else "the workers ended without a result for this size"
        entries.append(entry)
    return entries


def _origin(ctx: ControllerContext, dtype: str) -> RecordOrigin:
    return RecordOrigin(
        source="measured",
        run_id=ctx.run_id,
        backend=ctx.backend,
        world_size=ctx.world_size,
        dtype=dtype,
        time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def search_summary(found: cx.Crossover) -> str:
    """The search in a few words: where the implementation wins, over how many sizes and rounds."""
    runs = ", ".join(f"{format_bytes(a)}–{format_bytes(b)}" for a, b in found.winning_sizes) or "nowhere"
    return f"wins {runs} ({len(found.times)} sizes, {found.rounds} rounds)"
