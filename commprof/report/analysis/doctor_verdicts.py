"""meta.json's doctor verdicts (records.meta_sections.MetaDoctor) into rows (failing and warning checks first) and
the failed / warned lists, for the page and for RunAnalysis.doctor_failed."""

from __future__ import annotations

from typing import Any

from commprof.doctor.result import FAIL, OK, SKIPPED, STATUSES, WARN
from commprof.records.meta_sections import DoctorCheck, MetaDoctor

_CSS = {OK: "ok", WARN: "warn", FAIL: "fail", SKIPPED: "info"}
_ORDER = {status: rank for rank, status in enumerate((FAIL, WARN, OK, SKIPPED))}


def doctor_view(doctor: MetaDoctor | None) -> dict[str, Any] | None:
    """meta.json's doctor (commprof.doctor.doctor_summary() plus the sweep's "failed" ids) for the page, failing and
    warning checks first."""
    if doctor is None or doctor == MetaDoctor():
        return None
    rows = [_row(check) for check in sorted(doctor.checks or [], key=lambda c: _ORDER[c.status])]
    counts = {status: sum(row["status"] == status for row in rows) for status in STATUSES}
    return {
        "rows": rows,
        "failed": _named(rows, FAIL) + _listed_failed(doctor, rows),
        "warned": _named(rows, WARN),
        "counts": ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), key=lambda i: _ORDER[i[0]]) if n),
    }


def _named(rows: list[dict[str, Any]], status: str) -> list[str]:
    return [row["title"] or row["id"] for row in rows if row["status"] == status]


def _listed_failed(doctor: MetaDoctor, rows: list[dict[str, Any]]) -> list[str]:
    """The sweep's "failed" ids that no row names (a check the summary lists without its verdict)."""
    named = {row["id"] for row in rows} | {row["title"] for row in rows}
    return [f for f in doctor.failed or [] if f not in named]


def _row(check: DoctorCheck) -> dict[str, Any]:
    return {
        "id": check.id if check.id != check.title else "",
        "title": check.title,
        "status": check.status,
        "css": _CSS[check.status],
        "detail": check.detail,
        "evidence": list(check.evidence),
        "fix": check.fix,
        "extra": "",
    }
