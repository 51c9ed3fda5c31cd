"""Sweep files (TOML): parse, validate and expand into a SweepSpec before anything runs.

The format is documented in docs/sweep-files.md; SweepFile is its typed structure, read by msgspec through the
records' one error adapter. Every problem is reported as "file: key: problem (allowed: ...)" and nothing starts;
known traps become warnings. The settings every table shares are read by
commprof.sweep.planning.settings. Pure apart from load_sweep reading the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import msgspec

from commprof.errors import UsageError
from commprof.impls import registry
from commprof.planner.plan import build_step_plan
from commprof.problems import String, number, table
from commprof.records import point_ids
from commprof.records.values import MAX_ACCEPT
from commprof.sweep.planning.dryrun import format_points_table
from commprof.sweep.planning.points import auto_label, baseline, expand_axes
from commprof.sweep.planning.run_table import RunSection, RunTable, parse_run
from commprof.sweep.planning.settings import (
    SweepProblems,
    impl_variants,
    parse_axes,
    parse_point,
    parse_rule,
)
from commprof.sweep.planning.spec import (
    DEFAULT,
    DEFAULT_ITERATIONS,
    DEFAULT_MAX_POINTS,
    DEFAULT_POINT_TIMEOUT_S,
    DEFAULT_WARMUP,
    Axis,
    Rule,
    RunOverrides,
    SweepPoint,
    SweepSpec,
    SweepTooLarge,
    combinations,
    point_key,
    stage_work,
)
from commprof.sweep.planning.stage_config import parse_stage
from commprof.textfiles import parse_toml, read_text


def _tables(key: str) -> Any:
    """An array of tables, [[key]] in the file."""
    return table(list[table(dict[str, Any])], f"an array of tables ([[{key}]])")


class ReportSection(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """[report]: what the report assumes beyond the measurements (docs/sweep-files.md)."""

    # the step's compute time, ms: one for every T, or a table {"T" = ms} over T values of run.tokens
    compute_ms: number(0.0) | dict[str, number(0.0)] | None = None
    draft_ms: number(0.0) | None = None  # one draft cycle's time, ms (it does not depend on the verify step's T)
    # tokens accepted per verify step
    accept_lengths: number(1.0, most=MAX_ACCEPT) | list[number(1.0, most=MAX_ACCEPT)] | None = None
    baseline: String | None = None  # the stage-0 point id or label the report compares against


class SweepFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A sweep file as its typed structure (docs/sweep-files.md), read in one pass, every problem recorded."""

    name: String | None = None  # None: the file's stem
    description: String = ""
    run: table(RunSection) = msgspec.field(default_factory=RunSection)  # the model, T, timing and spacing
    # [axes], [[exclude]] and [[points]] are read by commprof.sweep.planning.settings: their keys are the variable
    # catalogue's and their order is the points' order
    axes: table(dict[str, Any]) = {}  # crossed into stage 0's points
    points: _tables("points") = []  # points listed one by one
    exclude: _tables("exclude") = []  # rules dropping axis combinations
    stages: _tables("stages") = []  # refinement and crossover stages (stage_config reads each by its kind)
    report: table(ReportSection) = msgspec.field(default_factory=ReportSection)


def _stage0_points(
    axes: tuple[Axis, ...],
    excludes: tuple[Rule, ...],
    explicit: list[tuple[int, tuple[str, dict[str, str], dict[str, Any], str | None]]],
    problems: SweepProblems,
) -> tuple[SweepPoint, ...]:
    points = [baseline()]
    seen = {points[0].key(): points[0].point_id}
    combos, dropped = expand_axes([points[0]], axes, excludes)
    if dropped:
        problems.warn("axes", f"{dropped} combinations skipped: a MIN channel / CTA count above its MAX")

    def add(impl: str, env: dict[str, str], options: dict[str, Any], label: str | None, where: str | None) -> None:
        key = point_key(impl, env, options)
        if key in seen:
            if where:
                problems.warn(where, f"repeats {seen[key]}; listed once")
            return
        this_id = point_ids.point_id(len(points))
        seen[key] = this_id
        points.append(SweepPoint(this_id, label or auto_label(impl, env, options), impl, env, options))

    for impl, env, options in combos:
        add(impl, env, options, None, None)
    for index, (impl, env, options, label) in explicit:
        add(impl, env, options, label, f"points[{index}]")
    return tuple(points)


def _per_tokens(raw: float | dict[str, float], tokens: tuple[int, ...], problems: SweepProblems) -> Any:
    """report.compute_ms: a number for every T, or a table {"T" = number} covering T values of [run] tokens."""
    if not isinstance(raw, dict):
        return raw
    out = {}
    for name, value in raw.items():
        if not re.fullmatch(r"\d{1,9}", name) or int(name) not in tokens:  # T <= MAX_TOKENS: 9 digits at most
            problems.error(
                f"report.compute_ms.{name}", f"not a T of run.tokens (allowed: {', '.join(map(str, tokens))})"
            )
        elif value is not None:
            out[int(name)] = value
    return out


def _parse_report(
    section: ReportSection, tokens: tuple[int, ...], points: tuple[SweepPoint, ...], problems: SweepProblems
) -> dict:
    """[report] as the spec keeps it (the keys the file gives), its T and baseline checked against the sweep."""
    report: dict[str, Any] = {}
    if section.compute_ms is not None:
        report["compute_ms"] = _per_tokens(section.compute_ms, tokens, problems)
    if section.draft_ms is not None:
        report["draft_ms"] = section.draft_ms
    if section.accept_lengths is not None:
        lengths = section.accept_lengths
        report["accept_lengths"] = [v for v in (lengths if isinstance(lengths, list) else [lengths]) if v is not None]
    if section.baseline is not None:
        match = [p.point_id for p in points if section.baseline in (p.point_id, p.label)]
        if not match:
            problems.error(
                "report.baseline",
                f"{section.baseline!r} is no stage-0 point id or label "
                f"(allowed: {', '.join(p.point_id for p in points[:8])}, ...)",
            )
        else:
            report["baseline"] = match[0]
    return report


def parse_sweep(
    text: str, path: str | None = None, source: str | None = None, max_points: int | None = DEFAULT_MAX_POINTS
) -> SweepSpec:
    """Validate a sweep file's text and expand it; UsageError lists every problem, one line each.

    Problems name `source`, else `path`, else "<sweep>". A sweep that may have more than `max_points` points
    (None: no limit) raises SweepTooLarge, counted before anything is expanded.
    """
    source = source or path or "<sweep>"
    problems = SweepProblems(source)
    data = problems.read(parse_toml(text, source), SweepFile)
    name = (Path(path).stem if path else "sweep") if data.name is None else data.name
    run = parse_run(data.run, problems)
    axes, excludes, explicit, stages = _point_tables(data, problems)
    problems.raise_if_any()
    _check_plans(run, problems)

    # Counted before expanding: a million-point sweep is refused in milliseconds, not built for a minute first.
    work = stage_work(1 + combinations(axes) + len(explicit), stages, run.iterations, run.warmup)
    if max_points is not None and sum(points for points, _, _ in work) > max_points:
        raise SweepTooLarge(source, name, work, len(run.tokens), max_points)
    points = _stage0_points(axes, excludes, explicit, problems)
    report = _parse_report(data.report, run.tokens, points, problems)
    problems.raise_if_any()
    return SweepSpec(
        path=path,
        content=text,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        name=name,
        description=data.description.strip(),
        model=run.model,
        tp=run.tp,
        tokens=run.tokens,
        phase=run.phase,
        dtype=run.dtype,
        iterations=run.iterations,
        warmup=run.warmup,
        point_timeout_s=run.point_timeout_s,
        points=points,
        stages=stages,
        warnings=tuple(problems.warnings),
        report=report,
        excludes=excludes,
        interconnect=problems.interconnect,
        layout=run.layout,
        engine=run.engine,
        plan_options=run.plan_options,
        compute=run.compute,
        skew=run.skew,
        tokens_from=run.tokens_from,
        baseline_every=run.baseline_every,
        shape=run.shape,
    )


def _point_tables(data: SweepFile, problems: SweepProblems) -> tuple[tuple[Axis, ...], tuple[Rule, ...], list, tuple]:
    """[axes], [[exclude]], [[points]] and [[stages]], each problem recorded under its key (a table that is no table
    is already recorded, and skipped)."""
    axes = parse_axes(data.axes, "axes", problems)
    excludes = tuple(
        rule
        for i, entry in enumerate(data.exclude)
        if entry is not None and (rule := parse_rule(entry, f"exclude[{i}]", problems, with_reason=True)) is not None
    )
    explicit = [
        (i, point)
        for i, entry in enumerate(data.points)
        if entry is not None and (point := parse_point(entry, f"points[{i}]", problems)) is not None
    ]
    stages = tuple(
        stage
        for i, entry in enumerate(data.stages, start=1)
        if entry is not None and (stage := parse_stage(entry, i, problems)) is not None
    )
    return axes, excludes, explicit, stages


def _check_plans(run: RunTable, problems: SweepProblems) -> None:
    """With the TP given, every T's step plan must build before anything runs."""
    if run.tp is None:
        return
    try:
        for t in run.tokens:
            build_step_plan(run.shape, run.tp, t, run.phase, run.dtype, run.plan_options)
    except UsageError as exc:
        problems.error("run", str(exc))
        problems.raise_if_any()


def load_sweep(path: str | Path, max_points: int | None = DEFAULT_MAX_POINTS) -> SweepSpec:
    """Read and validate a sweep file; UsageError "file: key: problem (allowed: ...)" on any problem, and
    SweepTooLarge above `max_points` points."""
    text = read_text(path, "sweep file")
    return parse_sweep(text, str(path), max_points=max_points)


def _toml_value(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # a JSON string or number is a valid TOML basic string or number


def default_sweep(given: RunOverrides | None = None, impls: tuple[str, ...] = (DEFAULT,)) -> SweepSpec:
    """The sweep `allreduce_sweep` runs without --sweep: the baseline (and any extra implementations).

    A built-in with required options runs in each of its variants (symm-mem: one_shot and two_shot).
    What `given` leaves None takes the defaults (model kimi-k2.5, tokens 1, 4, 8, phase verify, and the
    defaults of iterations, warmup and point_timeout_s); a bad value is a UsageError naming the setting, as
    if it came from a file.
    """
    given = given or RunOverrides()
    run = {
        "model": given.model or "kimi-k2.5",
        "tokens": list(given.tokens or (1, 4, 8)),
        "phase": given.phase or "verify",
        "dtype": given.dtype,
        "tp": given.tp,
        "iterations": DEFAULT_ITERATIONS if given.iterations is None else given.iterations,
        "warmup": DEFAULT_WARMUP if given.warmup is None else given.warmup,
        "point_timeout_s": DEFAULT_POINT_TIMEOUT_S if given.point_timeout_s is None else given.point_timeout_s,
    }
    lines = [
        'name = "default"',
        'description = "NCCL defaults (the baseline) and the implementations named on the command line."',
        "",
        "[run]",
    ]
    lines += [f"{key} = {_toml_value(value)}" for key, value in run.items() if value is not None]
    entries = [_toml_value(DEFAULT)]
    for name in dict.fromkeys(impls):
        if name == DEFAULT:
            continue
        if registry.required_options(name):
            for options in impl_variants(name):
                table = ", ".join(f"{key} = {_toml_value(value)}" for key, value in options.items())
                entries.append(f"{{ name = {_toml_value(name)}, options = {{ {table} }} }}")
        else:
            entries.append(_toml_value(name))
    if len(entries) > 1:
        lines += ["", "[axes]", f"impl = [{', '.join(entries)}]"]
    spec = parse_sweep("\n".join(lines) + "\n", None, source="command line")
    return spec if given.compute is None else spec.with_overrides(RunOverrides(compute=given.compute))


__all__ = ["DEFAULT_MAX_POINTS", "SweepTooLarge", "default_sweep", "format_points_table", "load_sweep", "parse_sweep"]
