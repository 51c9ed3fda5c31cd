"""The interleaved confirmation at a sweep's end (sweep/planning/interleave.py): the A/A control, then each point
that could become the answer between two measurements of the baseline, appended to interleaved.jsonl as they end.
Rank 0 picks the candidates from results.jsonl and every controller measures the same sequence. Ranks that share
GPUs (--share-gpus) make a functional check that never recommends: nothing is confirmed there."""

from __future__ import annotations

from commprof.records.files import BASELINE_REPEATS_FILE, INTERLEAVED_FILE, RESULTS_FILE, append_records, read_records
from commprof.sweep.planning import interleave
from commprof.sweep.planning.spec import SweepPoint
from commprof.sweep.running.measure import Again, SweepRun, all_gather_json, measure_point, point_status


def confirm(run: SweepRun, progress, shared_gpus: bool = False) -> None:
    """Measure the confirmation's sequence on every controller (collective); rank 0 appends its records."""
    ctx, spec = run.ctx, run.spec
    path = ctx.run_dir / INTERLEAVED_FILE
    plan = None
    if ctx.is_writer:
        repeats = ctx.run_dir / BASELINE_REPEATS_FILE
        found = []
        if not shared_gpus:
            again = read_records(repeats) if repeats.exists() else []
            found = interleave.candidates(spec, read_records(ctx.run_dir / RESULTS_FILE), again)
        order = interleave.sequence(interleave.report_baseline(spec), found)
        start = max((int(r["point"].get("interleaved", 0)) for r in read_records(path)), default=0)
        plan = {"points": [p.to_dict() for p in order], "start": start}
        if found:
            labels = ", ".join(p.label or p.point_id for p in found)
            progress.note(
                f"confirming {len(found)} point(s) that could become the answer beside the baseline "
                f"(A, A, then B, A each): {labels}"
            )
            progress.add_points(len(order))
    plan = all_gather_json(plan, ctx.world_size)[0]
    for number, point in enumerate((SweepPoint(**p) for p in plan["points"]), plan["start"] + 1):
        if ctx.interrupted:
            return
        label = f"{point.label or point.point_id} (interleaved, {number})"
        if ctx.is_writer:
            progress.point_started(label)
        records = measure_point(run, point, Again(f"interleaved{number}", {"interleaved": number}))
        if any(all_gather_json(ctx.interrupted, ctx.world_size)):
            ctx.interrupted = True
            return
        if ctx.is_writer:
            append_records(path, records)
            progress.point_done(label, point_status(records))
