"""The smoke's sweep points and, for each, the verdicts it yields: one table, so a point never goes unjudged.

The NCCL sweep runs at >= 2 ranks (on one GPU the ranks share it): NCCL's one-rank path logs no algorithm
choice and an in-place sum at one rank enqueues no kernel, so neither NCCL's choices nor its capture can be
judged there. Pure: the TOML text and the verdicts are functions of their inputs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from commprof.gpu_smoke.graph_point import GRAPH_LABEL, GRAPH_TABLE, graph_verdicts
from commprof.gpu_smoke.verdicts import (
    PASS,
    Verdict,
    capture_verdict,
    channels_verdict,
    knob_verdict,
    mode_verdict,
    nccl_log_verdict,
    point_records,
)
from commprof.records.point_ids import BASELINE_POINT_ID


def both_modes(path: str, rows: list[dict], gated_ok: bool = False) -> Verdict:
    """Eager and graph mode of one point as one verdict (the worse decides)."""
    eager = mode_verdict(path, rows, "eager", gated_ok)
    graph = mode_verdict(path, rows, "graph", gated_ok)
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
    """A [[points]] entry of the smoke sweep and the verdicts judged from its records."""

    label: str
    table: dict[str, Any]
    verdicts: Callable[[list[dict], str], list[Verdict]] = field(repr=False)


def _baseline(rows: list[dict], where: str) -> list[Verdict]:
    return [
        mode_verdict(f"NCCL all-reduce + all-gather, whole step, eager ({where})", rows, "eager"),
        mode_verdict(f"CUDA-graph capture and replay of the whole step ({where})", rows, "graph"),
        nccl_log_verdict("NCCL INFO log parsed: version, channels, a choice per all-reduce size", rows),
    ]


def _knob(algo: str, proto: str) -> Callable[[list[dict], str], list[Verdict]]:
    def verdicts(rows: list[dict], where: str) -> list[Verdict]:
        setting = f"NCCL_ALGO=allreduce:{algo.lower()} NCCL_PROTO={proto}"
        return [
            knob_verdict(f"{setting} acts (NCCL's log shows it)", rows, algo, proto),
            capture_verdict(f"capture verdict under {setting}", rows),
        ]

    return verdicts


def _channels(rows: list[dict], where: str) -> list[Verdict]:
    return [
        channels_verdict("NCCL_MIN/MAX_NCHANNELS=2 acts (NCCL's init log shows it)", rows, 2),
        capture_verdict("capture verdict with 2 channels", rows),
    ]


def _impl(title: str) -> Callable[[list[dict], str], list[Verdict]]:
    def verdicts(rows: list[dict], where: str) -> list[Verdict]:
        return [both_modes(f"{title}, eager + graph ({where})", rows, gated_ok=True)]

    return verdicts


POINTS: tuple[SmokePoint, ...] = (
    SmokePoint(
        "nccl+rmsnorm",
        {"impl": "nccl+rmsnorm"},
        lambda rows, where: [both_modes(f"nccl+rmsnorm, the unfused reference ({where})", rows)],
    ),
    SmokePoint("ring/LL", {"NCCL_ALGO": "allreduce:ring", "NCCL_PROTO": "LL"}, _knob("RING", "LL")),
    # Tree is the setting a field report saw fail under capture: its capture verdict is a result either way.
    SmokePoint("tree/Simple", {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "Simple"}, _knob("TREE", "SIMPLE")),
    SmokePoint("2 channels", {"channels": 2}, _channels),
    SmokePoint(
        "symm-mem one-shot", {"impl": "symm-mem", "options": {"variant": "one_shot"}}, _impl("symm-mem one-shot")
    ),
    SmokePoint(
        "flashinfer-fused one-shot",
        {"impl": "flashinfer-fused", "options": {"use_oneshot": True}},
        _impl("flashinfer-fused one-shot"),
    ),
    SmokePoint("flashinfer-pcie-ipc", {"impl": "flashinfer-pcie-ipc"}, _impl("flashinfer-pcie-ipc")),
    SmokePoint(GRAPH_LABEL, GRAPH_TABLE, graph_verdicts),
)

# At one rank only the kernel bindings of symm-mem can be checked (its reduction has no peer to reach).
ONE_RANK_POINTS: tuple[SmokePoint, ...] = (
    SmokePoint(
        "symm-mem one-shot",
        {"impl": "symm-mem", "options": {"variant": "one_shot"}},
        _impl("symm-mem one-shot kernel and capture at one rank (no peers)"),
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


def sweep_verdicts(records: list[dict], points: tuple[SmokePoint, ...], where: str, baseline: bool) -> list[Verdict]:
    """Every verdict of one smoke sweep, in the table's order (the baseline's first when it is judged)."""
    verdicts = []
    if baseline:
        verdicts += _baseline([r for r in records if r.get("point_id") == BASELINE_POINT_ID], where)
    for point in points:
        verdicts += point.verdicts(point_records(records, point.label), where)
    return verdicts
