"""Assemble a run's analysis into the report: index.html (self-contained) and the files next to it.

`analyze_run` calls the pure analysis functions once per run (per source, when a run mixes them);
`render_report` draws the figures, fills templates/index.html and writes the exports.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from commprof.report import analysis as an
from commprof.report import exports as ex

SOURCE_LABELS = {"measured": "measured", "model": "simulated (cost model)", "nccl-tests": "imported (nccl-tests)"}
DEFAULT_ACCEPTS = (1.3, 2.0, 3.0)
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
    steps: pd.DataFrame
    collectives: pd.DataFrame
    options: ReportOptions
    mode: str = "graph"
    mode_why: str = ""
    baseline: str | None = None
    head: pd.DataFrame = field(default_factory=pd.DataFrame)
    fusion: pd.DataFrame = field(default_factory=pd.DataFrame)
    recommended: pd.Series | None = None
    fails: pd.DataFrame = field(default_factory=pd.DataFrame)
    rated: pd.DataFrame = field(default_factory=pd.DataFrame)
    parts: pd.DataFrame = field(default_factory=pd.DataFrame)
    proj: pd.DataFrame = field(default_factory=pd.DataFrame)
    axes: list[str] = field(default_factory=list)

    @property
    def simulated(self) -> bool:
        return self.source == "model"

    @property
    def n_failed(self) -> int:
        return int(self.fails["failed"].sum()) if not self.fails.empty else 0

    @property
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
    steps = an.step_frame(frame)
    run = RunAnalysis(run_id=run_id, name=name, source=source, meta=meta, frame=frame, steps=steps,
                      collectives=an.collective_frame(frame), options=options)
    run.fails = an.failures(frame)
    if steps.empty:
        return run
    run.mode, run.mode_why = an.headline_mode(steps)
    run.baseline = an.baseline_id(steps, options.baseline)
    run.rated = an.speedups(steps, run.baseline)
    run.head = an.headline(steps, run.baseline, run.mode)
    run.fusion = an.fusion_comparison(steps, run.baseline, run.mode)
    baseline_impl = steps.loc[steps["point_id"] == run.baseline, "impl"].iloc[0]
    run.recommended = an.best_overall_point(steps, run.mode, impl=baseline_impl)
    run.axes = an.strongest_axes(steps, run.mode)
    if not run.head.empty:
        run.parts = an.breakdown(steps, run.head, run.baseline, options.compute)
        run.proj = an.projection(run.parts, options.draft_ms or 0.0, options.accepts)
    return run


# ------------------------------------------------------------------------------------------ formatting

def fmt_ms(us: Any) -> str:
    """A step time given in µs, shown in ms."""
    if not _finite(us):
        return "—"
    ms = float(us) / 1000.0
    return f"{ms:.3f} ms" if ms < 1 else f"{ms:.2f} ms"


def fmt_ms_value(ms: Any) -> str:
    return "—" if not _finite(ms) else (f"{float(ms):.3f} ms" if float(ms) < 1 else f"{float(ms):.2f} ms")


def fmt_us(us: Any) -> str:
    """A single collective's time, µs."""
    if not _finite(us):
        return "—"
    return f"{float(us):.1f} µs" if float(us) < 1000 else f"{float(us):,.0f} µs"


def fmt_pct(value: Any) -> str:
    return "—" if not _finite(value) else f"{float(value):.1f} %"


def fmt_x(value: Any) -> str:
    return "—" if not _finite(value) else f"{float(value):.2f}×"


def fmt_num(value: Any, digits: int = 2) -> str:
    return "—" if not _finite(value) else f"{float(value):.{digits}f}"


def fmt_bytes(value: Any) -> str:
    if not _finite(value):
        return "—"
    value = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _e(value: Any) -> str:
    """HTML-escaped text, for the big tables the template renders without autoescape."""
    return html.escape(str(value), quote=True)


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def axis_name(axis: str | None) -> str:
    return "—" if axis is None else axis.removeprefix(an.ENV_PREFIX)


# ---------------------------------------------------------------------------------------- page context

def provenance(run: RunAnalysis) -> list[str]:
    """Where a number came from, for the head of every exported file."""
    meta = run.meta
    gpus = meta.get("gpus") or []
    names = sorted({str(g.get("name", "?")) for g in gpus if isinstance(g, dict)})
    versions = meta.get("versions") or {}
    lines = [f"commprof report of run {run.run_id} ({SOURCE_LABELS.get(run.source, run.source)})"]
    if run.simulated:
        calibration = ", ".join(sorted({str(c) for c in run.frame.get("calibration", pd.Series()).dropna()}))
        lines.append(f"SIMULATED by the cost model (calibration: {calibration or 'unknown'}): not measured on "
                     "any machine; measure before you rely on it.")
    lines.append(f"Measured on: {len(gpus)} x {' / '.join(names) or 'unknown GPUs'}, host "
                 f"{meta.get('hostname', 'unknown')}, {meta.get('created', 'date unknown')}, "
                 f"world size {meta.get('world_size', '?')}, backend {meta.get('backend', '?')}")
    if versions:
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    launch_env = {k: v for k, v in (meta.get("env") or {}).items()
                  if k.startswith("NCCL_") and not k.startswith("NCCL_DEBUG")}
    if launch_env:
        lines.append("On top of the launch environment: " + an.env_text(launch_env))
    return lines


def recommend_notes(run: RunAnalysis) -> list[str]:
    point = run.recommended
    if point is None:
        return []
    tokens = an.distinct_tokens(an.ok_rows(run.steps, run.mode))
    base = run.head["baseline_us"].sum() if not run.head.empty else math.nan
    notes = [f"Point {point['point_id']} \"{point['label']}\" (impl {point['impl']}): least total {run.mode}-mode "
             f"step time over T = {', '.join(map(str, tokens))}: {fmt_ms(point['total_us'])} "
             f"vs {fmt_ms(base)} for the baseline {run.baseline}."]
    winners = set(run.head["best_point_id"].dropna()) if not run.head.empty else set()
    if len(winners) > 1:
        notes.append("The fastest point differs by T: nccl_tuner.conf has per-size rules "
                     "(use it instead of NCCL_ALGO / NCCL_PROTO, not with them).")
    return notes


def tuner_winners(run: RunAnalysis) -> pd.DataFrame:
    """Per T, the fastest ok record of the baseline's implementation (NCCL) in the headline mode."""
    if run.steps.empty or run.baseline is None:
        return run.steps.iloc[0:0]
    impl = run.steps.loc[run.steps["point_id"] == run.baseline, "impl"].iloc[0]
    rows = an.ok_rows(run.steps, run.mode)
    rows = rows[(rows["impl"] == impl) & ~rows["fused_rmsnorm"]]
    return rows.sort_values(["tokens", "median_us"]).groupby("tokens").head(1)


def headline_answers(run: RunAnalysis) -> dict[str, Any]:
    """The three questions of the first screen, answered in words (with numbers and their labels)."""
    answers: dict[str, Any] = {"set": [], "set_notes": [], "faster": [], "spec": [], "spec_note": "",
                               "spec_verdict": "", "plain": {}, "faster_verdict": ""}
    if run.steps.empty:
        answers["set"].append("No replayed steps in this run: nothing to recommend.")
        return answers
    if run.all_failed:
        answers["set"].append("Nothing: every point failed. See the CUDA-graph compatibility matrix below.")
        return answers
    point = run.recommended
    if point is None:
        answers["set"].append("No single NCCL setting passed at every T; see the per-T table.")
    elif not point["env"]:
        answers["set"].append("Keep NCCL's defaults: no NCCL setting measured beat them.")
    else:
        answers["set"].append(point["settings"])
        answers["set_notes"].append(f"Point {point['point_id']} {point['label']}: the least total step time over "
                                    "every T; exported in recommend.env.")
    won = run.fusion[run.fusion["saved_pct"] > 0] if not run.fusion.empty else run.fusion
    if not won.empty:
        tokens = ", ".join(str(int(t)) for t in won["tokens"])
        answers["set_notes"].append(f"Fused all-reduce + RMSNorm ({won['impl'].iloc[0]}) beat the unfused "
                                    f"reference at T = {tokens}: engine flags in section 8.")
    verify = run.head[run.head["tokens"] > 1] if not run.head.empty else run.head
    verify = verify if not verify.empty else run.head
    if verify["saved_pct"].notna().any():
        low, high = verify["saved_pct"].min(), verify["saved_pct"].max()
        answers["faster_verdict"] = (f"{high:.0f} % less communication" if abs(high - low) < 0.5
                                     else f"{low:.0f}–{high:.0f} % less communication")
    for r in verify.itertuples():
        answers["faster"].append({"tokens": int(r.tokens), "baseline": fmt_ms(r.baseline_us),
                                  "best": fmt_ms(r.best_us), "saved": fmt_pct(r.saved_pct),
                                  "saved_ms": fmt_ms(r.saved_us), "label": r.best_label})
    if run.proj.empty:
        answers["spec_note"] = ("Not answerable from this run: a T = 1 step (plain decode) and at least one "
                                "verify T are both needed.")
        return answers
    best = run.proj[run.proj["setting"] == "best"]
    for r in best.itertuples():
        cells = []
        for accept in run.options.accepts:
            value = getattr(r, an.tps_column(accept))
            cells.append({"text": fmt_num(value, 0) if _finite(value) else "n/a",
                          "pays": _finite(value) and value > r.plain_tokens_per_s})
        answers["spec"].append({"tokens": int(r.tokens), "break_even": fmt_num(r.break_even_accept),
                                "cells": cells})
    plain = run.proj.drop_duplicates("setting").set_index("setting")["plain_tokens_per_s"]
    answers["plain"] = {setting: fmt_num(value, 0) for setting, value in plain.items()}
    if not best.empty and best["break_even_accept"].notna().any():
        lowest = best.loc[best["break_even_accept"].idxmin()]
        answers["spec_verdict"] = (f"Pays above accept length {lowest['break_even_accept']:.2f} "
                                   f"at T = {int(lowest['tokens'])}")
    answers["spec_note"] = spec_label(run)
    return answers


def spec_label(run: RunAnalysis) -> str:
    """How to read the projection: an estimate with compute, communication-only without it."""
    draft = (f"draft time {run.options.draft_ms:g} ms" if run.options.draft_ms is not None
             else "draft time not given (taken as 0: an upper bound)")
    if not run.options.compute.given:
        return ("ESTIMATE, communication only: compute time not given (--compute-ms), so tokens/s are upper "
                f"bounds and break-even lengths count collectives alone; {draft}.")
    return (f"Estimate: compute {run.options.compute.describe()} (given) + {run.mode}-mode communication "
            f"({SOURCE_LABELS.get(run.source, run.source)}); {draft}.")


def banners(run: RunAnalysis) -> list[dict[str, str]]:
    out = []
    if run.simulated:
        out.append({"level": "sim", "text": f"SIMULATED: {run.name} comes from the cost model, not from a "
                    "measurement on this machine. Measure before acting on it."})
    elif run.source == "nccl-tests":
        out.append({"level": "info", "text": f"{run.name}: imported from nccl-tests logs."})
    if run.all_failed:
        out.append({"level": "fail", "text": f"{run.name}: every point failed; no tuning result. "
                    "See the CUDA-graph compatibility matrix."})
    elif run.n_failed:
        counts = run.fails[run.fails["failed"]]["status"].value_counts()
        detail = ", ".join(f"{k} {v}" for k, v in counts.items())
        out.append({"level": "fail", "text": f"{run.name}: {run.n_failed} of {len(run.frame)} records failed "
                    f"({detail}). Failed settings are excluded from the recommendation."})
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
    facts = [("GPUs", "; ".join(f"{n} × {name} (compute capability {cc})" for (name, cc), n in groups.items())
              or "not recorded")]
    facts += [(k, meta.get(k)) for k in ("hostname", "world_size", "nnodes", "backend", "created") if k in meta]
    plan = meta.get("plan") or {}
    if plan:
        facts.append(("plan", ", ".join(f"{k} {v}" for k, v in plan.items())))
    return {"facts": facts, "versions": sorted((meta.get("versions") or {}).items()),
            "gpus": gpus, "env": sorted((meta.get("env") or {}).items()),
            "topology": topology_view(meta.get("topology")), "doctor": doctor_view(meta.get("doctor")),
            "nccl": nccl_choices(run)}


_LEVEL_CLASS = {"X": "lv-self", "NV": "lv-nv", "PIX": "lv-pix", "PXB": "lv-pxb", "PHB": "lv-phb",
                "NODE": "lv-node", "SYS": "lv-sys", "LOC": "lv-sys"}


def topology_view(topology: Any) -> dict[str, Any] | None:
    """Square matrices in meta["topology"] as coloured grids; everything else as key / value text."""
    if not topology:
        return None
    if not isinstance(topology, dict):
        return {"grids": [], "other": [("topology", json.dumps(topology, indent=1, default=str))]}
    grids, other = [], []
    labels = topology.get("gpus") if isinstance(topology.get("gpus"), list) else None
    labels_used = False
    for key, value in topology.items():
        if _is_square(value):
            labels_used = labels_used or bool(labels and len(labels) == len(value))
            names = ([str(x if not isinstance(x, dict) else x.get("name", i)) for i, x in enumerate(labels)]
                     if labels and len(labels) == len(value) else [f"GPU{i}" for i in range(len(value))])
            grids.append({"title": key, "labels": names,
                          "rows": [[_level_cell(cell) for cell in row] for row in value]})
        else:
            other.append((key, value))
    other = [(key, value if isinstance(value, (str, int, float)) else json.dumps(value, default=str, indent=1)
              if len(json.dumps(value, default=str)) > 100 else json.dumps(value, default=str))
             for key, value in other if not (key == "gpus" and labels_used)]
    return {"grids": grids, "other": other}


def _is_square(value: Any) -> bool:
    return (isinstance(value, list) and len(value) > 1
            and all(isinstance(row, list) and len(row) == len(value) for row in value))


def _level_cell(cell: Any) -> tuple[str, str]:
    if isinstance(cell, bool):
        return ("yes" if cell else "no", "lv-pix" if cell else "lv-sys")
    text = str(cell)
    upper = text.upper()
    css = _LEVEL_CLASS.get(upper) or ("lv-nv" if upper.startswith("NV") else "lv-other")
    return text, css


_VERDICT_CLASS = {"ok": "ok", "pass": "ok", "passed": "ok", "good": "ok", "warn": "warn", "warning": "warn",
                  "fail": "fail", "failed": "fail", "error": "fail", "bad": "fail", "skip": "info",
                  "skipped": "info", "info": "info"}


def doctor_view(doctor: Any) -> list[dict[str, str]] | None:
    """meta["doctor"] verdicts, whatever their shape: a list of dicts, a dict of name -> verdict, or text."""
    if not doctor:
        return None
    items = []
    if isinstance(doctor, dict) and isinstance(doctor.get("checks"), (list, dict)):
        doctor = doctor["checks"]
    entries = (doctor.items() if isinstance(doctor, dict)
               else ((None, d) for d in doctor) if isinstance(doctor, list) else [(None, doctor)])
    for name, value in entries:
        if isinstance(value, dict):
            status = str(_first(value, "status", "verdict", "result", "level", "outcome") or "")
            label = _first(value, "check", "name", "id", "title") or name or ""
            message = _first(value, "message", "detail", "details", "summary", "why", "reason") or ""
            rest = {k: v for k, v in value.items() if k not in {"status", "verdict", "result", "level", "outcome",
                    "check", "name", "id", "title", "message", "detail", "details", "summary", "why", "reason"}}
        else:
            status, label, message, rest = (str(value) if name else ""), name or "", ("" if name else str(value)), {}
        items.append({"name": str(label), "status": status, "css": _VERDICT_CLASS.get(status.lower(), "info"),
                      "message": str(message), "extra": json.dumps(rest, default=str) if rest else ""})
    return items


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
            for choice in info.get("choices") or [{}]:
                out.append({"tokens": int(r.tokens), "setting": setting, "point_id": point_id,
                            "version": info.get("version", "—"),
                            "transports": ", ".join(f"{k}: {v}" for k, v in (info.get("transports") or {}).items())
                            or "—",
                            "coll": choice.get("coll", "—"), "bytes": fmt_bytes(choice.get("bytes")),
                            "algo": choice.get("algo", "—"), "proto": choice.get("proto", "—"),
                            "channels": choice.get("channels", info.get("channels", "—"))})
    return out


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
    table = table.reset_index().sort_values(["tokens", "sort", "point_id"], na_position="last")
    rows = []
    # Escaped here, rendered with autoescape off: a 10,000-row table renders 3x faster (see index.html).
    for r in table.itertuples():
        rows.append({"tokens": int(r.tokens), "point_id": _e(r.point_id), "label": _e(r.label), "impl": _e(r.impl),
                     "settings": _e(r.settings), "fused": bool(r.fused_rmsnorm),
                     "status_eager": _e(r.status_eager) if isinstance(r.status_eager, str) else "—",
                     "status_graph": _e(r.status_graph) if isinstance(r.status_graph, str) else "—",
                     "eager": fmt_ms(r.eager_us), "graph": fmt_ms(r.graph_us), "p99": fmt_ms(r.p99_us),
                     "cv": fmt_pct(r.cv * 100 if _finite(r.cv) else None), "speedup": fmt_x(r.speedup),
                     "reference": _e(r.reference) if isinstance(r.reference, str) else "",
                     "skew": fmt_pct(r.rank_skew_pct), "baseline": r.point_id == run.baseline})
    return rows


# Heatmap colours, fast to slow: green, yellow, red (ColorBrewer RdYlGn ends and middle).
_HEAT_STOPS = ((0x1a, 0x98, 0x50), (0xfe, 0xe0, 0x8b), (0xd7, 0x30, 0x27))


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
    finite = values[pd.notna(values)] if values is not None else []
    low, high = (float(min(finite)), float(max(finite))) if len(finite) else (0.0, 0.0)
    rows = []
    for label, line in zip(pivot.index, values if values is not None else []):
        cells = []
        for v in line:
            if not _finite(v):
                cells.append(("×", "#e6e6e6"))
            else:
                cells.append((f"{v:.2f}", heat_colour((v - low) / (high - low) if high > low else 0.0)))
        rows.append({"label": str(label), "cells": cells})
    return {"tokens": tokens, "columns": [str(c) for c in pivot.columns], "rows": rows,
            "range": f"{low:.2f}–{high:.2f} ms" if len(finite) else "no ok point"}


def compat_matrix(run: RunAnalysis) -> dict[str, Any]:
    matrix = an.status_matrix(run.steps)
    if matrix.empty:
        return {"columns": [], "rows": [], "messages": []}
    columns = [f"T={t} {m}" for t, m in matrix.columns]
    # Escaped here, rendered with autoescape off (see points_table).
    rows = [{"point_id": _e(pid), "label": _e(label), "cells": [_e(c) if isinstance(c, str) else "—" for c in values]}
            for (pid, label), values in zip(matrix.index, matrix.to_numpy())]
    messages = []
    fails = run.fails[run.fails["status"].isin(an.FAILED_STATUSES + ("unsupported",))]
    for (status, message), group in fails.groupby(["status", fails["message"].fillna("(no message)")], sort=True):
        cells = [f"{r.point_id} T={r.tokens} {r.mode}" for r in group.itertuples()]
        more = len(cells) - MAX_MESSAGE_CELLS
        messages.append({"status": status, "message": message,
                         "where": ", ".join(cells[:MAX_MESSAGE_CELLS]) + (f" and {more} more" if more > 0 else "")})
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
                        tables.append({"tokens": int(r.tokens), "setting": setting, "point_id": point_id,
                                       "site": s.site_kind, "ops": int(s.ops), "bytes": fmt_bytes(s.bytes),
                                       "median": fmt_us(s.median_us), "p99": fmt_us(s.p99_us),
                                       "total": fmt_ms(s.total_us)})
        if settings:
            per_tokens[int(r.tokens)] = settings
    ok = an.ok_rows(run.steps)
    for r in run.head.itertuples():
        for setting, point_id in (("baseline", run.baseline), ("best", r.best_point_id)):
            rows = ok[(ok["point_id"] == point_id) & (ok["tokens"] == r.tokens)]
            for s in rows.itertuples():
                if _finite(s.rank_skew_us):
                    skew.append({"tokens": int(r.tokens), "setting": setting, "point_id": point_id,
                                 "mode": s.mode, "skew": fmt_us(s.rank_skew_us), "pct": fmt_pct(s.rank_skew_pct)})
    return {"per_tokens": per_tokens, "tables": tables, "skew": skew}


def projection_rows(run: RunAnalysis) -> list[dict[str, Any]]:
    cases = {(a, t) for a, t in an.FIELD_REPORT_CASES}
    rows = []
    for r in run.proj.itertuples():
        cells = []
        for accept in run.options.accepts:
            value = getattr(r, an.tps_column(accept))
            cells.append({"text": fmt_num(value, 0) if _finite(value) else "n/a (accept > T)",
                          "pays": _finite(value) and _finite(r.plain_tokens_per_s) and value > r.plain_tokens_per_s,
                          "field": (accept, int(r.tokens)) in cases})
        rows.append({"setting": r.setting, "tokens": int(r.tokens), "point_id": r.point_id,
                     "verify": fmt_ms_value(r.verify_ms), "decode": fmt_ms_value(r.decode_ms),
                     "plain": fmt_num(r.plain_tokens_per_s, 0), "break_even": fmt_num(r.break_even_accept),
                     "cells": cells})
    return rows


def breakdown_rows(run: RunAnalysis) -> list[dict[str, Any]]:
    return [{"tokens": int(r.tokens), "setting": r.setting, "point_id": r.point_id,
             "comm": fmt_ms_value(r.comm_ms), "overhead": fmt_ms_value(r.overhead_ms),
             "compute": fmt_ms_value(r.compute_ms) if _finite(r.compute_ms) else "not given",
             "verify": fmt_ms_value(r.verify_ms), "share": fmt_pct(r.comm_share_pct)}
            for r in run.parts.itertuples()]


def collectives_rows(run: RunAnalysis) -> list[dict[str, Any]]:
    return [{"collective": r.collective, "bytes": int(r.bytes) if _finite(r.bytes) else "—",
             "time": fmt_us(r.time_us), "algbw": fmt_num(r.algbw_gbps), "busbw": fmt_num(r.busbw_gbps),
             "wrong": "N/A" if r.wrong is None or (isinstance(r.wrong, float) and math.isnan(r.wrong)) else r.wrong,
             "graph": bool(r.graph) if isinstance(r.graph, bool) else False, "status": r.status}
            for r in run.collectives.sort_values(["collective", "bytes"]).itertuples()]


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
    env_text = ex.recommend_env_text(run.recommended, lines, recommend_notes(run))
    inputs = ex.rule_inputs(tuner_winners(run))
    tuner_text = ex.tuner_conf_text(ex.tuner_rules(inputs), inputs, lines)
    env_exported = run.recommended is not None and bool(run.recommended["env"])
    fused_measured = not run.steps.empty and bool(
        (run.steps["fused_rmsnorm"] & (run.steps["impl"] != an.UNFUSED_REFERENCE_IMPL)).any())
    hints = ex.engine_hints(run.fusion, fused_measured, env_exported)
    engine_text = ex.engine_hints_text(hints, lines)
    files = {
        "recommend.env": ex.write_text(folder / "recommend.env", env_text),
        "nccl_tuner.conf": ex.write_text(folder / "nccl_tuner.conf", tuner_text),
        "engine_flags.txt": ex.write_text(folder / "engine_flags.txt", engine_text),
    }
    for point_id, path in write_nccl_tests_tables(run, folder / "nccl-tests").items():
        files[f"nccl-tests/{point_id}"] = path
    return RunExports(folder=str(folder.relative_to(out_dir)) if folder != out_dir else ".",
                      files={k: str(Path(v).relative_to(out_dir)) for k, v in files.items()},
                      recommend_env=env_text, tuner_conf=tuner_text, engine_text=engine_text, hints=hints)


def write_nccl_tests_tables(run: RunAnalysis, folder: Path) -> dict[str, Path]:
    """Per point, an all_reduce_perf-style table of its eager records' op sizes (every T), in place."""
    eager = an.ok_rows(run.steps, "eager")
    sizes = an.op_sizes(an.op_table(eager))
    if sizes.empty:
        return {}
    written = {}
    label = SOURCE_LABELS.get(run.source, run.source)
    firsts = {row["point_id"]: row for row in
              eager.drop_duplicates("point_id")[["point_id", "label", "impl", "settings", "world_size",
                                                 "dtype"]].to_dict("records")}
    tokens_of = {pid: sorted(int(t) for t in set(ts)) for pid, ts in eager.groupby("point_id")["tokens"]}
    checked = eager.groupby("point_id")["check_ok"].count()
    failed = (eager["check_ok"] == False).groupby(eager["point_id"]).sum()  # noqa: E712 (None is not False)
    bad = {point_id: int(failed[point_id]) if checked[point_id] else None for point_id in checked.index}
    rows_of: dict[str, list] = {}
    for point_id, collective, size, time_us in zip(sizes["point_id"], sizes["collective"], sizes["bytes"],
                                                   sizes["time_us"]):
        rows_of.setdefault(point_id, []).append((collective, int(size), float(time_us)))
    for point_id, rows in sorted(rows_of.items()):
        first = firsts[point_id]
        header = [f"commprof replay of point {point_id} \"{first['label']}\" (impl {first['impl']}; "
                  f"{first['settings']}), run {run.run_id}, {label}",
                  f"nRanks {int(first['world_size'])}, eager mode, per-op median over each step's timed "
                  f"iterations; sizes are the step's at T = {', '.join(map(str, tokens_of[point_id]))}",
                  "Compare with: all_reduce_perf -b <size> -e <size> -d bfloat16 (in-place columns)"]
        text = ex.nccl_tests_table(rows, int(first["world_size"]), str(first["dtype"]), header, bad[point_id])
        written[point_id] = ex.write_text(folder / f"{point_id}.txt", text)
    return written


def summary(run: RunAnalysis, exports: RunExports) -> dict[str, Any]:
    """The headline numbers, machine-readable (summary.json)."""
    point = run.recommended
    return {
        "run_id": run.run_id, "name": run.name, "source": run.source, "simulated": run.simulated,
        "mode": run.mode if not run.steps.empty else None, "mode_note": run.mode_why,
        "baseline_point_id": run.baseline, "model": _first_value(run.steps, "model"),
        "tp": _first_value(run.steps, "tp"), "world_size": run.meta.get("world_size"),
        "records": len(run.frame), "status_counts": an.status_counts(run.frame), "failed": run.n_failed,
        "all_failed": run.all_failed,
        "headline": run.head.to_dict("records") if not run.head.empty else [],
        "fusion": run.fusion.to_dict("records") if not run.fusion.empty else [],
        "recommended": None if point is None else {"point_id": point["point_id"], "label": point["label"],
                                                   "impl": point["impl"], "env": point["env"],
                                                   "total_us": point["total_us"]},
        "compute_ms": run.options.compute.describe(), "draft_ms": run.options.draft_ms,
        "accepts": list(run.options.accepts), "projection_label": spec_label(run) if not run.proj.empty else None,
        "projection": run.proj.to_dict("records") if not run.proj.empty else [],
        "engine_hints": ex.hints_as_dicts(exports.hints), "files": exports.files,
    }


def _first_value(frame: pd.DataFrame, column: str) -> Any:
    if frame.empty or column not in frame:
        return None
    values = frame[column].dropna()
    return values.iloc[0] if not values.empty else None


# ---------------------------------------------------------------------------------------- the render

def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("commprof.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
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
        heads = {f"{r.name} ({SOURCE_LABELS.get(r.source, r.source)})": r.head for r in runs if not r.head.empty}
        comparison = {
            "svg": figures.comparison_svg(heads) if heads else "",
            "rows": [{"run": name, "tokens": int(h.tokens), "baseline": fmt_ms(h.baseline_us),
                      "best": fmt_ms(h.best_us), "saved": fmt_pct(h.saved_pct), "settings": h.best_settings}
                     for name, head in heads.items() for h in head.itertuples()],
        }
    order = {"sim": 0, "fail": 1, "info": 2}
    all_banners = sorted((b for page in pages for b in page["banners"]), key=lambda b: order.get(b["level"], 3))
    html = _environment().get_template("index.html").render(
        runs=pages, comparison=comparison, banners=all_banners,
        title=" vs ".join(r.name for r in runs),
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    paths = {"index.html": ex.write_text(out_dir / "index.html", html),
             "summary.json": ex.write_json_file(out_dir / "summary.json", {"runs": summaries}),
             "results.csv": ex.write_text(out_dir / "results.csv",
                                          ex.results_csv(pd.concat([r.frame for r in runs], ignore_index=True)))}
    return paths


def _page(run: RunAnalysis, exports: RunExports, figures) -> dict[str, Any]:
    """The template's view of one run: formatted strings and inline SVG, nothing left to compute."""
    tokens = an.distinct_tokens(run.steps)
    page: dict[str, Any] = {
        "name": run.name, "run_id": run.run_id, "source": run.source,
        "source_label": SOURCE_LABELS.get(run.source, run.source), "simulated": run.simulated,
        "banners": banners(run), "mode": run.mode, "mode_why": run.mode_why, "baseline": run.baseline,
        "has_steps": not run.steps.empty, "all_failed": run.all_failed, "tokens": tokens,
        "answers": headline_answers(run), "accepts": [f"{a:g}" for a in run.options.accepts],
        "head": [{"tokens": int(r.tokens), "baseline": fmt_ms(r.baseline_us), "best": fmt_ms(r.best_us),
                  "saved": fmt_pct(r.saved_pct), "saved_ms": fmt_ms(r.saved_us), "speedup": fmt_x(r.speedup),
                  "point_id": r.best_point_id, "label": r.best_label, "impl": r.best_impl,
                  "settings": r.best_settings} for r in run.head.itertuples()],
        "fusion": [{"tokens": int(r.tokens), "point_id": r.point_id, "label": r.label, "impl": r.impl,
                    "time": fmt_ms(r.median_us), "reference": r.reference, "reference_time": fmt_ms(r.reference_us),
                    "saved": fmt_pct(r.saved_pct), "speedup": fmt_x(r.speedup)} for r in run.fusion.itertuples()],
        "env": environment(run), "exports": exports, "compute": run.options.compute.describe(),
        "compute_given": run.options.compute.given, "breakdown": breakdown_rows(run),
        "points": points_table(run), "matrix": compat_matrix(run), "per_collective": per_collective(run),
        "projection": projection_rows(run), "spec_label": spec_label(run),
        "axes": [axis_name(a) for a in run.axes], "collectives": collectives_rows(run),
        "heatmaps": [], "heatmap_axes": ("", ""),
        "nccl_tables": sum(1 for name in exports.files if name.startswith("nccl-tests/")),
        "svg": {},
    }
    if not run.parts.empty:
        page["svg"]["breakdown"] = figures.breakdown_svg(run.parts, run.options.compute.given)
    if not run.proj.empty:
        page["svg"]["projection"] = figures.projection_svg(run.parts, run.options.draft_ms or 0.0,
                                                           run.options.accepts, an.FIELD_REPORT_CASES)
    if run.axes and not an.ok_rows(run.steps, run.mode).empty:
        rows_axis, columns_axis = run.axes[0], (run.axes[1] if len(run.axes) > 1 else None)
        page["heatmaps"] = [heatmap_view(t, an.heatmap_pivot(run.steps, t, run.mode, rows_axis, columns_axis))
                            for t in tokens]
        page["heatmap_axes"] = (axis_name(rows_axis), axis_name(columns_axis) if columns_axis else "")
    if page["per_collective"]["per_tokens"]:
        page["svg"]["sites"] = figures.sites_svg(page["per_collective"]["per_tokens"])
    if not run.collectives.empty and (run.collectives["status"] == "ok").any():
        page["svg"]["collectives"] = figures.collectives_svg(run.collectives)
    return page


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
