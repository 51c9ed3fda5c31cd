"""The claims of a Decision, made in one place: each comparison's figure and error terms (Evidence.error_terms)
judged by the one rule (commprof.evidence.rule); a derived figure scaled from its source claim, verdict and all;
an observation the model does not explain withdraws every predicted claim (its error becomes unknown, so the rule
says "not judged"). Each subject is one claim: asking twice returns the first. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec

from commprof.evidence import ErrorTerm, Evidence, gain_pct, rule, total_pct
from commprof.report.decision.claim import Claim


@dataclass
class ClaimBook:
    """The claims made while deciding one run, by id, in the order they were made."""

    evidence: Evidence
    withdrawn: str = ""  # why every predicted claim is withdrawn ("" where none is)
    claims: dict[str, Claim] = field(default_factory=dict)

    def get(self, claim_id: str | None) -> Claim | None:
        return self.claims.get(claim_id) if claim_id is not None else None

    def compare(
        self,
        claim_id: str,
        subject: str,
        sides: tuple[tuple[Any, Any], tuple[Any, Any]],
        unit: str = "us",
        errors: tuple[float | None, float | None] | None = None,
        unknown: str = "",
    ) -> Claim | None:
        """The claim that `after` (median, p90) is less than `before` (median, p90), judged by the rule on its own
        error terms; None where a median is missing (nothing compared). `unknown`: why a term is unknown though the
        figures are there (a measured point the run's interleaved confirmation could not confirm), so the rule says
        "not judged"."""
        if claim_id in self.claims:
            return self.claims[claim_id]
        after, before = sides
        gain = gain_pct(before[0], after[0])
        if gain is None:
            return None
        terms = None if unknown else self.evidence.error_terms(after, before, errors)
        reason = unknown or ("" if terms is not None else _unknown(self.evidence))
        return self._add(
            Claim(
                id=claim_id,
                subject=subject,
                before=float(before[0]),
                after=float(after[0]),
                unit=unit,
                gain_pct=round(gain, 4),
                error=terms,
                error_pct=_rounded(total_pct(terms)),
                basis=self.evidence.label,
                verdict=rule(gain, total_pct(terms)),
                reason=reason,
            )
        )

    def derive(self, claim_id: str, subject: str, source: Claim, figures: tuple[float, float], unit: str) -> Claim:
        """A figure made from `source`'s by adding the same amount to both sides (a verify step: compute plus the
        communication compared): the gain and every error term scaled by before / the new before, the verdict
        `source`'s (the same inequality, scaled)."""
        if claim_id in self.claims:
            return self.claims[claim_id]
        before, after = figures
        scale = _scale(source, before)
        terms = tuple(ErrorTerm(t.name, t.pct * scale, t.source) for t in source.error) if source.error else None
        return self._add(
            Claim(
                id=claim_id,
                subject=subject,
                before=before,
                after=after,
                unit=unit,
                gain_pct=round(source.gain_pct * scale, 4),
                error=terms,
                error_pct=_rounded(total_pct(terms)),
                basis=source.basis,
                verdict=source.verdict,
                derived_from=source.id,
                reason=source.reason,
            )
        )

    def _add(self, claim: Claim) -> Claim:
        if self.withdrawn and self.evidence.simulated and claim.derived_from is None:
            claim = withdrawn(claim, self.withdrawn)
        self.claims[claim.id] = claim
        return claim


def withdrawn(claim: Claim, why: str) -> Claim:
    """A predicted claim an observation withdrew: its error unknown, so no verdict but "not judged"."""
    return msgspec.structs.replace(
        claim, error=None, error_pct=None, verdict=rule(claim.gain_pct, None), reason=f"withdrawn: {why}"
    )


def _scale(source: Claim, before: float) -> float:
    """How much smaller the derived figure's relative gain is: the source's reference over the new one."""
    source_before = source.before / 1000.0 if source.unit == "us" else source.before
    return source_before / before if before and math.isfinite(before) else 0.0


def _rounded(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def _unknown(evidence: Evidence) -> str:
    if evidence.simulated:
        return "not judged: the model's expected error is unknown here"
    return "not judged: a side has no p90 to measure its spread"
