"""The interleaved confirmation at a sweep's end (sweep/planning/interleave.py): per reference (the baseline, each
fused kind's unfused reference) the A/A control, then each point that could become an answer (an NCCL environment,
a route winner, a fused kind) between two measurements of its reference, appended to interleaved.jsonl as they end.
Rank 0 picks the candidates from results.jsonl and every controller measures the same sequence. Ranks that share
GPUs (--share-gpus) make a functional check that never recommends: nothing is confirmed there."""

from __future__ import annotations

from commprof.records.files import BASELINE_REPEATS_FILE, INTERLEAVED_FILE, RESULTS_FILE, append_records, read_records
from commprof.sweep.planning import interleave
from commprof.sweep.planning.spec import SweepPoint
from commprof.sweep.running.measure import Again, SweepRun, all_gather_json, measure_point, point_status

ANSWER_WORDS = {
    interleave.ENVIRONMENT: "answer (a), the NCCL environment",
    interleave.ROUTE: "answer (b), a route",
    interleave.FUSED_KIND: "answer (c), a fused kind",
}


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
        order = interleave.sequence(found)
        start = max((int(r["point"].get("interleaved", 0)) for r in read_records(path)), default=0)
        plan = {
            "measurements": [
                {"point": m.point.to_dict(), "against": m.against, "tokens": list(m.tokens)} for m in order
            ],
            "start": start,
        }
        if found:
            labels = ", ".join(
                f"{c.point.label or c.point.point_id} ({ANSWER_WORDS[c.answer]}"
                + (f", T = {', '.join(map(str, c.tokens))}" if c.tokens != tuple(spec.tokens) else "")
                + ")"
                for c in found
            )
            progress.note(
                f"confirming {len(found)} point(s) that could become an answer beside the baseline or their unfused "
                f"reference (A, A, then B, A each; {len(order)} measurements): {labels}"
            )
            progress.add_points(len(order))
    plan = all_gather_json(plan, ctx.world_size)[0]
    for number, item in enumerate(plan["measurements"], plan["start"] + 1):
        if ctx.interrupted:
            return
        point = SweepPoint(**item["point"])
        measurement = interleave.Measurement(point, item["against"], tuple(item["tokens"]))
        label = f"{point.label or point.point_id} (interleaved, {number})"
        if ctx.is_writer:
            progress.point_started(label)
        again = Again(f"interleaved{number}", measurement.tag(number), measurement.tokens)
        records = measure_point(run, point, again)
        if any(all_gather_json(ctx.interrupted, ctx.world_size)):
            ctx.interrupted = True
            return
        if ctx.is_writer:
            append_records(path, records)
            progress.point_done(label, point_status(records))
