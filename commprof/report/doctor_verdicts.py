"""meta.json's doctor verdicts read into rows (failing and warning checks first) and the failed / warned lists,
for the page and for RunAnalysis.doctor_failed."""

from __future__ import annotations

import json
from typing import Any

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
    summary = doctor if isinstance(doctor, dict) else {}
    listed_failed = summary["failed"] if isinstance(summary.get("failed"), list) else []
    counts = summary["counts"] if isinstance(summary.get("counts"), dict) else None
    if isinstance(summary.get("checks"), (list, dict)):
        doctor = summary["checks"]
    rows = sorted(
        (_row(name, value) for name, value in _entries(doctor)),
        key=lambda row: _VERDICT_ORDER.get(row["css"], len(_VERDICT_ORDER)),
    )
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


def _entries(doctor: Any) -> list[tuple[Any, Any]]:
    """(name or None, verdict) pairs of a mapping, a list or a lone value."""
    if isinstance(doctor, dict):
        return list(doctor.items())
    if isinstance(doctor, list):
        return [(None, d) for d in doctor]
    return [(None, doctor)]


def _row(name: Any, value: Any) -> dict[str, Any]:
    """One verdict as a page row; a verdict that is not a mapping is its status (named) or its detail."""
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
    return {
        "id": str(check_id) if check_id not in (None, "") and str(check_id) != str(title) else "",
        "title": str(title),
        "status": status or "?",
        "css": _VERDICT_CLASS.get(status.lower(), "info"),
        "detail": str(detail),
        "evidence": evidence,
        "fix": str(fix) if fix else "",
        "extra": json.dumps(rest, default=str) if rest else "",
    }


def _first(mapping: dict, *keys: str) -> Any:
    for key in keys:
        if mapping.get(key) not in (None, ""):
            return mapping[key]
    return None
