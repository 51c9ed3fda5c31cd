"""The baseline measured again over a sweep ([run] baseline_every): after every N points or M minutes and at the
end, A/B/.../A, its records in baseline-repeats.jsonl, so the report can give the run's drift
(report/analysis/drift.py)."""

from __future__ import annotations

import time

from commprof.records.files import BASELINE_REPEATS_FILE, append_records, read_records
from commprof.sweep.planning.interleave import report_baseline
from commprof.sweep.planning.spec import SweepPoint
from commprof.sweep.running.measure import Again, SweepRun, all_gather_json, measure_point, point_status


class BaselineRepeats:
    """The baseline measured again after every N points or M minutes and at the end ([run] baseline_every),
    its records appended to baseline-repeats.jsonl: the run's drift, A/B/.../A. Off without baseline_every.

    The baseline is the report's ([report] baseline), else the sweep's own; minutes are read on rank 0's clock
    and the verdict shared, so every controller measures the same repeats."""

    def __init__(self, run: SweepRun, progress, done: set):
        ctx, spec = run.ctx, run.spec
        self.run, self.ctx, self.spec, self.progress = run, ctx, spec, progress
        self.point = report_baseline(spec)
        self.measured = 0  # re-measurements so far (a resumed run goes on numbering where it stopped)
        if spec.baseline_every is not None:
            earlier = ctx.run_dir / BASELINE_REPEATS_FILE
            if ctx.is_writer and earlier.exists():
                self.measured = max((int(r["point"].get("repeat", 0)) for r in read_records(earlier)), default=0)
            self.measured = all_gather_json(self.measured, ctx.world_size)[0]
        self.since = 0  # points since the baseline was last measured
        self.seen = self.point.point_id in done  # the baseline has been measured once (repeats start after it)
        self.last = time.monotonic()

    def after(self, point: SweepPoint) -> None:
        """Called after every point; measures the baseline again when it is due."""
        if self.spec.baseline_every is None or self.ctx.interrupted:
            return
        if point.point_id == self.point.point_id and point.stage == self.point.stage:
            self.seen, self.since, self.last = True, 0, time.monotonic()
            return
        self.since += 1
        due = self.seen and self.spec.baseline_every.due(self.since, time.monotonic() - self.last)
        if all_gather_json(due, self.ctx.world_size)[0]:
            self.measure()

    def at_end(self) -> None:
        """The closing A: once more, unless the baseline was just measured."""
        if self.spec.baseline_every is not None and self.seen and self.since:
            self.measure()

    def measure(self) -> None:
        self.measured += 1
        label = f"{self.point.label} (again, {self.measured})"
        if self.ctx.is_writer:
            self.progress.add_points(1)
            self.progress.point_started(label)
        records = measure_point(self.run, self.point, Again(f"again{self.measured}", {"repeat": self.measured}))
        if self.ctx.is_writer:
            append_records(self.ctx.run_dir / BASELINE_REPEATS_FILE, records)
            self.progress.point_done(label, point_status(records))
        self.since, self.last = 0, time.monotonic()
