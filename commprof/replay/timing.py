"""How the harness reads time: a start aligned across ranks, then stamps that cost the timed work nothing extra.

Two clocks with one interface (align, stamp, wait, elapsed_us), so the harness runs the same timing loop on
GPUs and on CPU ranks:

- `DeviceClock` (CUDA): `align()` enqueues, with no host wait, an all-reduce of one number and then a short
  spin kernel; the start event recorded next fires on every rank when its device leaves that spin. The
  all-reduce's kernels end together on all ranks, so host skew (which rank left its last wait first) is
  absorbed on the device before the start, and the spin keeps the device busy while the host enqueues the
  first ops, so the step never starts from an idle queue.
- `HostClock` (CPU ranks): a host barrier, then a monotonic clock.

docs/timing.md sets the method beside nccl-tests'.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

# Long enough for the host to enqueue the start event and the step's first ops after the aligning
# all-reduce (tens of µs), short against a step of a hundred-odd collectives.
START_DELAY_US = 50.0
# torch.cuda._sleep spins for a number of GPU clock cycles; calibrated against events after a warm-up spin, repeated,
# keeping the most cycles per µs: an idle GPU's low clock (an H200 idles at 345 MHz) and another process's time
# slice on a shared GPU only lower the ratio, and a low ratio makes every later spin short.
_CALIBRATION_CYCLES = 2_000_000
_CALIBRATION_REPEATS = 8
_WARM_UP_CYCLES = 4 * _CALIBRATION_CYCLES


class HostClock:
    """CPU ranks: `align()` is a barrier on the process group, stamps read time.perf_counter_ns()."""

    kind = "cpu_clock"

    def __init__(self, group: dist.ProcessGroup):
        self.group = group

    def align(self) -> None:
        dist.barrier(group=self.group)

    def stamp(self) -> int:
        return time.perf_counter_ns()

    def wait(self, stamp: Any) -> None:
        """The host clock's stamps are taken when the work is done: nothing to wait for."""

    def elapsed_us(self, start: int, end: int) -> float:
        return (end - start) / 1000.0


class DeviceClock:
    """CUDA ranks: the start aligned on the device, then CUDA events on the current stream.

    `stamps` events are created once (creating them between ops would add host time) and reused every step.
    """

    kind = "cuda_events"

    def __init__(self, group: dist.ProcessGroup, device: torch.device, stamps: int, start_delay_us: float):
        self.group = group
        self.flag = torch.zeros(1, dtype=torch.float32, device=device)
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(stamps)]
        self.delay_cycles = round(start_delay_us * sleep_cycles_per_us()) if start_delay_us > 0 else 0
        self.used = 0

    def align(self) -> None:
        """Enqueue the aligning all-reduce and the spin; the host does not wait for either."""
        dist.all_reduce(self.flag, group=self.group)
        if self.delay_cycles:
            torch.cuda._sleep(self.delay_cycles)
        self.used = 0

    def stamp(self) -> torch.cuda.Event:
        event = self.events[self.used]
        self.used += 1
        event.record()
        return event

    def wait(self, stamp: torch.cuda.Event) -> None:
        stamp.synchronize()

    def elapsed_us(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end) * 1000.0  # elapsed_time is in ms


def sleep_cycles_per_us() -> float:
    """GPU clock cycles per µs of torch.cuda._sleep on the current device: the most over repeated event-timed
    spins after a warm-up spin."""
    torch.cuda._sleep(_WARM_UP_CYCLES)  # raise the clocks from idle first
    best = 0.0
    for _ in range(_CALIBRATION_REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(_CALIBRATION_CYCLES)
        end.record()
        end.synchronize()
        best = max(best, _CALIBRATION_CYCLES / max(start.elapsed_time(end) * 1000.0, 1e-3))
    return best


def make_clock(group: dist.ProcessGroup, device: torch.device, stamps: int, start_delay_us: float):
    """The clock for `device`: events with a device-aligned start on CUDA, the host clock elsewhere."""
    if device.type == "cuda":
        return DeviceClock(group, device, stamps, start_delay_us)
    return HostClock(group)
