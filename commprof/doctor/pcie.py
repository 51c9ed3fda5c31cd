"""Checks 5-7: PCIe link speed and width (GPUs and the uplinks above them), PCIe errors, BAR1 size."""

from __future__ import annotations

import json
import re
from typing import Any

from commprof.doctor.facts import Facts
from commprof.doctor.gpus import gpu_view
from commprof.doctor.parse_lspci import bridges_above, parse_lspci, pcie_gen
from commprof.doctor.result import FAIL, OK, SKIPPED, WARN, CheckResult, worst

LINK_ID, LINK_TITLE = "pcie-link", "PCIe links at full generation and width"
ERR_ID, ERR_TITLE = "pcie-errors", "No PCIe errors (AER, replays)"
BAR_ID, BAR_TITLE = "bar1", "BAR1 covers VRAM"

_AER_TOTAL = re.compile(r"TOTAL_ERR_(COR|FATAL|NONFATAL)\s+(\d+)")
_SYSFS_SPEED = re.compile(r"([\d.]+) GT/s")
LINK_FIX = (
    "reseat the GPU / riser, check the slot's BIOS PCIe speed setting (Auto or the max Gen) and "
    "retimer cables, then re-check under load: sudo lspci -vvv -s <bdf> | grep LnkSta"
)
LOAD_FIX = (
    "run `commprof doctor` on the box itself (it loads every GPU while reading its link), or watch "
    "`nvidia-smi -q -d PCIE` during a run"
)

# The sysfs files of each PCI device a bundle keeps (doctor/live.py reads them, this module reads the bundle): its
# link's trained and maximum speed and width, and its AER error counters.
LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
AER_FILES = ("aer_dev_correctable", "aer_dev_fatal", "aer_dev_nonfatal")


def _traffic(reading: dict) -> str:
    """The traffic NVML saw on the link while it was read (KB/s over its 20 ms sample), where it reports it."""
    kbps = [reading.get(k) for k in ("tx_kbps", "rx_kbps")]
    if None in kbps:
        return ""
    return f" of {sum(kbps) / 1e6:.1f} GB/s"


def check_pcie_link(facts: Facts) -> CheckResult:
    gpus, where, why = gpu_view(facts)
    if not gpus:
        return CheckResult(LINK_ID, LINK_TITLE, SKIPPED, f"no GPU: {why}")
    loaded = facts.tests.get("link_load") or {}
    statuses, findings, idle_down = [OK], [], []
    readings: dict[str, list[int]] = {}  # one evidence line per distinct reading, listing its GPUs
    for g in gpus:
        reading = loaded.get(g["bus_id"])
        gen = reading["gen"] if reading else g["gen_current"]
        width = reading["width"] if reading else g["width_current"]
        label = f"GPU {g['index']} ({g['bus_id']})"
        state = f"under load{_traffic(reading)}" if reading else "idle"
        readings.setdefault(
            f"Gen{gen} x{width} of Gen{g['gen_max']} x{g['width_max']} {state} "
            f"({'NVML during a load' if reading else where})",
            [],
        ).append(g["index"])
        if g["width_max"] and width and width < g["width_max"]:
            statuses.append(FAIL if reading else WARN)
            findings.append(f"{label} runs x{width} of x{g['width_max']}")
        if g["gen_max"] and gen and gen < g["gen_max"]:
            if reading:
                statuses.append(FAIL)
                findings.append(f"{label} stays at Gen{gen} of Gen{g['gen_max']} under load")
            else:
                idle_down.append(g["index"])
    evidence = [f"GPU {','.join(map(str, ids))}: {text}" for text, ids in readings.items()]
    links, _ = uplinks(facts, [g["bus_id"] for g in gpus])
    for link in links:
        down_speed = link["speed"] and link["speed_max"] and link["speed"] < link["speed_max"]
        down_width = link["width"] and link["width_max"] and link["width"] < link["width_max"]
        if down_speed or down_width:
            statuses.append(WARN)
            findings.append(
                f"uplink {link['bdf']} above GPU {link['gpu']} at Gen{pcie_gen(link['speed'])} "
                f"x{link['width']} of Gen{pcie_gen(link['speed_max'])} x{link['width_max']}"
            )
            evidence.append(
                f"{link['bdf']}: {link['speed']} GT/s x{link['width']} of {link['speed_max']} GT/s "
                f"x{link['width_max']} ({link['where']})"
            )
    if idle_down:
        statuses.append(WARN)
        findings.append(
            f"GPU(s) {','.join(map(str, idle_down))} below their max generation while idle: idle "
            "links train down on purpose, so this is not a fault; measure under load"
        )
    status = worst(statuses)
    fix = ""
    if status == FAIL or any("uplink" in f or "runs x" in f for f in findings):
        fix = LINK_FIX
    elif idle_down:
        fix = LOAD_FIX
    detail = "; ".join(findings) or (
        f"all {len(gpus)} GPUs at full generation and width" + (f", {len(links)} uplinks too" if links else "")
    )
    return CheckResult(LINK_ID, LINK_TITLE, status, detail, evidence, fix)


def uplinks(facts: Facts, gpu_bus_ids: list[str]) -> tuple[list[dict[str, Any]], str]:
    """Links above each GPU's own link (switch upstream ports, root ports), from sysfs or lspci."""
    sysfs = facts.source("sysfs_pci")
    if sysfs.ok:
        data = json.loads(sysfs.text)
        out = []
        for bus_id in gpu_bus_ids:
            chain = (data.get(bus_id) or {}).get("chain") or []
            for bdf in chain[:-1]:  # the last bridge's link is the GPU's own link
                d = data.get(bdf) or {}
                out.append(
                    {
                        "bdf": bdf,
                        "gpu": bus_id,
                        "where": sysfs.where,
                        "speed": _sysfs_speed(d.get("current_link_speed")),
                        "speed_max": _sysfs_speed(d.get("max_link_speed")),
                        "width": _int(d.get("current_link_width")),
                        "width_max": _int(d.get("max_link_width")),
                    }
                )
        return list({(u["bdf"]): u for u in out}.values()), sysfs.where
    lspci = facts.source("lspci_full")
    if not lspci.ok:
        return [], ""
    devices = parse_lspci(lspci.text)
    by_bdf = {d.bdf: d for d in devices}
    out = {}
    for bus_id in gpu_bus_ids:
        gpu = by_bdf.get(bus_id)
        if gpu is None:
            continue
        for b in bridges_above(gpu, devices):
            if b.bus_range[1] == gpu.bus or not b.link_sta or not b.link_cap:
                continue
            out[b.bdf] = {
                "bdf": b.bdf,
                "gpu": bus_id,
                "where": lspci.where,
                "speed": b.link_sta[0],
                "speed_max": b.link_cap[0],
                "width": b.link_sta[1],
                "width_max": b.link_cap[1],
            }
    return list(out.values()), lspci.where


def check_pcie_errors(facts: Facts) -> CheckResult:
    gpus, where, why = gpu_view(facts)
    if not gpus:
        return CheckResult(ERR_ID, ERR_TITLE, SKIPPED, f"no GPU: {why}")
    statuses, evidence, findings = [OK], [], []
    replays = [(g["index"], g["replays"]) for g in gpus if g["replays"]]
    known_replays = [g for g in gpus if g["replays"] is not None]
    if replays:
        statuses.append(WARN)
        findings.append("PCIe replays on GPU " + ", ".join(f"{i} ({n})" for i, n in replays))
    if known_replays:
        evidence.append(
            f"replay counters: {sum(g['replays'] for g in known_replays)} over {len(known_replays)} GPUs ({where})"
        )
    aer, aer_where = _aer_counts(facts, [g["bus_id"] for g in gpus])
    for bdf, counts in aer.items():
        if counts.get("FATAL") or counts.get("NONFATAL"):
            statuses.append(FAIL)
            findings.append(f"uncorrectable AER errors at {bdf}: {counts}")
        elif counts.get("COR"):
            statuses.append(WARN)
            findings.append(f"correctable AER errors at {bdf}: {counts}")
    if aer_where:
        evidence.append(f"AER state of {len(aer)} devices: the GPUs and the bridges above them ({aer_where})")
    if not known_replays and not aer_where:
        return CheckResult(ERR_ID, ERR_TITLE, SKIPPED, "neither replay counters nor AER state could be read")
    status = worst(statuses)
    fix = (
        (
            "errors that grow under load point at signal integrity: reseat GPUs and risers / retimer cables, "
            "try one Gen lower in the BIOS for that slot; watch `nvidia-smi -q -d PCIE` and "
            "/sys/bus/pci/devices/<bdf>/aer_dev_correctable"
        )
        if status != OK
        else ""
    )
    detail = "; ".join(findings) or "no replays and no AER errors on the GPUs and the bridges above them"
    return CheckResult(ERR_ID, ERR_TITLE, status, detail, evidence, fix)


def _aer_counts(facts: Facts, gpu_bus_ids: list[str]) -> tuple[dict[str, dict[str, int]], str]:
    """{bdf: {"COR": n, "FATAL": n, "NONFATAL": n}} for the GPUs and the bridges above them."""
    sysfs = facts.source("sysfs_pci")
    if sysfs.ok:
        data = json.loads(sysfs.text)
        wanted = {bdf for g in gpu_bus_ids for bdf in (data.get(g) or {}).get("chain", [])} | set(gpu_bus_ids)
        counts = {}
        for bdf in sorted(wanted):
            text = " ".join(str((data.get(bdf) or {}).get(k) or "") for k in AER_FILES)
            found = {kind: int(n) for kind, n in _AER_TOTAL.findall(text)}
            if found:
                counts[bdf] = found
        return counts, sysfs.where if counts else ""
    lspci = facts.source("lspci_full")
    if not lspci.ok:
        return {}, ""
    devices = parse_lspci(lspci.text)
    by_bdf = {d.bdf: d for d in devices}
    counts = {}
    for bus_id in gpu_bus_ids:
        gpu = by_bdf.get(bus_id)
        if gpu is None:
            continue
        for d in [gpu, *bridges_above(gpu, devices)]:
            # lspci shows status bits, not counters; AdvNonFatalErr is an advisory (correctable) bit.
            counts[d.bdf] = {"COR": len(d.aer_correctable), "NONFATAL": len(d.aer_uncorrectable)}
    return counts, f"UESta / CESta bits, {lspci.where}" if counts else ""


def check_bar1(facts: Facts) -> CheckResult:
    gpus, where, why = gpu_view(facts)
    if not gpus:
        return CheckResult(BAR_ID, BAR_TITLE, SKIPPED, f"no GPU: {why}")
    known = [g for g in gpus if g["bar1_total_mib"] is not None and g["fb_total_mib"] is not None]
    if not known:
        return CheckResult(BAR_ID, BAR_TITLE, SKIPPED, f"BAR1 size not reported ({where})")
    small = [g for g in known if g["bar1_total_mib"] < g["fb_total_mib"]]
    evidence = [
        f"GPU {g['index']}: BAR1 {g['bar1_total_mib']:.0f} MiB, VRAM {g['fb_total_mib']:.0f} MiB ({where})"
        for g in (small or known[:1])
    ]
    if small:
        return CheckResult(
            BAR_ID,
            BAR_TITLE,
            WARN,
            f"BAR1 smaller than VRAM on {len(small)} GPU(s): peers can map only part of each GPU's memory, "
            "so P2P / IPC buffers beyond it fall back or fail",
            evidence,
            "enable 'Above 4G Decoding' and 'Re-Size BAR Support' in the BIOS; on RTX PRO / workstation cards "
            "switch the BAR1 mode with NVIDIA's displaymodeselector tool, then reboot",
        )
    return CheckResult(BAR_ID, BAR_TITLE, OK, f"BAR1 >= VRAM on all {len(known)} GPUs", evidence)


def _sysfs_speed(text: str | None) -> float | None:
    m = _SYSFS_SPEED.search(text or "")
    return float(m.group(1)) if m else None


def _int(text: Any) -> int | None:
    try:
        return int(str(text).strip())
    except ValueError:
        return None
