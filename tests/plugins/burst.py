"""A gloo all-reduce whose baseline is caught in a load burst: the first measurement of a point that sets no
COMMPROF_KNOB sleeps on every all-reduce, as a box does under a neighbour's job; every later measurement (the
knobs', and the baseline's again) runs at the box's own speed. Nothing reads COMMPROF_KNOB: a no-op variable."""

import os
import time
from pathlib import Path

import torch.distributed as dist

from commprof.impls.base import AllReduceImpl

# The test sets it: a folder the burst leaves a marker in once the first measurement of the baseline has ended,
# holding the seconds rank 0 slept (what the burst added to the run's time).
BURST_DIR_VARIABLE = "COMMPROF_TEST_BURST_DIR"
BURST_S = 0.01  # per all-reduce: a step of a few all-reduces takes several times longer, far beyond a busy box's noise


class Burst(AllReduceImpl):
    name = "burst"

    def setup(self, group, plan, device):
        super().setup(group, plan, device)
        self.marker = Path(os.environ[BURST_DIR_VARIABLE]) / "baseline-measured"
        self.bursting = "COMMPROF_KNOB" not in os.environ and not self.marker.exists()
        self.slept = 0.0

    def all_reduce(self, x):
        if self.bursting:
            time.sleep(BURST_S)
            self.slept += BURST_S
        dist.all_reduce(x, group=self.group)
        return x

    def teardown(self):
        if self.bursting and dist.get_rank(self.group) == 0:
            self.marker.write_text(repr(self.slept))
