"""The simplest model a calibration must beat: one latency and one bandwidth, time = intercept + bytes x slope.

Fitted by least squares on relative error (each sample's residual divided by its time), so a 10 % miss at 8 KB
weighs as much as one at 1 MB, as the cost model's fit does. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

import numpy as np


@dataclass(frozen=True)
class Line:
    """time_us = intercept_us + bytes x us_per_byte, for one collective at one rank count."""

    intercept_us: float
    us_per_byte: float

    def time_us(self, nbytes: int) -> float:
        return self.intercept_us + self.us_per_byte * nbytes

    @property
    def gbps(self) -> float | None:
        """The line's bandwidth, GB/s (None: flat)."""
        return 1e-3 / self.us_per_byte if self.us_per_byte > 0 else None


def fit_line(sizes: list[int], times_us: list[float]) -> Line:
    """The line through (bytes, µs) with the least squared relative error; neither term negative."""
    x = np.asarray(sizes, dtype=float)
    t = np.asarray(times_us, dtype=float)
    if len(x) < 2 or len(set(sizes)) < 2:
        return Line(float(np.median(t)) if len(t) else 0.0, 0.0)
    coef, *_ = np.linalg.lstsq(np.stack([1.0 / t, x / t], axis=1), np.ones_like(t), rcond=None)
    intercept, slope = float(coef[0]), float(coef[1])
    if slope < 0:  # no bandwidth can be negative: the best flat line
        return Line(float(1.0 / np.mean(1.0 / t)), 0.0)
    if intercept < 0:  # nor a latency: the best line through the origin
        return Line(0.0, float(np.sum(x / t) / np.sum((x / t) ** 2)))
    return Line(intercept, slope)


def median_abs_pct(line: Line, sizes: list[int], times_us: list[float]) -> float:
    return median(100.0 * abs(line.time_us(b) - t) / t for b, t in zip(sizes, times_us))
