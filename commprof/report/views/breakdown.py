"""Where the step's time goes: the breakdown and projection tables, and the per-collective (op-site) view."""

from __future__ import annotations

from typing import Any

from commprof.report.analysis.decision import Decision
from commprof.report.analysis.formatting import (
    finite,
    fmt_bytes,
    fmt_ms,
    fmt_ms_value,
    fmt_num,
    fmt_pct,
    fmt_us,
    tps_column,
    verdict_column,
)
from commprof.report.analysis.projection import FIELD_REPORT_CASES
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import break_even_text

# The breakdown's and projection's settings (projection.breakdown) as the page names them.
# "answer": the decision's point at each T (decision.answer_tables), never a fastest point it did not choose.
SETTING_LABELS = {"baseline": "baseline", "recommended": "(a) to export", "answer": "the answer at this T"}
SHORT_SETTING_LABELS = {"baseline": "baseline", "recommended": "(a)", "answer": "the answer"}


def setting_label(run: RunAnalysis, decision: Decision, setting: str, point_id: Any, decode_point: Any = None) -> str:
    """A row's setting as the page names it; the answer's says when it is the baseline's or (a)'s point (the
    decision's; a projection row's at T = 1 too: `decode_point`)."""
    label = SETTING_LABELS.get(setting, setting)
    if setting == "answer" and point_id == run.baseline and decode_point in (None, point_id):
        return f"{label} (keeps the baseline)"
    if setting == "answer" and point_id == decision.nccl_answer_point and decode_point in (None, point_id):
        return f"{label} (= (a))"
    return label


def answer_live_note(run: RunAnalysis, decision: Decision) -> str:
    """Where the answer's routes name a point its files do not set live (an engine switch left commented out), what
    the answer's rows run instead, said once; "" where they run what the routes name."""
    head = run.headline
    if head.empty or "route_point_id" not in head:
        return ""
    unset = head[(head["route_point_id"] != head["answer_point_id"]) & head["route_point_id"].notna()]
    if unset.empty:
        return ""
    at = ", ".join(f"T = {int(r.tokens)}: {r.route_point_id}" for r in unset.itertuples())
    live = sorted({str(p) for p in unset["answer_point_id"].dropna()})
    kept = (
        " (the baseline's settings)"
        if live == [run.baseline]
        else " ((a)'s settings)"
        if live == [decision.nccl_answer_point]
        else ""
    )
    runs = f"what they set live, {', '.join(live)}{kept}" if live else "nothing: the answer sets nothing live here"
    return (
        f"The answer's routes name {at}, but its files leave that engine switch commented out (measure before "
        f"enabling), so it sets nothing there: the answer's rows run {runs}."
    )


def breakdown_rows(run: RunAnalysis, decision: Decision) -> list[dict[str, Any]]:
    noise = (
        {
            (int(c.tokens), "recommended")
            for c in run.choices.itertuples()
            if "recommended" in c.roles and c.beyond_uncertainty is False
        }
        if not run.choices.empty
        else set()
    )
    return [
        {
            "tokens": int(r.tokens),
            "setting": r.setting,
            "setting_label": setting_label(run, decision, r.setting, r.point_id),
            "point_id": r.point_id,
            "noise": (int(r.tokens), r.setting) in noise,
            "comm": fmt_ms_value(r.comm_ms),
            "overhead": fmt_ms_value(r.overhead_ms),
            "compute": fmt_ms_value(r.compute_ms) if finite(r.compute_ms) else "not given",
            "verify": fmt_ms_value(r.verify_ms),
            "share": fmt_pct(r.comm_share_pct),
        }
        for r in run.breakdown.itertuples()
    ]


def tps_cells(run: RunAnalysis, r: Any, missing: str) -> list[dict[str, Any]]:
    """One projection row's tokens/s per accept length, each with its verdict against plain decode; `missing`
    where the accept length cannot be reached at this T."""
    cells = []
    for accept in run.options.accepts:
        value = getattr(r, tps_column(accept))
        reached = finite(value)
        cells.append(
            {
                "text": fmt_num(value, 0) if reached else missing,
                "verdict": getattr(r, verdict_column(accept), "within") if reached else "within",
            }
        )
    return cells


def projection_rows(run: RunAnalysis, decision: Decision) -> list[dict[str, Any]]:
    cases = {(a, t) for a, t in FIELD_REPORT_CASES}
    rows = []
    for r in run.projection.itertuples():
        cells = [
            {"text": cell["text"], "css": cell["verdict"] + (" field" if (accept, int(r.tokens)) in cases else "")}
            for accept, cell in zip(run.options.accepts, tps_cells(run, r, "n/a (accept > T)"))
        ]
        decode_point = getattr(r, "decode_point_id", None)
        rows.append(
            {
                "setting": r.setting,
                "setting_label": setting_label(run, decision, r.setting, r.point_id, decode_point),
                "tokens": int(r.tokens),
                "point_id": r.point_id,
                "decode_point": decode_point if decode_point != r.point_id else None,
                "verify": fmt_ms_value(r.verify_ms),
                "decode": fmt_ms_value(r.decode_ms),
                "plain": fmt_num(r.plain_tokens_per_s, 0),
                "break_even": break_even_text(
                    r.break_even_ratio,
                    bool(r.within_uncertainty),
                    int(r.tokens),
                    getattr(r, "withdrawn", False) is True,
                ),
                "cells": cells,
            }
        )
    return rows


def answer_of(head_row: Any) -> Any:
    """The decision's point at a headline row's T (decision.answer_tables; None before the decision restates the tables)."""
    return getattr(head_row, "answer_point_id", None)


def per_collective(run: RunAnalysis, decision: Decision) -> dict[str, Any]:
    """Per T: op-site distributions of the baseline and the answer's point (eager records) and rank skew."""
    if run.headline.empty:
        return {"per_tokens": {}, "tables": [], "skew": [], "draft": []}
    per_tokens, tables, skew, draft = {}, [], [], []
    for r in run.headline.itertuples():
        settings = {}
        for setting, point_id in (("baseline", run.baseline), ("answer", answer_of(r))):
            found = run.sites_at(point_id, r.tokens)
            if found is None:
                continue
            settings[setting] = found.sites
            if split := found.split:
                draft.append(
                    {
                        "tokens": int(r.tokens),
                        "setting": setting,
                        "setting_label": setting_label(run, decision, setting, point_id),
                        "point_id": point_id,
                        "verify_ops": split["verify_ops"],
                        "verify": fmt_ms(split["verify_us"]),
                        "draft_ops": split["draft_ops"],
                        "draft": fmt_ms(split["draft_us"]),
                    }
                )
            for s in found.summary.itertuples():
                tables.append(
                    {
                        "tokens": int(r.tokens),
                        "setting": setting,
                        "setting_label": setting_label(run, decision, setting, point_id),
                        "point_id": point_id,
                        "site": s.site_kind,
                        "ops": int(s.ops),
                        "bytes": fmt_bytes(s.bytes),
                        "median": fmt_us(s.median_us),
                        "max": fmt_us(s.max_us),
                        "total": fmt_ms(s.total_us),
                    }
                )
        if settings:
            per_tokens[int(r.tokens)] = settings
    skews = _skews_at(run, {run.baseline, *(answer_of(r) for r in run.headline.itertuples())})
    for r in run.headline.itertuples():
        for setting, point_id in (("baseline", run.baseline), ("answer", answer_of(r))):
            for mode, skew_us, skew_pct in skews.get((point_id, r.tokens), ()):
                if finite(skew_us):
                    skew.append(
                        {
                            "tokens": int(r.tokens),
                            "setting": setting,
                            "setting_label": setting_label(run, decision, setting, point_id),
                            "point_id": point_id,
                            "mode": mode,
                            "skew": fmt_us(skew_us),
                            "pct": fmt_pct(skew_pct),
                        }
                    )
    return {"per_tokens": per_tokens, "tables": tables, "skew": skew, "draft": draft}


def _skews_at(run: RunAnalysis, point_ids: set[Any]) -> dict[tuple[str, Any], list[tuple[str, Any, Any]]]:
    """(point, T) -> each ok record's (mode, rank skew in µs and %), in the records' order, for these points: one
    pass over the ok records instead of a filter of all of them per point and T."""
    ok = run.ok_steps
    picked = ok.loc[
        ok["point_id"].isin({p for p in point_ids if isinstance(p, str)}),
        ["point_id", "tokens", "mode", "rank_skew_us", "rank_skew_pct"],
    ]
    out: dict[tuple[str, Any], list[tuple[str, Any, Any]]] = {}
    for point_id, tokens, *skew in zip(*(picked[column].tolist() for column in picked.columns)):
        out.setdefault((point_id, tokens), []).append(tuple(skew))
    return out
