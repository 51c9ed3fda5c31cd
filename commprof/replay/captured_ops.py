"""The graph-mode per-op pass: the step captured a second time with a timing event between ops, then replayed.

Events recorded during stream capture with `external=True` become event-record nodes of the graph
(torch.cuda.Event, `cudaEventRecordExternal`), so each replay stamps every op boundary on the device with no
host call and no stamp kernel between ops: the per-op times of the step as an engine replays it. Every event is
recorded on the capture stream itself, so the pass joins no other stream to the capture. The whole-step graph
that `step_us` times is a separate capture without these nodes (docs/timing.md).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

OP_TIMING = {
    "graph": "graph mode: events between the ops of a captured step, replayed (no stamp kernel, no host call)",
    "eager": "eager: includes each implementation's host issue cost (and an event and an arrival stamp per op)",
}


def external_events_missing() -> str | None:
    """Why this torch cannot record timing events inside a capture (its Event takes no `external`), else None."""
    if "external" in inspect.signature(torch.cuda.Event).parameters:
        return None
    return f"not measured: torch {torch.__version__} has no external CUDA events to time ops inside a graph"


class CapturedStamps:
    """Timing events recorded in a capture (external: graph event-record nodes), created once, reused per replay."""

    def __init__(self, count: int):
        self.events = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(count)]
        self.used = 0

    def stamp(self) -> Any:
        """Record the next event on the current (capture) stream."""
        event = self.events[self.used]
        self.used += 1
        event.record()
        return event

    def wait(self) -> None:
        """Wait on the host for the last replay's last event."""
        self.events[self.used - 1].synchronize()

    def intervals_us(self) -> list[float]:
        """µs between consecutive events of the last replay (waited for)."""
        recorded = self.events[: self.used]
        return [a.elapsed_time(b) * 1000.0 for a, b in zip(recorded, recorded[1:])]


def capture_per_op(replay: Any) -> tuple[Any, CapturedStamps]:
    """The step captured with an event before its first op and after each op; the first event is recorded before
    any collective, so a capture that refuses the event node fails before a communicator is touched."""
    stamps = CapturedStamps(len(replay.plan.ops) + 1)
    torch.cuda.synchronize(replay.device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stamps.stamp()
        replay.run_ops([], clock=stamps)
    torch.cuda.synchronize(replay.device)
    return graph, stamps


def time_per_op(replay: Any, graph: Any, stamps: CapturedStamps, warmup: int) -> list[list[float]]:
    """Per timed replay of the per-op graph, µs of each op; each replay starts aligned like a timed step and is
    waited for before the next."""
    samples = []
    for i in range(warmup + replay.config.iterations):
        replay.refill()
        replay.clock.align()
        graph.replay()
        stamps.wait()
        if i >= warmup:
            samples.append(stamps.intervals_us())
    return samples
