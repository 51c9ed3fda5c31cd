"""Section 2 of the page as the Decision holds it, the box a run ran on: GPUs and versions, the topology (the live
probe's answer or a simulated run's preset), the doctor's verdicts and what NCCL chose. Pure: a RunAnalysis in,
plain data out."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from commprof.records.meta_sections import MetaCalibration, MetaGpu, MetaSection
from commprof.records.meta_topology import (
    PROBE_FIELDS,
    MetaTopology,
    P2pStatus,
    PcieLink,
    TopologyGpu,
    TopologyHost,
    TopologyLink,
    TopologyPair,
)
from commprof.records.run_meta import as_written
from commprof.report.analysis.provenance import hardware_text
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.formatting import finite, fmt_bytes, fmt_us


def box_facts(run: RunAnalysis) -> list[tuple[str, str]]:
    """The box's facts as section 2 lists them: GPUs, host, world size, backend, date, the plan, the calibration."""
    meta = run.meta
    groups: dict[tuple, int] = {}
    for gpu in meta.gpus or []:
        key = (gpu.name or "?", gpu.compute_capability or "?")
        groups[key] = groups.get(key, 0) + 1
    facts = [
        (
            "GPUs",
            "; ".join(f"{n} × {name} (compute capability {cc})" for (name, cc), n in groups.items())
            or hardware_text(meta, run.backend),
        )
    ]
    run_facts = {
        "hostname": meta.hostname,
        "world_size": meta.world_size,
        "nnodes": meta.nnodes,
        "backend": meta.backend,
        "created": meta.created,
    }
    facts += [(name, str(value)) for name, value in run_facts.items() if value is not None]
    plan = _said(meta.plan)
    if plan:  # by name, as the file lists them
        facts.append(("plan", ", ".join(f"{k} {v}" for k, v in plan.items())))
    calibration = meta.calibration
    if run.simulated and calibration:
        facts.append(("model calibration", calibration if isinstance(calibration, str) else _calibration(calibration)))
    return facts


def _said(section: MetaSection | None) -> dict[str, Any]:
    """What a section of meta.json says, field by field as the file lists them (those it does not say left out)."""
    return as_written(section) or {}


def _calibration(calibration: MetaCalibration) -> str:
    return calibration.file or _as_text(_said(calibration))


def gpus_shown(run: RunAnalysis) -> dict[str, Any] | None:
    """meta.json's GPU list as a table, where the topology probe does not list them."""
    gpus = run.meta.gpus or []
    probed = _is_probe(run.meta.topology) and run.meta.probed_gpus
    return gpu_table(gpus) if gpus and not probed else None


def gpu_table(gpus: list[MetaGpu]) -> dict[str, Any]:
    """meta.json's GPU list as a table, where no topology probe lists them: the fields any GPU says as the
    columns."""
    columns = [name for name in MetaGpu.__struct_fields__ if any(getattr(gpu, name) is not None for gpu in gpus)]
    return {"count": len(gpus), "columns": columns, "rows": [[getattr(gpu, c) for c in columns] for gpu in gpus]}


def _grid(title: str, labels: list[str], rows: list[list[tuple]]) -> dict[str, Any]:
    """A square grid between GPUs, each row led by its GPU's label."""
    return {
        "title": title,
        "labels": labels,
        "rows": [{"label": labels[i] if i < len(labels) else "", "cells": row} for i, row in enumerate(rows)],
    }


_LEVEL_CLASS = {
    "X": "lv-self",
    "NV": "lv-nv",
    "PIX": "lv-pix",
    "BRD": "lv-pix",
    "PXB": "lv-pxb",
    "PHB": "lv-phb",
    "NODE": "lv-node",
    "SYS": "lv-sys",
    "LOC": "lv-sys",
}


def topology_view(topology: MetaTopology | None) -> dict[str, Any] | None:
    """meta.json's topology for the page: commprof.doctor.topology_probe.probe_topology()'s answer as a host line,
    a GPU table and level / P2P grids; a simulation's preset as its facts and figures; anything else it says as
    text."""
    said = _said(topology)
    if topology is None or not said:
        return None
    if _is_probe(topology):
        return probe_view(topology)
    if topology.simulated and topology.links is not None:
        return preset_view(topology)
    return {"probe": False, "grids": [], "other": [(key, _as_text(value)) for key, value in said.items()]}


def _is_probe(topology: MetaTopology | None) -> bool:
    """The topology is the probe's answer (it names the host or the GPU pairs)."""
    return topology is not None and (topology.host is not None or topology.pairs is not None)


def preset_view(topology: MetaTopology) -> dict[str, Any]:
    """A simulated run's topology preset (commprof.costmodel.topology.Topology.summary()): facts, the stated
    assumptions, the link figures and the stated latencies of other implementations, each with its source."""
    overhead = topology.launch_overhead_us
    facts = [
        ("preset", f"{topology.name or '?'} ({topology.path or '?'})"),
        ("box", topology.description or "?"),
        ("GPUs", "?" if topology.gpus is None else topology.gpus),
        ("compute capability", "?" if topology.compute_capability is None else topology.compute_capability),
        ("GPU-to-GPU path", "?" if topology.gpu_path is None else topology.gpu_path),
        ("P2P", "yes" if topology.p2p_supported else "no"),
        ("launch overhead per op (eager)", f"{'?' if overhead is None else overhead} µs"),
    ]
    links = [
        {
            "link": name,
            "channels": "?" if figures.channels is None else figures.channels,
            "bandwidth": f"{'?' if figures.channel_bw_gbps is None else figures.channel_bw_gbps} GB/s",
            "nvls": figures.nvls_channels or 0,
        }
        for name, figures in (topology.links or {}).items()
        if isinstance(figures, TopologyLink)
    ]
    impls = [
        {
            "impl": name,
            "points": ", ".join(f"{fmt_bytes(b)}: {fmt_us(us)}" for b, us in stated.points or []),
            "max": fmt_bytes(stated.max_bytes) if stated.max_bytes else "any size",
            "source": "?" if stated.source is None else stated.source,
        }
        for name, stated in (topology.impls or {}).items()
    ]
    return {
        "probe": False,
        "preset": True,
        "grids": [],
        "other": [],
        "facts": facts,
        "assumptions": str(topology.assumptions or "").strip(),
        "links": links,
        "impls": impls,
        "sources": "; ".join(topology.sources or []),
    }


def probe_view(topology: MetaTopology) -> dict[str, Any]:
    """The topology probe: host summary, driver, GPU table, path-level and P2P grids from "pairs"."""
    gpus = topology.probed_gpus  # a simulation's summary gives a count instead
    view: dict[str, Any] = {
        "probe": True,
        "host": host_line(topology.host),
        "driver": "",
        "gpus": [],
        "grids": [],
        "p2p_notes": [],
        "no_gpus": "",
        "other": [(k, _as_text(v)) for k, v in _said(topology).items() if k not in PROBE_FIELDS],
    }
    if topology.driver_version or topology.cuda_driver_version:
        view["driver"] = (
            f"NVIDIA driver {topology.driver_version or '?'}, CUDA driver API {topology.cuda_driver_version or '?'}"
            + (f" ({topology.source.upper()})" if topology.source else "")
        )
    if not gpus:
        view["no_gpus"] = f"no GPUs: {topology.reason or 'the probe found none'}"
        return view
    view["gpus"] = [_gpu_row(i, gpu) for i, gpu in enumerate(gpus)]
    labels = [f"GPU{g['index']}" for g in view["gpus"]]
    levels, p2p, broken = _pair_grids(topology.pairs or [], view["gpus"], labels)
    view["p2p_notes"] = [f"{', '.join(pairs)} ({why})" for why, pairs in broken.items()]
    if len(labels) > 1:
        view["grids"] = [_grid("path level (NVML)", labels, levels), _grid("P2P read + write (NVML)", labels, p2p)]
    return view


def _gpu_row(i: int, gpu: TopologyGpu) -> dict[str, Any]:
    """One probed GPU as a table row, "?" where the probe did not say."""
    pcie = gpu.pcie or PcieLink()
    memory = gpu.memory_total_mib
    return {
        "index": i if gpu.index is None else gpu.index,
        "name": gpu.name or "?",
        "cc": gpu.compute_capability or "?",
        "bus": gpu.pci_bus_id or "?",
        "memory": f"{memory / 1024:.0f} GiB" if finite(memory) else "?",
        "pcie": f"{_link(pcie.gen_current, pcie.width_current)} / {_link(pcie.gen_max, pcie.width_max)}",
        "numa": "?" if gpu.numa_node is None else gpu.numa_node,
        "cpus": gpu.cpu_affinity or "?",
        "nvlinks": gpu.nvlink_active or 0,
    }


def _pair_grids(
    pairs: list[TopologyPair], gpu_rows: list[dict[str, Any]], labels: list[str]
) -> tuple[list[list[tuple]], list[list[tuple]], dict[str, list[str]]]:
    """The path-level and P2P grids over the probed pairs, and the pairs whose P2P is off, by why."""
    position = {g["index"]: k for k, g in enumerate(gpu_rows)}
    count = len(labels)

    def blank() -> list[list[tuple]]:
        return [
            [("X", "lv-self", "") if a == b else ("?", "lv-other", "not probed") for b in range(count)]
            for a in range(count)
        ]

    levels, p2p = blank(), blank()
    broken: dict[str, list[str]] = {}  # why P2P is off -> the pairs
    for pair in pairs:
        ends = pair.gpus
        if not (ends is not None and len(ends) == 2 and all(e in position for e in ends)):
            continue
        a, b = position[ends[0]], position[ends[1]]
        where = f"{labels[a]}–{labels[b]}"
        level = "NV" if pair.nvlink else pair.level
        cell = (level or "?", _LEVEL_CLASS.get(str(level).upper(), "lv-other"), f"{where}: {level or 'unknown'}")
        levels[a][b] = levels[b][a] = cell
        status = pair.p2p or P2pStatus()
        read, write = status.read, status.write
        if read == "ok" and write == "ok":
            cell = ("yes", "lv-pix", f"{where}: P2P read and write ok")
        elif read is None and write is None:
            cell = ("?", "lv-other", f"{where}: P2P not probed")
        else:
            cell = ("no", "lv-sys", f"{where}: P2P read {read}, write {write}")
            broken.setdefault(f"read {read or '?'}, write {write or '?'}", []).append(where)
        p2p[a][b] = p2p[b][a] = cell
    return levels, p2p, broken


def host_line(host: TopologyHost | None) -> str:
    """ "host vm: AMD EPYC, 2 logical CPUs, 1 socket, 1 NUMA node (0: CPUs 0-1)"."""
    if host is None or not _said(host):
        return ""
    nodes = host.numa_nodes or []
    sockets = host.sockets
    parts = [str(host.cpu_model or "unknown CPU")]
    if host.logical_cpus:
        parts.append(f"{host.logical_cpus} logical CPUs")
    if sockets:
        parts.append(f"{sockets} socket{'s' if sockets != 1 else ''}")
    if nodes:
        layout = "; ".join(f"{n.node}: CPUs {n.cpus}" for n in nodes)
        parts.append(f"{len(nodes)} NUMA node{'s' if len(nodes) != 1 else ''} ({layout})")
    return f"host {host.hostname or '?'}: " + ", ".join(parts)


def _link(gen: Any, width: Any) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def _as_text(value: Any) -> str:
    if isinstance(value, (str, int, float)):
        return str(value)
    text = json.dumps(value, default=str)
    return json.dumps(value, default=str, indent=1) if len(text) > 100 else text


def nccl_choices(run: RunAnalysis, shown: list[tuple[int, str, str, str]]) -> list[dict[str, Any]]:
    """What NCCL ran (its INFO log) for each (T, setting, setting's words, point) shown, headline mode."""
    if not shown:
        return []
    rows = run.ok_mode_steps.set_index(["point_id", "tokens"])
    out = []
    for tokens, setting, label, point_id in shown:
        if point_id is None or (point_id, tokens) not in rows.index:
            continue
        nccl = rows.loc[(point_id, tokens)]
        nccl = nccl.iloc[0] if isinstance(nccl, pd.DataFrame) else nccl
        info = nccl["nccl"] if isinstance(nccl["nccl"], dict) else {}
        if not info:
            continue
        for choice in info.get("choices") or [{}]:
            out.append(
                {
                    "tokens": int(tokens),
                    "setting": setting,
                    "setting_label": label,
                    "point_id": point_id,
                    "version": info.get("version") or "—",
                    "transports": ", ".join(f"{k}: {v}" for k, v in (info.get("transports") or {}).items()) or "—",
                    "coll": choice.get("coll", "—"),
                    "bytes": fmt_bytes(choice.get("bytes")),
                    "algo": choice.get("algo", "—"),
                    "proto": choice.get("proto", "—"),
                    "channels": choice.get("channels", info.get("channels", "—")),
                }
            )
    return out


def nccl_note(run: RunAnalysis) -> str:
    """Why there is no "what NCCL chose" table, said once."""
    if run.backend == "gloo":
        return "NCCL did not run: this run used the gloo backend (CPU ranks), so there is no NCCL log to show."
    return (
        "No NCCL INFO log in these records: the sweep reads NCCL's choices from its NCCL_DEBUG=INFO log, "
        "which this run did not capture (run without --no-nccl-debug)."
    )
