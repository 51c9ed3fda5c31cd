"""Section 2 of the page as the Decision holds it, the box a run ran on: GPUs and versions, the topology (the live
probe's answer or a simulated run's preset), the doctor's verdicts and what NCCL chose. Pure: a RunAnalysis in,
plain data out."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from commprof.report.analysis.provenance import hardware_text
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.formatting import finite, fmt_bytes, fmt_us


def box_facts(run: RunAnalysis) -> list[tuple[str, str]]:
    """The box's facts as section 2 lists them: GPUs, host, world size, backend, date, the plan, the calibration."""
    meta = run.meta_view
    groups: dict[tuple, int] = {}
    for gpu in meta.gpu_list:
        key = (gpu.get("name", "?"), gpu.get("compute_capability", gpu.get("capability", "?")))
        groups[key] = groups.get(key, 0) + 1
    facts = [
        (
            "GPUs",
            "; ".join(f"{n} × {name} (compute capability {cc})" for (name, cc), n in groups.items())
            or hardware_text(meta, run.backend),
        )
    ]
    facts += [
        (k, str(getattr(meta, k))) for k in ("hostname", "world_size", "nnodes", "backend", "created") if k in run.meta
    ]
    plan = meta.plan or {}
    if plan:
        facts.append(("plan", ", ".join(f"{k} {v if v is not None else 'the model’s'}" for k, v in plan.items())))
    if run.simulated and meta.calibration:
        calibration = meta.calibration
        facts.append(
            (
                "model calibration",
                str(calibration.get("file", _as_text(calibration)) if isinstance(calibration, dict) else calibration),
            )
        )
    return facts


def gpus_shown(run: RunAnalysis, topology: dict[str, Any] | None) -> dict[str, Any] | None:
    """meta.json's GPU list as a table, where the topology does not list them."""
    gpus = run.meta_view.gpu_list
    return gpu_table(gpus) if gpus and not (topology and topology.get("gpus")) else None


def gpu_table(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """meta.json's GPU list as a table, where no topology probe lists them: the first GPU's keys as the columns."""
    return {"count": len(gpus), "columns": list(gpus[0]), "rows": [list(g.values()) for g in gpus]}


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
_PROBE_KEYS = {"source", "reason", "host", "driver_version", "cuda_driver_version", "gpus", "pairs"}


def topology_view(topology: Any) -> dict[str, Any] | None:
    """meta.json's topology for the page: commprof.doctor.topology_probe.probe_topology()'s answer as a host line, a GPU table
    and level / P2P grids; any other shape as its square matrices (grids) and the rest as text."""
    if not topology:
        return None
    if isinstance(topology, dict) and (
        isinstance(topology.get("host"), dict) or isinstance(topology.get("pairs"), list)
    ):
        return probe_view(topology)
    if isinstance(topology, dict) and topology.get("simulated") and isinstance(topology.get("links"), dict):
        return preset_view(topology)
    if not isinstance(topology, dict):
        return {"probe": False, "grids": [], "other": [("topology", json.dumps(topology, indent=1, default=str))]}
    grids, other = [], []
    labels = topology.get("gpus") if isinstance(topology.get("gpus"), list) else None
    labels_used = False
    for key, value in topology.items():
        if _is_square(value):
            labels_used = labels_used or bool(labels and len(labels) == len(value))
            names = (
                [str(x if not isinstance(x, dict) else x.get("name", i)) for i, x in enumerate(labels)]
                if labels and len(labels) == len(value)
                else [f"GPU{i}" for i in range(len(value))]
            )
            grids.append(_grid(key, names, [[_level_cell(cell) for cell in row] for row in value]))
        else:
            other.append((key, value))
    return {
        "probe": False,
        "grids": grids,
        "other": [(key, _as_text(value)) for key, value in other if not (key == "gpus" and labels_used)],
    }


def preset_view(topology: dict[str, Any]) -> dict[str, Any]:
    """A simulated run's topology preset (commprof.costmodel.topology.Topology.summary()): facts, the stated
    assumptions, the link figures and the stated latencies of other implementations, each with its source."""
    facts = [
        ("preset", f"{topology.get('name', '?')} ({topology.get('path', '?')})"),
        ("box", topology.get("description") or "?"),
        ("GPUs", topology.get("gpus", "?")),
        ("compute capability", topology.get("compute_capability", "?")),
        ("GPU-to-GPU path", topology.get("gpu_path", "?")),
        ("P2P", "yes" if topology.get("p2p_supported") else "no"),
        ("launch overhead per op (eager)", f"{topology.get('launch_overhead_us', '?')} µs"),
    ]
    links = [
        {
            "link": name,
            "channels": figures.get("channels", "?"),
            "bandwidth": f"{figures.get('channel_bw_gbps', '?')} GB/s",
            "nvls": figures.get("nvls_channels", 0),
        }
        for name, figures in topology["links"].items()
        if isinstance(figures, dict)
    ]
    impls = [
        {
            "impl": name,
            "points": ", ".join(f"{fmt_bytes(b)}: {fmt_us(us)}" for b, us in stated.get("points") or []),
            "max": fmt_bytes(stated.get("max_bytes")) if stated.get("max_bytes") else "any size",
            "source": stated.get("source", "?"),
        }
        for name, stated in (topology.get("impls") or {}).items()
        if isinstance(stated, dict)
    ]
    return {
        "probe": False,
        "preset": True,
        "grids": [],
        "other": [],
        "facts": facts,
        "assumptions": str(topology.get("assumptions") or "").strip(),
        "links": links,
        "impls": impls,
        "sources": "; ".join(str(x) for x in topology.get("sources") or []),
    }


def probe_view(topology: dict[str, Any]) -> dict[str, Any]:
    """The topology probe: host summary, driver, GPU table, path-level and P2P grids from "pairs"."""
    host = topology.get("host") if isinstance(topology.get("host"), dict) else {}
    listed = topology.get("gpus")  # a simulation's summary gives a count instead
    gpus = [g for g in listed if isinstance(g, dict)] if isinstance(listed, list) else []
    view: dict[str, Any] = {
        "probe": True,
        "host": host_line(host),
        "driver": "",
        "gpus": [],
        "grids": [],
        "p2p_notes": [],
        "no_gpus": "",
        "other": [(k, _as_text(v)) for k, v in topology.items() if k not in _PROBE_KEYS],
    }
    if topology.get("driver_version") or topology.get("cuda_driver_version"):
        view["driver"] = (
            f"NVIDIA driver {topology.get('driver_version') or '?'}, CUDA driver API "
            f"{topology.get('cuda_driver_version') or '?'}"
            + (f" ({str(topology['source']).upper()})" if topology.get("source") else "")
        )
    if not gpus:
        view["no_gpus"] = f"no GPUs: {topology.get('reason') or 'the probe found none'}"
        return view
    view["gpus"] = [_gpu_row(i, gpu) for i, gpu in enumerate(gpus)]
    labels = [f"GPU{g['index']}" for g in view["gpus"]]
    levels, p2p, broken = _pair_grids(topology.get("pairs") or [], view["gpus"], labels)
    view["p2p_notes"] = [f"{', '.join(pairs)} ({why})" for why, pairs in broken.items()]
    if len(labels) > 1:
        view["grids"] = [_grid("path level (NVML)", labels, levels), _grid("P2P read + write (NVML)", labels, p2p)]
    return view


def _gpu_row(i: int, gpu: dict[str, Any]) -> dict[str, Any]:
    """One probed GPU as a table row, "?" where the probe did not say."""
    pcie = gpu.get("pcie") if isinstance(gpu.get("pcie"), dict) else {}
    memory = gpu.get("memory_total_mib")
    return {
        "index": gpu.get("index", i),
        "name": gpu.get("name") or "?",
        "cc": gpu.get("compute_capability") or "?",
        "bus": gpu.get("pci_bus_id") or "?",
        "memory": f"{memory / 1024:.0f} GiB" if finite(memory) else "?",
        "pcie": f"{_link(pcie.get('gen_current'), pcie.get('width_current'))} / "
        f"{_link(pcie.get('gen_max'), pcie.get('width_max'))}",
        "numa": "?" if gpu.get("numa_node") is None else gpu.get("numa_node"),
        "cpus": gpu.get("cpu_affinity") or "?",
        "nvlinks": gpu.get("nvlink_active") or 0,
    }


def _pair_grids(
    pairs: list[Any], gpu_rows: list[dict[str, Any]], labels: list[str]
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
        ends = pair.get("gpus") if isinstance(pair, dict) else None
        if not (isinstance(ends, list) and len(ends) == 2 and all(e in position for e in ends)):
            continue
        a, b = position[ends[0]], position[ends[1]]
        where = f"{labels[a]}–{labels[b]}"
        level = "NV" if pair.get("nvlink") else pair.get("level")
        cell = (level or "?", _LEVEL_CLASS.get(str(level).upper(), "lv-other"), f"{where}: {level or 'unknown'}")
        levels[a][b] = levels[b][a] = cell
        status = pair.get("p2p") if isinstance(pair.get("p2p"), dict) else {}
        read, write = status.get("read"), status.get("write")
        if read == "ok" and write == "ok":
            cell = ("yes", "lv-pix", f"{where}: P2P read and write ok")
        elif read is None and write is None:
            cell = ("?", "lv-other", f"{where}: P2P not probed")
        else:
            cell = ("no", "lv-sys", f"{where}: P2P read {read}, write {write}")
            broken.setdefault(f"read {read or '?'}, write {write or '?'}", []).append(where)
        p2p[a][b] = p2p[b][a] = cell
    return levels, p2p, broken


def host_line(host: dict[str, Any]) -> str:
    """ "host vm: AMD EPYC, 2 logical CPUs, 1 socket, 1 NUMA node (0: CPUs 0-1)"."""
    if not host:
        return ""
    nodes = [n for n in host.get("numa_nodes") or [] if isinstance(n, dict)]
    sockets = host.get("sockets")
    parts = [str(host.get("cpu_model") or "unknown CPU")]
    if host.get("logical_cpus"):
        parts.append(f"{host['logical_cpus']} logical CPUs")
    if sockets:
        parts.append(f"{sockets} socket{'s' if sockets != 1 else ''}")
    if nodes:
        layout = "; ".join(f"{n.get('node')}: CPUs {n.get('cpus')}" for n in nodes)
        parts.append(f"{len(nodes)} NUMA node{'s' if len(nodes) != 1 else ''} ({layout})")
    return f"host {host.get('hostname') or '?'}: " + ", ".join(parts)


def _link(gen: Any, width: Any) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def _as_text(value: Any) -> str:
    if isinstance(value, (str, int, float)):
        return str(value)
    text = json.dumps(value, default=str)
    return json.dumps(value, default=str, indent=1) if len(text) > 100 else text


def _is_square(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 1
        and all(isinstance(row, list) and len(row) == len(value) for row in value)
    )


def _level_cell(cell: Any) -> tuple[str, str, str]:
    if isinstance(cell, bool):
        return ("yes" if cell else "no", "lv-pix" if cell else "lv-sys", "")
    text = str(cell)
    upper = text.upper()
    css = _LEVEL_CLASS.get(upper) or ("lv-nv" if upper.startswith("NV") else "lv-other")
    return text, css, ""


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
