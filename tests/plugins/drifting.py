"""An all-reduce that gets slower as the run goes on: a box drifting under the sweep, for the drift-checked A/B."""

import os
import time
from pathlib import Path

import torch.distributed as dist

from commprof.impls.base import AllReduceImpl

# The test sets both: a file that holds when the drift started (written by the first all-reduce that finds it
# absent) and how fast each all-reduce slows, µs per second since then.
EPOCH_FILE_VARIABLE = "COMMPROF_TEST_DRIFT_EPOCH_FILE"
RATE_VARIABLE = "COMMPROF_TEST_DRIFT_US_PER_S"


def _epoch() -> float:
    path = Path(os.environ[EPOCH_FILE_VARIABLE])
    try:
        with open(path, "x") as out:  # the first caller, on any rank, starts the clock
            out.write(repr(time.time()))
    except FileExistsError:
        pass
    for _ in range(100):  # a peer may be between creating the file and writing it
        text = path.read_text()
        if text:
            return float(text)
        time.sleep(0.001)
    return time.time()


class Drifting(AllReduceImpl):
    """gloo's all-reduce after a real sleep that grows with the time since the epoch; `variant` only names points
    that are the same code."""

    name = "drifting"
    option_kinds = {"variant": ("a", "b", "c")}

    def all_reduce(self, x):
        elapsed = max(time.time() - _epoch(), 0.0)
        time.sleep(elapsed * float(os.environ[RATE_VARIABLE]) / 1e6)
        dist.all_reduce(x, group=self.group)
        return x
