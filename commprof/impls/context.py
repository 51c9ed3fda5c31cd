"""The facts of the live machine that gate implementations: GPU architecture, peer access, library versions.

The gatherers import torch.cuda and NVML lazily and treat every failure as "not known", so the context is
built the same way on a CPU-only machine. Calling it with CUDA present initializes CUDA in this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commprof.impls.base import ImplContext
from commprof.impls.registry import libraries
from commprof.versions import installed_version

# nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a stray comma), which ctypes cannot
# pass; these are the enum values from nvml.h.
NVML_P2P_CAPS_INDEX_READ = 0
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NAMES = {
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}


@dataclass(frozen=True)
class PeerProbe:
    """What CUDA and NVML say about one ordered GPU pair (None: that source could not be asked)."""

    src: int
    dst: int
    cuda_can_access: bool | None
    nvml_read: int | None = None
    nvml_write: int | None = None
    nvml_atomics: int | None = None


def summarize_p2p(probes: list[PeerProbe]) -> tuple[bool | None, str]:
    """(all pairs reachable, detail) from per-pair probes; CUDA's answer decides, NVML says why.

    CUDA's can_device_access_peer is what the driver will actually allow for IPC mappings, so it is the
    verdict; NVML's status names the cause (e.g. "IOH topology not supported") when CUDA says no.
    """
    if not probes:
        return True, ""
    if any(p.cuda_can_access is None for p in probes):
        return None, "peer access could not be probed"
    blocked = [p for p in probes if not p.cuda_can_access]
    nvml_only = [p for p in probes if p.cuda_can_access and _nvml_problem(p)]
    parts = []
    if blocked:
        shown = "; ".join(_describe(p) for p in blocked[:3])
        more = f" (+{len(blocked) - 3} more pairs)" if len(blocked) > 3 else ""
        parts.append(f"no peer access {shown}{more}")
    if nvml_only:
        shown = "; ".join(_describe(p) for p in nvml_only[:2])
        parts.append(f"CUDA allows peer access but NVML reports {shown}")
    return not blocked, ", ".join(parts)


def summarize_p2p_atomics(probes: list[PeerProbe]) -> tuple[bool | None, str]:
    """(native atomics between every GPU pair, detail) from NVML's P2P atomics status; None when unknown."""
    if not probes:
        return True, ""
    if any(p.nvml_atomics is None for p in probes):
        return None, "NVML's P2P atomics status could not be read for every pair"
    missing = [p for p in probes if p.nvml_atomics != NVML_P2P_STATUS_OK]
    if not missing:
        return True, f"NVML: P2P atomics supported between all {len(probes)} ordered GPU pairs"
    shown = "; ".join(
        f"GPU{p.src}->GPU{p.dst} ({NVML_P2P_STATUS_NAMES.get(p.nvml_atomics, p.nvml_atomics)})" for p in missing[:3]
    )
    more = f" (+{len(missing) - 3} more pairs)" if len(missing) > 3 else ""
    return False, f"NVML reports no P2P atomics for {shown}{more}"


def _nvml_problem(probe: PeerProbe) -> str:
    problems = [
        f"{kind} {NVML_P2P_STATUS_NAMES.get(status, status)}"
        for kind, status in (("read", probe.nvml_read), ("write", probe.nvml_write))
        if status is not None and status != NVML_P2P_STATUS_OK
    ]
    return ", ".join(problems)


def _describe(probe: PeerProbe) -> str:
    why = _nvml_problem(probe)
    return f"GPU{probe.src}->GPU{probe.dst}" + (f" (NVML: {why})" if why else "")


def probe_peers(device_ids: list[int]) -> list[PeerProbe]:
    """Asks CUDA and, where it loads, NVML about every ordered pair of the given CUDA devices."""
    import torch

    pairs = [(a, b) for a in device_ids for b in device_ids if a != b]
    nvml = _nvml_p2p_status(device_ids, pairs)
    probes = []
    for a, b in pairs:
        try:
            cuda_ok = bool(torch.cuda.can_device_access_peer(a, b))
        except (RuntimeError, AssertionError):
            cuda_ok = None
        read, write, atomics = nvml.get((a, b), (None, None, None))
        probes.append(PeerProbe(a, b, cuda_ok, read, write, atomics))
    return probes


def _nvml_p2p_status(device_ids: list[int], pairs) -> dict[tuple[int, int], tuple[int | None, ...]]:
    """NVML read / write / atomics P2P status per pair, matching CUDA devices to NVML by PCI address; {}
    without NVML."""
    try:
        import pynvml
        import torch
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound and friends: no NVML on this machine
        return {}
    try:
        handles = {}
        for index in device_ids:
            props = torch.cuda.get_device_properties(index)
            bus_id = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
            handles[index] = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        return {
            (a, b): tuple(
                pynvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], index)
                for index in (NVML_P2P_CAPS_INDEX_READ, NVML_P2P_CAPS_INDEX_WRITE, NVML_P2P_CAPS_INDEX_ATOMICS)
            )
            for a, b in pairs
        }
    except (pynvml.NVMLError, AttributeError, RuntimeError):
        return {}
    finally:
        pynvml.nvmlShutdown()


def build_impl_context(
    backend: str, world_size: int, dtype: str, tokens, hidden_size: int, options: dict[str, Any] | None = None
) -> ImplContext:
    """An ImplContext filled from this machine: CUDA devices 0..world_size-1 are the ranks' GPUs.

    With GPUs of mixed architectures the lowest compute capability stands for all (every rank must run
    the kernel).
    """
    import torch

    device_type = "cpu"
    capability = None
    p2p_all_pairs: bool | None = None
    p2p_detail = ""
    atomics: tuple[bool | None, str] = (None, "")
    if backend == "nccl" and torch.cuda.is_available():
        device_type = "cuda"
        visible = torch.cuda.device_count()
        devices = list(range(min(world_size, visible)))
        capabilities = sorted({tuple(torch.cuda.get_device_capability(i)) for i in devices})
        capability = capabilities[0] if capabilities else None
        if visible < world_size:
            # Ranks on other nodes, or several ranks on one GPU: CUDA IPC cannot join them all.
            p2p_all_pairs = False
            p2p_detail = (
                f"world size {world_size} but {visible} CUDA device(s) here: ranks span nodes or share "
                "GPUs, and CUDA IPC needs every rank on its own GPU of this node"
            )
        else:
            probes = probe_peers(devices)
            p2p_all_pairs, p2p_detail = summarize_p2p(probes)
            atomics = summarize_p2p_atomics(probes)
    return ImplContext(
        backend=backend,
        world_size=world_size,
        dtype=dtype,
        tokens=tuple(tokens),
        hidden_size=hidden_size,
        device_type=device_type,
        compute_capability=capability,
        p2p_all_pairs=p2p_all_pairs,
        p2p_detail=p2p_detail,
        p2p_atomics=atomics[0],
        p2p_atomics_detail=atomics[1],
        libraries={library: installed_version(library) for library in libraries()},
        torch_version=torch.__version__,
        options=dict(options or {}),
    )
