"""A check's verdict: what was read, where from, what it means and what to do."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from commprof.records.vocab import CHECK_STATUSES as STATUSES
from commprof.records.vocab import CheckStatus as Status

OK, WARN, FAIL, SKIPPED = STATUSES
_RANK = {SKIPPED: 0, OK: 1, WARN: 2, FAIL: 3}


@dataclass(frozen=True)
class CheckResult:
    """One line of `commprof doctor`. `evidence`: the values read, each with where it came from."""

    id: str
    title: str
    status: Status
    detail: str  # one sentence: the finding, or why the check was skipped
    evidence: list[str] = field(default_factory=list)
    fix: str = ""  # the command, kernel parameter or variable to apply (warn / fail)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> CheckResult:
        """A verdict as to_dict() wrote it (meta.json's doctor, a bundle's doctor.json); ValueError naming what
        is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"a check is an object, got {type(data).__name__}")
        if data.get("status") not in STATUSES:
            raise ValueError(f"status {data.get('status')!r} is not one of {', '.join(STATUSES)}")
        texts = {name: data.get(name, "") for name in ("id", "title", "detail", "fix")}
        evidence = data.get("evidence", [])
        if not all(isinstance(value, str) for value in texts.values()) or not isinstance(evidence, list):
            raise ValueError("id, title, detail and fix are text and evidence is a list of text")
        return cls(status=data["status"], evidence=[str(e) for e in evidence], **texts)


def read_checks(summary: Any) -> tuple[list[CheckResult], list[str]]:
    """The verdicts of a doctor_summary() read back, and why each entry that is not one could not be read."""
    entries = summary.get("checks") if isinstance(summary, dict) else summary
    if not isinstance(entries, list):
        return [], [f"no list of checks (got {type(entries).__name__})"]
    results, problems = [], []
    for index, entry in enumerate(entries):
        try:
            results.append(CheckResult.from_dict(entry))
        except ValueError as exc:
            problems.append(f"checks[{index}]: {exc}")
    return results, problems


def worst(statuses: list[str]) -> str:
    """The most severe of several statuses (fail > warn > ok > skipped)."""
    return max(statuses, key=_RANK.__getitem__, default=SKIPPED)
