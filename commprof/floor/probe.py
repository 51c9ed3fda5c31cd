"""The floor probe: peer copies between this node's GPUs, timed with CUDA events, in one process.

Per ordered pair: a large copy by copy engine (`dst.copy_(src)` across devices, cudaMemcpyPeerAsync) and by SM
kernel (a Triton store kernel on the source GPU writing into the peer's memory, where Triton is installed), and
the time of one tiny peer copy under CUDA-graph replay (the write latency, an upper bound: it includes the
copy engine's start). All pairs at once: every GPU copies to every other on its own streams, every copy held
behind one gate (a spin kernel on GPU 0 that every copy's stream waits for) so they all start together, each
timed from the gate; each GPU's inbound bandwidth is what it received over the time from the gate to its last
sender's end. Copies issued from Python one after another barely overlap, and a GPU that received 7 copies in
one copy's time would read 7x its link: where the gate opened before the last copy was queued, the gate is
lengthened and tried again, and refused, named, where it never held. One launch: a one-element kernel under graph
replay. Needs CUDA and at least two GPUs with peer access; every way that cannot run is named.
"""

from __future__ import annotations

import platform
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import partial

from commprof.floor.measure import FloorProbe, PairCopy

COPY_BYTES = 64 << 20  # large enough that the link, not the launch, sets the time
REPEATS = 10
QUICK_COPY_BYTES, QUICK_REPEATS = 16 << 20, 3  # still link-bound (~0.3 ms a copy at Gen5), a few seconds on 8 GPUs
GRAPH_REPLAYS = 200
# The all-pairs gate: torch.cuda._sleep cycles (about 10 ms at 2 GHz, while issuing 56 copies from Python takes a
# few ms), times GATE_GROWTH on each try whose gate opened before the last copy was queued, GATE_TRIES tries.
GATE_CYCLES = 20_000_000
GATE_GROWTH = 4
GATE_TRIES = 3


def probe_floor(copy_bytes: int = COPY_BYTES, repeats: int = REPEATS) -> FloorProbe:
    """Measure this node's GPUs; RuntimeError with the reason where it cannot run at all."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise RuntimeError(f"the floor probe needs at least 2 CUDA GPUs in this process, found {found}")
    devices = list(range(torch.cuda.device_count()))
    not_measured: list[str] = []
    blocked = [(a, b) for a in devices for b in devices if a != b and not torch.cuda.can_device_access_peer(a, b)]
    if blocked:
        not_measured.append(f"no peer access for {len(blocked)} pair(s), e.g. GPU{blocked[0][0]}->GPU{blocked[0][1]}")
    buffers = {d: torch.empty(copy_bytes, dtype=torch.uint8, device=f"cuda:{d}") for d in devices}
    store = _triton_store(not_measured)
    pairs = []
    for a in devices:
        for b in devices:
            if a == b or (a, b) in blocked:
                continue
            ce = _per_pair(
                f"copy-engine copy GPU{a}->GPU{b}",
                lambda a=a, b=b: _bandwidth(
                    a, lambda: buffers[b].copy_(buffers[a], non_blocking=True), copy_bytes, repeats
                ),
                not_measured,
            )
            sm = None
            if store is not None:
                sm = _per_pair(
                    f"SM-kernel copy GPU{a}->GPU{b}",
                    lambda a=a, b=b: _bandwidth(a, lambda: store(buffers[a], buffers[b]), copy_bytes, repeats),
                    not_measured,
                )
            latency = _per_pair(f"write latency GPU{a}->GPU{b}", lambda a=a, b=b: _write_latency_us(a, b), not_measured)
            pairs.append(PairCopy(a, b, ce, sm, latency))
    ingress: dict[int, float] = {}
    if blocked:
        not_measured.append("all pairs at once: not measured while some pairs lack peer access")
    else:
        ingress, refused = _all_pairs_ingress(devices, copy_bytes // len(devices), repeats)
        if refused:
            not_measured.append(f"all pairs at once: {refused}")
    return FloorProbe(
        gpus=[torch.cuda.get_device_name(d) for d in devices],
        pairs=pairs,
        all_pairs_ingress_gbps=ingress,
        launch_us=_launch_us(devices[0]),
        copy_bytes=copy_bytes,
        not_measured=not_measured,
        host=platform.node(),
        time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _bandwidth(device: int, copy, nbytes: int, repeats: int) -> float:
    """GB/s of `copy` issued on `device`'s current stream, best of `repeats` after one warm-up."""
    import torch

    with torch.cuda.device(device):
        copy()
        torch.cuda.synchronize(device)
        best = float("inf")
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            copy()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) * 1000.0)  # ms -> µs
    return nbytes / (1000.0 * best)  # bytes / µs / 1000 = GB/s


def _per_pair(what: str, measure, not_measured: list[str]) -> float | None:
    """One pair's figure, or None with its failure named for this pair alone (the probe goes on)."""
    try:
        return measure()
    except Exception as exc:  # e.g. a capture this driver refuses: this pair's figure, not the probe, is lost
        not_measured.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
        return None


def _write_latency_us(src: int, dst: int) -> float:
    """One 4-byte peer copy under CUDA-graph replay, averaged over many in one graph."""
    import torch

    with torch.cuda.device(src):
        a = torch.zeros(1, dtype=torch.int32, device=f"cuda:{src}")
        b = torch.zeros(1, dtype=torch.int32, device=f"cuda:{dst}")
        return _graph_us(src, lambda: b.copy_(a, non_blocking=True), peer=dst)


def _launch_us(device: int) -> float:
    """One one-element kernel under CUDA-graph replay: the least a kernel launch costs inside a graph."""
    import torch

    with torch.cuda.device(device):
        x = torch.zeros(1, device=f"cuda:{device}")
        return _graph_us(device, lambda: x.add_(1))


def _graph_us(device: int, op, peer: int | None = None) -> float:
    """`op` captured GRAPH_REPLAYS times on `device` and replayed: µs per op. A copy to `peer` makes torch record
    on and wait from the peer's current stream (aten Copy.cu copy_device_to_device), so during the capture that
    stream is one forked from the capture and joined back before it ends (CUDA's stream-capture rules)."""
    import torch

    stream = torch.cuda.Stream(device)
    joined = torch.cuda.Stream(peer) if peer is not None else None  # made before the capture, used inside it
    with torch.cuda.stream(stream):
        op()  # warm up outside the capture
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            with _peer_joined(stream, device, joined):
                for _ in range(GRAPH_REPLAYS):
                    op()
        graph.replay()
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
    return start.elapsed_time(end) * 1000.0 / GRAPH_REPLAYS


@contextmanager
def _peer_joined(capture, device: int, joined):
    """Inside a capture on `capture` (on `device`): `joined`, a stream of the peer GPU, is that GPU's current
    stream, forked from the capture, and the capture waits for it before the block ends; nothing without one."""
    import torch

    if joined is None:
        yield
        return
    joined.wait_stream(capture)  # the fork: the peer's stream joins the capture
    with torch.cuda.stream(joined), torch.cuda.device(device):
        yield
    capture.wait_stream(joined)  # the join: every captured stream rejoins before the capture ends


def _all_pairs_ingress(devices: list[int], chunk: int, repeats: int) -> tuple[dict[int, float], str | None]:
    """Every GPU copies `chunk` bytes to every other at once, one stream per pair on its source and one on its
    destination (torch's copy barriers the destination's current stream: a shared one would serialise the copies
    into each GPU), every copy behind one gate; (GB/s into each GPU, None) or ({}, why it was refused)."""
    import torch

    src = {d: torch.empty(chunk * len(devices), dtype=torch.uint8, device=f"cuda:{d}") for d in devices}
    dst = {d: torch.empty(chunk * len(devices), dtype=torch.uint8, device=f"cuda:{d}") for d in devices}
    pairs = [(a, b) for a in devices for b in devices if a != b]
    streams = {(a, b): (torch.cuda.Stream(a), torch.cuda.Stream(b)) for a, b in pairs}
    gate_stream = torch.cuda.Stream(devices[0])
    best = {d: float("inf") for d in devices}
    cycles = GATE_CYCLES
    copy = partial(_pair_copy, src, dst, chunk)
    for _ in range(repeats + 1):
        for _try in range(GATE_TRIES):
            spans = _gated_copies(devices, streams, gate_stream, cycles, copy)
            if spans is not None:
                break
            cycles *= GATE_GROWTH
        else:
            return {}, (
                f"the copies could not be started together (the gate of {cycles // GATE_GROWTH:,} GPU cycles opened "
                f"before the last of {len(pairs)} copies was queued, {GATE_TRIES} tries): not measured"
            )
        for d in devices:  # into d: from the gate to its last sender's end
            best[d] = min(best[d], max(span for (a, b), span in spans.items() if b == d))
    received = chunk * (len(devices) - 1)
    return {d: received / (1000.0 * best[d]) for d in devices}, None


def _pair_copy(src, dst, chunk: int, a: int, b: int) -> None:
    dst[b][a * chunk : (a + 1) * chunk].copy_(src[a][b * chunk : (b + 1) * chunk], non_blocking=True)


def _gated_copies(devices: list[int], streams: dict, gate_stream, cycles: int, copy) -> dict | None:
    """Every pair's copy queued behind one gate: a spin of `cycles` on `gate_stream` that every copy's source stream
    waits for; µs per pair from the gate (an event each source stream records as it leaves the wait, on its own
    GPU's clock) to its copy's end. None when the gate had already opened by the time the last copy was queued
    (the copies may have started one after another)."""
    import torch

    for device in devices:
        torch.cuda.synchronize(device)
    with torch.cuda.stream(gate_stream):
        torch.cuda._sleep(cycles)
    gate = torch.cuda.Event()
    gate.record(gate_stream)
    starts, ends = {}, {}
    for (a, b), (outbound, inbound) in streams.items():
        outbound.wait_event(gate)
        with torch.cuda.stream(inbound), torch.cuda.stream(outbound):
            starts[(a, b)], ends[(a, b)] = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            starts[(a, b)].record(outbound)
            copy(a, b)
            ends[(a, b)].record(outbound)
    held = not gate.query()  # still spinning once every copy is queued: they all start when it ends
    for event in ends.values():
        event.synchronize()
    if not held:
        return None
    return {k: starts[k].elapsed_time(ends[k]) * 1000.0 for k in streams}


def _triton_store(not_measured: list[str]):
    """A Triton kernel that copies a byte buffer into a peer's (an SM-driven peer write), or None with the reason."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        not_measured.append("SM-kernel copies: Triton is not installed (copy-engine copies only)")
        return None

    @triton.jit
    def _store(src, dst, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)

    def store(src, dst):
        n = src.numel()
        _store[(triton.cdiv(n, 8192),)](src, dst, n, BLOCK=8192)

    return store
