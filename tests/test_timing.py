"""The timing method on CPU: two stamps per eager step, the per-op breakdown in its own pass, a stall before
the aligning barrier kept out of the step (real gloo ranks), and the CUDA clock's call order pinned with
stand-ins bound against torch's signatures."""

import inspect
import time

import pytest
import torch

from commprof.replay import timing
from tests.distributed import run_ranks


class Recording:
    """Wraps a clock: records "align" and "stamp" calls; optionally stalls one rank before aligning."""

    def __init__(self, clock, stall_s: float = 0.0):
        self.clock, self.stall_s, self.calls = clock, stall_s, []
        self.kind = clock.kind

    def align(self):
        time.sleep(self.stall_s)
        self.calls.append("align")
        self.clock.align()

    def stamp(self):
        self.calls.append("stamp")
        return self.clock.stamp()

    def wait(self, stamp):
        self.clock.wait(stamp)

    def elapsed_us(self, a, b):
        return self.clock.elapsed_us(a, b)


def stamps_per_step(calls: list[str]) -> list[int]:
    steps = "".join("|" if c == "align" else "s" for c in calls).split("|")[1:]
    return [len(s) for s in steps]


def _replay(rank, world_size, stall_on_rank_1_s):
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import build_step_plan
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    plan = build_step_plan(ModelShape("tiny", 3, 64, 256, "bfloat16", "test"), world_size, 2)
    impl = load_impl("gloo")()
    impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
    replay = StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), ReplayConfig(iterations=4, warmup=2))
    replay.clock = Recording(replay.clock, stall_on_rank_1_s if rank == 1 else 0.0)
    result = replay_mode(replay, "eager").to_dict()
    return result, replay.clock.calls, len(plan.ops)


@pytest.mark.processes
def test_eager_steps_take_two_stamps_and_the_breakdown_its_own_pass():
    result, calls, ops = run_ranks(_replay, 2, (0.0,))[0]
    assert result["status"] == "ok" and result["timing"] == "cpu_clock"
    # 2 warm-up + 4 timed steps with a start and an end stamp; then 1 warm-up + 4 steps stamped after each op.
    assert stamps_per_step(calls) == [2] * 6 + [ops + 1] * 5
    assert result["step_us"]["n"] == 4 and len(result["op_us"]["median"]) == ops


@pytest.mark.processes
def test_a_rank_late_to_the_barrier_does_not_add_its_lateness_to_the_step():
    stall = 0.25
    result, _, _ = run_ranks(_replay, 2, (stall,))[0]
    assert result["status"] == "ok"
    # Each step waits 250 ms for rank 1 before the start: none of it may be inside the step.
    assert result["step_us"]["median"] < stall * 1e6 / 2, result["step_us"]


# --- the CUDA clock, with stand-ins ----------------------------------------------------------------------


class FakeEvent:
    log: list = []

    def __init__(self, enable_timing=False):
        inspect.signature(torch.cuda.Event).bind(enable_timing=enable_timing)
        assert enable_timing

    def record(self, stream=None):
        FakeEvent.log.append("record")

    def synchronize(self):
        FakeEvent.log.append("synchronize")

    def elapsed_time(self, end):
        return 1.0  # ms


def test_device_clock_aligns_on_the_device_with_no_host_wait(monkeypatch):
    log = FakeEvent.log = []
    sleep_signature = inspect.signature(torch.cuda._sleep)

    def sleep(cycles):
        sleep_signature.bind(cycles)
        assert isinstance(cycles, int) and cycles > 0
        log.append(f"sleep {cycles}")

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "_sleep", sleep)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append("device synchronize"))
    monkeypatch.setattr(timing.dist, "all_reduce", lambda t, group=None: log.append(f"all_reduce {t.numel()}"))
    monkeypatch.setattr(timing.dist, "barrier", lambda *a, **k: log.append("host barrier"))
    clock = timing.DeviceClock("group", torch.device("cpu"), stamps=3, start_delay_us=50.0)
    # Calibration: 2e6 cycles in 1 ms of events -> 2000 cycles per µs -> 50 µs = 100000 cycles.
    assert clock.delay_cycles == 100_000
    log.clear()
    clock.align()
    start = clock.stamp()
    end = clock.stamp()
    clock.wait(end)
    assert log == ["all_reduce 1", "sleep 100000", "record", "record", "synchronize"]
    assert clock.elapsed_us(start, end) == 1000.0


def test_the_cuda_calls_exist_in_this_torch():
    inspect.signature(torch.cuda._sleep).bind(1000)
    for method in ("record", "synchronize", "elapsed_time"):
        assert callable(getattr(torch.cuda.Event, method))
    inspect.signature(torch.cuda.Event.elapsed_time).bind(None, None)


def test_the_spin_calibration_warms_up_and_keeps_the_fastest_of_its_repeats(monkeypatch):
    """Idle clocks and a shared GPU's foreign time slice only lengthen a timed spin: the first spins here take
    6 ms and 1.4 ms (idle clock, a time slice), the rest 1 ms; the calibration keeps 2000 cycles per µs."""
    spans = iter([6.0, 1.4] + [1.0] * 20)
    sleeps = []

    class TimedEvent(FakeEvent):
        def elapsed_time(self, end):
            return next(spans)

    monkeypatch.setattr(torch.cuda, "Event", TimedEvent)
    monkeypatch.setattr(torch.cuda, "_sleep", sleeps.append)
    assert timing.sleep_cycles_per_us() == pytest.approx(2000.0)
    assert sleeps[0] > sleeps[1] == timing._CALIBRATION_CYCLES  # the warm-up spin first, longer than one timed
    assert len(sleeps) == 1 + timing._CALIBRATION_REPEATS
