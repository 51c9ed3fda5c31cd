"""A fake `torch` for CPU tests of CUDA stream code: it records every stream operation and applies CUDA's
stream-capture rules to them, and copies across devices the way torch's aten Copy.cu `copy_device_to_device`
issues them (the destination's current stream records an event the source's current stream waits on, the copy
runs on the source's stream, then the destination's current stream waits on an event recorded after it).

With a Timeline it also keeps time, as CUDA orders work: the host pays `host_us` per call it makes; a stream runs
its work in order, each item starting once the stream is free, the host has issued it and what it waits for has
happened; a spin (torch.cuda._sleep) takes its cycles at `cycles_per_us`; a peer copy takes `copy_us` on its
destination's inbound link, which carries one copy at a time (so n copies into one GPU take n times one copy, the
link's bandwidth shared); an event happens when its stream reaches it, `query()` says whether the host's clock
has passed it, and `elapsed_time` is the difference. Without one, every elapsed time is 1 ms and no event has
happened until the host waits for it."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace


@dataclass
class Timeline:
    """The fake's clocks (µs): what each host call, spin cycle and peer copy costs."""

    host_us: float = 5.0
    cycles_per_us: float = 2000.0
    copy_us: float = 100.0


class CaptureError(RuntimeError):
    """What CUDA would return: an illegal operation during a stream capture."""


class FakeStream:
    _ids = itertools.count(1)

    def __init__(self, gpu: FakeCuda, device: int, default: bool = False):
        self.gpu, self.device, self.default = gpu, device, default
        self.id = 0 if default else next(self._ids)
        self.ops = 0  # work issued on this stream so far
        self.ready = 0.0  # timeline: when its last queued work ends

    def wait_stream(self, other: FakeStream) -> None:
        event = FakeEvent(self.gpu)
        event.record(other)
        self.gpu.wait(self, event)

    def wait_event(self, event: FakeEvent) -> None:
        self.gpu.wait(self, event)

    def __repr__(self) -> str:
        return f"stream{self.id}@gpu{self.device}"


class FakeEvent:
    def __init__(self, gpu: FakeCuda, enable_timing: bool = False):
        self.gpu = gpu
        self.stream, self.seq, self.captured = None, 0, False
        self.time = 0.0  # timeline: when the stream reaches it

    def record(self, stream: FakeStream | None = None) -> None:
        stream = stream or self.gpu.current_stream()
        self.stream, self.seq = stream, stream.ops
        self.captured = stream in self.gpu.capturing
        self.gpu.log.append(("record", stream))
        self.time = self.gpu.host_call(stream)

    def synchronize(self) -> None:
        self.gpu.now = max(self.gpu.now, self.time)

    def query(self) -> bool:
        """Whether the stream has reached it by the host's clock (no timeline: never on its own)."""
        return self.gpu.timeline is not None and self.time <= self.gpu.now

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.time - self.time) / 1000.0 if self.gpu.timeline else 1.0


class FakeTensor:
    def __init__(self, gpu: FakeCuda, device: int):
        self.gpu, self.device = gpu, device

    def __getitem__(self, _index) -> FakeTensor:
        return FakeTensor(self.gpu, self.device)

    def add_(self, _other) -> FakeTensor:
        self.gpu.issue(self.gpu.current_stream(self.device), "kernel")
        return self

    def copy_(self, src: FakeTensor, non_blocking: bool = False) -> FakeTensor:
        gpu = self.gpu
        copy_stream = gpu.current_stream(src.device)
        if src.device != self.device:
            dst_ready = FakeEvent(gpu)
            dst_ready.record(gpu.current_stream(self.device))
            gpu.wait(copy_stream, dst_ready)
        gpu.issue(copy_stream, "copy", link=self.device if src.device != self.device else None)
        if src.device != self.device:
            src_ready = FakeEvent(gpu)
            src_ready.record(copy_stream)
            dst_stream = gpu.current_stream(self.device)
            gpu.wait(dst_stream, src_ready)
            gpu.copies.append((copy_stream, dst_stream))
        return self


class FakeCuda:
    """torch.cuda as the probe uses it, on `count` fake GPUs."""

    def __init__(self, count: int, timeline: Timeline | None = None):
        self.count, self.device_now = count, 0
        self.timeline, self.now = timeline, 0.0  # the host's clock, µs
        self.links = dict.fromkeys(range(count), 0.0)  # timeline: when each GPU's inbound link is next free
        self.defaults = {d: FakeStream(self, d, default=True) for d in range(count)}
        self.current = dict(self.defaults)
        self.capturing: set[FakeStream] = set()
        self.log: list[tuple] = []
        self.copies: list[tuple[FakeStream, FakeStream]] = []  # (copy stream, destination stream) per cross copy
        self.captures_ended = 0
        self.Event = lambda enable_timing=False: FakeEvent(self, enable_timing)
        self.streams: list[FakeStream] = []
        self.Stream = self._new_stream
        self.CUDAGraph = lambda: SimpleNamespace(replay=lambda: None)

    def _new_stream(self, device: int | None = None) -> FakeStream:
        stream = FakeStream(self, self.device_now if device is None else int(device))
        self.streams.append(stream)
        return stream

    def current_stream(self, device: int | None = None) -> FakeStream:
        return self.current[self.device_now if device is None else device]

    def host_call(self, stream: FakeStream) -> float:
        """The host makes one call on `stream`: when that stream can start what the call queues."""
        if self.timeline:
            self.now += self.timeline.host_us
        return max(self.now, stream.ready)

    def issue(self, stream: FakeStream, what: str, link: int | None = None, us: float = 0.0) -> None:
        stream.ops += 1
        self.log.append((what, stream))
        start = self.host_call(stream)
        if self.timeline and link is not None:  # a peer copy: its destination's link carries one at a time
            start = max(start, self.links[link])
            us = self.timeline.copy_us
            self.links[link] = start + us
        stream.ready = start + us

    def wait(self, stream: FakeStream, event: FakeEvent) -> None:
        if stream in self.capturing and not event.captured:
            raise CaptureError(f"{stream} is capturing and waits on an event recorded outside the capture")
        if event.captured and stream not in self.capturing:
            self.capturing.add(stream)  # the stream joins the capture (a fork)
        stream.ops += 1
        self.log.append(("wait", stream, event.stream, event.seq))
        stream.ready = max(self.host_call(stream), event.time)

    def _sleep(self, cycles: int) -> None:
        """A spin on the current stream: `cycles` at the timeline's clock."""
        rate = self.timeline.cycles_per_us if self.timeline else float("inf")
        self.issue(self.current_stream(), "spin", us=cycles / rate)

    def synchronize(self, device: int | None = None) -> None:
        if self.capturing:
            raise CaptureError("synchronize during a capture")
        streams = [*self.defaults.values(), *self.streams] if device is None else self._streams_of(device)
        self.now = max([self.now, *(s.ready for s in streams)])

    def _streams_of(self, device: int) -> list[FakeStream]:
        return [s for s in (*self.defaults.values(), *self.streams) if s.device == int(device)]

    def get_device_name(self, device: int) -> str:
        return "fake GPU"

    @contextmanager
    def device(self, device: int):
        before, self.device_now = self.device_now, int(device)
        try:
            yield
        finally:
            self.device_now = before

    @contextmanager
    def stream(self, stream: FakeStream):
        """torch.cuda.StreamContext: the stream becomes its device's current one, and its device the current
        device (torch.cuda.set_stream switches device), both put back on exit."""
        before_device = self.device_now
        before = {before_device: self.current[before_device], stream.device: self.current[stream.device]}
        self.current[stream.device], self.device_now = stream, stream.device
        try:
            yield
        finally:
            self.current.update(before)
            self.device_now = before_device

    @contextmanager
    def graph(self, _graph, stream: FakeStream):
        with self.stream(stream):
            self.capturing = {stream}
            try:
                yield
                self.end_capture(stream)
            finally:
                self.capturing = set()

    def end_capture(self, origin: FakeStream) -> None:
        """CUDA's rule: every stream that joined the capture has rejoined the origin after its last work."""
        joined_back = {(e[2], e[3]) for e in self.log if e[0] == "wait" and e[1] is origin}
        unjoined = [s for s in self.capturing if s is not origin and (s, s.ops) not in joined_back]
        if unjoined:
            raise CaptureError(f"capture ended with unjoined streams {unjoined}")
        self.captures_ended += 1


def fake_torch(gpus: int = 2, timeline: Timeline | None = None) -> SimpleNamespace:
    """A `torch` module stand-in whose `cuda` is a FakeCuda (keeping time with `timeline`, where given)."""
    cuda = FakeCuda(gpus, timeline)

    def tensor(*_shape, dtype=None, device="cuda:0"):
        return FakeTensor(cuda, int(str(device).split(":")[1]))

    return SimpleNamespace(cuda=cuda, zeros=tensor, empty=tensor, int32="int32", uint8="uint8")
