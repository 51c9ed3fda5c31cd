"""Where a number comes from, and how far it can be trusted: the one vocabulary every number, verdict and exported
line of commprof uses.

Three levels: *measured* (timed by commprof, on which backend), *simulated* (predicted by the cost model, with
which calibration and what expected error) and *imported* (read from which nccl-tests file). Each level brings
its own rule for when a difference is a result: beyond measurement noise for measured numbers, beyond the model's
expected error for simulated ones. A difference inside that uncertainty is not a result and is never recommended.
Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from commprof.records.schema import SOURCES, Source

MEASURED = "measured"
SIMULATED = "simulated"
IMPORTED = "imported"
# The records' `source` field -> its evidence level, in SOURCES' order (timed here, predicted, imported).
LEVEL_OF_SOURCE: dict[Source, str] = dict(zip(SOURCES, (MEASURED, SIMULATED, IMPORTED), strict=True))

NOISE_RULE = (
    "a point beats the baseline beyond noise when its p90 step time is below the baseline's median "
    "(nine in ten of its steps were faster than the baseline's typical step); over several T, the "
    "sums over T"
)


# What the one rule says of a figure: better by more than its error; not (inside error); no figure to compare on
# one side, or an unknown error, or an observation withdrew it (not judged); nothing to judge (no answer).
Verdict = Literal["beyond error", "inside error", "not judged", "no answer"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)


def error_band(pct: float | None) -> str:
    """An expected error as every page and file writes it ("±41 %"), or "unknown"."""
    return f"±{pct:.0f} %" if pct is not None else "unknown"


@dataclass(frozen=True)
class ModelError:
    """The expected error of a simulation (median |model - measured| / measured, %) and where that figure comes
    from; `pct` None: unknown, and then no predicted difference counts."""

    pct: float | None
    basis: str

    @property
    def band(self) -> str:
        return error_band(self.pct)

    def to_dict(self) -> dict[str, Any]:
        """As a simulated run's meta.json holds it ("model_error")."""
        return {"pct": self.pct, "basis": self.basis}

    @classmethod
    def from_meta(cls, meta: dict) -> ModelError:
        """A simulated run's expected error: the one figure every verdict, page and file of the run quotes for its
        NCCL model. It is what `commprof simulate` recorded in meta.json: the calibration's held-out error, or
        the prior's measured error; never an in-sample fit figure (a record's own NCCL figure may be one, and
        is not used). Unknown when meta.json holds none (an older simulation)."""
        item = meta.get("model_error")
        if not isinstance(item, dict):
            return cls(None, "meta.json records no expected error (simulated by an older commprof: simulate again)")
        pct, basis = item.get("pct"), str(item.get("basis") or "recorded by commprof simulate")
        if isinstance(pct, (int, float)) and not isinstance(pct, bool) and math.isfinite(pct) and pct >= 0:
            return cls(float(pct), basis)
        return cls(None, basis)


@dataclass(frozen=True)
class Evidence:
    """One run's (one source's) evidence: its level and what qualifies it."""

    level: str  # MEASURED, SIMULATED or IMPORTED
    backend: str | None = None  # measured: the backend the steps ran on ("nccl", "gloo")
    calibration: str | None = None  # simulated: "nccl-prior" (uncalibrated) or the calibration file
    model_error: ModelError | None = None  # simulated: the expected error the verdicts use
    origin: tuple[str, ...] = field(default_factory=tuple)  # imported: the files
    # measured: how far the baseline moved between its measurements over the run (its drift band, % of its
    # fastest); None: measured once, no drift known. A gain must exceed it as well as noise.
    drift_pct: float | None = None

    @property
    def simulated(self) -> bool:
        return self.level == SIMULATED

    @property
    def uncalibrated(self) -> bool:
        return self.simulated and self.calibration in (None, "nccl-prior")

    @property
    def measured(self) -> str:
        """The word for how a number of this evidence came to be: "measured", "predicted" or "imported"."""
        return {MEASURED: "measured", SIMULATED: "predicted"}.get(self.level, "imported")

    @property
    def measurement(self) -> str:
        """The noun for one such number: "measurement", "prediction" or "import"."""
        return {MEASURED: "measurement", SIMULATED: "prediction"}.get(self.level, "import")

    @property
    def label(self) -> str:
        """ "measured on gloo", "simulated with nccl-prior (expected error ±41 %)", "imported from a.txt"."""
        if self.level == MEASURED:
            return f"measured on {self.backend}" if self.backend else "measured"
        if self.level == SIMULATED:
            error = self.model_error.band if self.model_error else "unknown"
            return f"simulated with {self.calibration or 'unknown calibration'} (expected error {error})"
        return "imported from " + (", ".join(self.origin) if self.origin else "nccl-tests logs")

    @property
    def uncertainty(self) -> str:
        """What a difference must exceed to count: "measurement noise" or "the model's expected error"."""
        if self.simulated:
            return "the model's expected error"
        return "measurement noise" if self.drift_pct is None else "measurement noise and the baseline's drift"

    @property
    def beyond(self) -> str:
        if self.simulated:
            return "beyond model error"
        return "beyond noise" if self.drift_pct is None else "beyond noise and drift"

    @property
    def within(self) -> str:
        if self.simulated and (self.model_error is None or self.model_error.pct is None):
            return "not judged: the model's error is unknown"
        if self.simulated:
            return "within model error"
        return "within noise" if self.drift_pct is None else "within noise or drift"

    @property
    def rule(self) -> str:
        """The rule the verdicts follow, with this run's figures."""
        if not self.simulated:
            if self.drift_pct is None:
                return NOISE_RULE
            return (
                f"{NOISE_RULE}; and by more than the baseline's drift over the run (±{self.drift_pct:.1f} %: the "
                "point's p90 below the baseline's median lowered by the drift)"
            )
        error = self.model_error
        if error is None or error.pct is None:
            return (
                "a predicted difference counts only beyond the model's expected error, which is unknown for this "
                f"calibration ({error.basis if error else 'no figure'}): no predicted difference counts"
            )
        return (
            f"a predicted gain counts when it exceeds the model's expected error ({error.band}: {error.basis}); "
            "a smaller one is within model error; over several T, the sums over T"
        )

    def beats(
        self,
        median_us: Any,
        p90_us: Any,
        reference_median_us: Any,
        errors: tuple[float | None, float | None] | None = None,
    ) -> bool | None:
        """Whether a point (its median and p90) beats a reference (its median) by more than this evidence's
        uncertainty; None when a number is missing. Unknown model error: never.

        `errors`: simulated by two different models (a kernel's against NCCL's), their expected errors (the
        point's, the reference's) in %: the point wins only when its time raised by its error stays below the
        reference's lowered by its own, since the two models can be wrong in opposite directions."""
        try:
            median, p90, reference = float(median_us), float(p90_us), float(reference_median_us)
        except (TypeError, ValueError):
            return None
        if not self.simulated:
            if not (math.isfinite(p90) and math.isfinite(reference)):
                return None
            return p90 < reference * (1.0 - (self.drift_pct or 0.0) / 100.0)
        if not (math.isfinite(median) and math.isfinite(reference)):
            return None
        if errors is not None:
            mine, theirs = errors
            if mine is None or theirs is None:
                return False
            return median * (1.0 + mine / 100.0) < reference * (1.0 - theirs / 100.0)
        if self.model_error is None or self.model_error.pct is None:
            return False
        return median < reference * (1.0 - self.model_error.pct / 100.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "label": self.label,
            "backend": self.backend,
            "calibration": self.calibration,
            "expected_error_pct": self.model_error.pct if self.model_error else None,
            "expected_error_basis": self.model_error.basis if self.model_error else None,
            "origin": list(self.origin),
            "drift_pct": self.drift_pct,
            "rule": self.rule,
        }

    def figure_error_pct(self, uncertain_ms: float, total_ms: float) -> float | None:
        """The expected error of a figure of which only `uncertain_ms` is predicted (a verify step: predicted
        communication plus the compute the user gave), in % of the figure; None: measured, or unknown."""
        if not self.simulated or self.model_error is None or self.model_error.pct is None:
            return None
        if not (math.isfinite(uncertain_ms) and math.isfinite(total_ms)) or total_ms <= 0:
            return None
        return self.model_error.pct * min(max(uncertain_ms / total_ms, 0.0), 1.0)

    def judge(
        self, after: tuple[float, float], before: float, errors: tuple[float | None, float | None] | None = None
    ) -> Verdict:
        """The one rule applied to a figure a user reads: `after` (median, p90) against `before` (median), each side
        with its own error where simulated (`errors`: the after's and the before's, % of each figure)."""
        if self.simulated and errors is not None and None in errors:
            return "not judged"
        beats = self.beats(after[0], after[1], before, errors if self.simulated else None)
        if beats is None or (self.simulated and (self.model_error is None or self.model_error.pct is None)):
            return "not judged"
        return "beyond error" if beats else "inside error"
