"""The routing plan as engine settings: per band where another all-reduce implementation beat the baseline
beyond the evidence's uncertainty, the engine variables that route those sizes to it, and the workspace it needs.
Pure (the plan's bands in, settings and text out; report/write.py writes routing.txt).

Engines route by an upper size bound (one-shot up to X, then NCCL), so only a band that starts at the smallest
size the plan holds can become a setting; any other winning band is listed as not expressible. A band the plan
kept on the baseline is never exported: a size choice inside noise or model error is not a result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from commprof.report.engine_switches import ROUTING_VARIABLES
from commprof.report.export_text import comment, one_line
from commprof.units import format_bytes


@dataclass(frozen=True)
class RoutingSetting:
    """One engine's way to route one band of sizes to an implementation; `setting` empty: no known way."""

    engine: str
    impl: str
    min_bytes: int
    max_bytes: int
    setting: str
    workspace: str  # what the implementation's workspace must hold, in words and bytes
    version: str
    evidence: str


def engine_mode(bands: list[dict]) -> str | None:
    """The mode engines run the verify step in: graph (captured and replayed) where the plan has it."""
    modes = {b["mode"] for b in bands if b["collective"] == "all_reduce"}
    return "graph" if "graph" in modes else next(iter(sorted(modes)), None)


def routing_settings(
    bands: list[dict], hidden: int | None, dtype_bytes: int, backend: str | None = "nccl"
) -> tuple[list[RoutingSetting], list[str]]:
    """The engine settings of the plan's all-reduce bands in the engines' mode, and notes on what is left out.
    Bands measured on CPU ranks (gloo) are never engine settings: engines run NCCL and GPU kernels."""
    if backend == "gloo":
        return [], ["measured on gloo (CPU ranks): the plan shows the method, not a GPU answer; no engine setting"]
    mode = engine_mode(bands)
    ordered = sorted((b for b in bands if b["collective"] == "all_reduce" and b["mode"] == mode), key=_low)
    notes: list[str] = []
    if not ordered:
        return [], ["no all-reduce routing in this run: nothing to route"]
    if mode != "graph":
        notes.append(f"routed from {mode}-mode times: engines replay the verify step as a CUDA graph")
    first, settings = ordered[0], []
    for band in ordered:
        if band["baseline"]:
            continue
        span = f"{band['impl']} at {format_bytes(band['min_bytes'])}-{format_bytes(band['max_bytes'])}"
        if band is not first:
            notes.append(f"{span}: not at the smallest sizes, and engines take one upper size bound: no setting")
            continue
        largest = max(s["bytes"] for s in band["sizes"])
        workspace = _workspace(largest, hidden, dtype_bytes)
        for engine, switch, variable, unit, version in ROUTING_VARIABLES.get(band["impl"], ()):
            bound = ""
            if variable is not None:  # the largest size that won, not the band's edge beyond it
                bound = f" {variable}={largest if unit == 'bytes' else largest // dtype_bytes}"
            settings.append(
                RoutingSetting(
                    engine,
                    band["impl"],
                    band["min_bytes"],
                    band["max_bytes"],
                    switch + bound,
                    workspace,
                    version,
                    _evidence_words(band),
                )
            )
        if band["impl"] not in ROUTING_VARIABLES:
            notes.append(f"{span}: no engine setting known to commprof runs {band['impl']}: engine work")
        if band["options"]:
            notes.append(f"{span} won with options {band['options']}: the engine's own choice may differ")
        if band is not ordered[-1] and not band["boundary"].startswith("crossover "):
            notes.append(
                f"{span}: the bound is the largest size that won ({format_bytes(largest)}); the band's edge is a "
                f"{band['boundary']}"
                + ("" if "crossover search" in band["boundary"] else ": run the crossover search to place it")
            )
    return settings, notes


def _low(band: dict) -> int:
    return band["min_bytes"]


def _workspace(nbytes: int, hidden: int | None, dtype_bytes: int) -> str:
    if not hidden:
        return f"at least {format_bytes(nbytes)} per all-reduce buffer"
    tokens = nbytes // (hidden * dtype_bytes)
    return (
        f"max batch x draft tokens <= {tokens} tokens: {tokens} x hidden {hidden} x {dtype_bytes} B = "
        f"{format_bytes(nbytes)} ({nbytes // dtype_bytes} elements)"
    )


def _evidence_words(band: dict) -> str:
    evidence = band["evidence"]
    floor = f", {band['pct_of_floor']:.0f} % of the floor" if band.get("pct_of_floor") else ""
    return f"{evidence['label']}: {evidence['verdict']} against {evidence['baseline_label']} NCCL{floor}"


def routing_text(settings: list[RoutingSetting], notes: list[str], provenance: list[str]) -> str:
    """routing.txt: where from, then per band and engine the variables that route it, with the workspace."""
    lines = [comment(line) for line in provenance]
    lines.append(comment("Per message size, which all-reduce the plan routes where (summary.json: routing)."))
    lines += [comment(f"note: {line}") for line in notes]
    if not settings:
        lines.append(comment("No size beat NCCL beyond the evidence's uncertainty: keep NCCL at every size."))
    for s in settings:
        lines += [
            "",
            comment(f"{s.engine}: {s.impl} for {s.min_bytes}-{s.max_bytes} B, NCCL above"),
            comment(f"written for: {s.version}"),
            comment(f"workspace: {s.workspace}"),
            comment(f"evidence: {s.evidence}"),
            one_line(s.setting),
        ]
    return "\n".join(lines) + "\n"


def settings_as_dicts(settings: list[RoutingSetting]) -> list[dict[str, Any]]:
    return [asdict(s) for s in settings]
