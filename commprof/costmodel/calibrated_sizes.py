"""The sizes a calibration was judged on, and how a simulation prices around them: inside, the calibration with
its held-out error; outside, NCCL's uncalibrated model with its own error, every such op labelled "outside the
calibrated sizes", and a step's error covering its ops'. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from commprof.costmodel.latency import CostParams
from commprof.evidence import ModelError

# The bands of decode / verify sizes a calibration's held-out error is judged on (commprof calibrate writes one
# error per band: fit.band_names / band_error_pct), bytes: low <= size < high.
DECISION_BANDS = ((8 << 10, 64 << 10, "8-64 KB"), (64 << 10, (1 << 20) + 1, "64 KB-1 MB"))
OUTSIDE = "outside the calibrated sizes"  # the label of an op a calibration was never judged at


@dataclass(frozen=True)
class JudgedSizes:
    """The sizes a calibration's held-out error was judged on (the decision bands it states an error for): an op
    of another size was never judged, so the calibration does not price it (commprof.costmodel.simulate)."""

    bands: tuple[tuple[int, int, str], ...]  # (low, high, name), bytes: low <= size < high

    def covers(self, nbytes: int) -> bool:
        return any(low <= nbytes < high for low, high, _ in self.bands)

    def describe(self) -> str:
        low, high = min(b[0] for b in self.bands), max(b[1] for b in self.bands)
        return f"{_size(low)}-{_size(high - 1)}" if len(self.bands) > 1 else self.bands[0][2]

    def to_list(self) -> list[int]:
        """[low, high) of its span, bytes."""
        return [min(b[0] for b in self.bands), max(b[1] for b in self.bands)]


def _size(nbytes: int) -> str:
    for unit, shift in (("MB", 20), ("KB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def judged_sizes(fit: dict) -> JudgedSizes | None:
    """The bands a calibration states its error for; None where it states none (its error is unknown, so nothing
    it predicts counts)."""
    stated = set(fit.get("band_names") or ())
    bands = tuple(band for band in DECISION_BANDS if band[2] in stated)
    return JudgedSizes(bands) if bands else None


@dataclass(frozen=True)
class Pricing:
    """Which model prices an NCCL op of a calibrated simulation: the calibration inside the sizes it was judged
    on, the prior (NCCL's uncalibrated model, with its error) outside them."""

    calibrated: CostParams
    prior: CostParams
    judged: JudgedSizes | None  # None: no calibration, or one judged on no band (the calibration prices all)
    prior_error: ModelError

    def params(self, nbytes: int) -> CostParams:
        return self.prior if self.outside(nbytes) else self.calibrated

    def outside(self, nbytes: int) -> bool:
        return self.judged is not None and not self.judged.covers(nbytes)

    def note(self, count: int, sizes: list[int]) -> dict:
        """The record's account of its ops outside the calibrated sizes."""
        assert self.judged is not None
        return {
            "label": OUTSIDE,
            "judged": self.judged.describe(),
            "judged_bytes": self.judged.to_list(),
            "ops": count,
            "sizes": sizes[:32],
            "expected_error_pct": self.prior_error.pct,
            "error_basis": f"priced by NCCL's uncalibrated model: {self.prior_error.basis}",
        }


def covering(priced: list[tuple[float, float | None]]) -> float | None:
    """The expected error of a step from its NCCL ops' (time, error %) pairs, each error the calibration's or the
    prior's: a sum of times each off by at most its error is off by at most their time-weighted mean, so that
    covers every op's; unknown if any op's is."""
    if any(error is None for _, error in priced):
        return None
    total = sum(time for time, _ in priced)
    if total <= 0:
        return max((error for _, error in priced), default=None)
    return round(sum(time * error for time, error in priced) / total, 1)
