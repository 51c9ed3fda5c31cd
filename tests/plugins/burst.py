"""A gloo all-reduce of a fixed cost (a sleep of STEP_S each, as a GPU's is: the box's CPU load hardly moves it),
whose baseline is caught in a load burst: where the test names a burst folder, the first measurement of a point
that sets no COMMPROF_KNOB sleeps BURST_S more on every all-reduce, as a box does under a neighbour's job; every
later measurement (the knobs', and the baseline's again) runs at the box's own speed. Nothing reads
COMMPROF_KNOB: a no-op variable."""

import os
import time
from pathlib import Path

import torch.distributed as dist

from commprof.impls.base import AllReduceImpl

# The test sets it: a folder the burst leaves a marker in once the first measurement of the baseline has ended,
# holding the seconds rank 0 slept (what the burst added to the run's time).
BURST_DIR_VARIABLE = "COMMPROF_TEST_BURST_DIR"
STEP_S = 0.005  # per all-reduce, always: the step is mostly this sleep, as a GPU step is its kernels
BURST_S = 0.01  # per all-reduce in the burst: a step takes several times longer, far beyond a busy box's noise


class Burst(AllReduceImpl):
    name = "burst"

    def setup(self, group, plan, device):
        super().setup(group, plan, device)
        folder = os.environ.get(BURST_DIR_VARIABLE)
        self.marker = Path(folder) / "baseline-measured" if folder else None
        self.bursting = bool(folder) and "COMMPROF_KNOB" not in os.environ and not self.marker.exists()
        self.slept = 0.0

    def all_reduce(self, x):
        time.sleep(STEP_S)
        if self.bursting:
            time.sleep(BURST_S)
            self.slept += BURST_S
        dist.all_reduce(x, group=self.group)
        return x

    def teardown(self):
        if self.bursting and dist.get_rank(self.group) == 0:
            self.marker.write_text(repr(self.slept))


class Calm(Burst):
    """Another implementation of the same all-reduce, at the same fixed cost, never in a burst: beside a reference
    caught in its burst it looks faster (a route winner of the first pass only)."""

    name = "calm"

    def setup(self, group, plan, device):
        super().setup(group, plan, device)
        self.bursting = False
