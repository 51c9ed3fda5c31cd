"""How the page colours a claim (its words: decision/formatting.claim_words, the same in every output)."""

from __future__ import annotations

from commprof.report.decision.claim import Claim


def verdict_css(claim: Claim | None) -> str:
    """verdict-ok (faster beyond error), verdict-warn (slower beyond error, or inside it), "" (not compared)."""
    if claim is None:
        return ""
    return "verdict-ok" if claim.beyond else "verdict-warn"
