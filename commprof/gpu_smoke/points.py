"""The smoke's sweep points and, for each, the verdicts it yields: one table, so a point never goes unjudged.

The NCCL sweep runs at >= 2 ranks (on one GPU the ranks share it): NCCL's one-rank path logs no algorithm
choice and an in-place sum at one rank enqueues no kernel, so neither NCCL's choices nor its capture can be
judged there. Pure: the TOML text and the verdicts are functions of their inputs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commprof.gpu_smoke.knobs import Knob, knob_verdict
from commprof.gpu_smoke.verdicts import (
    FAIL,
    PASS,
    Verdict,
    capture_verdict,
    mode_verdict,
    nccl_log_verdict,
    point_records,
)
from commprof.impls.registry import smoke_table
from commprof.records.point_ids import BASELINE_POINT_ID


@dataclass(frozen=True)
class Placement:
    """Where a smoke sweep's ranks ran: `ranks` processes on `gpus` GPUs (fewer GPUs: they share one)."""

    ranks: int
    gpus: int

    @property
    def time_sliced(self) -> bool:
        """The ranks take turns on a GPU: their step times are not latencies."""
        return self.gpus < self.ranks

    def __str__(self) -> str:
        if self.ranks == 1:
            return "1 rank"
        return f"{self.ranks} ranks sharing one GPU" if self.time_sliced else f"{self.ranks} ranks on {self.ranks} GPUs"


# A point's verdicts from (its records, the same sweep's baseline records, where the ranks ran).
Judge = Callable[[list[dict], list[dict], Placement], list[Verdict]]


def both_modes(path: str, rows: list[dict], gated_ok: bool = False, time_sliced: bool = False) -> Verdict:
    """Eager and graph mode of one point as one verdict (the worse decides)."""
    eager = mode_verdict(path, rows, "eager", gated_ok, time_sliced)
    graph = mode_verdict(path, rows, "graph", gated_ok, time_sliced)
    if eager.status != PASS:
        return eager
    if graph.status != PASS:
        return graph
    return Verdict(path, PASS, f"{eager.detail}; {graph.detail}" + _impl_detail(rows))


def _impl_detail(rows: list[dict]) -> str:
    detail = next((r.get("impl_detail") for r in rows if r.get("impl_detail")), None)
    return f"; ran: {detail}" if detail else ""


@dataclass(frozen=True)
class SmokePoint:
    """A [[points]] entry of a smoke sweep and the verdicts judged from its records."""

    label: str
    table: dict[str, Any]
    verdicts: Judge = field(repr=False)


def _baseline(rows: list[dict], placement: Placement) -> list[Verdict]:
    sliced = placement.time_sliced
    return [
        mode_verdict(f"NCCL all-reduce + all-gather, whole step, eager ({placement})", rows, "eager", False, sliced),
        mode_verdict(f"CUDA-graph capture and replay of the whole step ({placement})", rows, "graph", False, sliced),
        nccl_log_verdict("NCCL INFO log parsed: version, channels, a choice per all-reduce size", rows),
    ]


def knob_point(knob: Knob) -> SmokePoint:
    """A knob as a sweep point: whether NCCL's choice moved from the baseline's, and its capture verdict."""

    def verdicts(rows: list[dict], baseline: list[dict], placement: Placement) -> list[Verdict]:
        return [
            knob_verdict(f"{knob.setting} acts (NCCL's log differs from the baseline's)", knob, rows, baseline),
            capture_verdict(f"capture verdict under {knob.setting}", rows),
        ]

    return SmokePoint(knob.label, knob.table, verdicts)


def _impl(title: str, gated_ok: bool = True) -> Judge:
    def verdicts(rows: list[dict], baseline: list[dict], placement: Placement) -> list[Verdict]:
        return [both_modes(f"{title} ({placement})", rows, gated_ok, placement.time_sliced)]

    return verdicts


def impl_points() -> tuple[SmokePoint, ...]:
    """A point for every built-in whose module declares one (its `smoke`), in the registry's order."""
    points = []
    for name, case in smoke_table().items():
        table = {"impl": name, **({"options": dict(case.options)} if case.options else {})}
        title = case.title or f"{case.label}, eager + graph"
        points.append(SmokePoint(case.label, table, _impl(title, case.gated_ok)))
    return tuple(points)


POINTS: tuple[SmokePoint, ...] = impl_points()

# At one rank only the kernel bindings of symm-mem can be checked (its reduction has no peer to reach).
ONE_RANK_POINTS: tuple[SmokePoint, ...] = (
    SmokePoint(
        "symm-mem one-shot",
        {"impl": "symm-mem", "options": {"variant": "one_shot"}},
        _impl("symm-mem one-shot kernel and capture at one rank (no peers), eager + graph"),
    ),
)


def toml_value(value: Any) -> str:
    """A TOML value for the smoke's own tables: strings, integers, booleans and inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")


def sweep_toml(name: str, points: tuple[SmokePoint, ...], tokens: list[int], point_timeout_s: int) -> str:
    """The sweep file: Kimi-K2.5's whole verify step, few steps per point, the baseline and `points`."""
    lines = [
        f'name = "{name}"',
        "[run]",
        'model = "kimi-k2.5"',
        f"tokens = {json.dumps(tokens)}",
        "iterations = 5",
        "warmup = 2",
        f"point_timeout_s = {point_timeout_s}",
    ]
    for point in points:
        lines += ["", "[[points]]", f"label = {toml_value(point.label)}"]
        lines += [f"{key} = {toml_value(value)}" for key, value in point.table.items()]
    return "\n".join(lines) + "\n"


def sweep_verdicts(
    records: list[dict], points: tuple[SmokePoint, ...], placement: Placement, baseline: bool
) -> list[Verdict]:
    """Every verdict of one smoke sweep, in the table's order (the baseline's first when it is judged)."""
    base = [r for r in records if r.get("point_id") == BASELINE_POINT_ID]
    verdicts = _baseline(base, placement) if baseline else []
    for point in points:
        verdicts += point.verdicts(point_records(records, point.label), base, placement)
    return verdicts


@dataclass(frozen=True)
class SmokeSweep:
    """One smoke sweep to launch."""

    name: str
    """The step's name: the sweep file's stem and the name its output is logged under."""
    ranks: int
    """Processes torchrun starts."""
    points: tuple[SmokePoint, ...]
    """The points swept besides the baseline."""
    tokens: tuple[int, ...]
    """Token counts each point runs at."""
    extra: tuple[str, ...] = ()
    """Flags passed on to the sweep."""
    cap: float | None = None
    """Seconds the step may run at most; None: the steps' own limit."""


@dataclass(frozen=True)
class SweepOutcome:
    """What a smoke sweep left behind."""

    run_dir: Path | None
    """Its run folder; None where it made none."""
    records: list[dict]
    """Its results' records (empty where it wrote none)."""
    code: int | None
    """Its exit code; None where it was stopped."""
    output: str
    """Its stdout and stderr together."""


def sweep_step_verdicts(
    title: str, sweep: SmokeSweep, outcome: SweepOutcome, placement: Placement, baseline: bool
) -> list[Verdict]:
    """A sweep step's verdicts, led by a failure with the output's tail when the sweep itself did not exit 0."""
    verdicts = sweep_verdicts(outcome.records, sweep.points, placement, baseline)
    if outcome.code != 0:
        tail = "\n".join(outcome.output.strip().splitlines()[-8:])
        verdicts.insert(0, Verdict(title, FAIL, f"exit {outcome.code}: {tail}"))
    return verdicts
