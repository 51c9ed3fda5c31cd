"""A check's verdict: what was read, where from, what it means and what to do."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
        """As meta.json's doctor holds it (records.meta_sections.DoctorCheck reads it back)."""
        return asdict(self)


def worst(statuses: list[str]) -> str:
    """The most severe of several statuses (fail > warn > ok > skipped)."""
    return max(statuses, key=_RANK.__getitem__, default=SKIPPED)
