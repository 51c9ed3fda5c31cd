"""`commprof trace TRACE...`: what one step of the engine (or of a commprof replay) communicates, and for how long."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click

from commprof.errors import UsageError
from commprof.planner.plan import PHASES
from commprof.records.files import finite_json
from commprof.terminal import echo
from commprof.textfiles import LOG_BYTES, read_text
from commprof.units import format_bytes

TRACE_SUFFIXES = (".json", ".json.gz")
DUMP_SUFFIXES = (".log", ".prom")
# NCCL Inspector's file names: <host>-pid<pid>.log (JSON lines) and nccl_inspector_metrics_<GPU UUID>.prom
DUMP_NAMES = re.compile(r"(-pid\d+\.log|^nccl_inspector_metrics_.*\.prom)$")


def input_files(arguments: tuple[str, ...]) -> tuple[list[Path], list[Path]]:
    """Kineto traces and NCCL Inspector dumps among the arguments; folders are searched (sorted), where
    only Inspector's own file names count as dumps (a run folder's worker logs are not)."""
    traces: list[Path] = []
    dumps: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found = [p for p in sorted(path.rglob("*")) if p.is_file() and (_is_trace(p) or DUMP_NAMES.search(p.name))]
            if not found:
                raise UsageError(
                    f"{path}: no trace (.json, .json.gz) or NCCL Inspector dump (.log, .prom) in this folder"
                )
        else:
            found = [path]
        for p in found:
            (traces if _is_trace(p) or not p.name.endswith(DUMP_SUFFIXES) else dumps).append(p)
    return traces, dumps


def _is_trace(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def read_dumps(paths: list[Path]):
    """Inspector records of every dump file, and how many lines could not be read."""
    from commprof.trace.inspector import parse_json_lines, parse_prom, records_frame

    rows, unreadable = [], 0
    for path in paths:
        text = read_text(path, "NCCL Inspector dump", LOG_BYTES, errors="replace")
        if path.name.endswith(".prom"):
            rows += parse_prom(text)
        else:
            found, bad = parse_json_lines(text)
            rows += found
            unreadable += bad
    return records_frame(rows), unreadable


def _us(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value / 1000:.2f} ms"
    return f"{value:.1f} µs"


def _bytes(value: int | None) -> str:
    return "?" if value is None else format_bytes(value)


def _size_range(c: dict[str, Any]) -> str:
    if c.get("bytes_out_max") not in (None, c["bytes_out"]):
        return f"{_bytes(c['bytes_out'])}..{_bytes(c['bytes_out_max'])}"
    return _bytes(c["bytes_out"])


def _bucket(row: dict[str, Any]) -> str:
    """A size, or a Prometheus size bucket as its range."""
    if row.get("bytes_upper") not in (None, row["bytes"]):
        return f"{_bytes(row['bytes'])}..{_bytes(row['bytes_upper'])}"
    return _bytes(row["bytes"])


def format_inspector(summary: dict[str, Any]) -> str:
    """Inspector dumps as a person reads them: per size, then before -> after."""
    lines = [
        f"NCCL Inspector: {summary['records']} records ({', '.join(summary['formats']) or 'none'})"
        + (f", {summary['unreadable_lines']} unreadable line(s) left out" if summary["unreadable_lines"] else "")
    ]
    for r in summary["per_size"]:
        spread = f" (p10 {_us(r['p10_us'])}, p90 {_us(r['p90_us'])})" if r["ops"] > 1 else ""
        pairs = f"  {r['algo_proto']}" if r["algo_proto"] else ""
        lines.append(
            f"  {r['coll']:<14}{_bucket(r):>20}  {r['ops']:>5} records  median {_us(r['time_us'])}{spread}{pairs}"
        )
    if summary.get("note"):
        lines.append(f"  note: {summary['note']}")
    if "before_after" in summary:
        lines.append("before -> after, per collective and size:")
        for c in summary["before_after"]:
            change = (
                f" ({c['change_pct']:+.0f}%, {c['verdict']})" if c["change_pct"] is not None else f" ({c['verdict']})"
            )
            algos = ""
            if c["algo_proto_before"] or c["algo_proto_after"]:
                algos = f"; {c['algo_proto_before'] or '?'} -> {c['algo_proto_after'] or '?'}"
            times = f"{_us(c['time_us_before'])} -> {_us(c['time_us_after'])}"
            lines.append(f"  {c['coll']} {_bucket(c)}: {times}{change}{algos}")
    return "\n".join(lines)


def format_account(account: dict[str, Any]) -> str:
    """The account as a person reads it."""
    traces = account["traces"]
    first = traces[0]
    where = ", ".join(
        part
        for part in (
            first.get("backend"),
            f"world size {first['world_size']}" if first.get("world_size") else None,
            f"NCCL {first['nccl_version']}" if first.get("nccl_version") else None,
        )
        if part
    )
    ranks = ", ".join(str(t["rank"]) for t in traces)
    lines = [f"commprof trace: {len(traces)} trace(s), rank(s) {ranks}" + (f" ({where})" if where else "")]
    steps = account["steps"]
    if not steps["collectives_per_step"]:
        lines.append("no collectives in these traces (no NCCL kernels and no c10d ops)")
        return "\n".join(lines)
    lines.append(
        f"steps: {steps['count']} (found by {steps['found_by']}); {steps['alike']} alike with "
        f"{steps['collectives_per_step']} collectives each"
        + (f", {steps['differing']} different (left out)" if steps["differing"] else "")
    )
    lines.append(f"one step, rank {steps['reference_rank']} (median over {steps['alike']} steps):")
    lines.append(
        f"  {'collective':<15}{'per step':>9}  {'in':>10}  {'out':>21}  {'dtype':<14}{'median op':>11}{'p90 op':>11}"
    )
    for c in account["step"]["collectives"]:
        lines.append(
            f"  {c['kind']:<15}{c['per_step']:>9}  {_bytes(c['bytes_in']):>10}  {_size_range(c):>21}  "
            f"{str(c['dtype']):<14}{_us(c['median_us']):>11}{_us(c['p90_us']):>11}"
        )
    lines.append(
        f"  communication: {_us(account['step']['comm_us_median'])} per step inside collectives; "
        f"{_us(account['step']['span_us_median'])} from the first one's start to the last one's end"
    )
    for rank, pct in account["overlap_pct"].items():
        if pct is None:
            lines.append(f"  overlap with compute (rank {rank}): none measurable (no GPU kernels: CPU ranks)")
        else:
            lines.append(f"  overlap with compute (rank {rank}): {pct:.1f}% of communication time")
    skew = account["skew"]
    if skew:
        lines.append(
            f"  ranks {', '.join(map(str, skew['ranks']))}: {_us(skew['wait_us'])} per step waiting for the slowest "
            f"rank, {_us(skew['wire_us'])} after all arrived (median over {skew['steps']} steps; largest start skew "
            f"of one op {_us(skew['max_op_start_skew_us'])})"
        )
    elif len(traces) == 1:
        lines.append("  one trace only: give every rank's trace of the same run to split waiting from the wire")
    if "plan_match" in account:
        plan = account["plan"]
        lines.append(
            f"plan {plan['model']} TP {plan['tp']} T={plan['tokens']} ({plan['phase']}, {plan['ops']} ops): "
            f"plan_match {str(account['plan_match']).lower()}"
        )
        for d in account["differences"]:
            lines.append(f"  {d['what']}: plan {d['plan']}, trace {d['trace']}")
    for group in account.get("kernels", []) if "answer_check" not in account else []:
        ran = ", ".join(f"{n} {impl}" for impl, n in group["implementations"].items())
        size = _bytes(group["bytes"]) if group["bytes"] is not None else "size unknown"
        lines.append(f"Kernels: {group['count']} {group['kind']} of {size}: {ran}")
    for check in account.get("answer_check", []):
        lines.append(f"{check['status']}: {check['sentence']}")
    if "hta" in account:
        for rank, pct in account["hta"]["comm_comp_overlap_pct"].items():
            lines.append(f"Holistic Trace Analysis, rank {rank}: comm/comp overlap {pct:.1f}% over the whole trace")
    return "\n".join(lines)


@click.command(
    help="Read PyTorch profiler (Kineto) traces, one per rank: the step's collectives, time and skew; "
    "and NCCL Inspector dumps (.log, .prom), with --before DIR to compare two."
)
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option(
    "--model", default=None, help="Compare the step with commprof's plan of this model (preset or config.json)."
)
@click.option("--tp", type=int, default=None, help="Tensor parallel degree of the plan [the traces' group size].")
@click.option("--tokens", type=int, default=None, help="Tokens in the step (T) for the plan.")
@click.option("--phase", type=click.Choice(PHASES), default="verify", show_default=True)
@click.option("--before", "before", default=None, help="NCCL Inspector dumps of the run before a change, to compare.")
@click.option(
    "--answer",
    "answer",
    type=click.Path(dir_okay=False),
    default=None,
    help="A run's answer (reports/<id>/summary.json): say per op group whether the engine ran what it routes there.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--hta", is_flag=True, help="Add Holistic Trace Analysis's overlap figures (needs commprof[trace]).")
def trace(traces, model, tp, tokens, phase, before, answer, as_json, hta):
    from commprof.trace.analysis import TraceAnalysis
    from commprof.trace.events import load_traces
    from commprof.trace.inspector import summarize_dumps

    files, dumps = input_files(traces)
    if (model is None) != (tokens is None):
        raise UsageError("comparing with the plan needs both --model and --tokens")
    before_dumps = input_files((before,))[1] if before else None
    if before and not before_dumps:
        raise UsageError(f"--before {before}: no NCCL Inspector dumps (.log, .prom) there")
    if before and not dumps:
        raise UsageError("--before compares NCCL Inspector dumps: give the folder of the run after the change as TRACE")
    if answer and not files:
        raise UsageError("--answer checks the kernels of an engine's trace: give its Kineto traces as TRACE")
    account: dict[str, Any] = {}
    if files:
        hta_figures = None
        if hta:
            from commprof.trace.hta import hta_overlap

            hta_figures = hta_overlap(files)
        loaded = load_traces(files)
        plan = None
        if model is not None:
            from commprof.planner.models import load_model
            from commprof.planner.plan import build_step_plan

            group = next((t.world_size for t in loaded if t.world_size), None)
            plan = build_step_plan(load_model(model), tp or group or 1, tokens, phase)
        account = TraceAnalysis(loaded).account(plan)
        if answer:
            from commprof.trace.answer import answer_run, check_answer

            try:
                summary = json.loads(read_text(answer, "answer (summary.json)"))
            except ValueError as exc:
                raise UsageError(f"--answer {answer}: not JSON ({exc})") from None
            account["answer_check"] = check_answer(
                account["kernels"],
                answer_run(summary, answer),
                next((t.world_size for t in loaded if t.world_size), None),
            )
        if hta_figures is not None:
            account["hta"] = {"comm_comp_overlap_pct": hta_figures}
    if dumps:
        records, unreadable = read_dumps(dumps)
        previous = read_dumps(before_dumps)[0] if before_dumps else None
        account["inspector"] = summarize_dumps(records, unreadable, previous)
    if as_json:
        echo(json.dumps(finite_json(account), indent=2, default=str, allow_nan=False))  # strict JSON: NaN -> null
        return
    parts = [format_account(account)] if files else []
    if dumps:
        parts.append(format_inspector(account["inspector"]))
    echo("\n".join(parts))
