"""The crossover search: where an implementation starts beating the baseline, found with few measured sizes. Pure.

Per implementation and mode (graph and eager apart): measure sizes from 1 KiB to 1 MiB by powers of two plus
the plan's own sizes, then bisect between the last win and the first loss around the crossover until the gap
is one step. A size is a win when the implementation's time is below the baseline's, each time the max over
ranks of the min over rounds; the crossover is the start of a sustained run of wins (at least two consecutive
measured sizes), so one lucky size does not move it. The search asks a `measure(impl, sizes)` callable for
times and returns what it measured and found, with its cost in sizes measured and calls made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from commprof.evidence import sustained_runs, sustained_start

KIB = 1024
POWERS = tuple(KIB << k for k in range(11))  # 1 KiB .. 1 MiB
STEP_BYTES = KIB  # bisection stops when the last win and the first loss are this close

# (implementation, sizes) -> {size: (implementation µs, baseline µs)}
Measure = Callable[[str, list[int]], dict[int, tuple[float, float]]]


@dataclass
class Crossover:
    """One implementation's search in one mode: every size measured, and what they say."""

    impl: str
    mode: str
    times: dict[int, tuple[float, float]] = field(default_factory=dict)  # size -> (impl µs, baseline µs)
    rounds: int = 0  # measure() calls (each a fresh set of processes in a sweep)

    def wins(self) -> dict[int, bool]:
        return {size: impl < base for size, (impl, base) in sorted(self.times.items())}

    @property
    def crossover_bytes(self) -> int | None:
        """The first size of the first sustained run of wins (None: no such run)."""
        return sustained_start(self.wins())

    @property
    def winning_sizes(self) -> list[tuple[int, int]]:
        """Contiguous (first, last) measured sizes of every sustained winning run."""
        return sustained_runs(self.wins())

    def to_dict(self) -> dict:
        return {
            "impl": self.impl,
            "mode": self.mode,
            "crossover_bytes": self.crossover_bytes,
            "winning_sizes": [list(run) for run in self.winning_sizes],
            "sizes_measured": len(self.times),
            "rounds": self.rounds,
            "times": {str(s): {"impl_us": a, "baseline_us": b} for s, (a, b) in sorted(self.times.items())},
        }


def powers(low: int = POWERS[0], high: int = POWERS[-1]) -> list[int]:
    """Powers of two from the first at or above `low` to `high`."""
    size = 1 << max(int(low) - 1, 0).bit_length()
    out = []
    while size <= high:
        out.append(size)
        size <<= 1
    return out


def initial_sizes(plan_sizes: Iterable[int] = (), low: int = POWERS[0], high: int = POWERS[-1]) -> list[int]:
    """Powers of two from `low` to `high` (1 KiB to 1 MiB) plus the plan's own sizes, in order."""
    return sorted(set(powers(low, high)) | {int(s) for s in plan_sizes if s > 0})


def next_sizes(wins: dict[int, bool], step: int = STEP_BYTES) -> list[int]:
    """Sizes to measure next: the midpoint of every win/loss boundary wider than `step` (rounded to `step`)."""
    ordered = sorted(wins.items())
    wanted = []
    for (low, low_won), (high, high_won) in zip(ordered, ordered[1:]):
        if low_won != high_won and high - low > step:
            mid = (low + high) // 2 // step * step
            if low < mid < high:
                wanted.append(mid)
    return wanted


@dataclass(frozen=True)
class SearchBounds:
    """How far one search goes: the powers of two it starts from, and how finely and how long it bisects."""

    low: int = POWERS[0]  # the smallest power of two measured first
    high: int = POWERS[-1]  # the largest
    step: int = STEP_BYTES  # bisection stops when the last win and the first loss are this close
    max_rounds: int = 16  # measure() calls at most

    @classmethod
    def of(cls, stage) -> SearchBounds:
        """A sweep file's [[stages]] crossover stage's bounds (a CrossoverStage)."""
        return cls(stage.min_bytes, stage.max_bytes, stage.step_bytes, stage.max_rounds)


def search(
    impl: str, mode: str, measure: Measure, plan_sizes: Iterable[int] = (), bounds: SearchBounds | None = None
) -> Crossover:
    """Powers of two and the plan's sizes, then bisect every boundary until each is `bounds.step` wide. A size
    that gave no time (it failed) is not asked for again."""
    bounds = bounds or SearchBounds()
    result = Crossover(impl, mode)
    sizes = initial_sizes(plan_sizes, bounds.low, bounds.high)
    tried: set[int] = set()
    while sizes and result.rounds < bounds.max_rounds:
        tried.update(sizes)
        result.times.update(measure(impl, sizes))
        result.rounds += 1
        sizes = [s for s in next_sizes(result.wins(), bounds.step) if s not in tried]
    return result


def exhaustive(impl: str, mode: str, measure: Measure, sizes: Iterable[int]) -> Crossover:
    """Every size at once (what the search saves): the reference its cost is compared with."""
    result = Crossover(impl, mode)
    result.times.update(measure(impl, sorted(set(sizes))))
    result.rounds = 1
    return result


def exhaustive_sizes(searched: Crossover, step: int = STEP_BYTES) -> list[int]:
    """The sizes an exhaustive sweep at the search's resolution measures: every step up to the largest searched."""
    top = max(searched.times)
    return sorted({*range(step, top + 1, step), *searched.times})
