"""The engine's observation as the Decision carries it: the observed step beside the prediction per T, whether the
model explains it, and where it does not, commprof explain's ranked explanations on the run's box. Types only."""

from __future__ import annotations

from typing import Any

from commprof.report.decision.claim import Frozen

EXPLANATIONS_SHOWN = 3  # the ranked explanations the page and the terminal list (summary.json has every one)


class Explanation(Frozen):
    """One box condition (or two together) that could explain an observation the model does not, as commprof explain
    ranks it on the run's box: its predictions beside the observations, whether it explains them within the model's
    error, what the box's records say of it and the fix."""

    condition: str  # "p2p-off-shm", "iommu-translation", "as-modelled", ...
    magnitude: str  # the fitted or fixed magnitude, in words ("" where none)
    bytes: list[int]
    ranks: list[int]
    predicted_us: list[float]
    observed_us: list[float]
    error_pct: float  # median |predicted - observed| / observed over the judged sizes
    allowed_error_pct: float | None  # the model's stated error (None: unknown, nothing judged)
    explains: bool | None  # within that error (None: not judged)
    evidence: str  # what the box's records say: "confirmed", "ruled out", "not checked"
    confirmed_by: list[str]  # the records' lines
    fix: str  # how to fix it ("" for the box as modelled)
    basis: str  # how it was priced
    state: str  # whether it explains the observation, in words


class Explanations(Frozen):
    """commprof explain's ranked explanations of an observation the model does not explain, best first."""

    box: str
    verdict: str
    explained: bool
    model_error: dict[str, Any]
    error_sizes: list[int] | None
    judged: str
    explanations: list[Explanation]
    tell_apart: str  # the measurement that tells the first candidates apart ("" where none)
    no_change_here: dict[str, str]  # conditions that change nothing on this box -> why
    landmines: list[str]


class Observed(Frozen):
    """The engine's observation beside the prediction, per T, and whether the model explains it; where it does not,
    what could (the checks, and the ranked explanations on the run's box)."""

    source: str
    mode: str | None
    rows: list[dict[str, Any]]  # per T: observed_ms, today_ms, answer_ms, band_ms, ratio, explained
    explained: bool | None  # None: not judged (measured, or the model's error unknown)
    verdict: str
    checks: list[str]
    t_given: bool
    explanations: Explanations | None  # None: nothing to explain, or no box to explain it on
    explanations_note: str  # why there are none where the model does not explain the observation
