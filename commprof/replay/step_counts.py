"""How many steps the harness runs for one T in one mode: one home for the counts the replay runs
(commprof/replay/harness.py) and the dry run's estimate adds up (commprof/sweep/planning/dryrun.py). Pure."""

from __future__ import annotations

PROFILED_STEPS = 3  # steps in each trace of the profiling pass, after one step that warms the profiler up


def per_op_warmup(warmup: int) -> int:
    """Warm-up steps of the per-op pass (and of the compute-only pass): one where the timed pass has any."""
    return min(1, warmup)


def steps_per_mode(iterations: int, warmup: int) -> int:
    """Steps one (T, mode) runs: the first step, checked; the timed pass's warm-up and timed steps (its last checked
    too); the per-op pass's warm-up and timed steps."""
    return 1 + warmup + iterations + per_op_warmup(warmup) + iterations


def compute_steps(iterations: int, warmup: int) -> int:
    """Compute-only steps of one (T, mode) where compute runs between collectives (time_compute)."""
    return per_op_warmup(warmup) + iterations
