"""A check's verdict: what was read, where from, what it means and what to do."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
_RANK = {SKIPPED: 0, OK: 1, WARN: 2, FAIL: 3}


@dataclass(frozen=True)
class CheckResult:
    """One line of `commprof doctor`. `evidence`: the values read, each with where it came from."""

    id: str
    title: str
    status: str  # ok / warn / fail / skipped
    detail: str  # one sentence: the finding, or why the check was skipped
    evidence: list[str] = field(default_factory=list)
    fix: str = ""  # the command, kernel parameter or variable to apply (warn / fail)

    def to_dict(self) -> dict:
        return asdict(self)


def worst(statuses: list[str]) -> str:
    """The most severe of several statuses (fail > warn > ok > skipped)."""
    return max(statuses, key=_RANK.__getitem__, default=SKIPPED)
