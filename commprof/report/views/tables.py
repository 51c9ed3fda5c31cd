"""The page's tables of points: table 1 (the points behind every answer), every point per T, the CUDA-graph
compatibility matrix, the heatmaps and imported single collectives."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from commprof.report.decision.formatting import claim_words, escaped, fmt_ms, fmt_num, fmt_pct, fmt_us, fmt_x
from commprof.report.decision.tables import Heatmap
from commprof.report.decision.types import Decision
from commprof.report.views.claims import verdict_css


def points_table(decision: Decision) -> str:
    """Every (point, T) as the sweep table's rows (the Decision's PointsTable): status and medians per mode, tail /
    CV / speed-up / rank skew in the headline mode. HTML built once, every cell escaped here (the template writes
    it with autoescape off: a 31 MB table is not copied again)."""
    table = decision.tables.points
    if table is None:
        return ""
    measured = f" <i>(re-{decision.environment.evidence.measured} as "
    eager_status = _each(_shown, table.status_eager)
    graph_status = _each(_shown, table.status_graph)
    cells = (
        [
            ' class="baseline"' if point_id == decision.run.baseline else ' class="superseded"' if old else ""
            for point_id, old in zip(table.point_id, table.superseded_by)
        ],
        table.tokens,
        [
            f"{point_id} {label}" + (f"{measured}{escaped(old)})</i>" if old else "")
            for point_id, label, old in zip(
                _each(escaped, table.point_id), _each(escaped, table.label), table.superseded_by
            )
        ],
        _each(escaped, table.impl),
        _each(escaped, table.settings),
        _each(status_css, eager_status),
        eager_status,
        _each(status_css, graph_status),
        graph_status,
        map(fmt_ms, table.eager_us),
        map(fmt_ms, table.graph_us),
        map(fmt_ms, table.tail_us),
        (fmt_pct(cv * 100 if cv is not None else None) for cv in table.cv),
        [
            fmt_x(speedup) + (f" vs {escaped(reference)}" if fused and reference else "")
            for speedup, fused, reference in zip(table.speedup, table.fused, table.reference)
        ],
        map(fmt_pct, table.rank_skew_pct),
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


def _each(format_one: Callable[[Any], str], values: Iterable[Any]) -> list[str]:
    """format_one of every text (or missing value), computed once per distinct text."""
    done: dict[Any, str] = {}
    return [done[v] if v in done else done.setdefault(v, format_one(v)) for v in values]


def _shown(status: Any) -> str:
    return escaped(status) if isinstance(status, str) else "—"


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


def heatmap_view(heatmap: Heatmap) -> dict[str, Any]:
    """A heatmap as a coloured HTML table: ms per cell, × = no ok point; a cell only unranked points fill is grey,
    †, and the colours run over the ranked cells."""
    known = [v for line in heatmap.ranked_ms for v in line if v is not None]
    low, high = (min(known), max(known)) if known else (0.0, 0.0)
    rows = []
    for label, line, ranked_line in zip(heatmap.labels, heatmap.ms, heatmap.ranked_ms):
        cells = []
        for v, r in zip(line, ranked_line):
            if v is None:
                cells.append(("×", "#e6e6e6"))
            elif r is None:
                cells.append((f"{v:.2f} †", UNRANKED_CELL))
            else:
                cells.append((f"{r:.2f}", heat_colour((r - low) / (high - low) if high > low else 0.0)))
        rows.append({"label": label, "cells": cells})
    return {
        "tokens": heatmap.tokens,
        "columns": heatmap.columns,
        "rows": rows,
        "range": f"{low:.2f}–{high:.2f} ms" if known else "no ok point",
    }


def compat_matrix(decision: Decision) -> dict[str, Any]:
    """Every point x (T, mode) with its status (the Decision's Matrix); rows as HTML, one line per point, every
    cell escaped here (written with autoescape off, see points_table)."""
    matrix = decision.tables.matrix
    if matrix is None:
        return {"columns": [], "rows": "", "messages": [], "note": "", "all_ran": ""}
    rows = "\n".join(
        f"<tr><td>{escaped(pid)} {escaped(label)}</td>{''.join(_each(_status_cell, statuses))}</tr>"
        for (pid, label), statuses in zip(matrix.points, matrix.statuses)
    )
    all_ran = "" if matrix.note or matrix.messages else "Every point ran in every mode."
    return {
        "columns": matrix.columns,
        "rows": rows,
        "messages": matrix.messages,
        "note": matrix.note,
        "all_ran": all_ran,
    }


def _status_cell(status: Any) -> str:
    """A cell of the compatibility matrix: its status as shown, coloured ("—" where the point has no record)."""
    text = escaped(status) if isinstance(status, str) else "—"
    return f'<td><span class="st st-{status_css(text)}">{text}</span></td>'


def collectives_rows(decision: Decision) -> list[dict[str, Any]]:
    return [
        {
            "collective": c["collective"],
            "bytes": c["bytes"] if c["bytes"] is not None else "—",
            "time": fmt_us(c["time_us"]),
            "algbw": fmt_num(c["algbw_gbps"]),
            "busbw": fmt_num(c["busbw_gbps"]),
            "wrong": "N/A" if c["wrong"] is None else c["wrong"],
            "graph": "yes" if c["graph"] else "no",
            "status": c["status"],
        }
        for c in decision.tables.collectives
    ]


def choice_rows(decision: Decision) -> list[dict[str, Any]]:
    """Table 1: per T, the baseline, (a), the fastest setting and the fastest point, each once, with its roles and
    its claim against the baseline."""
    rows = []
    previous = None
    for r in decision.tables.choices:
        is_base = r.point_id == decision.run.baseline
        claim = decision.claim(r.claim)
        rows.append(
            {
                "tokens": r.tokens,
                "first": r.tokens != previous,
                "roles": " · ".join(r.role_labels),
                "css": " ".join(
                    c
                    for c in (
                        "baseline" if is_base else "",
                        "chosen" if "recommended" in r.roles and not is_base else "",
                        "other" if r.other_impl else "",
                        "noise" if not is_base and (claim is None or not claim.beyond) else "",
                    )
                    if c
                )
                + (" first" if r.tokens != previous else ""),
                "point_id": r.point_id,
                "label": r.label,
                "impl": r.impl,
                "settings": r.settings,
                "time": fmt_ms(r.median_us),
                "p90": fmt_ms(r.p90_us),
                "cv": fmt_pct(r.cv * 100 if r.cv is not None else None),
                "saved": "—"
                if is_base
                else f"{fmt_pct(r.saved_pct)} ({fmt_ms(r.baseline_us - r.median_us) if r.baseline_us is not None and r.median_us is not None else '—'})",
                "speedup": "—" if is_base else fmt_x(r.speedup),
                "noise": "" if is_base else claim_words(claim, "not compared"),
                "noise_css": "" if is_base else verdict_css(claim),
            }
        )
        previous = r.tokens
    return rows
