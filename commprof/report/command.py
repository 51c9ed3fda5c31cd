"""`commprof report RUN_DIR [RUN_DIR ...] --out DIR`: render one run, or several side by side, as HTML + exports."""

from __future__ import annotations

import gc
import hashlib
import importlib
import warnings
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from commprof.errors import UsageError
from commprof.records.files import (
    RESULTS_FILE,
    duplicated_measurements,
    ensure_writable_dir,
    read_records,
    read_run_files,
)
from commprof.records.run_meta import RunMeta, read_meta
from commprof.report.analysis.engine_dispatch import DEFAULT_ENGINES
from commprof.report.worker import Worker, echo, figure_worker, hold_until_exit

if TYPE_CHECKING:
    from commprof.report.flags import ReportFlags

# This process imports what the command line needs, no more: the render (its own process) imports pandas and the
# analysis, which this one would otherwise take apart again when it exits (a tenth of a small report's CPU).


def newest_run(parent: Path) -> Path:
    """The most recent run folder under `parent` (meta.json "created", else results.jsonl's modification time)."""
    if not parent.is_dir():
        raise UsageError(f"--latest {parent}: no such directory")
    runs = [p for p in parent.iterdir() if (p / RESULTS_FILE).is_file()]
    if not runs:
        raise UsageError(f"--latest {parent}: no run folder (one with {RESULTS_FILE}) in it; run a sweep first")

    def created(run: Path) -> tuple[str, float]:
        try:
            stamp = read_meta(run).created or ""
        except UsageError:
            stamp = ""
        return stamp, (run / RESULTS_FILE).stat().st_mtime

    return max(runs, key=created)


def load_run(run_dir: Path) -> tuple[str, list[dict], RunMeta, list[str]]:
    """(run id, records, meta, warnings) of a run folder; UsageError with one clear line when it cannot be used."""
    if not run_dir.exists():
        raise UsageError(f"{run_dir}: no such run directory")
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a directory (give the run folder that holds {RESULTS_FILE})")
    results = run_dir / RESULTS_FILE
    if not results.is_file():
        raise UsageError(f"{run_dir}: no {RESULTS_FILE} here; is this a run folder (runs/<run-id>/)?")
    from commprof.report.analysis.ops import OP_STATISTICS_READ

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = read_records(results, OP_STATISTICS_READ)  # the other statistics checked, then dropped
    notes = [str(w.message) for w in caught]
    if not records:
        raise UsageError(f"{results}: empty, no records (the run wrote nothing; did it start?)")
    duplicated = duplicated_measurements(records)
    if duplicated:
        examples = ", ".join(f"{p} T={t} {m} ({n}x)" for (p, t, m), n in list(duplicated.items())[:3])
        notes.append(
            f"{results}: {len(duplicated)} (point, T, mode) measured more than once, e.g. {examples}: two sweeps "
            "wrote this run (a --resume of a run still going?); their timings may disturb each other"
        )
    meta = read_meta(run_dir)
    run_id = str(meta.run_id or records[0].get("run_id") or run_dir.name)
    return run_id, records, meta, notes


def default_out(run_ids: list[str]) -> Path:
    """reports/<run-id>, or reports/<id>_vs_<id>... for several (shortened to stay a valid folder name)."""
    name = "_vs_".join(run_ids)
    if len(name) > 200:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{run_ids[0][:150]}_vs_{len(run_ids) - 1}_more-{digest}"
    return Path("reports") / name


@click.command(
    help="Render a run (or several, side by side) as reports/<run-id>/index.html with the files "
    "that apply it: recommend.env, nccl_tuner.conf, engine_flags.txt, routing.txt, summary.json, results.csv, "
    "and nccl-tests-style tables per point."
)
@click.argument("run_dirs", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--latest",
    "latest",
    type=click.Path(path_type=Path),
    default=None,
    help="Render the newest run folder under this parent (e.g. runs/).",
)
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for the report's files (default reports/<run-id>/).",
)
@click.option(
    "--compute-ms",
    default=None,
    help="Compute time of the target forward pass per T, ms: one number or T=ms pairs, e.g. 4=5.0,8=5.2.",
)
@click.option("--draft-ms", default=None, type=str, help="Draft time per speculative step, ms (default: not given, 0).")
@click.option("--accept", default=None, help="Accept lengths to project (default 1.3,2.0,3.0).")
@click.option("--baseline", default=None, help="Baseline point id (default p000, NCCL's defaults).")
@click.option(
    "--engine",
    "engines",
    multiple=True,
    help="The serving engine whose all-reduce dispatch to reproduce op by op, e.g. sglang==0.5.23 (repeatable; "
    "default: the engines installed where the run ran, else here, else " + " and ".join(DEFAULT_ENGINES) + ").",
)
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Recommend from an interrupted run's finished points (by default an incomplete run recommends nothing).",
)
@click.option(
    "--observed-step-ms",
    default=None,
    help="The engine's measured communication per verify step, ms (one number, or T=ms pairs, e.g. 4=25): "
    "set beside the prediction, which it confirms or contradicts.",
)
@click.option(
    "--observed",
    "observed_dir",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="An engine trace folder (PyTorch profiler, read as `commprof trace` reads it): its median communication "
    "per step is set beside the prediction.",
)
@click.option(
    "--from-summary",
    "from_summary",
    type=click.Path(path_type=Path),
    default=None,
    help="Render every output again from a report's summary.json alone (its Decisions): index.html, summary.json "
    "and each run's files (results.csv and the nccl-tests tables are the records': they are not re-made). Needs --out.",
)
def report(
    run_dirs,
    latest,
    out,
    compute_ms,
    draft_ms,
    accept,
    baseline,
    engines,
    allow_partial,
    observed_step_ms,
    observed_dir,
    from_summary,
):
    if from_summary is not None:
        given = run_dirs or latest or compute_ms or draft_ms or accept or baseline or engines or allow_partial
        if given or observed_step_ms or observed_dir:
            raise UsageError("--from-summary renders a summary.json alone: give only --out with it")
        if out is None:
            raise UsageError("--from-summary needs --out DIR (a new folder: the report it came from stays as it is)")
        _from_summary(from_summary, out)
        return
    # Records are acyclic JSON: the cyclic collector only re-scans them (a fifth of a 10,000-record render).
    gc.disable()
    try:
        given = (compute_ms, draft_ms, accept, baseline, tuple(engines), allow_partial)
        # The render runs in a process of its own, which ends when it is done: the system takes back its records
        # at once, where freeing them one by one took a tenth of the render.
        render = partial(_render, run_dirs, latest, out, given, (observed_step_ms, observed_dir))
        with Worker(render, interruptible=True) as process:
            process.jobs[0].result()
    finally:
        gc.enable()


def _render(run_dirs, latest, out, given: tuple, observe: tuple[str | None, Path | None]) -> None:
    """The report, in its own process: `given`, ReportFlags' fields as the command line gave them."""
    from commprof.report.flags import ReportFlags

    flags = ReportFlags(*given)
    observed = observation(*observe)
    from commprof.report.analysis.engine_dispatch import TABLES, parse_engine

    for engine in flags.engines:  # a malformed one, or a version without a table, is a one-line error before any work
        if parse_engine(engine) not in TABLES:
            known = ", ".join(f"{name}=={version}" for name, version in sorted(TABLES))
            raise UsageError(f"--engine {engine}: commprof has no dispatch table for it (it knows {known})")
    if latest is not None:
        run_dirs = (*run_dirs, newest_run(latest))
    if not run_dirs:
        raise UsageError("give a run folder (runs/<run-id>) or --latest runs/")
    # Both workers are forked before the records are read (a process forked later copies each page either touches),
    # and after the modules all three run are imported (each would import them again): the figure worker imports
    # matplotlib and draws the figures beside the page; the other writes what it is sent.
    importlib.import_module("commprof.report.write")
    with figure_worker(), Worker() as files:
        _report(run_dirs, out, flags, observed, files)


def _from_summary(path: Path, out: Path) -> None:
    """Every output of a report rendered from its summary.json: the same Decisions, the same files."""
    from commprof.report.exports.decision_files import decision_lines, observed_lines
    from commprof.report.write import render_from_summary

    with figure_worker():
        paths, report = render_from_summary(path, out)
    for decision in report.runs:  # as the report that wrote it printed them: the observation first
        for line in observed_lines(decision):
            echo(line)
    echo(f"wrote {paths['index.html']} (from {path})")
    for decision in report.runs:
        for line in ([decision.run.name] if len(report.runs) > 1 else []) + decision_lines(decision):
            echo(line)


def observation(step_ms: str | None, trace_dir: Path | None) -> tuple[dict, str, int | None]:
    """--observed-step-ms / --observed as ({T or None: ms}, where it comes from, the traces' world size or None);
    ({}, "", None) when neither is given."""
    from commprof.report.analysis.observed import parse_observed_ms

    if step_ms is not None and trace_dir is not None:
        raise UsageError("give one of --observed-step-ms and --observed, not both")
    if step_ms is not None:
        return parse_observed_ms(step_ms), f"given with --observed-step-ms {step_ms}", None
    if trace_dir is None:
        return {}, "", None
    from commprof.trace.analysis import TraceAnalysis
    from commprof.trace.command import input_files
    from commprof.trace.events import load_traces

    files, _ = input_files((str(trace_dir),))
    if not files:
        raise UsageError(f"--observed {trace_dir}: no PyTorch profiler trace (.json, .json.gz) there")
    traces = load_traces(files)
    account = TraceAnalysis(traces).account()
    comm_us = account["step"]["comm_us_median"]
    if not comm_us:
        raise UsageError(f"--observed {trace_dir}: no communication found in the traces (`commprof trace` says why)")
    steps = account["steps"]
    return (
        {None: comm_us / 1000.0},
        (
            f"engine trace {trace_dir} (commprof trace: median communication of {steps['alike']} alike steps of "
            f"{steps['collectives_per_step']} collectives, rank {steps['reference_rank']})"
        ),
        next((t.world_size for t in traces if t.world_size), None),
    )


def _report(
    run_dirs,
    out,
    flags: ReportFlags,
    observed=({}, "", None),
    files: Worker | None = None,
) -> None:
    """`files`: the worker that writes results.csv and the nccl-tests tables (write_report)."""
    loaded = [load_run(Path(d)) for d in run_dirs]
    hold_until_exit(loaded)
    for _, _, _, notes in loaded:
        for note in notes:
            echo(f"commprof: warning: {note}", err=True)

    from commprof.report.analysis.compared import incomparable
    from commprof.report.analysis.run_analysis import RunExtras, analyze_run
    from commprof.report.flags import report_options, sweep_options
    from commprof.report.write import check_report_target, write_report

    cli = asdict(flags)
    out_dir = out or default_out([run_id for run_id, *_ in loaded])
    check_report_target(out_dir)  # before the analysis: a link, or a folder of other files, is refused
    ensure_writable_dir(out_dir.parent, "--out")  # the report is rendered beside it, then swapped in
    runs = []
    for (run_id, records, meta, _), run_dir in zip(loaded, run_dirs):
        options = replace(report_options(cli, sweep_options(meta)), observed=observed[0], observed_source=observed[1])
        if observed[0]:  # the box an observation the model does not explain is explained on (commprof explain)
            from commprof.explain.run_box import run_box

            box, why = run_box(meta)
            options = replace(options, observed_box=box, observed_box_note=why)
        with warnings.catch_warnings(record=True) as caught:  # a torn last line: one warning line, as for records
            warnings.simplefilter("always")
            extras = RunExtras(*read_run_files(Path(run_dir)))
        for note in caught:
            echo(f"commprof: warning: {note.message}", err=True)
        runs.extend(analyze_run(run_id, records, meta, options, str(run_dir), extras))
    hold_until_exit(runs)
    for run in runs:
        check_observed(run, observed[0], observed[2])
    mismatch = incomparable(runs)
    if mismatch:
        echo(f"commprof: warning: {mismatch}", err=True)
    from commprof.report.analysis.decide import decide
    from commprof.report.exports.decision_files import decision_lines, observed_lines

    # Decided once, beside the worker that writes the tables: the files, the page and the terminal render that answer.
    paths, report = write_report(runs, out_dir, decide, files)
    decisions = report.runs
    hold_until_exit(decisions)
    for run in runs:
        if run.all_failed:
            echo(f"commprof: {run.name}: every point failed; the report says so", err=True)
        if run.completeness is not None and not run.completeness.complete:
            echo(f"commprof: warning: {run.name}: {run.completeness.sentence(flags.allow_partial)}", err=True)
        if run.drift is not None and run.drift.exceeded:
            echo(f"commprof: warning: {run.name}: {run.drift.sentence()}", err=True)
    for decision in decisions:
        for line in observed_lines(decision):
            echo(line)
    echo(f"wrote {paths['index.html']}")
    echo(
        f"      {out_dir}/ also holds summary.json, results.csv, recommend.env, nccl_tuner.conf, "
        "engine_flags.txt, routing.txt, nccl-tests/"
    )
    for run, decision in zip(runs, decisions):  # the same answer lines the sweep and `simulate` end with
        if not run.steps.empty:
            for line in ([run.name] if len(runs) > 1 else []) + decision_lines(decision):
                echo(line)
            if decision.plan is not None:
                echo(f"  measure it: {decision.plan.command} (confirm.toml is in {out_dir / decision.folder})")


def check_observed(run, observed: dict, world_size: int | None) -> None:
    """An observation of another run is refused: a T the run did not step, or traces of another world size."""
    if run.steps.empty or not observed:
        return
    run_tokens = sorted({int(t) for t in run.steps["tokens"].unique()})
    missing = sorted(t for t in observed if t is not None and t not in run_tokens)
    if missing:
        raise UsageError(
            f"--observed-step-ms: T={missing[0]} is not in {run.name} (its T: {', '.join(map(str, run_tokens))})"
        )
    tps = {int(t) for t in run.steps["tp"].dropna().unique()} if "tp" in run.steps else set()
    if world_size and tps and world_size not in tps:
        raise UsageError(
            f"--observed: the traces' world size {world_size} is not {run.name}'s TP {min(tps)}: "
            "give the traces of an engine run at the run's TP"
        )


def answer_lines(run_dir: Path) -> list[str]:
    """A run's one answer as the report decides it (report/analysis/decide.py) with the sweep file's options:
    the last lines the sweep and `simulate` print."""
    from commprof.report.analysis.decide import decide
    from commprof.report.analysis.run_analysis import RunExtras, analyze_run
    from commprof.report.exports.decision_files import decision_lines
    from commprof.report.flags import report_options, sweep_options

    try:
        run_id, records, meta, _notes = load_run(run_dir)
        options = report_options({}, sweep_options(meta))
        runs = analyze_run(run_id, records, meta, options, str(run_dir), RunExtras(*read_run_files(run_dir)))
    except UsageError as exc:
        return [f"no answer from this run: {exc}"]
    return [line for run in runs if not run.steps.empty for line in decision_lines(decide(run))]
