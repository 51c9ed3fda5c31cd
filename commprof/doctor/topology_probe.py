"""Topology probe: GPUs, PCIe links, pairwise P2P and path levels through NVML, or the host alone without GPUs.

`probe_topology()` returns a plain JSON-able dict (stored in meta.json["topology"]); `commprof topo`
(doctor/command.py) prints it with `format_topology()`.
NVML (nvidia-ml-py) is imported lazily; no NVML, no driver or no GPU is an answer, never an exception.
"""

from __future__ import annotations

import glob
import importlib
import os
import socket
from pathlib import Path
from typing import Any

from commprof.doctor.nvml_guard import NvmlCalls

# nvmlDeviceGetTopologyCommonAncestor answers (NVML_TOPOLOGY_*), named as `nvidia-smi topo -m` names them.
LEVEL_NAMES = {0: "BRD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# NVML_P2P_STATUS_*, in order.
P2P_STATUS_NAMES = [
    "ok",
    "chipset_not_supported",
    "gpu_not_supported",
    "topology_not_supported",
    "disabled_by_regkey",
    "not_supported",
    "unknown",
]
# NVML_P2P_CAPS_INDEX_*.
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}


def probe_topology(nvml: Any = None) -> dict[str, Any]:
    """The machine's GPU topology as a dict; `nvml` replaces the pynvml module (tests pass a fake)."""
    topology: dict[str, Any] = {
        "source": None,
        "reason": None,
        "host": describe_host(),
        "driver_version": None,
        "cuda_driver_version": None,
        "gpus": [],
        "pairs": [],
    }
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            topology["reason"] = "no NVML: nvidia-ml-py is not installed"
            return topology
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...: no usable driver
        topology["reason"] = f"no NVIDIA driver (NVML: {exc})"
        return topology
    ask = NvmlCalls(nvml)
    try:
        topology["source"] = "nvml"
        topology["driver_version"] = as_text(ask("nvmlSystemGetDriverVersion"))
        cuda = ask("nvmlSystemGetCudaDriverVersion_v2") or ask("nvmlSystemGetCudaDriverVersion")
        topology["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None
        count = ask("nvmlDeviceGetCount")
        handles = [ask("nvmlDeviceGetHandleByIndex", i) for i in range(count or 0)]
        if count is None:
            topology["reason"] = f"NVML gave no device count ({ask.unanswered['nvmlDeviceGetCount']})"
        elif not handles:
            topology["reason"] = "no GPU: the NVIDIA driver is loaded but reports 0 devices"
        topology["gpus"] = [_gpu(ask, i, h) for i, h in enumerate(handles)]
        topology["pairs"] = [_pair(ask, handles, a, b) for a in range(len(handles)) for b in range(a + 1, len(handles))]
    finally:
        ask("nvmlShutdown")
    if ask.unanswered:  # the calls this NVML did not answer, and why (an older nvidia-ml-py, a refused read)
        topology["nvml_unanswered"] = ask.unanswered
    return topology


def p2p_all_pairs(topology: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether NVML reports P2P read and write between every GPU pair; None when that is unknown."""
    gpus, pairs = topology.get("gpus") or [], topology.get("pairs") or []
    if len(gpus) < 2:
        return None, topology.get("reason") or f"{len(gpus)} GPU: no peers"
    if len(pairs) != len(gpus) * (len(gpus) - 1) // 2 or any(not p.get("p2p") for p in pairs):
        return None, "P2P status not probed for every pair"
    bad = [p for p in pairs if p["p2p"].get("read") != "ok" or p["p2p"].get("write") != "ok"]
    if bad:
        shown = ", ".join(
            f"GPU{p['gpus'][0]}-GPU{p['gpus'][1]} (read {p['p2p'].get('read')}, write {p['p2p'].get('write')})"
            for p in bad[:4]
        )
        more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
        return False, f"NVML: no P2P between {shown}{more}"
    return True, f"NVML: P2P read and write OK between all {len(pairs)} GPU pairs"


def describe_host() -> dict[str, Any]:
    """CPU model, logical CPUs, sockets and NUMA nodes of this machine, from /proc and /sys."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    host = {"hostname": socket.gethostname(), "logical_cpus": os.cpu_count(), **parse_cpuinfo(cpuinfo)}
    nodes = []
    for path in sorted(glob.glob("/sys/devices/system/node/node[0-9]*"), key=lambda p: int(p.rsplit("node", 1)[1])):
        try:
            nodes.append({"node": int(path.rsplit("node", 1)[1]), "cpus": Path(path, "cpulist").read_text().strip()})
        except OSError:
            continue
    host["numa_nodes"] = nodes
    return host


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """Model name, vendor and socket count from /proc/cpuinfo text (x86 and Arm spellings)."""
    model = vendor = None
    sockets = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in ("model name", "Model", "cpu model") and model is None:
            model = value
        elif key in ("vendor_id", "CPU implementer") and vendor is None:
            vendor = value
        elif key == "physical id":
            sockets.add(value)
    return {"cpu_model": model, "cpu_vendor": vendor, "sockets": len(sockets) or None}


def cpu_list(masks: list[int]) -> str:
    """NVML's CPU-affinity bitmask words (64 CPUs each) as a list like "0-63,128-191"."""
    cpus = [w * 64 + b for w, word in enumerate(masks) for b in range(64) if word >> b & 1]
    ranges: list[str] = []
    start = prev = None
    for cpu in cpus + [None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            ranges.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = cpu
    return ",".join(ranges)


def _gpu(ask: NvmlCalls, index: int, handle) -> dict[str, Any]:
    pci = ask("nvmlDeviceGetPciInfo_v3", handle) or ask("nvmlDeviceGetPciInfo", handle)
    bus_id = normalize_bus_id(as_text(pci.busId)) if pci is not None else None
    cc = ask("nvmlDeviceGetCudaComputeCapability", handle)
    memory = ask("nvmlDeviceGetMemoryInfo", handle)
    words = -(-(os.cpu_count() or 64) // 64)
    affinity = ask("nvmlDeviceGetCpuAffinity", handle, words)
    numa = ask("nvmlDeviceGetNumaNodeId", handle)
    if numa is None and bus_id:
        numa = _sysfs_numa_node(bus_id)
    return {
        "index": index,
        "name": as_text(ask("nvmlDeviceGetName", handle)),
        "uuid": as_text(ask("nvmlDeviceGetUUID", handle)),
        "pci_bus_id": bus_id,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "memory_total_mib": memory.total // 2**20 if memory is not None else None,
        "pcie": {
            "gen_current": ask("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            "gen_max": ask("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            "gen_gpu_max": ask("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
            "width_current": ask("nvmlDeviceGetCurrPcieLinkWidth", handle),
            "width_max": ask("nvmlDeviceGetMaxPcieLinkWidth", handle),
        },
        "numa_node": numa if numa is None or numa >= 0 else None,
        "cpu_affinity": cpu_list(list(affinity)) if affinity is not None else None,
        "nvlink_active": _active_nvlinks(ask, handle),
    }


def _pair(ask: NvmlCalls, handles, a: int, b: int) -> dict[str, Any]:
    level = ask("nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b])
    p2p = {}
    for cap, index in P2P_CAPS.items():
        status = ask("nvmlDeviceGetP2PStatus", handles[a], handles[b], index)
        p2p[cap] = P2P_STATUS_NAMES[status] if status is not None and status < len(P2P_STATUS_NAMES) else None
    return {"gpus": [a, b], "level": LEVEL_NAMES.get(level), "nvlink": p2p.get("nvlink") == "ok", "p2p": p2p}


def _active_nvlinks(ask: NvmlCalls, handle) -> int:
    active = 0
    for link in range(getattr(ask.nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = ask("nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            break
        active += int(state == 1)
    return active


def _sysfs_numa_node(bus_id: str) -> int | None:
    try:
        return int(Path(f"/sys/bus/pci/devices/{bus_id.lower()}/numa_node").read_text())
    except (OSError, ValueError):
        return None


def normalize_bus_id(bus_id: str) -> str:
    """ "00000000:06:00.0" (NVML), "0000:06:00.0" (sysfs) and "06:00.0" (lspci) all become "0000:06:00.0"."""
    bus_id = bus_id.strip().lower()
    parts = bus_id.split(":")
    domain = parts[0][-4:] if len(parts) == 3 else "0000"
    return f"{domain}:{parts[-2]}:{parts[-1]}"


def as_text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def format_topology(topology: dict[str, Any]) -> str:
    """The probe as a person reads it: host, GPU table, path-level matrix, P2P matrix."""
    host = topology["host"]
    lines = [
        f"host {host.get('hostname')}: {host.get('cpu_model') or 'unknown CPU'}, "
        f"{host.get('logical_cpus')} logical CPUs, {host.get('sockets') or '?'} socket(s), "
        f"{len(host.get('numa_nodes') or []) or '?'} NUMA node(s)"
    ]
    for node in host.get("numa_nodes") or []:
        lines.append(f"  NUMA {node['node']}: CPUs {node['cpus']}")
    gpus = topology["gpus"]
    if not gpus:
        lines.append(f"no GPUs: {topology.get('reason')}; nothing to tune here")
        return "\n".join(lines)
    lines.append(f"driver {topology.get('driver_version')}, CUDA {topology.get('cuda_driver_version')} (NVML)")
    lines.append(f"{'GPU':>3}  {'name':<44} {'bus id':<13} {'cc':>4}  {'PCIe now/max':<14} {'NUMA':>4}  CPUs")
    for g in gpus:
        p = g["pcie"]
        link = f"Gen{p['gen_current']}x{p['width_current']}/Gen{p['gen_max']}x{p['width_max']}"
        lines.append(
            f"{g['index']:>3}  {str(g['name'])[:44]:<44} {str(g['pci_bus_id']):<13} "
            f"{str(g['compute_capability']):>4}  {link:<14} {str(g['numa_node']):>4}  {g['cpu_affinity']}"
        )
    level = {tuple(p["gpus"]): p for p in topology["pairs"]}
    lines.append("")
    lines.append("path level (P2P read/write: ok, - = not supported)")
    lines.append("      " + "".join(f"GPU{g['index']:<5}" for g in gpus))
    for a in gpus:
        cells = []
        for b in gpus:
            if a["index"] == b["index"]:
                cells.append("X")
                continue
            pair = level.get((min(a["index"], b["index"]), max(a["index"], b["index"])), {})
            p2p = pair.get("p2p") or {}
            ok = "ok" if p2p.get("read") == "ok" and p2p.get("write") == "ok" else "-"
            cells.append(f"{pair.get('level') or '?'}/{ok}")
        lines.append(f"GPU{a['index']:<3}" + "".join(f"{c:<8}" for c in cells))
    return "\n".join(lines)
