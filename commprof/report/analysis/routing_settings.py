"""The routing plan as engine settings: per band where another all-reduce implementation beat the baseline
beyond the evidence's uncertainty, the engine variables that route those sizes to it, with the size cap the
engine has, and whether the files may set them. Pure (the plan's bands in, settings and notes out; the decision
holds them and report/exports/decision_files.py writes them).

Engines route by an upper size bound (one-shot up to X, then NCCL), so only a band that starts at the smallest
size the plan holds can become a setting; any other winning band is listed as not expressible. A band the plan
kept on the baseline is never exported: a size choice inside noise or model error is not a result. An engine
without a size cap sends the kernel every size up to its workspace: its switch is set only if the kernel won at
every one of those sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from commprof.impls.registry import engine_switch_table
from commprof.planner.engine_sizes import vllm_graphs
from commprof.units import format_bytes

# vLLM's default largest CUDA-graph capture size off the SM100 family: FlashInfer PCIe IPC's workspace covers it.
VLLM_PCIE_IPC_DEFAULT_CAPTURE = vllm_graphs().largest


@dataclass(frozen=True)
class EngineSetting:
    """What one engine is told for one routed band: its variables, and whether the files set them (`live`) or
    leave them off, with the one reason why."""

    engine: str
    impl: str
    min_bytes: int
    max_bytes: int
    variables: tuple[tuple[str, str], ...]
    live: bool
    why: str
    version: str
    workspace: str


def engine_mode(bands: list[dict]) -> str | None:
    """The mode engines run the verify step in: graph (captured and replayed) where the plan has it."""
    modes = {b["mode"] for b in bands if b["collective"] == "all_reduce"}
    return "graph" if "graph" in modes else next(iter(sorted(modes)), None)


def routing_settings(
    bands: list[dict], hidden: int | None, dtype_bytes: int, backend: str | None = "nccl", not_live: str = ""
) -> tuple[list[EngineSetting], list[str]]:
    """The engine settings of the plan's all-reduce bands in the engines' mode, and notes on what is left out.
    Bands measured on CPU ranks (gloo) are never engine settings: engines run NCCL and GPU kernels. `not_live`:
    why nothing may be set live (a simulation, an unfinished run), else ""."""
    if backend == "gloo":
        return [], ["measured on gloo (CPU ranks): the plan shows the method, not a GPU answer; no engine setting"]
    mode = engine_mode(bands)
    ordered = sorted((b for b in bands if b["collective"] == "all_reduce" and b["mode"] == mode), key=_low)
    if not ordered:
        return [], []
    notes: list[str] = []
    if mode != "graph":
        notes.append(f"routed from {mode}-mode times: engines replay the verify step as a CUDA graph")
    for band in ordered[1:]:
        if not band["baseline"]:
            notes.append(f"{_span(band)}: not at the smallest sizes, and engines take one upper size bound: no setting")
    first = ordered[0]
    if first["baseline"]:
        return [], notes
    impl = first["impl"]
    switches = engine_switch_table().get(impl)
    if not switches:
        return [], [*notes, f"{_span(first)}: no engine setting known to commprof runs {impl}: engine work"]
    if first["options"]:
        notes.append(f"{_span(first)} won with options {first['options']}: the engine's own choice may differ")
    if first is not ordered[-1] and not first["boundary"].startswith("crossover "):
        notes.append(f"{_span(first)}: the cap is the largest size that won; the band's edge is a {first['boundary']}")
    largest = max(s["bytes"] for s in first["sizes"])  # the largest size that won, not the band's edge beyond it
    every = all(not b["baseline"] and b["impl"] == impl for b in ordered)
    measured_to = max(s["bytes"] for b in ordered for s in b["sizes"])
    settings = []
    for entry in switches:
        engine, switch, variable, unit, version = (
            entry.engine,
            entry.switch,
            entry.size_variable,
            entry.unit,
            entry.version,
        )
        variables = [tuple(part.split("=", 1)) for part in switch.split()]
        live, why = not not_live, f"{impl} takes {_sizes(first)} from NCCL ({first['evidence']['verdict']})"
        if variable is not None:
            variables.append((variable, str(largest if unit == "bytes" else largest // dtype_bytes)))
            why += f"; {variable} caps it at the largest size that won ({format_bytes(largest)}), NCCL above"
        else:
            workspace = VLLM_PCIE_IPC_DEFAULT_CAPTURE * (hidden or 0) * dtype_bytes
            if not (hidden and every and measured_to >= workspace):
                live = False
                why = (
                    f"{engine} has no size cap for {impl}: it sends it every all-reduce up to its largest CUDA-graph "
                    f"capture size x hidden (default {VLLM_PCIE_IPC_DEFAULT_CAPTURE} tokens"
                    + (f", {format_bytes(workspace)}" if hidden else "")
                    + f"), and this run shows it winning only at {_sizes(first)}"
                    + ("" if every else ", NCCL above")
                    + ": measure every size up to the capture size before setting it"
                )
        if not_live and variable is not None or not_live and live is False and "no size cap" not in why:
            why = f"{why}; {not_live}"
        settings.append(
            EngineSetting(
                engine,
                impl,
                first["min_bytes"],
                first["max_bytes"],
                tuple(variables),
                live,
                why,
                version,
                _workspace(largest, hidden, dtype_bytes),
            )
        )
    return settings, notes


def _low(band: dict) -> int:
    return band["min_bytes"]


def _sizes(band: dict) -> str:
    return f"{format_bytes(band['min_bytes'])}-{format_bytes(band['max_bytes'])}"


def _span(band: dict) -> str:
    return f"{band['impl']} at {_sizes(band)}"


def _workspace(nbytes: int, hidden: int | None, dtype_bytes: int) -> str:
    if not hidden:
        return f"at least {format_bytes(nbytes)} per all-reduce buffer"
    tokens = nbytes // (hidden * dtype_bytes)
    return (
        f"max batch x draft tokens <= {tokens} tokens: {tokens} x hidden {hidden} x {dtype_bytes} B = "
        f"{format_bytes(nbytes)} ({nbytes // dtype_bytes} elements)"
    )
