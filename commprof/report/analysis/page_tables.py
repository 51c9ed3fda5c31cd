"""The page's descriptive tables as the Decision holds them: every point per T (the sweep table), the CUDA-graph
compatibility matrix, the heatmaps, the single collectives, and per T the op sites, rank skew and draft split of
the baseline and of what the answer runs. Plain data: the page formats it. Pure."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from commprof.records.schema import FAILED_STATUSES
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.formatting import finite, tail_header
from commprof.report.decision.tables import Heatmap, Matrix, PointsTable
from commprof.report.decision.types import AnswerAtT

MAX_MESSAGE_CELLS = 12
# A simulated record's "ok" is a prediction: nothing ran, so neither capture nor correctness was tested.
NOT_TESTED = "not tested"
# The points table's columns: the point's own (first record per point and T), the headline mode's values.
_POINT_INFO = ("label", "impl", "settings", "fused_rmsnorm")
_HEAD_VALUES = ("tail_us", "cv", "speedup", "reference", "rank_skew_pct")


def points_table(run: RunAnalysis) -> PointsTable | None:
    """Every (point, T) with an eager or a graph record, in the table's order: by T, re-measured configurations'
    earlier points last, fastest first in the headline mode (no time last), then by point. Each value is the first
    record's of its (point, T) (of that mode for the mode's own columns; a time only where that record is ok)."""
    if run.speedups.empty:
        return None
    column = _point_columns(run)
    shown = "predicted" if run.simulated else None
    spread = [None] * len(column["point_id"])  # a prediction has no spread
    return PointsTable(
        point_id=[str(p) for p in column["point_id"]],
        tokens=[int(t) for t in column["tokens"]],
        label=[str(v) for v in column["label"]],
        impl=[str(v) for v in column["impl"]],
        settings=[str(v) for v in column["settings"]],
        status_eager=[_status(s, shown) for s in column["status_eager"]],
        status_graph=[_status(s, shown) for s in column["status_graph"]],
        eager_us=_numbers(column["eager_us"]),
        graph_us=_numbers(column["graph_us"]),
        tail_us=spread if run.simulated else _numbers(column["tail_us"]),
        cv=spread if run.simulated else _numbers(column["cv"]),
        speedup=_numbers(column["speedup"]),
        reference=[r if isinstance(r, str) and r else None for r in column["reference"]],
        fused=[bool(f) for f in column["fused_rmsnorm"]],
        rank_skew_pct=_numbers(column["rank_skew_pct"]),
        superseded_by=[o if isinstance(o, str) else None for o in column["old"]],
        tail=tail_header(run.speedups["tail_stat"].unique() if "tail_stat" in run.speedups else (), run.simulated),
    )


def _status(status: Any, ok_as: str | None) -> str | None:
    if not isinstance(status, str):
        return None
    return ok_as if ok_as and status == "ok" else status


def _numbers(values: list[Any]) -> list[float | None]:
    """Each value as a float, None where it is missing or not finite."""
    try:
        array = np.asarray(values, dtype=float)  # None is NaN
    except (TypeError, ValueError):
        return [float(v) if finite(v) else None for v in values]
    return np.where(np.isfinite(array), array, None).tolist()


def _point_columns(run: RunAnalysis) -> dict[str, list[Any]]:
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


def compat_matrix(run: RunAnalysis) -> Matrix | None:
    """Every point x (T, mode) with its status; a simulated run's predictions are "not tested", never ok."""
    matrix = run.status_matrix
    if matrix.empty:
        return None
    if run.simulated:
        matrix = matrix.where(matrix != "ok", NOT_TESTED)
    messages = []
    fails = run.failures[run.failures["status"].isin(FAILED_STATUSES + ("unsupported",))]
    for (status, message), group in fails.groupby(["status", fails["message"].fillna("(no message)")], sort=True):
        cells = [
            f"{r.point_id}{f' T={int(r.tokens)}' if finite(r.tokens) else ''} {r.mode}"
            for r in group.head(MAX_MESSAGE_CELLS)[["point_id", "tokens", "mode"]].itertuples()
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
    return Matrix(
        columns=[f"T={t} {m}" for t, m in matrix.columns],
        points=[(str(p), str(label)) for p, label in matrix.index],
        statuses=[[v if isinstance(v, str) else None for v in row] for row in matrix.to_numpy().tolist()],
        messages=messages,
        note=note,
    )


def heatmaps(run: RunAnalysis) -> list[Heatmap]:
    """Per T, the best step time (ms) over the two strongest axes, of every point and of the ranked ones."""
    out = []
    if not run.heatmaps:
        return out
    rows_axis, *columns_axis = run.heatmap_axes
    for t, every, ranked in run.heatmaps:
        values = every.to_numpy(dtype=float) / 1000.0 if not every.empty else np.zeros((0, 0))
        ranked_values = ranked.to_numpy(dtype=float) / 1000.0 if not every.empty else values
        out.append(
            Heatmap(
                tokens=int(t),
                rows_axis=rows_axis,
                columns_axis=columns_axis[0] if columns_axis else "",
                columns=[str(c) for c in every.columns],
                labels=[str(label) for label in every.index],
                ms=[[float(v) if finite(v) else None for v in line] for line in values.tolist()],
                ranked_ms=[[float(v) if finite(v) else None for v in line] for line in ranked_values.tolist()],
            )
        )
    return out


def collectives(run: RunAnalysis) -> list[dict[str, Any]]:
    """The single-collective records (imported or simulated), by collective and size."""
    out = []
    for r in run.collectives.sort_values(["collective", "bytes"]).itertuples() if not run.collectives.empty else []:
        wrong = None if r.wrong is None or (isinstance(r.wrong, float) and math.isnan(r.wrong)) else r.wrong
        out.append(
            {
                "collective": str(r.collective),
                "bytes": int(r.bytes) if finite(r.bytes) else None,
                "time_us": float(r.time_us) if finite(r.time_us) else None,
                "algbw_gbps": float(r.algbw_gbps) if finite(r.algbw_gbps) else None,
                "busbw_gbps": float(r.busbw_gbps) if finite(r.busbw_gbps) else None,
                "wrong": wrong.item() if hasattr(wrong, "item") else wrong,
                "graph": bool(isinstance(r.graph, bool) and r.graph),
                "status": str(r.status),
            }
        )
    return out


def per_collective(run: RunAnalysis, per_t: list[AnswerAtT]) -> tuple[list[dict], list[dict], list[dict]]:
    """Per T: the op sites of the baseline and of the answer's point (eager records), their rank skew, and the
    verify / draft split: (sites, skew, draft)."""
    sites, skew, draft = [], [], []
    shown = [
        (a.tokens, setting, point)
        for a in per_t
        for setting, point in (("baseline", run.baseline), ("answer", a.point_id))
    ]
    for tokens, setting, point_id in shown:
        found = run.sites_at(point_id, tokens)
        if found is None:
            continue
        label = shown_label(run, setting, point_id)
        summary = [
            {
                "site": str(s.site_kind),
                "ops": int(s.ops),
                "bytes": float(s.bytes) if finite(s.bytes) else None,
                "median_us": float(s.median_us),
                "max_us": float(s.max_us),
                "total_us": float(s.total_us),
            }
            for s in found.summary.itertuples()
        ]
        sites.append({"tokens": tokens, "setting": setting, "setting_label": label, "point_id": point_id,
                      "values": found.values, "summary": summary})  # fmt: skip
        if split := found.split:
            draft.append({"tokens": tokens, "setting": setting, "setting_label": label, "point_id": point_id, **split})
    skews = _skews_at(run, {p for _t, _s, p in shown})
    for tokens, setting, point_id in shown:
        for mode, skew_us, skew_pct in skews.get((point_id, tokens), ()):
            if finite(skew_us):
                skew.append({"tokens": tokens, "setting": setting, "setting_label": shown_label(run, setting, point_id),
                             "point_id": point_id, "mode": mode, "skew_us": float(skew_us),
                             "pct": float(skew_pct) if finite(skew_pct) else None})  # fmt: skip
    return sites, skew, draft


def shown_label(run: RunAnalysis, setting: str, point_id: Any) -> str:
    if setting == "answer" and point_id == run.baseline:
        return "the answer at this T (keeps the baseline)"
    return {"baseline": "baseline", "answer": "the answer at this T"}.get(setting, setting)


def _skews_at(run: RunAnalysis, point_ids: set[Any]) -> dict[tuple[str, Any], list[tuple[str, Any, Any]]]:
    """(point, T) -> each ok record's (mode, rank skew in µs and %), in the records' order, for these points."""
    ok = run.ok_steps
    picked = ok.loc[
        ok["point_id"].isin({p for p in point_ids if isinstance(p, str)}),
        ["point_id", "tokens", "mode", "rank_skew_us", "rank_skew_pct"],
    ]
    out: dict[tuple[str, Any], list[tuple[str, Any, Any]]] = {}
    for point_id, tokens, *skew in zip(*(picked[column].tolist() for column in picked.columns)):
        out.setdefault((point_id, tokens), []).append(tuple(skew))
    return out


def answer_live_note(run: RunAnalysis, per_t: list[AnswerAtT], exported: str | None) -> str:
    """Where the routes name a point the files do not set live (an engine switch left commented out), what the
    answer's rows run instead, said once; "" where they run what the routes name."""
    unset = [a for a in per_t if a.route_point_id is not None and a.route_point_id != a.point_id]
    if not unset:
        return ""
    at = ", ".join(f"T = {a.tokens}: {a.route_point_id}" for a in unset)
    live = sorted({str(a.point_id) for a in unset if a.point_id})
    kept = " (the baseline's settings)" if live == [run.baseline] else " ((a)'s settings)" if live == [exported] else ""
    runs = f"what they set live, {', '.join(live)}{kept}" if live else "nothing: the answer sets nothing live here"
    return (
        f"The answer's routes name {at}, but its files leave that engine switch commented out (measure before "
        f"enabling), so it sets nothing there: the answer's rows run {runs}."
    )
