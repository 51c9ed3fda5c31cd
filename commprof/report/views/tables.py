"""The page's tables of points: table 1 (the points behind every answer), every point per T, the CUDA-graph
compatibility matrix, the heatmaps and imported single collectives."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from commprof.records.schema import FAILED_STATUSES
from commprof.report.analysis.decision import Decision
from commprof.report.analysis.formatting import escaped, finite, fmt_ms, fmt_num, fmt_pct, fmt_us, fmt_x
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import tuned_name

MAX_MESSAGE_CELLS = 12


def points_table(run: RunAnalysis) -> str:
    """Every (point, T) as the sweep table's rows: status and medians per mode, tail (stats.tail) / CV / skew /
    speed-up in the headline mode. HTML built once, every cell escaped here (the template writes it with
    autoescape off: a 31 MB table is not copied again); a template loop over 50,000 rows was the page's slowest part."""
    if run.speedups.empty:
        return ""
    column = _point_columns(run)
    status = functools.partial(shown_status, run)
    eager_status, graph_status = _each(status, column["status_eager"]), _each(status, column["status_graph"])
    measured = f" <i>(re-{run.evidence.measured} as "
    no_spread = ["—"] * len(column["point_id"])  # a prediction has no spread
    cells = (
        [
            ' class="baseline"' if point_id == run.baseline else ' class="superseded"' if isinstance(old, str) else ""
            for point_id, old in zip(column["point_id"], column["old"])
        ],
        map(int, column["tokens"]),
        [
            f"{point_id} {label}" + (f"{measured}{escaped(old)})</i>" if isinstance(old, str) else "")
            for point_id, label, old in zip(
                _each(escaped, column["point_id"]), _each(escaped, column["label"]), column["old"]
            )
        ],
        _each(escaped, column["impl"]),
        _each(escaped, column["settings"]),
        _each(status_css, eager_status),
        eager_status,
        _each(status_css, graph_status),
        graph_status,
        map(fmt_ms, column["eager_us"]),
        map(fmt_ms, column["graph_us"]),
        no_spread if run.simulated else map(fmt_ms, column["tail_us"]),
        no_spread if run.simulated else (fmt_pct(cv * 100 if finite(cv) else None) for cv in column["cv"]),
        [
            fmt_x(speedup) + (f" vs {escaped(reference)}" if fused and isinstance(reference, str) and reference else "")
            for speedup, fused, reference in zip(column["speedup"], column["fused_rmsnorm"], column["reference"])
        ],
        map(fmt_pct, column["rank_skew_pct"]),
    )
    return "\n".join(map(_POINT_ROW.format, *cells))


# One row of the points table: class, T, point and label, impl, settings, each mode's status (class, text), eager
# and graph medians, tail, CV, speed-up, rank skew.
_POINT_ROW = (
    '<tr{}><td class="num">{}</td><td>{}</td><td>{}</td><td><code>{}</code></td>'
    '<td><span class="st st-{}">{}</span></td><td><span class="st st-{}">{}</span></td>'
    + '<td class="num">{}</td>' * 6
    + "</tr>"
)


def _point_columns(run: RunAnalysis) -> dict[str, list[Any]]:
    """The points table's columns, one value per (point, T) with an eager or a graph record, in the table's order:
    by T, re-measured configurations' earlier points last, fastest first in the headline mode (no time last), then
    by point. Each value is the first record's of its (point, T) (of that mode for the mode's own columns; a time
    only where that record is ok). Positions of records, not a frame indexed per mode: one pass at 100,000."""
    rated = run.speedups
    points = pd.factorize(rated["point_id"], use_na_sentinel=False)[0].astype(np.int64)
    tokens, distinct_tokens = pd.factorize(rated["tokens"], use_na_sentinel=False)
    key = np.unique(points * len(distinct_tokens) + tokens, return_inverse=True)[1]  # (point, T) -> 0, 1, ...
    mode = rated["mode"].to_numpy()
    first_of = {"any": _first_records(key, None)}
    for each in ("eager", "graph", run.mode):
        if each not in first_of:
            first_of[each] = _first_records(key, mode == each)
    shown = np.flatnonzero((first_of["eager"] >= 0) | (first_of["graph"] >= 0))
    status = rated["status"].to_numpy()
    columns: dict[str, Any] = {}
    for name in ("point_id", "tokens", *_POINT_INFO):
        columns[name] = rated[name].to_numpy()[first_of["any"][shown]]
    for name, source, where in (
        ("status_eager", "status", "eager"),
        ("status_graph", "status", "graph"),
        ("eager_us", "median_us", "eager"),
        ("graph_us", "median_us", "graph"),
        *((name, name, run.mode) for name in _HEAD_VALUES),
    ):
        at = first_of[where][shown]
        kept = at >= 0 if source == "status" else (at >= 0) & (status[at] == "ok")
        values = rated[source].to_numpy()
        columns[name] = np.where(kept, values[at], np.nan if values.dtype.kind == "f" else None)
    old = [run.superseded.get(point_id) for point_id in columns["point_id"].tolist()]
    order = (
        columns["point_id"].argsort(kind="stable").argsort(),  # each point's place in the order of point ids
        columns["graph_us" if run.mode == "graph" else "eager_us"].astype(float),
        *([np.array([o is not None for o in old])] if run.superseded else []),
        columns["tokens"],
    )
    rows = np.lexsort(order)
    out = {name: values[rows].tolist() for name, values in columns.items()}
    out["old"] = [old[k] for k in rows.tolist()]
    return out


def _first_records(key: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Per key (0..max): the position of its first record among those `mask` selects, -1 where it has none."""
    positions = np.arange(len(key)) if mask is None else np.flatnonzero(mask)
    found, first = np.unique(key[positions], return_index=True)
    out = np.full(int(key.max()) + 1 if len(key) else 0, -1)
    out[found] = positions[first]
    return out


# The points table's columns: the point's own (first record per point and T), the headline mode's values.
_POINT_INFO = ("label", "impl", "settings", "fused_rmsnorm")
_HEAD_VALUES = ("tail_us", "cv", "speedup", "reference", "rank_skew_pct")


def _each(format_one: Callable[[Any], str], values: Iterable[Any]) -> list[str]:
    """format_one of every text (or missing value), computed once per distinct text (a column repeats its labels
    and statuses; never numbers: 0.0 and -0.0 are one key, two texts)."""
    done: dict[Any, str] = {}
    return [done[v] if v in done else done.setdefault(v, format_one(v)) for v in values]


def shown_status(run: RunAnalysis, status: Any) -> str:
    """A record's status as the tables show it: a simulated "ok" is a prediction, never a tested result."""
    if not isinstance(status, str):
        return "—"
    return "predicted" if run.simulated and status == "ok" else escaped(status)


def status_css(shown: str) -> str:
    """The class that colours a status as shown (st-ok, st-not_tested, st-none for "—")."""
    return "none" if shown == "—" else shown.replace(" ", "_")


# Heatmap colours, fast to slow: green, yellow, red (ColorBrewer RdYlGn ends and middle).
_HEAT_STOPS = ((0x1A, 0x98, 0x50), (0xFE, 0xE0, 0x8B), (0xD7, 0x30, 0x27))


def heat_colour(fraction: float) -> str:
    """#rrggbb between green (0, fastest) and red (1, slowest) through yellow."""
    fraction = min(max(fraction, 0.0), 1.0) * (len(_HEAT_STOPS) - 1)
    low = min(int(fraction), len(_HEAT_STOPS) - 2)
    share = fraction - low
    mixed = (round(a + (b - a) * share) for a, b in zip(_HEAT_STOPS[low], _HEAT_STOPS[low + 1]))
    return "#" + "".join(f"{c:02x}" for c in mixed)


UNRANKED_CELL = "#d9d9d9"  # grey: a number shown, but not ranked (colour would rank it)


def heatmap_view(tokens: int, pivot: pd.DataFrame, ranked: pd.DataFrame | None = None) -> dict[str, Any]:
    """A heatmap as a coloured HTML table (crisp in print, cheap for big sweeps): ms per cell, × = no ok point.
    `ranked`: the same pivot over the points a verdict may rest on; a cell only unranked points fill is grey, †."""
    values = pivot.to_numpy(dtype=float) / 1000.0 if not pivot.empty else None
    rankable = ranked.to_numpy(dtype=float) / 1000.0 if ranked is not None and not pivot.empty else values
    known = rankable[pd.notna(rankable)] if rankable is not None else []
    low, high = (float(min(known)), float(max(known))) if len(known) else (0.0, 0.0)
    rows = []
    for label, line, ranked_line in zip(pivot.index, *((values, rankable) if values is not None else ([], []))):
        cells = []
        for v, r in zip(line, ranked_line):
            if not finite(v):
                cells.append(("×", "#e6e6e6"))
            elif not finite(r):
                cells.append((f"{v:.2f} †", UNRANKED_CELL))
            else:
                cells.append((f"{r:.2f}", heat_colour((r - low) / (high - low) if high > low else 0.0)))
        rows.append({"label": str(label), "cells": cells})
    return {
        "tokens": tokens,
        "columns": [str(c) for c in pivot.columns],
        "rows": rows,
        "range": f"{low:.2f}–{high:.2f} ms" if len(known) else "no ok point",
    }


# A simulated record's "ok" is a prediction: nothing ran, so neither capture nor correctness was tested.
NOT_TESTED = "not tested"


def compat_matrix(run: RunAnalysis) -> dict[str, Any]:
    """Every point x (T, mode) with its status; a simulated run's predictions are "not tested", never ok. Its rows
    are HTML, one line per point, every cell escaped here (written with autoescape off, see points_table)."""
    matrix = run.status_matrix
    if matrix.empty:
        return {"columns": [], "rows": "", "messages": [], "note": "", "all_ran": ""}
    if run.simulated:
        matrix = matrix.where(matrix != "ok", NOT_TESTED)
    columns = [f"T={t} {m}" for t, m in matrix.columns]
    cells = _each(_status_cell, matrix.to_numpy().ravel().tolist())
    width = len(columns)
    rows = "\n".join(
        f"<tr><td>{escaped(pid)} {escaped(label)}</td>{''.join(cells[k * width : (k + 1) * width])}</tr>"
        for k, (pid, label) in enumerate(matrix.index)
    )
    messages = []
    fails = run.failures[run.failures["status"].isin(FAILED_STATUSES + ("unsupported",))]
    for (status, message), group in fails.groupby(["status", fails["message"].fillna("(no message)")], sort=True):
        cells = [
            f"{r.point_id}{f' T={int(r.tokens)}' if finite(r.tokens) else ''} {r.mode}"
            for r in group.head(MAX_MESSAGE_CELLS).itertuples()
        ]  # a crossover search's record has no T
        more = len(group) - MAX_MESSAGE_CELLS
        messages.append(
            {
                "status": status,
                "message": message,
                "where": ", ".join(cells) + (f" and {more} more" if more > 0 else ""),
            }
        )
    note = (
        f"Simulated ({run.evidence.label}): nothing was run, so no setting was captured into a CUDA graph or "
        f'checked against the exact reduction; "{NOT_TESTED}" cells hold predictions only. Measure on the box '
        "to test capture."
        if run.simulated
        else ""
    )
    all_ran = "" if note or messages else "Every point ran in every mode."
    return {"columns": columns, "rows": rows, "messages": messages, "note": note, "all_ran": all_ran}


def _status_cell(status: Any) -> str:
    """A cell of the compatibility matrix: its status as shown, coloured ("—" where the point has no record)."""
    text = escaped(status) if isinstance(status, str) else "—"
    return f'<td><span class="st st-{status_css(text)}">{text}</span></td>'


def collectives_rows(run: RunAnalysis) -> list[dict[str, Any]]:
    return [
        {
            "collective": r.collective,
            "bytes": int(r.bytes) if finite(r.bytes) else "—",
            "time": fmt_us(r.time_us),
            "algbw": fmt_num(r.algbw_gbps),
            "busbw": fmt_num(r.busbw_gbps),
            "wrong": "N/A" if r.wrong is None or (isinstance(r.wrong, float) and math.isnan(r.wrong)) else r.wrong,
            "graph": "yes" if isinstance(r.graph, bool) and r.graph else "no",
            "status": r.status,
        }
        for r in run.collectives.sort_values(["collective", "bytes"]).itertuples()
    ]


def role_label(role: str, run: RunAnalysis, decision: Decision, impl: str, answer: bool = False) -> str:
    """Table 1's words for a role (choices.CHOICE_ROLES), naming the answer it backs; another implementation is
    (b) only where the decision runs it at this T (`answer`), a setting nccl_tuner.conf's only where that file
    holds the decision's rules."""
    name = tuned_name(run)
    if role == "recommended":
        return "(a) to export" if decision.nccl_answer_point != run.baseline else "(a) kept"
    if role == "fastest setting":
        return f"fastest {name} setting at this T" + (
            " (nccl_tuner.conf's rule)" if name == "NCCL" and decision.tuner_rules else ""
        )
    if role == "fastest" and impl not in run.baseline_family:
        return f"fastest at this T: (b) {impl}" if answer else f"fastest at this T: {impl}, not the answer here"
    if role == "fastest":
        return "fastest at this T"
    return role


def choice_rows(run: RunAnalysis, decision: Decision) -> list[dict[str, Any]]:
    """Table 1: per T, the baseline, (a), the fastest setting and the fastest point, each once, with its roles."""
    rows = []
    previous = None
    head = run.headline
    answers = dict(zip(head["tokens"], head["route_point_id"])) if "route_point_id" in head else {}
    for r in run.choices.itertuples():
        is_base = r.point_id == run.baseline
        answer = answers.get(r.tokens) == r.point_id
        rows.append(
            {
                "tokens": int(r.tokens),
                "first": r.tokens != previous,
                "roles": " · ".join(role_label(role, run, decision, r.impl, answer) for role in r.roles),
                "css": " ".join(
                    c
                    for c in (
                        "baseline" if is_base else "",
                        "chosen" if "recommended" in r.roles and not is_base else "",
                        "other" if r.impl not in run.baseline_family else "",
                        "noise" if not is_base and r.beyond_uncertainty is not True else "",
                    )
                    if c
                )
                + (" first" if r.tokens != previous else ""),
                "point_id": r.point_id,
                "label": r.label,
                "impl": r.impl,
                "settings": r.settings,
                "time": fmt_ms(r.median_us),
                "p90": "—" if run.simulated else fmt_ms(r.p90_us),  # a prediction has no spread
                "cv": "—" if run.simulated else fmt_pct(r.cv * 100 if finite(r.cv) else None),
                "saved": "—" if is_base else f"{fmt_pct(r.saved_pct)} ({fmt_ms(r.baseline_us - r.median_us)})",
                "speedup": "—" if is_base else fmt_x(r.speedup),
                "noise": ""
                if is_base
                else {True: "yes", False: f"no: {run.evidence.within}"}.get(r.beyond_uncertainty, "—"),
                "noise_css": ""
                if is_base or not isinstance(r.beyond_uncertainty, bool)
                else "verdict-ok"
                if r.beyond_uncertainty
                else "verdict-warn",
            }
        )
        previous = r.tokens
    return rows
