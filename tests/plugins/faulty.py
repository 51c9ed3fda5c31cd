"""Fault-injecting all-reduce implementations for the harness and sweep tests."""

import os
import subprocess
import time

import torch.distributed as dist

from commprof.impls.base import AllReduceImpl


class WrongOnRank1(AllReduceImpl):
    """Rank 1 contributes a wrong value: the exact-reduction check must catch it."""

    name = "wrong-on-rank1"

    def all_reduce(self, x):
        if dist.get_rank(self.group) == 1:
            x.add_(1)
        dist.all_reduce(x, group=self.group)
        return x


class SilentNoOp(AllReduceImpl):
    """Returns without reducing, like vLLM's custom all-reduce on PCIe at world size > 2."""

    name = "silent-no-op"

    def all_reduce(self, x):
        return x


class Hang(AllReduceImpl):
    """Never returns: the sweep must time the point out and go on."""

    name = "hang"

    def all_reduce(self, x):
        while True:
            time.sleep(1)


class HangsUntilReleased(AllReduceImpl):
    """Never returns until the file named by COMMPROF_TEST_RELEASE exists, then reduces: a point a test stops the
    sweep in, and a resume then measures."""

    name = "hangs-until-released"

    def all_reduce(self, x):
        while not os.path.exists(os.environ["COMMPROF_TEST_RELEASE"]):
            time.sleep(0.1)
        dist.all_reduce(x, group=self.group)
        return x


class Crash(AllReduceImpl):
    """Aborts the worker on rank 1: the sweep must record "crashed" with the signal."""

    name = "crash"

    def all_reduce(self, x):
        if dist.get_rank(self.group) == 1:
            os.abort()
        dist.all_reduce(x, group=self.group)
        return x


class NotAnImpl:
    """Does not follow the interface."""


class NaNOnRank0(AllReduceImpl):
    """Rank 0 returns a NaN in the first row, like a custom all-reduce reading an unwritten buffer."""

    name = "nan-on-rank0"

    def all_reduce(self, x):
        dist.all_reduce(x, group=self.group)
        if dist.get_rank(self.group) == 0:
            x.view(-1)[0] = float("nan")
        return x


class LeavesADaemon(AllReduceImpl):
    """Starts a helper in a session of its own at setup and never stops it: the point must end it anyway."""

    name = "leaves-a-daemon"

    def setup(self, group, plan, device):
        super().setup(group, plan, device)
        helper = subprocess.Popen(["sleep", "600"], start_new_session=True)
        with open(os.environ["COMMPROF_TEST_PIDS"], "a") as pids:
            pids.write(f"{helper.pid}\n")

    def all_reduce(self, x):
        dist.all_reduce(x, group=self.group)
        return x


class WrongAndLateOnRank1(AllReduceImpl):
    """From the second size it reduces on, rank 1 returns a wrong sum and reaches the ranks' agreement on the check
    seconds late (its exact check, run right after the step's last collective, is slowed)."""

    name = "wrong-and-late-on-rank1"
    late_s = 2.0

    def setup(self, group, plan, device):
        from commprof.replay.replay_tensors import StepTensors

        super().setup(group, plan, device)
        self.sizes_seen: list[int] = []
        self.late = False
        verify, impl = StepTensors.verify, self

        def late_verify(tensors, eps):
            if impl.late:
                impl.late = False
                time.sleep(impl.late_s)
            return verify(tensors, eps)

        StepTensors.verify = late_verify  # this worker process only

    def all_reduce(self, x):
        dist.all_reduce(x, group=self.group)
        if x.numel() not in self.sizes_seen:
            self.sizes_seen.append(x.numel())
        if len(self.sizes_seen) > 1 and dist.get_rank(self.group) == 1:
            x.add_(1)
            self.late = True
        return x


class DropsRank0(AllReduceImpl):
    """Rank 0's contribution never reaches the sum (every other rank's does): off by at most the pattern's
    largest value times one, which a tolerance scaled by the ranks would let through."""

    name = "drops-rank0"

    def all_reduce(self, x):
        if dist.get_rank(self.group) == 0:
            x.zero_()
        dist.all_reduce(x, group=self.group)
        return x


class DoublesRank1(AllReduceImpl):
    """Rank 1's contribution counts twice."""

    name = "doubles-rank1"

    def all_reduce(self, x):
        if dist.get_rank(self.group) == 1:
            x.mul_(2)
        dist.all_reduce(x, group=self.group)
        return x


class StaleOutput(AllReduceImpl):
    """Out of place; from its second call on each input it returns a copy of the sum it computed on the call
    before (a kernel reading its own stale buffer): right on the first step, one step behind after."""

    name = "stale-output"

    def setup(self, group, plan, device):
        super().setup(group, plan, device)
        self.previous = {}

    def all_reduce(self, x):
        out = x.clone()
        dist.all_reduce(out, group=self.group)
        before = self.previous.get(x.data_ptr())
        self.previous[x.data_ptr()] = out
        return out if before is None else before.clone()


class IdleOutput(AllReduceImpl):
    """Out of place into a buffer of its own per input, written on the first call only, then handed back
    unwritten (a kernel that stopped communicating): the buffer the harness poisoned keeps its NaN."""

    name = "idle-output"

    def setup(self, group, plan, device):
        super().setup(group, plan, device)
        self.buffers = {}

    def all_reduce(self, x):
        buffer = self.buffers.get(x.data_ptr())
        if buffer is None:
            buffer = self.buffers[x.data_ptr()] = x.clone()
            dist.all_reduce(buffer, group=self.group)
        return buffer
