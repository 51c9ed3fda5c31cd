"""What a replay runs between collectives, and when each rank arrives at one: the harness's spacers and arrival stamps.

`Spacer.before(i)` runs, on this rank, the compute before op i (commprof.planner.spacing) and then this rank's
lateness. On CUDA both are kernels on the current stream, so they are captured into the step's graph like the
collectives: a spin kernel calibrated to µs (torch.cuda._sleep counts GPU clock cycles) or the layer's GEMMs. On
CPU ranks, a busy loop of the same length on the host that yields its core at every turn (the cores are shared
with gloo's threads and the other ranks), or the same GEMMs on the CPU.

`Arrivals` stamps when this rank reaches each collective on a clock every rank of the machine shares: the host's
CLOCK_MONOTONIC for CPU ranks, the GPU's %globaltimer (nanoseconds, driver-synchronised across the GPUs of one
host) read by a one-thread Triton kernel on CUDA; `None` where no shared clock is available.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from typing import Any

import torch

from commprof.planner.plan import StepPlan
from commprof.planner.spacing import ComputeSpec, SkewSpec, gemm_shapes
from commprof.replay.replay_tensors import TORCH_DTYPES
from commprof.replay.timing import sleep_cycles_per_us

HOST_CLOCK = "host_monotonic"
DEVICE_CLOCK = "cuda_globaltimer"


# A yield that returns this much later gave the core to another process for a time slice, not to one of this
# rank's threads (gloo's run for µs): the wait then spins on without yielding, or it would lose slice after slice.
_FOREIGN_SLICE_NS = 200_000


def busy_wait_us(us: float) -> None:
    """Hold this host thread for `us` µs, to the µs (perf_counter_ns: CLOCK_MONOTONIC on Linux), yielding the
    core at every turn of the loop until a yield hands it to another process.

    Neither a sleep nor a plain spin: a thread that sleeps gives its core up (to idle, or to another process)
    and gloo's transport threads then wake late, on every collective after a gap; a plain spin holds the core
    from them. On 2 gloo ranks on 2 shared cores, step - compute exceeded the no-compute step by 1.5-2.5 ms
    (sleep, then spin) and ~5 ms (spin), and by -0.4 to +0.5 ms with the yielding loop.
    """
    now = time.perf_counter_ns()
    end = now + int(us * 1000)
    yielding = True
    while now < end:
        if yielding:
            os.sched_yield()
            after = time.perf_counter_ns()
            yielding = after - now < _FOREIGN_SLICE_NS
            now = after
        else:
            now = time.perf_counter_ns()


class Spacer:
    """This rank's work before each op of one plan: compute (timed on its own by the harness) and lateness."""

    def __init__(
        self,
        plan: StepPlan,
        compute: ComputeSpec,
        skew: SkewSpec,
        rank: int,
        device: torch.device,
        intermediate: int | None = None,
    ):
        self.device = device
        self.compute_us = compute.gaps_us(plan)
        self.lag_us = skew.lags_us(plan, rank) if skew.active else [0.0] * len(plan.ops)
        self.gemms: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None] = []
        if compute.kind == "gemm":
            dtype = TORCH_DTYPES[plan.model.dtype]
            for shapes in gemm_shapes(plan, intermediate):
                self.gemms.append(None if shapes is None else _gemm_buffers(shapes, dtype, device))
        self.cycles_per_us = sleep_cycles_per_us() if device.type == "cuda" and self.active else 0.0

    @property
    def has_compute(self) -> bool:
        return any(self.compute_us) or any(g is not None for g in self.gemms)

    @property
    def active(self) -> bool:
        return self.has_compute or any(self.lag_us)

    def compute(self, index: int) -> None:
        """The compute before op `index`."""
        if self.gemms and self.gemms[index] is not None:
            a, w_up, hidden, w_down = self.gemms[index]
            torch.mm(a, w_up, out=hidden)
            torch.mm(hidden, w_down, out=a)
        elif self.compute_us[index]:
            self._spin(self.compute_us[index])

    def before(self, index: int) -> None:
        """Everything this rank does before it issues op `index`: the gap's compute, then its lateness."""
        self.compute(index)
        if self.lag_us[index]:
            self._spin(self.lag_us[index])

    def _spin(self, us: float) -> None:
        if self.device.type == "cuda":
            torch.cuda._sleep(max(int(round(us * self.cycles_per_us)), 1))
        else:
            busy_wait_us(us)


def _gemm_buffers(shapes, dtype, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Activations [rows, hidden], up-projection weight, its output [rows, I/TP] and down-projection weight.

    Values are small and bounded (the down projection writes back into the activations every step)."""
    (rows, hidden), (_, inner) = shapes
    a = torch.full((rows, hidden), 0.01, dtype=dtype, device=device)
    w_up = torch.full((hidden, inner), 1.0 / hidden, dtype=dtype, device=device)
    mid = torch.empty((rows, inner), dtype=dtype, device=device)
    w_down = torch.full((inner, hidden), 1.0 / inner, dtype=dtype, device=device)
    return a, w_up, mid, w_down


class HostArrivals:
    """CPU ranks: CLOCK_MONOTONIC, one clock for every process of the machine, in ns."""

    kind = HOST_CLOCK
    offsets = False  # one clock: no rank's stamps are offset from another's

    def __init__(self, ops: int):
        self.stamps = [0] * (ops + 1)  # one per op, then the step's reference

    def stamp(self, index: int) -> None:
        self.stamps[index] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)

    def stamp_reference(self) -> None:
        """The step's reference: when this rank left the step's aligning collective."""
        self.stamp(len(self.stamps) - 1)

    def read(self) -> list[int]:
        """The ops' stamps, then the reference."""
        return list(self.stamps)


class DeviceArrivals:
    """CUDA: a one-thread kernel writes %globaltimer (ns) into slot i when the stream reaches op i."""

    kind = DEVICE_CLOCK
    offsets = True  # each GPU's timer: a constant offset between GPUs is possible

    def __init__(self, ops: int, device: torch.device):
        self.kernel = globaltimer_kernel()
        self.buffer = torch.zeros(ops + 1, dtype=torch.int64, device=device)  # one per op, then the reference

    def stamp(self, index: int) -> None:
        self.kernel[(1,)](self.buffer, index)

    def stamp_reference(self) -> None:
        """The step's reference: when the stream leaves the step's aligning collective (the same moment on
        every GPU)."""
        self.stamp(self.buffer.numel() - 1)

    def read(self) -> list[int]:
        """The ops' stamps, then the reference (synchronises with the stream)."""
        return self.buffer.tolist()


@functools.cache
def globaltimer_kernel() -> Any:
    """The Triton kernel that stores %globaltimer at out[index]; ImportError without Triton."""
    import triton
    import triton.language as tl

    @triton.jit
    def stamp_globaltimer(out, index):
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        tl.store(out + index, now)

    return stamp_globaltimer


def make_arrivals(ops: int, device: torch.device) -> tuple[HostArrivals | DeviceArrivals | None, str | None]:
    """This rank's arrival clock, or None and why not."""
    if device.type != "cuda":
        return HostArrivals(ops), None
    try:
        arrivals = DeviceArrivals(ops, device)
        arrivals.stamp(0)  # compiles the kernel now, never inside a timed step
        torch.cuda.synchronize(device)
        return arrivals, None
    except Exception as exc:  # no Triton, or no compiler for this GPU: waiting is then not measured
        return None, f"not measured: no %globaltimer reader on this GPU ({type(exc).__name__}: {str(exc)[:200]})"


def wait_per_step(arrivals: list[list[list[int]]], offsets: bool) -> list[float]:
    """Per step, the time the first rank to reach each op waited for the last, summed over ops, µs.

    `arrivals[rank][step]`: ns, the ops' stamps then the step's reference (stamped as the step's aligning
    collective ended, the same moment on every rank). With `offsets` (a clock per rank), each rank's offset from
    rank 0, the median over steps of their references' difference, is taken off its stamps first: a constant
    offset between the ranks' clocks adds no waiting, and one step's jitter at the reference moves no step. Pure."""
    ranks, steps = len(arrivals), len(arrivals[0])
    shift = [0.0] * ranks
    if offsets:
        shift = [statistics.median(arrivals[r][s][-1] - arrivals[0][s][-1] for s in range(steps)) for r in range(ranks)]
    out = []
    for step in range(steps):
        total = 0.0
        for op in range(len(arrivals[0][step]) - 1):
            times = [arrivals[r][step][op] - shift[r] for r in range(ranks)]
            total += max(times) - min(times)
        out.append(total / 1000.0)
    return out
