"""How far the baseline moved over a run: its measurements (the first, and the sweep's repeats at intervals and
at the end, `[run] baseline_every`) in time order, and the band they span, which every gain must exceed. Pure.

A gain judged inside one run is only as good as the box was steady: the same gloo baseline has measured 21.7 ms
and 150 ms within 25 minutes. Each measurement's step time is summed over the run's T (as the ranking sums
them), so one band covers the whole answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from commprof.evidence import measurement_total, spread_pct

# Beyond this band the run says so on its first screen: its verdicts rest on a box that did not hold still.
DRIFT_LIMIT_PCT = 10.0


@dataclass(frozen=True)
class BaselineDrift:
    """The baseline's measurements over the run and their band."""

    mode: str
    samples: tuple[dict[str, Any], ...] = field(default=())  # {"time", "total_us", "repeat"} in time order
    limit_pct: float = DRIFT_LIMIT_PCT

    @property
    def band_pct(self) -> float | None:
        """(slowest - fastest) / fastest of the baseline's measurements, %; None: measured once."""
        return spread_pct([s["total_us"] for s in self.samples])

    @property
    def exceeded(self) -> bool:
        return self.band_pct is not None and self.band_pct > self.limit_pct

    def sentence(self) -> str:
        band = self.band_pct
        if band is None:
            return "the baseline was measured once: drift over the run is unknown (set [run] baseline_every)"
        text = (
            f"the baseline moved by {band:.1f} % over the run ({len(self.samples)} measurements, {self.mode} "
            f"mode); a gain counts only beyond that"
        )
        if self.exceeded:
            text = (
                f"BASELINE DRIFT: {text}. Above the {self.limit_pct:g} % limit: the box did not hold still; "
                "find what else runs on it and measure again"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "band_pct": self.band_pct,
            "limit_pct": self.limit_pct,
            "exceeded": self.exceeded,
            "samples": list(self.samples),
            "sentence": self.sentence(),
        }


def _total(records: list[dict[str, Any]], mode: str, tokens: set[int]) -> tuple[str, float] | None:
    """(time, step median summed over T) of one measurement of the baseline; None unless every T is ok."""
    total = measurement_total(records, mode, tokens)
    if total is None:
        return None
    return max(str(r.get("time") or "") for r in records if r.get("tokens") in tokens), total[0]


def baseline_drift(
    first: list[dict[str, Any]], repeats: list[dict[str, Any]], mode: str, tokens: set[int]
) -> BaselineDrift | None:
    """The baseline's drift in `mode` over the T values `tokens`: `first` holds its first measurement's step
    records, `repeats` those of its re-measurements (each tagged with its "repeat" number in point.repeat).
    None: the run has no repeats of it."""
    if not repeats:
        return None
    samples = []
    measured = _total(first, mode, tokens)
    if measured is not None:
        samples.append({"time": measured[0], "total_us": measured[1], "repeat": 0})
    by_repeat: dict[int, list[dict[str, Any]]] = {}
    for record in repeats:
        by_repeat.setdefault(int((record.get("point") or {}).get("repeat", 0)), []).append(record)
    for number, records in sorted(by_repeat.items()):
        measured = _total(records, mode, tokens)
        if measured is not None:
            samples.append({"time": measured[0], "total_us": measured[1], "repeat": number})
    samples.sort(key=lambda s: (s["time"], s["repeat"]))
    return BaselineDrift(mode, tuple(samples))
