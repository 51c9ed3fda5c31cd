"""Where the step's time goes: the breakdown and projection tables, and the per-collective (op-site) view, each
formatted from the Decision's tables."""

from __future__ import annotations

from typing import Any

from commprof.report.decision.formatting import (
    break_even_text,
    fmt_bytes,
    fmt_ms,
    fmt_ms_value,
    fmt_num,
    fmt_pct,
    fmt_us,
)
from commprof.report.decision.types import Decision

# The field report's operating points: (accept length, verify T). See docs/report.md.
FIELD_REPORT_CASES = ((1.3, 8), (2.0, 4))
# The breakdown's and projection's settings as the figures' legends name them.
SETTING_LABELS = {"baseline": "baseline", "recommended": "(a) to export", "answer": "the answer at this T"}
SHORT_SETTING_LABELS = {"baseline": "baseline", "recommended": "(a)", "answer": "the answer"}


def breakdown_rows(decision: Decision) -> list[dict[str, Any]]:
    rows = []
    for r in decision.tables.breakdown:
        claim = decision.claim(r.claim)
        rows.append(
            {
                "tokens": r.tokens,
                "setting": r.setting,
                "setting_label": r.setting_label,
                "point_id": r.point_id,
                "noise": claim is not None and not claim.beyond,
                "comm": fmt_ms_value(r.comm_ms),
                "overhead": fmt_ms_value(r.overhead_ms),
                "compute": fmt_ms_value(r.compute_ms) if r.compute_ms is not None else "not given",
                "verify": fmt_ms_value(r.verify_ms),
                "share": fmt_pct(r.comm_share_pct),
            }
        )
    return rows


def projection_rows(decision: Decision) -> list[dict[str, Any]]:
    cases = set(FIELD_REPORT_CASES)
    rows = []
    for r in decision.tables.projection:
        cells = [
            {
                "text": fmt_num(c.tokens_per_s, 0) if c.tokens_per_s is not None else "n/a (accept > T)",
                "css": c.verdict + (" field" if (c.accept, r.tokens) in cases else ""),
            }
            for c in r.cells
        ]
        rows.append(
            {
                "setting": r.setting,
                "setting_label": r.setting_label,
                "tokens": r.tokens,
                "point_id": r.point_id,
                "decode_point": r.decode_point_id if r.decode_point_id != r.point_id else None,
                "verify": fmt_ms_value(r.verify_ms),
                "decode": fmt_ms_value(r.decode_ms),
                "plain": fmt_num(r.plain_tokens_per_s, 0),
                "break_even": "withdrawn (the model does not explain the engine's observed step)"
                if r.withdrawn
                else break_even_text(r.break_even, r.tokens),
                "cells": cells,
            }
        )
    return rows


def per_collective(decision: Decision) -> dict[str, Any]:
    """Per T: op-site tables of the baseline and the answer's point, rank skew, the verify / draft split, and the
    sites figure's data ({T: {setting: {site: [each op's median]}}})."""
    tables = decision.tables
    per_tokens: dict[int, dict[str, dict[str, list[float]]]] = {}
    rows = []
    for entry in tables.sites:
        per_tokens.setdefault(entry["tokens"], {})[entry["setting"]] = entry["values"]
        for s in entry["summary"]:
            rows.append(
                {
                    "tokens": entry["tokens"],
                    "setting": entry["setting"],
                    "setting_label": entry["setting_label"],
                    "point_id": entry["point_id"],
                    "site": s["site"],
                    "ops": s["ops"],
                    "bytes": fmt_bytes(s["bytes"]),
                    "median": fmt_us(s["median_us"]),
                    "max": fmt_us(s["max_us"]),
                    "total": fmt_ms(s["total_us"]),
                }
            )
    skew = [{**s, "skew": fmt_us(s["skew_us"]), "pct": fmt_pct(s["pct"])} for s in tables.skew]
    draft = [{**d, "verify": fmt_ms(d["verify_us"]), "draft": fmt_ms(d["draft_us"])} for d in tables.draft]
    return {"per_tokens": per_tokens, "tables": rows, "skew": skew, "draft": draft}
