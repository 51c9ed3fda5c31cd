"""build_impl_context: the machine's facts, gathered on CPU, and the P2P verdict from fabricated probes."""

import inspect
import sys
import types

import torch

from commprof.impls import context
from commprof.impls.context import PeerProbe, build_impl_context, summarize_p2p, summarize_p2p_atomics


def test_context_on_a_cpu_machine():
    ctx = build_impl_context("gloo", 2, "bfloat16", [1, 4], 7168, {"use_oneshot": True})
    assert ctx.backend == "gloo" and ctx.device_type == "cpu" and ctx.tokens == (1, 4)
    assert ctx.compute_capability is None and ctx.p2p_all_pairs is None
    assert ctx.version("flashinfer-python") == flashinfer_in_metadata()  # read from package metadata, not imported
    assert ctx.torch_version == torch.__version__ and ctx.options == {"use_oneshot": True}


def flashinfer_in_metadata() -> str | None:
    """FlashInfer's installed version (0.7.4 with `make extras`), None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flashinfer-python")
    except PackageNotFoundError:
        return None


def test_nccl_without_cuda_stays_a_cpu_context():
    ctx = build_impl_context("nccl", 8, "bfloat16", (16,), 7168)
    assert ctx.device_type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_missing_flashinfer_reads_as_none():
    from commprof.versions import installed_version

    assert installed_version("no-such-distribution") is None


def test_all_pairs_reachable():
    probes = [PeerProbe(a, b, True, 0, 0) for a in range(4) for b in range(4) if a != b]
    assert summarize_p2p(probes) == (True, "")
    assert summarize_p2p([]) == (True, "")


def test_blocked_pairs_are_named_with_nvml_cause():
    probes = [PeerProbe(0, 1, True, 0, 0), PeerProbe(0, 4, False, 3, 3), PeerProbe(4, 0, False, 3, None)]
    ok, detail = summarize_p2p(probes)
    assert ok is False
    assert detail == (
        "no peer access GPU0->GPU4 (NVML: read IOH topology not supported, "
        "write IOH topology not supported); GPU4->GPU0 (NVML: read IOH topology not supported)"
    )


def test_many_blocked_pairs_are_summarized():
    probes = [PeerProbe(a, b, False) for a in range(8) for b in range(8) if a != b]
    ok, detail = summarize_p2p(probes)
    assert ok is False and detail.endswith("(+53 more pairs)")


def test_cuda_decides_and_nvml_disagreement_is_reported():
    ok, detail = summarize_p2p([PeerProbe(0, 1, True, 2, 0), PeerProbe(1, 0, True, 0, 0)])
    assert ok is True and detail == "CUDA allows peer access but NVML reports GPU0->GPU1 (NVML: read GPU not supported)"


def test_unprobeable_pairs_leave_p2p_unknown():
    assert summarize_p2p([PeerProbe(0, 1, None)]) == (None, "peer access could not be probed")


def test_probe_asks_cuda_and_nvml_for_every_ordered_pair(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: asked.append((a, b)) or (a, b) != (2, 0))
    monkeypatch.setattr(context, "_nvml_p2p_status", lambda ids, pairs: {(2, 0): (3, 3, 5)})
    probes = context.probe_peers([0, 1, 2])
    assert asked == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    blocked = [p for p in probes if not p.cuda_can_access]
    assert blocked == [PeerProbe(2, 0, False, 3, 3, 5)]


def test_nvml_status_is_asked_with_plain_int_indices(monkeypatch):
    """nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ is the tuple (0,); ctypes cannot pass it, so we use 0."""
    import pynvml

    assert pynvml.NVML_P2P_CAPS_INDEX_READ in ((0,), 0) and pynvml.NVML_P2P_CAPS_INDEX_WRITE == 1
    calls = []

    def handle_by_bus_id(bus_id):
        inspect.signature(pynvml.nvmlDeviceGetHandleByPciBusId).bind(bus_id)
        calls.append(bus_id)
        return bus_id

    def p2p_status(device1, device2, index):
        inspect.signature(pynvml.nvmlDeviceGetP2PStatus).bind(device1, device2, index)
        calls.append(index)
        return {0: 3, 1: 0, 3: 5}[index]

    fake = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByPciBusId=handle_by_bus_id,
        nvmlDeviceGetP2PStatus=p2p_status,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    assert context._nvml_p2p_status([0, 1], [(0, 1)]) == {(0, 1): (3, 0, 5)}
    assert calls == ["00000000:1b:00.0", "00000000:1b:00.0", 0, 1, 3, "shutdown"]  # read, write, atomics
    assert all(type(c) is int for c in calls[2:5])
    assert pynvml.NVML_P2P_CAPS_INDEX_ATOMICS == context.NVML_P2P_CAPS_INDEX_ATOMICS


def test_no_nvml_library_means_no_nvml_opinion(monkeypatch):
    import pynvml

    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    assert context._nvml_p2p_status([0, 1], [(0, 1)]) == {}


def test_p2p_atomics_come_from_nvml_for_every_ordered_pair():
    ok = [PeerProbe(a, b, True, 0, 0, 0) for a in range(2) for b in range(2) if a != b]
    assert summarize_p2p_atomics(ok) == (True, "NVML: P2P atomics supported between all 2 ordered GPU pairs")
    pcie = [PeerProbe(0, 1, True, 0, 0, 5), PeerProbe(1, 0, True, 0, 0, 5)]
    assert summarize_p2p_atomics(pcie) == (
        False,
        "NVML reports no P2P atomics for GPU0->GPU1 (not supported); GPU1->GPU0 (not supported)",
    )
    assert summarize_p2p_atomics([PeerProbe(0, 1, True)]) == (
        None,
        "NVML's P2P atomics status could not be read for every pair",
    )
