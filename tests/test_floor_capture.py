"""The floor probe's stream handling, read through a fake CUDA that records every stream operation and applies
the stream-capture rules (tests/fake_cuda.py): every stream a capture touches joins it and rejoins it before it
ends, a pair whose capture fails loses its latency alone, and the all-pairs copies never share a stream; on the
fake's timeline, the all-pairs copies start together behind one gate and are timed from it, and copies that
would start one after another are refused."""

import sys

import pytest

from commprof.floor import probe
from commprof.floor.measure import figures
from tests.fake_cuda import CaptureError, Timeline, fake_torch


@pytest.fixture
def torch_fake(monkeypatch):
    fake = fake_torch(gpus=3)
    monkeypatch.setitem(sys.modules, "torch", fake)
    return fake


def test_a_peer_copy_is_captured_with_the_destination_stream_joined_and_rejoined(torch_fake):
    assert probe._write_latency_us(0, 1) == pytest.approx(1000.0 / probe.GRAPH_REPLAYS)
    cuda = torch_fake.cuda
    assert cuda.captures_ended == 1
    # the copies' destination stream inside the capture is a fresh stream on GPU 1, never its default stream
    captured = cuda.copies[1:]  # the first copy is the warm-up, outside the capture
    assert len(captured) == probe.GRAPH_REPLAYS
    assert {dst.device for _, dst in captured} == {1} and not any(dst.default for _, dst in captured)


def test_the_fake_refuses_what_the_old_capture_did(torch_fake):
    """A capture copying to a peer whose current stream never joined it fails as CUDA fails it."""
    cuda = torch_fake.cuda
    a, b = torch_fake.zeros(1, device="cuda:0"), torch_fake.zeros(1, device="cuda:1")
    stream = cuda.Stream(0)
    with pytest.raises(CaptureError, match="outside the capture"), cuda.graph(None, stream=stream):
        b.copy_(a)


def test_the_fake_refuses_a_capture_ending_before_a_forked_stream_rejoins(torch_fake):
    cuda = torch_fake.cuda
    stream, side = cuda.Stream(0), cuda.Stream(1)
    with pytest.raises(CaptureError, match="unjoined"), cuda.graph(None, stream=stream):
        side.wait_stream(stream)
        cuda.issue(side, "kernel")


def test_a_launch_capture_touches_only_its_own_stream(torch_fake):
    assert probe._launch_us(0) > 0 and torch_fake.cuda.captures_ended == 1


def _peers_timed_elsewhere(monkeypatch, fake, gpus: int) -> None:
    """`gpus` GPUs that all reach each other, the probe's bandwidth, launch and Triton parts given fixed answers:
    what a test of the other parts does not time."""
    monkeypatch.setattr(probe, "_bandwidth", lambda *args: 50.0)
    monkeypatch.setattr(probe, "_launch_us", lambda device: 2.0)
    monkeypatch.setattr(probe, "_triton_store", lambda not_measured: None)
    fake.cuda.is_available = lambda: True
    fake.cuda.device_count = lambda: gpus
    fake.cuda.can_device_access_peer = lambda a, b: True


def test_a_pair_whose_capture_fails_is_named_and_the_probe_goes_on(torch_fake, monkeypatch):
    def refuse(device, op, peer=None):
        raise CaptureError("operation not permitted when stream is capturing")

    monkeypatch.setattr(probe, "_graph_us", refuse)
    _peers_timed_elsewhere(monkeypatch, torch_fake, 3)
    measured = probe.probe_floor(copy_bytes=1 << 20, repeats=1)
    assert len(measured.pairs) == 6 and all(p.write_latency_us is None and p.ce_gbps == 50.0 for p in measured.pairs)
    assert measured.all_pairs_ingress_gbps and measured.launch_us == 2.0
    failed = [line for line in measured.not_measured if line.startswith("write latency GPU")]
    assert len(failed) == 6 and failed[0] == (
        "write latency GPU0->GPU1: CaptureError: operation not permitted when stream is capturing"
    )


def test_all_pairs_at_once_issue_each_copy_on_streams_of_its_own(torch_fake):
    ingress, refused = probe._all_pairs_ingress([0, 1, 2], chunk=1024, repeats=1)
    assert set(ingress) == {0, 1, 2} and refused is None
    copies = torch_fake.cuda.copies[:6]  # one repeat: every ordered pair once
    assert len({src for src, _ in copies}) == 6 and len({dst for _, dst in copies}) == 6
    assert not any(src.default or dst.default for src, dst in copies)
    assert all(src.device != dst.device for src, dst in copies)


def _on_timeline(monkeypatch, gpus: int, timeline: Timeline):
    fake = fake_torch(gpus=gpus, timeline=timeline)
    monkeypatch.setitem(sys.modules, "torch", fake)
    return fake


def test_all_pairs_start_together_behind_the_gate_and_are_timed_from_it(monkeypatch):
    """8 GPUs, 56 copies issued at 5 µs a host call: the gate holds them, so each GPU's 7 inbound copies share its
    link from the gate on (7 x 100 µs) and its bandwidth is one copy's, not 7 times it."""
    timeline = Timeline(host_us=5.0, cycles_per_us=2000.0, copy_us=100.0)
    fake = _on_timeline(monkeypatch, 8, timeline)
    chunk = 1 << 20
    ingress, refused = probe._all_pairs_ingress(list(range(8)), chunk=chunk, repeats=2)
    assert refused is None
    one_copy_gbps = chunk / (1000.0 * timeline.copy_us)
    assert ingress == {d: pytest.approx(one_copy_gbps) for d in range(8)}
    assert "spin" in {entry[0] for entry in fake.cuda.log}


def test_copies_that_would_start_one_after_another_are_refused(monkeypatch):
    """A host so slow (20 ms a call) that every gate, lengthened GATE_TRIES times, opens before the last copy is
    queued: the copies would start one after another and each GPU read up to 7x its link, so nothing is reported."""
    _on_timeline(monkeypatch, 8, Timeline(host_us=20_000.0, cycles_per_us=2000.0, copy_us=100.0))
    ingress, refused = probe._all_pairs_ingress(list(range(8)), chunk=1 << 20, repeats=1)
    assert ingress == {} and refused.startswith("the copies could not be started together")
    assert f"{probe.GATE_TRIES} tries" in refused and "56 copies" in refused


def test_a_refused_all_pairs_probe_gives_no_floor(monkeypatch):
    fake = _on_timeline(monkeypatch, 4, Timeline(host_us=50_000.0))
    monkeypatch.setattr(probe, "_write_latency_us", lambda a, b: 1.0)
    _peers_timed_elsewhere(monkeypatch, fake, 4)
    measured = probe.probe_floor(copy_bytes=1 << 20, repeats=1)
    assert measured.all_pairs_ingress_gbps == {}
    assert any(
        line.startswith("all pairs at once: the copies could not be started together") for line in measured.not_measured
    )
    with pytest.raises(ValueError, match="could not be started together"):
        figures(measured)
