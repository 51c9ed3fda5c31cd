"""Assemble a run's analysis into the report: index.html (self-contained) and the files next to it.

`analyze_run` calls the pure analysis functions once per run (per source, when a run mixes them);
`render_report` draws the figures, fills templates/index.html and writes the exports.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from commprof.report import analysis as an
from commprof.report import exports as ex
from commprof.report.answers import (
    break_even_text,
    choice_rows,
    headline_answers,
    not_a_result_notes,
    recommend_notes,
    spec_label,
)
from commprof.report.costmodel_check import check_summary, check_view, model_checks
from commprof.report.formatting import (
    SOURCE_LABELS,
    axis_name,
    escaped,
    finite,
    fmt_bytes,
    fmt_ms,
    fmt_ms_value,
    fmt_num,
    fmt_pct,
    fmt_us,
    fmt_x,
)

DEFAULT_ACCEPTS = (1.3, 2.0, 3.0)
# The breakdown's and projection's settings (analysis.breakdown) as the page names them.
SETTING_LABELS = {"baseline": "baseline", "recommended": "(a) to export", "best": "fastest at this T"}
SHORT_SETTING_LABELS = {"baseline": "baseline", "recommended": "(a)", "best": "fastest"}
MAX_MESSAGE_CELLS = 12


@dataclass(frozen=True)
class ReportOptions:
    """What the user tells the report beyond the records (`--compute-ms`, `--draft-ms`, `--accept`, `--baseline`)."""

    compute: an.ComputeTimes = field(default_factory=an.ComputeTimes)
    draft_ms: float | None = None
    accepts: tuple[float, ...] = DEFAULT_ACCEPTS
    baseline: str | None = None


@dataclass
class RunAnalysis:
    """Everything the page shows about one run (one source of it)."""

    run_id: str
    name: str
    source: str
    meta: dict
    frame: pd.DataFrame
    steps: pd.DataFrame  # each configuration's latest, longest measurement: what is ranked
    all_steps: pd.DataFrame  # every step record, re-measured configurations' earlier ones included
    collectives: pd.DataFrame
    options: ReportOptions
    mode: str = "graph"
    mode_why: str = ""
    baseline: str | None = None
    baseline_requested: str | None = None
    head: pd.DataFrame = field(default_factory=pd.DataFrame)
    fusion: pd.DataFrame = field(default_factory=pd.DataFrame)
    rec: an.Recommendation | None = None
    superseded: dict[str, str] = field(default_factory=dict)
    fails: pd.DataFrame = field(default_factory=pd.DataFrame)
    rated: pd.DataFrame = field(default_factory=pd.DataFrame)
    parts: pd.DataFrame = field(default_factory=pd.DataFrame)
    proj: pd.DataFrame = field(default_factory=pd.DataFrame)
    axes: list[str] = field(default_factory=list)
    family: tuple[str, ...] = ()  # the impl names of the baseline's all-reduce (analysis.implementation_family)
    choices: pd.DataFrame = field(default_factory=pd.DataFrame)
    alternatives: pd.DataFrame = field(default_factory=pd.DataFrame)
    without_result: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def simulated(self) -> bool:
        return self.source == "model"

    @property
    def shared_gpus(self) -> bool:
        """Ranks shared GPUs (the sweep's --share-gpus): a functional check, never a tuning result."""
        return bool(self.meta.get("shared_gpus"))

    @property
    def recommended(self) -> pd.Series | None:
        """The point to set: the fastest over every T if beyond noise, else the baseline (None: nothing passed)."""
        return self.rec.chosen if self.rec is not None else None

    @property
    def reference(self) -> str | None:
        """The point whose settings the recommendation exports (the baseline when it is kept or nothing passed)."""
        point = self.recommended
        return str(point["point_id"]) if point is not None else self.baseline

    @cached_property
    def doctor_failed(self) -> list[str]:
        doctor = doctor_view(self.meta.get("doctor"))
        return doctor["failed"] if doctor else []

    @cached_property
    def backend(self) -> str | None:
        backends = self.frame["backend"].dropna().unique() if "backend" in self.frame else []
        return str(backends[0]) if len(backends) == 1 else self.meta.get("backend")

    @property
    def n_failed(self) -> int:
        return int(self.fails["failed"].sum()) if not self.fails.empty else 0

    @cached_property
    def all_failed(self) -> bool:
        return not self.steps.empty and an.ok_rows(self.steps).empty


def split_by_source(run_id: str, records: list[dict]) -> dict[str, list[dict]]:
    """A run's records per source, so measured and simulated numbers are never mixed in one table."""
    by_source: dict[str, list[dict]] = {}
    for record in records:
        by_source.setdefault(str(record.get("source")), []).append(record)
    return by_source


def analyze_run(run_id: str, records: list[dict], meta: dict, options: ReportOptions) -> list[RunAnalysis]:
    """One RunAnalysis per source present in the run."""
    by_source = split_by_source(run_id, records)
    results = []
    for source, rows in by_source.items():
        name = run_id if len(by_source) == 1 else f"{run_id} · {SOURCE_LABELS.get(source, source)}"
        results.append(_analyze(run_id, name, source, rows, meta, options))
    return results


def _analyze(run_id, name, source, records, meta, options) -> RunAnalysis:
    frame = an.records_frame(records)
    all_steps = an.step_frame(frame)
    latest = an.latest_point_ids(all_steps)
    steps = an.latest_measurements(all_steps, latest)
    run = RunAnalysis(
        run_id=run_id,
        name=name,
        source=source,
        meta=meta,
        frame=frame,
        steps=steps,
        all_steps=all_steps,
        collectives=an.collective_frame(frame),
        options=options,
    )
    run.fails = an.failures(frame)
    if steps.empty:
        return run
    run.mode, run.mode_why = an.headline_mode(steps)
    run.baseline_requested = options.baseline or an.BASELINE_POINT_ID
    run.baseline = an.baseline_id(all_steps, options.baseline, latest)
    run.superseded = an.superseded_by(latest)
    run.rated = an.speedups(all_steps, run.baseline)
    run.family = an.implementation_family(steps.loc[steps["point_id"] == run.baseline, "impl"].iloc[0])
    ranked = an.ok_rows(steps, run.mode)  # the rankings below read only these rows: filter once
    run.rec = an.recommendation(ranked, run.baseline, run.mode, impl=run.family)
    recommended = run.reference if run.recommended is not None else None
    run.head = an.headline(ranked, run.baseline, run.mode, recommended, run.family)
    current = run.rated[run.rated["point_id"].isin(set(latest))] if run.superseded else run.rated
    run.fusion = an.fusion_comparison(steps, run.baseline, run.mode, rated=current)
    run.choices = an.choices_per_tokens(ranked, run.baseline, run.mode, recommended, run.family)
    run.alternatives = an.alternatives(ranked, run.reference, run.mode, run.family)
    run.without_result = an.implementations_without_result(steps, run.mode, run.family)
    run.axes = an.strongest_axes(steps, run.mode)
    if not run.head.empty:
        run.parts = an.breakdown(
            steps, run.head, run.baseline, options.compute, recommended=run.reference, mode=run.mode
        )
        run.proj = an.projection(run.parts, options.draft_ms or 0.0, options.accepts)
    return run


# ---------------------------------------------------------------------------------------- page context


def provenance(run: RunAnalysis) -> list[str]:
    """Where a number came from, for the head of every exported file."""
    meta = run.meta
    versions = {k: v for k, v in (meta.get("versions") or {}).items() if v not in (None, "")}
    lines = [f"commprof report of run {run.run_id} ({SOURCE_LABELS.get(run.source, run.source)})"]
    if run.simulated:
        calibration = ", ".join(sorted({str(c) for c in run.frame.get("calibration", pd.Series()).dropna()}))
        lines.append(
            f"SIMULATED by the cost model (calibration: {calibration or 'unknown'}): not measured on "
            "any machine; measure before you rely on it."
        )
    if run.shared_gpus:
        lines.append("SHARED GPUs: ranks shared GPUs (--share-gpus): a functional check, not a tuning result.")
    where = {"model": "Simulated for", "nccl-tests": "Imported from"}.get(run.source, "Measured on")
    lines.append(
        f"{where}: {hardware_text(meta, run.backend)}, host {meta.get('hostname', 'unknown')}, "
        f"{meta.get('created', 'date unknown')}, world size {meta.get('world_size', '?')}, "
        f"backend {run.backend or '?'}"
    )
    if versions:
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    launch_env = {
        k: v for k, v in (meta.get("env") or {}).items() if k.startswith("NCCL_") and not k.startswith("NCCL_DEBUG")
    }
    if launch_env:
        lines.append("On top of the launch environment: " + an.env_text(launch_env))
    return lines


def hardware_text(meta: dict, backend: str | None) -> str:
    """ "8 x NVIDIA ..." from meta["gpus"], or the simulated topology's description; CPU ranks said as such (a
    gloo run has no GPU to name)."""
    gpus = [g for g in meta.get("gpus") or [] if isinstance(g, dict)]
    if gpus:
        names = sorted({str(g.get("name", "?")) for g in gpus})
        return f"{len(gpus)} x {' / '.join(names)}"
    topology = meta.get("topology")
    if isinstance(topology, dict) and topology.get("simulated") and topology.get("description"):
        return f"{topology['description']} (topology preset {topology.get('name', '?')})"
    if backend == "gloo":
        return "CPU ranks (gloo backend), no GPUs"
    return "GPUs not recorded"


def tuner_winners(run: RunAnalysis) -> pd.DataFrame:
    """Per T, the fastest ok record of the baseline's implementation (NCCL) in the headline mode, with whether
    it beats the baseline beyond noise (`beyond_noise`) and, where not, why it gets no rule (`note`)."""
    if run.steps.empty or run.baseline is None:
        return run.steps.iloc[0:0]
    rows = an.ok_rows(run.steps, run.mode)
    base = rows[rows["point_id"] == run.baseline].drop_duplicates("tokens").set_index("tokens")["median_us"]
    # The same points as table 1's "fastest setting" rows (ties broken the same way).
    prefer = [p for p in (run.baseline, run.reference) if p]
    winners = an.best_points(rows[rows["impl"].isin(list(run.family))], run.mode, prefer).sort_values("tokens")
    winners["beyond_noise"] = pd.Series(
        [an.beyond_noise(p90, base.get(t)) for p90, t in zip(winners["p90_us"], winners["tokens"])],
        index=winners.index,
        dtype=object,
    )
    winners["note"] = [
        "the baseline was fastest"
        if pid == run.baseline
        else "within measurement noise of the baseline"
        if verdict is False
        else None
        for pid, verdict in zip(winners["point_id"], winners["beyond_noise"])
    ]
    return winners


def banners(run: RunAnalysis) -> list[dict[str, str]]:
    """The page's banners for one run: shared GPUs, simulated, a failing box, failed records, doctor warnings,
    eager mode."""
    out = []
    if run.shared_gpus:
        out.append(
            {
                "level": "shared",
                "text": f"SHARED GPUs: in {run.name} several ranks ran on one GPU "
                "(--share-gpus). A functional check that every setting runs and gives the right answer, not "
                "a tuning result: its times say nothing about a box with one GPU per rank.",
            }
        )
    if run.simulated:
        out.append(
            {
                "level": "sim",
                "text": f"SIMULATED: {run.name} comes from the cost model, not from a "
                "measurement on this machine. Measure before acting on it.",
            }
        )
    elif run.source == "nccl-tests":
        out.append({"level": "info", "text": f"{run.name}: imported from nccl-tests logs."})
    doctor = doctor_view(run.meta.get("doctor"))
    if doctor and doctor["failed"]:
        out.append(
            {
                "level": "fail",
                "text": f"{run.name}: doctor checks failed ({', '.join(doctor['failed'])}): "
                "numbers measured on a box with failing checks are not tuning results. Fix the box "
                "(section 2 says how) and measure again.",
            }
        )
    if run.all_failed:
        out.append(
            {
                "level": "fail",
                "text": f"{run.name}: every point failed; no tuning result. See the CUDA-graph compatibility matrix.",
            }
        )
    elif run.n_failed:
        counts = run.fails[run.fails["failed"]]["status"].value_counts()
        detail = ", ".join(f"{k} {v}" for k, v in counts.items())
        out.append(
            {
                "level": "fail",
                "text": f"{run.name}: {run.n_failed} of {len(run.frame)} records failed "
                f"({detail}). Failed settings are excluded from the recommendation.",
            }
        )
    if doctor and doctor["warned"] and not doctor["failed"]:
        out.append(
            {
                "level": "warn",
                "text": f"{run.name}: doctor warnings ({', '.join(doctor['warned'])}): "
                "the box may not reach its best numbers; see section 2.",
            }
        )
    if not run.steps.empty and run.mode == "eager":
        out.append({"level": "info", "text": f"{run.name}: headline uses {run.mode_why}."})
    return out


def environment(run: RunAnalysis) -> dict[str, Any]:
    meta = run.meta
    gpus = [g for g in meta.get("gpus") or [] if isinstance(g, dict)]
    groups: dict[tuple, int] = {}
    for gpu in gpus:
        key = (gpu.get("name", "?"), gpu.get("compute_capability", gpu.get("capability", "?")))
        groups[key] = groups.get(key, 0) + 1
    facts = [
        (
            "GPUs",
            "; ".join(f"{n} × {name} (compute capability {cc})" for (name, cc), n in groups.items())
            or hardware_text(meta, run.backend),
        )
    ]
    facts += [(k, meta.get(k)) for k in ("hostname", "world_size", "nnodes", "backend", "created") if k in meta]
    plan = meta.get("plan") or {}
    if plan:
        facts.append(("plan", ", ".join(f"{k} {v}" for k, v in plan.items())))
    if run.simulated and meta.get("calibration"):
        calibration = meta["calibration"]
        facts.append(
            (
                "model calibration",
                calibration.get("file", _as_text(calibration)) if isinstance(calibration, dict) else calibration,
            )
        )
    nccl = nccl_choices(run)
    return {
        "facts": facts,
        "versions": sorted((k, v) for k, v in (meta.get("versions") or {}).items() if v not in (None, "")),
        "gpus": gpus,
        "env": sorted((meta.get("env") or {}).items()),
        "topology": topology_view(meta.get("topology")),
        "doctor": doctor_view(meta.get("doctor")),
        "nccl": nccl,
        "nccl_note": nccl_note(run) if not nccl and not run.head.empty else "",
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
    """meta["topology"] for the page: commprof.doctor.topology_probe.probe_topology()'s answer as a host line, a GPU table
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
            grids.append(
                {"title": key, "labels": names, "rows": [[_level_cell(cell) for cell in row] for row in value]}
            )
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
        "sources": [str(x) for x in topology.get("sources") or []],
    }


def probe_view(topology: dict[str, Any]) -> dict[str, Any]:
    """The topology probe: host summary, driver, GPU table, path-level and P2P grids from "pairs"."""
    host = topology.get("host") if isinstance(topology.get("host"), dict) else {}
    gpus = [g for g in topology.get("gpus") or [] if isinstance(g, dict)]
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
    for i, gpu in enumerate(gpus):
        pcie = gpu.get("pcie") if isinstance(gpu.get("pcie"), dict) else {}
        memory = gpu.get("memory_total_mib")
        view["gpus"].append(
            {
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
        )
    labels = [f"GPU{g['index']}" for g in view["gpus"]]
    position = {g["index"]: k for k, g in enumerate(view["gpus"])}
    count = len(labels)
    levels = [
        [("X", "lv-self", "") if a == b else ("?", "lv-other", "not probed") for b in range(count)]
        for a in range(count)
    ]
    p2p = [
        [("X", "lv-self", "") if a == b else ("?", "lv-other", "not probed") for b in range(count)]
        for a in range(count)
    ]
    broken: dict[str, list[str]] = {}  # why P2P is off -> the pairs
    for pair in topology.get("pairs") or []:
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
    view["p2p_notes"] = [f"{', '.join(pairs)} ({why})" for why, pairs in broken.items()]
    if count > 1:
        view["grids"] = [
            {"title": "path level (NVML)", "labels": labels, "rows": levels},
            {"title": "P2P read + write (NVML)", "labels": labels, "rows": p2p},
        ]
    return view


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


_VERDICT_CLASS = {
    "ok": "ok",
    "pass": "ok",
    "passed": "ok",
    "good": "ok",
    "warn": "warn",
    "warning": "warn",
    "fail": "fail",
    "failed": "fail",
    "error": "fail",
    "bad": "fail",
    "skip": "info",
    "skipped": "info",
    "info": "info",
}
_VERDICT_ORDER = {"fail": 0, "warn": 1, "ok": 2, "info": 3}
_STATUS_KEYS = ("status", "verdict", "result", "level", "outcome")
_NAME_KEYS = ("title", "check", "name", "id")
_DETAIL_KEYS = ("detail", "message", "details", "summary", "why", "reason")


def doctor_view(doctor: Any) -> dict[str, Any] | None:
    """meta["doctor"] for the page, failing and warning checks first.

    The doctor writes commprof.doctor.doctor_summary()'s shape ({"status", "counts", "checks": [{"id",
    "title", "status", "detail", "evidence", "fix"}], "failed"}); other shapes (a list of verdicts, a
    mapping of name -> verdict, text) are shown as well as they can be, unknown fields as JSON.
    """
    if not doctor:
        return None
    listed_failed = doctor.get("failed") if isinstance(doctor, dict) and isinstance(doctor.get("failed"), list) else []
    counts = doctor.get("counts") if isinstance(doctor, dict) and isinstance(doctor.get("counts"), dict) else None
    if isinstance(doctor, dict) and isinstance(doctor.get("checks"), (list, dict)):
        doctor = doctor["checks"]
    entries = (
        doctor.items()
        if isinstance(doctor, dict)
        else ((None, d) for d in doctor)
        if isinstance(doctor, list)
        else [(None, doctor)]
    )
    rows = []
    for name, value in entries:
        if isinstance(value, dict):
            status = str(_first(value, *_STATUS_KEYS) or "")
            check_id = value.get("id") if value.get("id") not in (None, "") else name
            title = _first(value, *_NAME_KEYS) or name or ""
            detail = _first(value, *_DETAIL_KEYS) or ""
            evidence = value.get("evidence")
            evidence = [str(e) for e in evidence] if isinstance(evidence, list) else [str(evidence)] if evidence else []
            fix = value.get("fix")
            known = {*_STATUS_KEYS, *_NAME_KEYS, *_DETAIL_KEYS, "evidence", "fix"}
            rest = {k: v for k, v in value.items() if k not in known and v not in (None, "", [], {})}
        else:
            status, title, detail = (str(value) if name else ""), name or "", ("" if name else str(value))
            check_id, evidence, fix, rest = None, [], None, {}
        css = _VERDICT_CLASS.get(status.lower(), "info")
        rows.append(
            {
                "id": str(check_id) if check_id not in (None, "") and str(check_id) != str(title) else "",
                "title": str(title),
                "status": status or "?",
                "css": css,
                "detail": str(detail),
                "evidence": evidence,
                "fix": str(fix) if fix else "",
                "extra": json.dumps(rest, default=str) if rest else "",
            }
        )
    rows.sort(key=lambda row: _VERDICT_ORDER.get(row["css"], len(_VERDICT_ORDER)))
    failed = [row["title"] or row["id"] for row in rows if row["css"] == "fail"]
    named = {row["id"] for row in rows} | {row["title"] for row in rows}
    failed += [str(f) for f in listed_failed if str(f) not in named]
    warned = [row["title"] or row["id"] for row in rows if row["css"] == "warn"]
    if counts is None:
        counts = {}
        for row in rows:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
    order = sorted(counts.items(), key=lambda item: _VERDICT_ORDER.get(_VERDICT_CLASS.get(str(item[0]).lower()), 9))
    return {
        "rows": rows,
        "failed": failed,
        "warned": warned,
        "counts": ", ".join(f"{n} {status}" for status, n in order),
    }


def _first(mapping: dict, *keys: str) -> Any:
    for key in keys:
        if mapping.get(key) not in (None, ""):
            return mapping[key]
    return None


def nccl_choices(run: RunAnalysis) -> list[dict[str, Any]]:
    """What NCCL ran (its INFO log) for the baseline and the best point at each T, headline mode."""
    if run.head.empty:
        return []
    rows = an.ok_rows(run.steps, run.mode).set_index(["point_id", "tokens"])
    out = []
    for r in run.head.itertuples():
        for setting, point_id in (("baseline", run.baseline), ("best", r.best_point_id)):
            if (point_id, r.tokens) not in rows.index:
                continue
            nccl = rows.loc[(point_id, r.tokens)]
            nccl = nccl.iloc[0] if isinstance(nccl, pd.DataFrame) else nccl
            info = nccl["nccl"] if isinstance(nccl["nccl"], dict) else {}
            if not info:
                continue
            for choice in info.get("choices") or [{}]:
                out.append(
                    {
                        "tokens": int(r.tokens),
                        "setting": setting,
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


def points_table(run: RunAnalysis) -> list[dict[str, Any]]:
    """Every (point, T): status and medians per mode, p99 / CV / skew / speed-up in the headline mode."""
    if run.rated.empty:
        return []
    rated = run.rated
    keys = ["point_id", "tokens"]
    eager = rated[rated["mode"] == "eager"].drop_duplicates(keys).set_index(keys)
    graph = rated[rated["mode"] == "graph"].drop_duplicates(keys).set_index(keys)
    head = rated[rated["mode"] == run.mode].drop_duplicates(keys).set_index(keys)
    index = eager.index.union(graph.index)
    info = rated.drop_duplicates(keys).set_index(keys)
    table = pd.DataFrame(index=index)
    for column in ("label", "impl", "settings", "fused_rmsnorm"):
        table[column] = info[column].reindex(index)
    table["status_eager"] = eager["status"].reindex(index)
    table["status_graph"] = graph["status"].reindex(index)
    table["eager_us"] = eager["median_us"].where(eager["status"] == "ok").reindex(index)
    table["graph_us"] = graph["median_us"].where(graph["status"] == "ok").reindex(index)
    for column in ("p99_us", "cv", "speedup", "reference", "rank_skew_pct"):
        table[column] = head[column].where(head["status"] == "ok").reindex(index)
    table["sort"] = table["graph_us" if run.mode == "graph" else "eager_us"]
    table = table.reset_index()
    table["old"] = table["point_id"].map(run.superseded) if run.superseded else None
    table["is_old"] = table["old"].notna()  # earlier measurements of re-measured configurations go last
    table = table.sort_values(
        ["tokens", "is_old", "sort", "point_id"] if run.superseded else ["tokens", "sort", "point_id"],
        na_position="last",
    )
    rows = []
    # Escaped here, rendered with autoescape off: a 10,000-row table renders 3x faster (see index.html).
    for r in table.itertuples():
        label = escaped(r.label) + (f" <i>(re-measured as {escaped(r.old)})</i>" if isinstance(r.old, str) else "")
        row_class = (
            ' class="baseline"'
            if r.point_id == run.baseline
            else ' class="superseded"'
            if isinstance(r.old, str)
            else ""
        )
        rows.append(
            {
                "tokens": int(r.tokens),
                "point_id": escaped(r.point_id),
                "label": label,
                "impl": escaped(r.impl),
                "settings": escaped(r.settings),
                "fused": bool(r.fused_rmsnorm),
                "status_eager": escaped(r.status_eager) if isinstance(r.status_eager, str) else "—",
                "status_graph": escaped(r.status_graph) if isinstance(r.status_graph, str) else "—",
                "eager": fmt_ms(r.eager_us),
                "graph": fmt_ms(r.graph_us),
                "p99": fmt_ms(r.p99_us),
                "cv": fmt_pct(r.cv * 100 if finite(r.cv) else None),
                "speedup": fmt_x(r.speedup),
                "reference": escaped(r.reference) if isinstance(r.reference, str) else "",
                "skew": fmt_pct(r.rank_skew_pct),
                "row_class": row_class,
            }
        )
    return rows


# Heatmap colours, fast to slow: green, yellow, red (ColorBrewer RdYlGn ends and middle).
_HEAT_STOPS = ((0x1A, 0x98, 0x50), (0xFE, 0xE0, 0x8B), (0xD7, 0x30, 0x27))


def heat_colour(fraction: float) -> str:
    """#rrggbb between green (0, fastest) and red (1, slowest) through yellow."""
    fraction = min(max(fraction, 0.0), 1.0) * (len(_HEAT_STOPS) - 1)
    low = min(int(fraction), len(_HEAT_STOPS) - 2)
    share = fraction - low
    mixed = (round(a + (b - a) * share) for a, b in zip(_HEAT_STOPS[low], _HEAT_STOPS[low + 1]))
    return "#" + "".join(f"{c:02x}" for c in mixed)


def heatmap_view(tokens: int, pivot: pd.DataFrame) -> dict[str, Any]:
    """A heatmap as a coloured HTML table (crisp in print, cheap for big sweeps): ms per cell, × = no ok point."""
    values = pivot.to_numpy(dtype=float) / 1000.0 if not pivot.empty else None
    known = values[pd.notna(values)] if values is not None else []
    low, high = (float(min(known)), float(max(known))) if len(known) else (0.0, 0.0)
    rows = []
    for label, line in zip(pivot.index, values if values is not None else []):
        cells = []
        for v in line:
            if not finite(v):
                cells.append(("×", "#e6e6e6"))
            else:
                cells.append((f"{v:.2f}", heat_colour((v - low) / (high - low) if high > low else 0.0)))
        rows.append({"label": str(label), "cells": cells})
    return {
        "tokens": tokens,
        "columns": [str(c) for c in pivot.columns],
        "rows": rows,
        "range": f"{low:.2f}–{high:.2f} ms" if len(known) else "no ok point",
    }


def compat_matrix(run: RunAnalysis) -> dict[str, Any]:
    matrix = an.status_matrix(run.all_steps)
    if matrix.empty:
        return {"columns": [], "rows": [], "messages": []}
    columns = [f"T={t} {m}" for t, m in matrix.columns]
    # Escaped here, rendered with autoescape off (see points_table).
    rows = [
        {
            "point_id": escaped(pid),
            "label": escaped(label),
            "cells": [escaped(c) if isinstance(c, str) else "—" for c in values],
        }
        for (pid, label), values in zip(matrix.index, matrix.to_numpy())
    ]
    messages = []
    fails = run.fails[run.fails["status"].isin(an.FAILED_STATUSES + ("unsupported",))]
    for (status, message), group in fails.groupby(["status", fails["message"].fillna("(no message)")], sort=True):
        cells = [f"{r.point_id} T={r.tokens} {r.mode}" for r in group.itertuples()]
        more = len(cells) - MAX_MESSAGE_CELLS
        messages.append(
            {
                "status": status,
                "message": message,
                "where": ", ".join(cells[:MAX_MESSAGE_CELLS]) + (f" and {more} more" if more > 0 else ""),
            }
        )
    return {"columns": columns, "rows": rows, "messages": messages}


def per_collective(run: RunAnalysis) -> dict[str, Any]:
    """Per T: op-site distributions of the baseline and best point (eager records) and rank skew."""
    if run.head.empty:
        return {"per_tokens": {}, "tables": [], "skew": []}
    eager = an.ok_rows(run.steps, "eager").drop_duplicates(["point_id", "tokens"]).set_index(["point_id", "tokens"])
    per_tokens, tables, skew = {}, [], []
    for r in run.head.itertuples():
        settings = {}
        for setting, point_id in (("baseline", run.baseline), ("best", r.best_point_id)):
            if (point_id, r.tokens) in eager.index:
                sites = an.op_sites(eager.loc[(point_id, r.tokens), "op_us"])
                if not sites.empty:
                    settings[setting] = sites
                    for s in an.site_summary(sites).itertuples():
                        tables.append(
                            {
                                "tokens": int(r.tokens),
                                "setting": setting,
                                "point_id": point_id,
                                "site": s.site_kind,
                                "ops": int(s.ops),
                                "bytes": fmt_bytes(s.bytes),
                                "median": fmt_us(s.median_us),
                                "p99": fmt_us(s.p99_us),
                                "total": fmt_ms(s.total_us),
                            }
                        )
        if settings:
            per_tokens[int(r.tokens)] = settings
    ok = an.ok_rows(run.steps)
    for r in run.head.itertuples():
        for setting, point_id in (("baseline", run.baseline), ("best", r.best_point_id)):
            rows = ok[(ok["point_id"] == point_id) & (ok["tokens"] == r.tokens)]
            for s in rows.itertuples():
                if finite(s.rank_skew_us):
                    skew.append(
                        {
                            "tokens": int(r.tokens),
                            "setting": setting,
                            "point_id": point_id,
                            "mode": s.mode,
                            "skew": fmt_us(s.rank_skew_us),
                            "pct": fmt_pct(s.rank_skew_pct),
                        }
                    )
    return {"per_tokens": per_tokens, "tables": tables, "skew": skew}


def projection_rows(run: RunAnalysis) -> list[dict[str, Any]]:
    cases = {(a, t) for a, t in an.FIELD_REPORT_CASES}
    rows = []
    for r in run.proj.itertuples():
        cells = []
        for accept in run.options.accepts:
            value = getattr(r, an.tps_column(accept))
            cells.append(
                {
                    "text": fmt_num(value, 0) if finite(value) else "n/a (accept > T)",
                    "pays": finite(value) and finite(r.plain_tokens_per_s) and value > r.plain_tokens_per_s,
                    "field": (accept, int(r.tokens)) in cases,
                }
            )
        rows.append(
            {
                "setting": r.setting,
                "setting_label": SETTING_LABELS.get(r.setting, r.setting),
                "tokens": int(r.tokens),
                "point_id": r.point_id,
                "verify": fmt_ms_value(r.verify_ms),
                "decode": fmt_ms_value(r.decode_ms),
                "plain": fmt_num(r.plain_tokens_per_s, 0),
                "break_even": break_even_text(r.break_even_ratio),
                "cells": cells,
            }
        )
    return rows


def breakdown_rows(run: RunAnalysis) -> list[dict[str, Any]]:
    noise = (
        {
            (int(h.tokens), "best")
            for h in run.head.itertuples()
            if h.beyond_noise is False and h.best_point_id != run.baseline
        }
        if not run.head.empty
        else set()
    )
    noise |= (
        {
            (int(c.tokens), "recommended")
            for c in run.choices.itertuples()
            if "recommended" in c.roles and c.beyond_noise is False
        }
        if not run.choices.empty
        else set()
    )
    return [
        {
            "tokens": int(r.tokens),
            "setting": r.setting,
            "setting_label": SETTING_LABELS.get(r.setting, r.setting),
            "point_id": r.point_id,
            "noise": (int(r.tokens), r.setting) in noise,
            "comm": fmt_ms_value(r.comm_ms),
            "overhead": fmt_ms_value(r.overhead_ms),
            "compute": fmt_ms_value(r.compute_ms) if finite(r.compute_ms) else "not given",
            "verify": fmt_ms_value(r.verify_ms),
            "share": fmt_pct(r.comm_share_pct),
        }
        for r in run.parts.itertuples()
    ]


def collectives_rows(run: RunAnalysis) -> list[dict[str, Any]]:
    return [
        {
            "collective": r.collective,
            "bytes": int(r.bytes) if finite(r.bytes) else "—",
            "time": fmt_us(r.time_us),
            "algbw": fmt_num(r.algbw_gbps),
            "busbw": fmt_num(r.busbw_gbps),
            "wrong": "N/A" if r.wrong is None or (isinstance(r.wrong, float) and math.isnan(r.wrong)) else r.wrong,
            "graph": bool(r.graph) if isinstance(r.graph, bool) else False,
            "status": r.status,
        }
        for r in run.collectives.sort_values(["collective", "bytes"]).itertuples()
    ]


# ------------------------------------------------------------------------------------------ the files


@dataclass
class RunExports:
    folder: str
    files: dict[str, str]
    recommend_env: str
    tuner_conf: str
    engine_text: str
    hints: list[ex.EngineHint]


def write_run_exports(run: RunAnalysis, folder: Path, out_dir: Path) -> RunExports:
    """recommend.env, nccl_tuner.conf, engine_flags.txt and per-point nccl-tests tables for one run."""
    lines = provenance(run)
    winners = tuner_winners(run)
    inputs = ex.rule_inputs(winners)
    rules = ex.tuner_rules(inputs)
    tuner_lines = lines + (
        ["This run used gloo (CPU ranks): NCCL did not run, so there is nothing to tune in it."]
        if run.backend == "gloo"
        else []
    )
    tuner_text = ex.tuner_conf_text(rules, inputs, tuner_lines)
    per_size = (
        bool(rules) and winners.loc[[v is True for v in winners.get("beyond_noise", [])], "point_id"].nunique() > 1
    )
    env_text = ex.recommend_env_text(run.recommended, lines, recommend_notes(run, per_size))
    env_exported = run.recommended is not None and bool(run.recommended["env"])
    fused_measured = not run.steps.empty and bool(
        (run.steps["fused_rmsnorm"] & (run.steps["impl"] != an.UNFUSED_REFERENCE_IMPL)).any()
    )
    hints = ex.engine_hints(run.fusion, fused_measured, env_exported, run.alternatives)
    engine_text = ex.engine_hints_text(hints, lines)
    files = {
        "recommend.env": ex.write_text(folder / "recommend.env", env_text),
        "nccl_tuner.conf": ex.write_text(folder / "nccl_tuner.conf", tuner_text),
        "engine_flags.txt": ex.write_text(folder / "engine_flags.txt", engine_text),
    }
    for point_id, path in write_nccl_tests_tables(run, folder / "nccl-tests").items():
        files[f"nccl-tests/{point_id}"] = path
    return RunExports(
        folder=str(folder.relative_to(out_dir)) if folder != out_dir else ".",
        files={k: str(Path(v).relative_to(out_dir)) for k, v in files.items()},
        recommend_env=env_text,
        tuner_conf=tuner_text,
        engine_text=engine_text,
        hints=hints,
    )


def write_nccl_tests_tables(run: RunAnalysis, folder: Path) -> dict[str, Path]:
    """Per point, an all_reduce_perf-style table of its eager records' op sizes (every T), in place."""
    eager = an.ok_rows(run.all_steps, "eager")
    sizes = an.op_sizes(an.op_table(eager))
    if sizes.empty:
        return {}
    written = {}
    label = SOURCE_LABELS.get(run.source, run.source)
    firsts = {
        row["point_id"]: row
        for row in eager.drop_duplicates("point_id")[
            ["point_id", "label", "impl", "settings", "world_size", "dtype"]
        ].to_dict("records")
    }
    tokens_of = {pid: sorted(int(t) for t in set(ts)) for pid, ts in eager.groupby("point_id")["tokens"]}
    checked = eager.groupby("point_id")["check_ok"].count()
    failed = (eager["check_ok"] == False).groupby(eager["point_id"]).sum()  # noqa: E712 (None is not False)
    bad = {point_id: int(failed[point_id]) if checked[point_id] else None for point_id in checked.index}
    rows_of: dict[str, list] = {}
    for point_id, collective, size, time_us in zip(
        sizes["point_id"], sizes["collective"], sizes["bytes"], sizes["time_us"]
    ):
        rows_of.setdefault(point_id, []).append((collective, int(size), float(time_us)))
    for point_id, rows in sorted(rows_of.items()):
        first = firsts[point_id]
        header = [
            f'commprof replay of point {point_id} "{first["label"]}" (impl {first["impl"]}; '
            f"{first['settings']}), run {run.run_id}, {label}",
            f"nRanks {int(first['world_size'])}, eager mode, per-op median over each step's timed "
            f"iterations; sizes are the step's at T = {', '.join(map(str, tokens_of[point_id]))}",
            "Compare with: all_reduce_perf -b <size> -e <size> -d bfloat16 (in-place columns)",
        ]
        text = ex.nccl_tests_table(rows, int(first["world_size"]), str(first["dtype"]), header, bad[point_id])
        written[point_id] = ex.write_text(folder / f"{point_id}.txt", text)
    return written


def summary(run: RunAnalysis, exports: RunExports) -> dict[str, Any]:
    """The headline numbers, machine-readable (summary.json)."""
    point = run.recommended
    rec = run.rec
    fastest = rec.fastest if rec is not None else None
    return {
        "run_id": run.run_id,
        "name": run.name,
        "source": run.source,
        "simulated": run.simulated,
        "shared_gpus": run.shared_gpus,
        "not_a_tuning_result": not_a_result_notes(run),
        "mode": run.mode if not run.steps.empty else None,
        "mode_note": run.mode_why,
        "baseline_point_id": run.baseline,
        "model": _first_value(run.steps, "model"),
        "tp": _first_value(run.steps, "tp"),
        "world_size": run.meta.get("world_size"),
        "records": len(run.frame),
        "status_counts": an.status_counts(run.frame),
        "failed": run.n_failed,
        "all_failed": run.all_failed,
        "headline": run.head.to_dict("records") if not run.head.empty else [],
        "fusion": run.fusion.to_dict("records") if not run.fusion.empty else [],
        "beyond_noise": rec.beyond_noise if rec is not None else None,
        "noise_rule": an.NOISE_RULE,
        "recommended": None
        if point is None
        else {
            "point_id": point["point_id"],
            "label": point["label"],
            "impl": point["impl"],
            "env": point["env"],
            "total_us": point["total_us"],
            "keeps_baseline": rec.keeps_baseline,
        },
        "fastest": None
        if fastest is None
        else {
            "point_id": fastest["point_id"],
            "label": fastest["label"],
            "impl": fastest["impl"],
            "env": fastest["env"],
            "total_us": fastest["total_us"],
            "p90_total_us": fastest["p90_total_us"],
            "tokens": fastest["tokens_covered"],
        },
        "baseline_total_us": rec.baseline_total_us if rec is not None else None,
        "choices": run.choices.drop(columns=["env"]).to_dict("records") if not run.choices.empty else [],
        "alternatives": run.alternatives.to_dict("records") if not run.alternatives.empty else [],
        "without_result": run.without_result.to_dict("records") if not run.without_result.empty else [],
        "remeasured": run.superseded,
        "compute_ms": run.options.compute.describe(),
        "draft_ms": run.options.draft_ms,
        "accepts": list(run.options.accepts),
        "projection_label": spec_label(run) if not run.proj.empty else None,
        "projection": run.proj.to_dict("records") if not run.proj.empty else [],
        "engine_hints": ex.hints_as_dicts(exports.hints),
        "files": exports.files,
    }


def _first_value(frame: pd.DataFrame, column: str) -> Any:
    if frame.empty or column not in frame:
        return None
    values = frame[column].dropna()
    return values.iloc[0] if not values.empty else None


# ---------------------------------------------------------------------------------------- the render


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("commprof.report", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ms=fmt_ms, us=fmt_us, pct=fmt_pct, x=fmt_x, axis=axis_name)
    return env


def render_report(runs: list[RunAnalysis], out_dir: Path) -> dict[str, Path]:
    """Write index.html, summary.json, results.csv and each run's exports into out_dir; return the main paths."""
    from commprof.report import figures

    out_dir.mkdir(parents=True, exist_ok=True)
    pages, summaries = [], []
    for run in runs:
        folder = out_dir if len(runs) == 1 else out_dir / _safe_name(run.name)
        exports = write_run_exports(run, folder, out_dir)
        summaries.append(summary(run, exports))
        pages.append(_page(run, exports, figures))
    comparison = None
    if len(runs) > 1:
        named = {f"{r.name} ({SOURCE_LABELS.get(r.source, r.source)})": r for r in runs if not r.head.empty}
        heads = {name: r.head for name, r in named.items()}
        comparison = {
            "svg": figures.comparison_svg(heads) if heads else "",
            "rows": [
                {
                    "run": name,
                    "tokens": int(h.tokens),
                    "baseline": fmt_ms(h.baseline_us),
                    "best": fmt_ms(h.best_us),
                    "saved": fmt_pct(h.saved_pct),
                    "settings": h.best_settings if h.best_impl in run.family else f"{h.best_impl} ({h.best_settings})",
                    "noise": noise_text(h.beyond_noise, h.best_point_id == run.baseline),
                }
                for name, run in named.items()
                for h in run.head.itertuples()
            ],
        }
    checks = model_checks(runs)
    order = {"shared": 0, "sim": 0, "fail": 1, "warn": 2, "info": 3}
    all_banners = sorted((b for page in pages for b in page["banners"]), key=lambda b: order.get(b["level"], 3))
    html = (
        _environment()
        .get_template("index.html")
        .render(
            runs=pages,
            comparison=comparison,
            banners=all_banners,
            model_checks=[check_view(check, figures) for check in checks],
            band=f"±{an.MODEL_BAND * 100:.0f} %",
            title=" vs ".join(r.name for r in runs),
            generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        )
    )
    paths = {
        "index.html": ex.write_text(out_dir / "index.html", html),
        "summary.json": ex.write_json_file(
            out_dir / "summary.json", {"runs": summaries, "model_checks": [check_summary(c) for c in checks]}
        ),
        "results.csv": ex.write_text(
            out_dir / "results.csv", ex.results_csv(pd.concat([r.frame for r in runs], ignore_index=True))
        ),
    }
    return paths


def _page(run: RunAnalysis, exports: RunExports, figures) -> dict[str, Any]:
    """The template's view of one run: formatted strings and inline SVG, nothing left to compute."""
    tokens = an.distinct_tokens(run.steps)
    page: dict[str, Any] = {
        "name": run.name,
        "run_id": run.run_id,
        "source": run.source,
        "source_label": SOURCE_LABELS.get(run.source, run.source),
        "simulated": run.simulated,
        "banners": banners(run),
        "mode": run.mode,
        "mode_why": run.mode_why,
        "baseline": run.baseline,
        "baseline_requested": run.baseline_requested,
        "remeasured": sorted(run.superseded.items()),
        "noise_rule": an.NOISE_RULE,
        "has_steps": not run.steps.empty,
        "all_failed": run.all_failed,
        "tokens": tokens,
        "answers": headline_answers(run),
        "accepts": [f"{a:g}" for a in run.options.accepts],
        "choices": choice_rows(run),
        "shared_gpus": run.shared_gpus,
        "fusion": [
            {
                "tokens": int(r.tokens),
                "point_id": r.point_id,
                "label": r.label,
                "impl": r.impl,
                "time": fmt_ms(r.median_us),
                "reference": r.reference,
                "reference_time": fmt_ms(r.reference_us),
                "saved": fmt_pct(r.saved_pct),
                "speedup": fmt_x(r.speedup),
                "noise": "yes"
                if r.beyond_noise is True
                else "slower"
                if r.slower_beyond_noise is True
                else "no: within noise"
                if r.beyond_noise is False
                else "—",
            }
            for r in run.fusion.itertuples()
        ],
        "env": environment(run),
        "exports": exports,
        "compute": run.options.compute.describe(),
        "compute_given": run.options.compute.given,
        "breakdown": breakdown_rows(run),
        "points": points_table(run),
        "matrix": compat_matrix(run),
        "per_collective": per_collective(run),
        "projection": projection_rows(run),
        "spec_label": spec_label(run),
        "axes": [axis_name(a) for a in run.axes],
        "collectives": collectives_rows(run),
        "heatmaps": [],
        "heatmap_axes": ("", ""),
        "nccl_tables": sum(1 for name in exports.files if name.startswith("nccl-tests/")),
        "svg": {},
    }
    if not run.parts.empty:
        page["svg"]["breakdown"] = figures.breakdown_svg(
            run.parts, run.options.compute.given, run.mode, SHORT_SETTING_LABELS
        )
    if not run.proj.empty:
        page["svg"]["projection"] = figures.projection_svg(
            run.parts, run.options.draft_ms or 0.0, run.options.accepts, an.FIELD_REPORT_CASES, SETTING_LABELS
        )
    if run.axes and not an.ok_rows(run.steps, run.mode).empty:
        rows_axis, columns_axis = run.axes[0], (run.axes[1] if len(run.axes) > 1 else None)
        page["heatmaps"] = [
            heatmap_view(t, an.heatmap_pivot(run.steps, t, run.mode, rows_axis, columns_axis)) for t in tokens
        ]
        page["heatmap_axes"] = (axis_name(rows_axis), axis_name(columns_axis) if columns_axis else "")
    if page["per_collective"]["per_tokens"]:
        page["svg"]["sites"] = figures.sites_svg(page["per_collective"]["per_tokens"])
    if not run.collectives.empty and (run.collectives["status"] == "ok").any():
        page["svg"]["collectives"] = figures.collectives_svg(run.collectives)
    return page


def noise_text(verdict: Any, baseline_fastest: bool = False) -> str:
    """Table 1's "beyond noise?" cell."""
    if baseline_fastest:
        return "baseline fastest"
    return {True: "yes", False: "no: within noise"}.get(verdict, "—") if isinstance(verdict, bool) else "—"


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
