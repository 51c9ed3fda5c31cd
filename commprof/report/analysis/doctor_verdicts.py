"""meta.json's doctor verdicts, read through the doctor's own CheckResult, into rows (failing and warning checks
first) and the failed / warned lists, for the page and for RunAnalysis.doctor_failed."""

from __future__ import annotations

import json
from typing import Any

from commprof.doctor.result import FAIL, OK, SKIPPED, STATUSES, WARN, CheckResult, read_checks

UNREADABLE = "unreadable"  # an entry that is no verdict the doctor writes: shown as it is, never guessed at
_CSS = {OK: "ok", WARN: "warn", FAIL: "fail", SKIPPED: "info", UNREADABLE: "info"}
_ORDER = {status: rank for rank, status in enumerate((FAIL, WARN, OK, SKIPPED, UNREADABLE))}


def doctor_view(doctor: Any) -> dict[str, Any] | None:
    """meta.json's doctor (commprof.doctor.doctor_summary() plus the sweep's "failed" ids) for the page, failing and
    warning checks first; an entry of another shape is one row saying it is unreadable, with its JSON."""
    if not doctor:
        return None
    results, problems = read_checks(doctor)
    rows = [_row(result) for result in sorted(results, key=lambda r: _ORDER[r.status])]
    rows += [_unreadable(problem, doctor) for problem in problems]
    counts = {status: sum(row["status"] == status for row in rows) for status in (*STATUSES, UNREADABLE)}
    return {
        "rows": rows,
        "failed": _named(rows, FAIL) + _listed_failed(doctor, rows),
        "warned": _named(rows, WARN),
        "counts": ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), key=lambda i: _ORDER[i[0]]) if n),
    }


def _named(rows: list[dict[str, Any]], status: str) -> list[str]:
    return [row["title"] or row["id"] for row in rows if row["status"] == status]


def _listed_failed(doctor: Any, rows: list[dict[str, Any]]) -> list[str]:
    """The sweep's "failed" ids that no row names (a check the summary lists but whose verdict is unreadable)."""
    listed = doctor.get("failed") if isinstance(doctor, dict) else None
    if not isinstance(listed, list):
        return []
    named = {row["id"] for row in rows} | {row["title"] for row in rows}
    return [str(f) for f in listed if str(f) not in named]


def _row(result: CheckResult) -> dict[str, Any]:
    return {
        "id": result.id if result.id != result.title else "",
        "title": result.title,
        "status": result.status,
        "css": _CSS[result.status],
        "detail": result.detail,
        "evidence": result.evidence,
        "fix": result.fix,
        "extra": "",
    }


def _unreadable(problem: str, doctor: Any) -> dict[str, Any]:
    """A row for an entry that is not a verdict: why, and the entry itself as JSON."""
    where, _, why = problem.partition(": ")
    entries = doctor.get("checks") if isinstance(doctor, dict) else doctor
    entry: Any = doctor
    if where.startswith("checks[") and isinstance(entries, list):
        entry = entries[int(where[len("checks[") : -1])]
    return {
        "id": "",
        "title": where if why else "doctor verdicts",
        "status": UNREADABLE,
        "css": _CSS[UNREADABLE],
        "detail": why or problem,
        "evidence": [],
        "fix": "",
        "extra": json.dumps(entry, default=str)[:2000],
    }
