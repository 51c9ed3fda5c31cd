"""One view of the GPUs for the checks, whichever source answered: NVML (live or nvml.json) or nvidia-smi text.

Each GPU becomes a flat dict with the same keys from either source (None where the source has no answer):
index, bus_id, name, gen_current, gen_max, width_current, width_max, fb_total_mib, bar1_total_mib, replays,
power_limit_w, power_default_w, temperature_c, temp_margin_c, persistence, event_reasons, sm_clock_mhz,
sm_clock_max_mhz, utilization_pct, pstate, numa_node, cpu_affinity.
"""

from __future__ import annotations

from typing import Any

from commprof.doctor.facts import Facts
from commprof.doctor.parse_nvsmi import MAX_TOPO_DEVICES, number, parse_nvidia_smi_q, parse_topo_matrix, value
from commprof.doctor.topology_probe import normalize_bus_id
from commprof.errors import UsageError

GPU_KEYS = (
    "index",
    "bus_id",
    "name",
    "gen_current",
    "gen_max",
    "width_current",
    "width_max",
    "fb_total_mib",
    "bar1_total_mib",
    "replays",
    "power_limit_w",
    "power_default_w",
    "temperature_c",
    "temp_margin_c",
    "persistence",
    "event_reasons",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "utilization_pct",
    "pstate",
    "numa_node",
    "cpu_affinity",
)


def gpu_view(facts: Facts) -> tuple[list[dict[str, Any]], str, str]:
    """(GPUs, where they were read, why there are none)."""
    topology = facts.topology
    if topology and topology.get("gpus"):
        health = {h.get("bus_id"): h for h in facts.gpu_health or []}
        gpus = [_from_nvml(g, health.get(g["pci_bus_id"], {})) for g in topology["gpus"]]
        return gpus, "NVML", ""
    smi = facts.source("nvidia_smi_full")
    if smi.ok:
        parsed = parse_nvidia_smi_q(smi.text)
        if len(parsed["gpus"]) > MAX_TOPO_DEVICES // 2:
            raise UsageError(
                f"{smi.where}: {len(parsed['gpus'])} GPUs, more than the {MAX_TOPO_DEVICES // 2} one box holds "
                "(NCCL_TOPO_MAX_NODES)"
            )
        if parsed["gpus"]:
            topo = facts.source("nvidia_topo")
            numa = parse_topo_matrix(topo.text)["numa"] if topo.ok else {}
            return [_from_smi(i, g, numa.get(i)) for i, g in enumerate(parsed["gpus"])], smi.where, ""
    if topology and topology.get("reason"):
        return [], "", topology["reason"]
    return [], "", smi.why_missing() if not smi.ok else "nvidia-smi -q lists no GPU"


def pair_levels(facts: Facts) -> tuple[dict[tuple[int, int], str], str]:
    """{(a, b): "PIX" | "PXB" | "PHB" | "NODE" | "SYS" | "NV#"} for a < b, and where it was read."""
    topology = facts.topology
    if topology and topology.get("pairs"):
        return {tuple(p["gpus"]): p["level"] for p in topology["pairs"] if p.get("level")}, "NVML"
    topo = facts.source("nvidia_topo")
    if topo.ok:
        levels = parse_topo_matrix(topo.text)["levels"]
        return {k: v for k, v in levels.items() if k[0] < k[1]}, topo.where
    return {}, ""


def _from_nvml(gpu: dict[str, Any], health: dict[str, Any]) -> dict[str, Any]:
    pcie = gpu.get("pcie") or {}
    out = {key: health.get(key) for key in GPU_KEYS}
    out.update(
        index=gpu["index"],
        bus_id=gpu["pci_bus_id"],
        name=gpu["name"],
        gen_current=pcie.get("gen_current"),
        gen_max=pcie.get("gen_max"),
        width_current=pcie.get("width_current"),
        width_max=pcie.get("width_max"),
        numa_node=gpu.get("numa_node"),
        cpu_affinity=gpu.get("cpu_affinity"),
    )
    if out["fb_total_mib"] is None:
        out["fb_total_mib"] = gpu.get("memory_total_mib")
    return out


def _from_smi(index: int, g: dict[str, Any], numa: int | None) -> dict[str, Any]:
    link = ("PCI", "GPU Link Info")
    power = "GPU Power Readings" if "GPU Power Readings" in g else "Power Readings"
    reasons = g.get("Clocks Event Reasons") or g.get("Clocks Throttle Reasons")
    reasons = reasons if isinstance(reasons, dict) else {}  # "N/A" on some boards
    persistence = value(g, "Persistence Mode")
    return {
        "index": index,
        "bus_id": normalize_bus_id(g["bus_id"]),
        "name": value(g, "Product Name"),
        "gen_current": _int(number(g, *link, "PCIe Generation", "Current")),
        "gen_max": _int(number(g, *link, "PCIe Generation", "Max")),
        "width_current": _int(number(g, *link, "Link Width", "Current")),
        "width_max": _int(number(g, *link, "Link Width", "Max")),
        "fb_total_mib": number(g, "FB Memory Usage", "Total"),
        "bar1_total_mib": number(g, "BAR1 Memory Usage", "Total"),
        "replays": _int(number(g, "PCI", "Replays Since Reset")),
        "power_limit_w": _first(number(g, power, "Current Power Limit"), number(g, power, "Power Limit")),
        "power_default_w": number(g, power, "Default Power Limit"),
        "temperature_c": number(g, "Temperature", "GPU Current Temp"),
        "temp_margin_c": _temp_margin(g),
        "persistence": None if persistence is None else persistence == "Enabled",
        "event_reasons": [k for k, v in reasons.items() if isinstance(v, str) and v == "Active"],
        "sm_clock_mhz": number(g, "Clocks", "SM"),
        "sm_clock_max_mhz": number(g, "Max Clocks", "SM"),
        "utilization_pct": _first(number(g, "Utilization", "GPU"), number(g, "Utilization", "Gpu")),
        "pstate": value(g, "Performance State"),
        "numa_node": numa,
        "cpu_affinity": None,
    }


def _temp_margin(g: dict[str, Any]) -> float | None:
    """Degrees below the slowdown temperature: newer drivers print it ("GPU T.Limit Temp"), older ones
    print the absolute "GPU Slowdown Temp"."""
    margin = number(g, "Temperature", "GPU T.Limit Temp")
    if margin is not None:
        return margin
    slowdown, current = number(g, "Temperature", "GPU Slowdown Temp"), number(g, "Temperature", "GPU Current Temp")
    return slowdown - current if slowdown is not None and current is not None else None


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _int(x: float | None) -> int | None:
    return int(x) if x is not None else None
