"""A Claim: one verdict-bearing statement of a Decision. Every verdict any output shows is a Claim's: its subject
(what is compared with what, at which T or size band), the figure shown, its error and where that comes from, the
basis (measured on which backend, simulated with which model and calibration, imported), and the verdict the one
rule (commprof.evidence.rule) gives on that figure and error. A derived figure (a verify step, tokens/s) carries
the verdict of the claim it derives from, its figure and error scaled alike, and is never judged again. Types
only: the analysis makes claims (report/analysis/claims.py)."""

from __future__ import annotations

import msgspec

from commprof.evidence import ErrorTerm, Verdict


class Frozen(msgspec.Struct, frozen=True, kw_only=True):
    """The base of every part of a Decision."""


class Claim(Frozen):
    """One comparison and its verdict."""

    id: str  # unique in its Decision: how tables, routes and steps name it
    subject: str  # what is compared with what, where: "p001 vs s2-p000, graph-mode step at T = 4"
    before: float  # the reference's figure, in `unit`
    after: float  # the compared side's figure
    unit: str  # "us", "ms", "ms per token"
    gain_pct: float  # how much less `after` is than `before`, % of `before` (negative: more)
    error: tuple[ErrorTerm, ...] | None  # what the gain must exceed, term by term (None: unknown)
    error_pct: float | None  # the terms summed, % of `before` (None: unknown)
    basis: str  # measured on nccl / simulated with ... / imported from ...
    verdict: Verdict  # the rule's on gain_pct and error_pct, or the claim it derives from
    derived_from: str | None = None  # the id of the claim whose verdict this carries
    reason: str = ""  # why there is no judgement where "not judged" (withdrawn, the error unknown)

    @property
    def beyond(self) -> bool:
        """Faster beyond its error."""
        return self.verdict == "beyond error" and self.gain_pct > 0

    @property
    def slower(self) -> bool:
        """Slower beyond its error."""
        return self.verdict == "beyond error" and self.gain_pct < 0
