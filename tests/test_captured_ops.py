"""The graph-mode per-op pass: on CPU, its capture's order of calls pinned with stand-ins bound against torch's
signatures (external timing events, every one recorded on the capture stream inside the capture, before the first
op and after each); on GPUs, a real capture whose per-op times sum to about the step."""

import inspect
from types import SimpleNamespace

import pytest
import torch

from commprof.replay import captured_ops
from commprof.replay.harness import StepReplay
from tests.distributed import run_nccl_ranks

OPS = 4


class FakeEvent:
    log: list = []

    def __init__(self, enable_timing=False, external=False):
        inspect.signature(torch.cuda.Event).bind(enable_timing=enable_timing, external=external)
        assert enable_timing and external
        self.index = len([e for e in FakeEvent.log if e == "new event"])
        FakeEvent.log.append("new event")

    def record(self, stream=None):
        assert stream is None  # the current stream: the capture stream while capturing
        FakeEvent.log.append(f"record {self.index}")

    def synchronize(self):
        FakeEvent.log.append(f"synchronize {self.index}")

    def elapsed_time(self, end):
        return 0.001 * (end.index - self.index)  # ms


class FakeGraph:
    def replay(self):
        FakeEvent.log.append("replay")


class FakeCapture:
    def __init__(self, graph, pool=None, stream=None, capture_error_mode="global"):
        inspect.signature(torch.cuda.graph).bind(graph, pool=pool, stream=stream)

    def __enter__(self):
        FakeEvent.log.append("capture begins")

    def __exit__(self, *exc):
        FakeEvent.log.append("capture ends")


class FakeReplay:
    """The StepReplay surface the pass uses; run_ops stamps the given clock after each op, as the harness does."""

    def __init__(self):
        self.plan = SimpleNamespace(ops=list(range(OPS)))
        self.device = torch.device("cpu")
        self.config = SimpleNamespace(iterations=3)
        self.clock = SimpleNamespace(align=lambda: FakeEvent.log.append("align"))

    def refill(self):
        FakeEvent.log.append("refill")

    def run_ops(self, stamps=None, arrivals=None, clock=None):
        inspect.signature(StepReplay.run_ops).bind(self, stamps, arrivals=arrivals, clock=clock)
        assert arrivals is None  # no stamp kernel in the pass whose times are ranked
        for op in self.plan.ops:
            FakeEvent.log.append(f"op {op}")
            stamps.append(clock.stamp())


@pytest.fixture
def fakes(monkeypatch):
    FakeEvent.log = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", FakeCapture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: FakeEvent.log.append("device synchronize"))
    return FakeEvent.log


def test_the_per_op_capture_records_an_external_event_before_the_first_op_and_after_each(fakes):
    replay = FakeReplay()
    graph, stamps = captured_ops.capture_per_op(replay)
    inside = fakes[fakes.index("capture begins") + 1 : fakes.index("capture ends")]
    expected = ["record 0"] + [step for op in range(OPS) for step in (f"op {op}", f"record {op + 1}")]
    assert inside == expected
    assert fakes[-1] == "device synchronize" and fakes.count("new event") == OPS + 1
    # nothing but the events and the ops is issued during capture: no other stream to join
    assert not [e for e in inside if not e.startswith(("record", "op"))]
    fakes.clear()
    rows = captured_ops.time_per_op(replay, graph, stamps, warmup=1)
    assert rows == [[pytest.approx(1.0)] * OPS] * 3  # 1 µs between consecutive fake events
    assert fakes.count("align") == 4 and fakes.count("replay") == 4 and fakes.count(f"synchronize {OPS}") == 4
    assert fakes.index("align") < fakes.index("replay")


def test_this_torch_has_external_events():
    assert captured_ops.external_events_missing() is None
    inspect.signature(torch.cuda.Event).bind(enable_timing=True, external=True)
    for method in ("record", "synchronize", "elapsed_time"):
        assert callable(getattr(torch.cuda.Event, method))


def test_the_pass_says_why_where_torch_has_no_external_events(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False, blocking=False, interprocess=False: None)
    assert "no external CUDA events" in captured_ops.external_events_missing()


def _graph_op_pass(rank, world_size, device):
    from commprof.replay.harness import replay_mode
    from tests.test_timing_gpu import _tiny_replay

    replay = _tiny_replay(world_size, device, start_delay_us=50.0)
    replay_mode(replay, "eager")  # as the trial does: eager first, then capture
    return replay_mode(replay, "graph").to_dict(), len(replay.plan.ops)


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.timeout(600)
def test_graph_mode_records_carry_per_op_times_that_sum_to_about_the_step():
    result, ops = run_nccl_ranks(_graph_op_pass, 2)[0]
    assert result["status"] == "ok", result["message"]
    op_us = result["op_us"]
    assert result["op_timing"] == captured_ops.OP_TIMING["graph"] and len(op_us["median"]) == ops
    assert all(v > 0 for v in op_us["median"])
    step = result["step_us"]["median"]
    # the per-op graph is the step's graph plus event nodes: its ops sum to about the step, never far above
    assert 0.3 * step <= sum(op_us["median"]) <= 1.5 * step + 20, (sum(op_us["median"]), step)


def test_a_failed_per_op_capture_loses_only_the_split(monkeypatch):
    import commprof.replay.harness as harness

    def refuse(replay):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(harness, "capture_per_op", refuse)
    replay = SimpleNamespace(op_graph="stale", op_stamps=None, tensors=SimpleNamespace(outputs=[]))
    why = StepReplay.capture_op_pass(replay)
    assert why.startswith("not measured: the per-op capture failed: RuntimeError") and replay.op_graph is None


def test_the_step_graphs_outputs_stay_the_checked_ones_after_the_per_op_capture(monkeypatch):
    """The per-op capture runs the step again into outputs of its own (an out-of-place kernel's): the last timed
    replay of the step graph is verified against the step graph's outputs, never the per-op graph's."""
    from commprof.replay import harness

    step_outputs = [torch.zeros(2), torch.ones(2)]
    replay = SimpleNamespace(tensors=SimpleNamespace(outputs=list(step_outputs)), op_graph=None, op_stamps=None)

    def per_op(target):
        target.tensors.outputs = [torch.full((2,), 7.0), torch.full((2,), 8.0)]  # the per-op graph's own
        return "graph", "stamps"

    monkeypatch.setattr(harness, "external_events_missing", lambda: None)
    monkeypatch.setattr(harness, "capture_per_op", per_op)
    assert StepReplay.capture_op_pass(replay) is None and replay.op_graph == "graph"
    assert all(a is b for a, b in zip(replay.tensors.outputs, step_outputs, strict=True))
