"""What rank 0 shows and stores around a sweep: progress, the run's meta.json, and the final table."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from commprof.planner.plan import SITE_KINDS
from commprof.records.files import RESULTS_FILE, read_records
from commprof.records.point_ids import BASELINE_POINT_ID
from commprof.records.schema import EAGER_INCLUDES, EAGER_INCLUDES_WHY, GRAPH_FIRST, MODES
from commprof.stats import median, tail
from commprof.sweep.planning.spec import SweepSpec
from commprof.sweep.running.measure import point_status
from commprof.sweep.running.runner import SweepProgress
from commprof.terminal import one_line, plain_console, styled
from commprof.units import format_bytes


class SweepConsole(SweepProgress):
    """A rich progress bar (points done / total, current point, elapsed, ETA) on rank 0; silent elsewhere."""

    def __init__(
        self,
        enabled: bool = True,
        estimate: Callable[..., list[str]] | None = None,
        steps: tuple[int, int] = (0, 0),
    ):
        self.enabled = enabled
        # The sweep's size, estimated duration and its basis, from a StepCost (none given: the assumed one), and
        # the stage-0 (iterations, warmup) a measured point's records are read with.
        self.estimate, self.steps, self.measured = estimate, steps, False
        self.console = plain_console(stderr=True)
        self.progress: Progress | None = None
        self.task = None
        self.started = time.monotonic()

    def start(self, total: int, run_dir: Path) -> None:
        if not self.enabled:
            return
        self.console.print(styled(("commprof", "bold"), f" sweep → {run_dir}"))
        for line in self.estimate() if self.estimate else []:
            self.console.print(f"  {line}")
        self.progress = Progress(
            TextColumn("{task.description}", style="cyan", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task("starting", total=total)

    def add_points(self, count: int) -> None:
        if self.progress is not None and count:
            self.progress.update(self.task, total=self.progress.tasks[0].total + count)

    def point_started(self, label: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=one_line(label))

    def point_done(self, label: str, status: str) -> None:
        if self.progress is not None:
            self.progress.advance(self.task)
            style = (
                "green" if status == "ok" else "yellow" if status in ("unsupported", "done before resume") else "red"
            )
            self.progress.console.print(styled("  ", (f"{status:<18}", style), f" {one_line(label)}"))

    def point_measured(self, records: list[dict[str, Any]]) -> None:
        """After the first point that timed every T: the estimate again, from its measured start-up and steps."""
        from commprof.sweep.planning.dryrun import cost_from_records

        if not self.enabled or self.estimate is None or self.measured:
            return
        cost = cost_from_records(records, *self.steps)
        if cost is None:
            return
        self.measured = True
        for index, line in enumerate(self.estimate(cost)):
            self.note(("  after the first point: " if index == 0 else "  ") + line)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()

    def note(self, text: str, style: str = "") -> None:
        """One line for the person at the terminal, printed as given (never read as markup)."""
        if self.enabled:
            self.console.print(styled((text, style)))

    def print_summary(self, run_dir: Path, spec: SweepSpec) -> None:
        """Every point: status, eager and graph median step time per T, speed-up against the baseline."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            records = read_records(run_dir / RESULTS_FILE)
        out = plain_console(pipe_width=200)
        out.print(summary_table(records))
        collectives = per_collective_table(records)
        if collectives is not None:
            out.print(collectives)
        out.print(
            f"results: {run_dir / RESULTS_FILE}\nrender the report: python -m commprof report {shlex.quote(str(run_dir))}"
        )
        profiles = sorted(run_dir.glob("points/*/profile/T*"))
        if profiles:
            out.print(
                f"profiler traces: {run_dir}/points/<point>/profile/T<T>/ ({len(profiles)} folders); read one with "
                f"python -m commprof trace {shlex.quote(str(profiles[0]))}",
            )


def _fmt_us(stats: dict | None) -> str:
    if not stats:
        return "—"
    value = stats["median"]
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.1f} µs"


def summary_table(records: list[dict[str, Any]]) -> Table:
    """The sweep at a glance: one row per point, eager / graph medians per T, speed-up vs the baseline."""
    steps = [r for r in records if r.get("kind") == "step"]
    tokens = sorted({r["tokens"] for r in steps})
    modes = [m for m in MODES if any(r["mode"] == m and r["status"] != "unsupported" for r in steps)] or ["eager"]
    by_point: dict[str, dict] = {}
    for r in steps:
        entry = by_point.setdefault(r["point_id"], {"label": r["point"]["label"], "records": [], "cells": {}})
        entry["records"].append(r)
        entry["cells"][(r["tokens"], r["mode"])] = r
    compare = len(by_point) > 1
    backends = ", ".join(sorted({r.get("backend") or "?" for r in steps}))
    table = Table(title=f"commprof sweep, measured on {backends}: median time of one whole step (all its collectives)")
    table.add_column("point", no_wrap=True)
    table.add_column("configuration", no_wrap=True)
    table.add_column("status", min_width=6)
    for t in tokens:
        for mode in modes:
            header = f"T={t} eager ({EAGER_INCLUDES})" if mode == "eager" else f"T={t} {mode}"
            table.add_column(header, justify="right", no_wrap=True)
        if compare:
            table.add_column(f"T={t} vs base", justify="right", no_wrap=True)
    base = by_point.get(BASELINE_POINT_ID)
    for point_id, entry in by_point.items():
        row = [point_id, Text(one_line(entry["label"])), point_status(entry["records"])]
        for t in tokens:
            row += [_cell(entry["cells"].get((t, m))) for m in modes]
            if compare:
                row.append(_speedup(entry, base, t, modes))
        table.add_row(*row)
    notes = [f"eager: includes {EAGER_INCLUDES_WHY}"] if "eager" in modes else []
    notes += ["graph mode: not measurable on CPU ranks (CUDA graphs need GPUs)"] if modes == ["eager"] else []
    refused: dict[str, list[str]] = {}
    for point_id, entry in by_point.items():
        if all(r["status"] == "unsupported" for r in entry["records"]):
            refused.setdefault(str(entry["records"][0].get("message") or "unsupported"), []).append(point_id)
    notes += [f"n/a, never timed: {reason} ({', '.join(ids)})" for reason, ids in refused.items()]
    if notes:
        table.caption = Text("\n".join(notes))
    return table


def per_collective_table(records: list[dict[str, Any]], point_id: str = BASELINE_POINT_ID) -> Table | None:
    """Per-collective latency of one point (eager, where ops are timed one by one), grouped by site kind."""
    rows: dict[str, dict[int, list]] = {}
    sizes: dict[tuple[str, int], int] = {}
    tokens, words = [], set()
    for r in records:
        if r.get("point_id") != point_id or r["mode"] != "eager" or r["status"] != "ok" or not r.get("op_us"):
            continue
        tokens.append(r["tokens"])
        ops = r["op_us"]
        word, tails = tail(ops, r.get("iterations") or 0)
        words.add(word)
        tails = tails or [None] * len(ops["sites"])  # a record written before the max was kept
        for site, nbytes, op_median, op_tail in zip(ops["sites"], ops["bytes"], ops["median"], tails):
            # The draft model's ops are their own rows: draft and verify communication apart.
            kind = ("draft " if site.startswith("draft.") else "") + site.rsplit(".", 1)[-1]
            rows.setdefault(kind, {}).setdefault(r["tokens"], []).append((op_median, op_tail))
            sizes[(kind, r["tokens"])] = max(nbytes, sizes.get((kind, r["tokens"]), 0))
    if not rows:
        return None
    tokens = sorted(set(tokens))
    word = " / ".join(sorted(words))
    table = Table(title=f"per collective, point {point_id}, eager: median of the ops' medians ({word} of the worst op)")
    table.add_column("site", no_wrap=True)
    table.add_column("ops", justify="right")
    for t in tokens:
        table.add_column(f"T={t} size", justify="right", no_wrap=True)
        table.add_column(f"T={t} median", justify="right", no_wrap=True)
        table.add_column(f"T={t} {word}", justify="right", no_wrap=True)
    order = [*SITE_KINDS, *(f"draft {kind}" for kind in SITE_KINDS)]
    for kind in sorted(rows, key=lambda k: order.index(k) if k in order else len(order)):
        count = len(next(iter(rows[kind].values())))
        row = [kind, str(count)]
        for t in tokens:
            values = rows[kind].get(t, [])
            if not values:
                row += ["—"] * 3
                continue
            tails = [v[1] for v in values if v[1] is not None]
            row += [
                format_bytes(sizes[(kind, t)]),
                _fmt_us({"median": median([v[0] for v in values])}),
                _fmt_us({"median": max(tails)} if tails else None),
            ]
        table.add_row(*row)
    return table


def _cell(record: dict | None) -> str:
    if record is None:
        return "—"
    if record["status"] == "ok":
        return _fmt_us(record.get("step_us"))
    return record["status"].replace("unsupported", "n/a")


def _speedup(entry: dict, base: dict | None, tokens: int, modes: list[str]) -> str:
    """Baseline median / this point's median: graph mode where both captured, else eager, marked "(eager)"
    when the table also shows graph results, so the column never mixes modes without saying so."""
    for mode in GRAPH_FIRST:
        mine = entry["cells"].get((tokens, mode))
        theirs = base["cells"].get((tokens, mode)) if base else None
        if mine and theirs and mine["status"] == "ok" and theirs["status"] == "ok":
            ratio = f"{theirs['step_us']['median'] / mine['step_us']['median']:.2f}×"
            return f"{ratio} (eager)" if mode == "eager" and "graph" in modes else ratio
    return "—"
