"""What a parsed NCCL INFO log means for an inference box: findings, each with its evidence lines and a fix.

Pure: rules over an `NcclLogSummary` (commprof.nccl_log.parse). Each rule mirrors a known failure of PCIe boxes or of
CUDA-graph serving; the evidence is the log's own lines, so a user can find them in their file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from commprof.nccl_log.parse import NcclLogSummary
from commprof.nccl_vocab import HOST_PATHS, forces_ll128, nccl_user_p2p_level
from commprof.records.vocab import SEVERITIES, Severity

INFO, WARN, FAIL = SEVERITIES
# NVL / NVB are NVLink (src/graph/topo.h).
NVLINK_PATHS = ("NVL", "NVB")


@dataclass(frozen=True)
class Finding:
    """One thing the log shows that matters, in one sentence, with the lines that show it and what to do."""

    id: str
    severity: Severity
    text: str
    fix: str
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _lines(s: NcclLogSummary, *kinds: str) -> list[str]:
    return [line for kind in kinds for line in s.evidence.get(kind, [])]


def _warned(s: NcclLogSummary, *needles: str) -> list[str]:
    return [f"NCCL WARN {w}" for w in s.warnings if any(n in w.lower() for n in needles)]


def p2p_disabled(s: NcclLogSummary) -> Finding | None:
    """GPU pairs talk through host memory (SHM): P2P turned off by a variable, or unavailable."""
    shm = s.transports.get("SHM", 0)
    if not shm:
        return None
    total = len(s.connections)
    user = nccl_user_p2p_level(s.env)
    if user is not None and user.level == "LOC":
        variable = user.variable
        return Finding(
            "p2p_disabled",
            WARN,
            f"P2P is disabled by {variable}={s.env[variable]}: {shm} of {total} GPU connections go through host "
            "memory (SHM) instead of GPU to GPU",
            f"unset {variable}; if NCCL then fails or hangs, the driver, the IOMMU or PCIe ACS blocks P2P: "
            "`commprof doctor` checks each (p2p, iommu, acs)",
            _lines(s, variable)[:1] + _lines(s, "transport:SHM"),
        )
    return Finding(
        "p2p_unavailable",
        WARN,
        f"NCCL uses host memory (SHM) for {shm} of {total} GPU connections: P2P is unavailable between those "
        "GPUs (a path beyond NCCL's P2P level, PXB by default, or a driver that refuses peer access)",
        "where the pairs cross a CPU host bridge (`nvidia-smi topo -m`: PHB, NODE or SYS), measure "
        "NCCL_P2P_LEVEL=SYS (an axis of sweeps/pcie8-verify.toml); `commprof doctor` says whether P2P works",
        _lines(s, "transport:SHM", "NCCL_P2P_LEVEL"),
    )


def p2p_through_host(s: NcclLogSummary) -> Finding | None:
    """P2P is on, but the ring's GPU-to-GPU path crosses the CPU's host bridge or the socket link."""
    if not s.transports.get("P2P"):
        return None
    graph = next((g for g in s.graphs if g["type_intra"] in HOST_PATHS), None)
    if graph is None:
        return None
    return Finding(
        "p2p_through_host",
        INFO,
        f"P2P traffic crosses the CPU (graph path type {graph['type_intra']}): GPU-to-GPU copies go through the "
        f"root complex{' and the socket link' if graph['type_intra'] == 'SYS' else ''}, at "
        f"{graph['bw_intra_gbps']:g} GB/s per channel in NCCL's model",
        "check measured P2P bandwidth with `commprof doctor`; rings whose neighbours share a PCIe switch "
        "(an NCCL_GRAPH_FILE) keep most hops off the host",
        [graph["line"], *_lines(s, "transport:P2P")[:1]],
    )


def turin_graph(s: NcclLogSummary) -> Finding | None:
    """The dual-socket ring NCCL builds on AMD Turin when it under-rates the socket link: GPU-to-GPU (P2P) rings
    across the sockets (NVIDIA/nccl PR #2127). A SYS graph of host-memory (SHM) rings, as P2P off gives, is not it;
    a CPU the log shows as other than AMD rules it out."""
    if s.p2p_level == "LOC" or not s.transports.get("P2P") or s.cpu_vendor not in (None, "AMD"):
        return None
    for g in s.graphs:
        if (g["pattern"], g["channels"], g["bw_intra_gbps"], g["bw_inter_gbps"], g["type_intra"]) == (
            4,
            2,
            15.0,
            15.0,
            "SYS",
        ):
            known = s.cpu_vendor == "AMD"
            cpu = (
                "NCCL's topology shows an AMD CPU"
                if known
                else "the log does not show the CPU (NCCL prints it with NCCL_DEBUG_SUBSYS=GRAPH), so check it is "
                "AMD (lscpu) before acting"
            )
            return Finding(
                "turin_graph",
                WARN if known else INFO,
                "NCCL's P2P ring is the dual-socket signature of the known AMD Turin misdetection (Pattern 4, "
                f"2 channels, bw 15/15, type SYS): it rates the socket link far below its real bandwidth and "
                f"settles on 2 slow channels; {cpu}",
                "measure with a hand-written NCCL_GRAPH_FILE (on 8 x RTX PRO 6000: 26-37 us instead of 48-56 us "
                "at 32-256 KB); upstream fixes are proposed in NVIDIA/nccl PRs #2113 and #2127",
                [g["line"], *_lines(s, "cpu")[:1], *_lines(s, "transport:P2P")[:1]],
            )
    return None


def ll128_on_pcie(s: NcclLogSummary) -> Finding | None:
    """LL128 forced by NCCL_PROTO where NCCL keeps it off: PCIe paths, where it can corrupt data."""
    value = s.env.get("NCCL_PROTO")
    if not value or any(g["type_intra"] in NVLINK_PATHS for g in s.graphs):
        return None
    try:
        if not forces_ll128(value):
            return None
    except ValueError:
        return None
    return Finding(
        "ll128_forced_on_pcie",
        FAIL,
        f"NCCL_PROTO={value} forces LL128 on a box without NVLink: NCCL keeps LL128 off on PCIe because it can "
        "corrupt data there",
        "remove LL128 from NCCL_PROTO (or unset it); commprof's sweep checks every result against the exact sum",
        _lines(s, "NCCL_PROTO"),
    )


def env_overrides_tuner(s: NcclLogSummary) -> Finding | None:
    """NCCL_ALGO / NCCL_PROTO in the environment win over a tuner plugin's per-size rules."""
    forced = [name for name in ("NCCL_ALGO", "NCCL_PROTO") if name in s.env]
    if not s.tuner_plugin or not forced:
        return None
    settings = ", ".join(f"{name}={s.env[name]}" for name in forced)
    return Finding(
        "env_overrides_tuner",
        WARN,
        f"{settings} overrides the tuner plugin {s.tuner_plugin}: its per-size rules do not apply to what they force",
        f"unset {' and '.join(forced)} and let the tuner's NCCL_TUNER_CONFIG_FILE choose per size",
        _lines(s, "tuner", *forced),
    )


# NCCL <= 2.29: "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx" (src/init.cc); 2.30:
# "Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 ..." (src/init.cc:1057).
DUPLICATE_GPU = ("duplicate gpu", "multiple ranks are using the same gpu")


def duplicate_gpu(s: NcclLogSummary) -> Finding | None:
    evidence = _warned(s, *DUPLICATE_GPU)
    if not evidence:
        return None
    return Finding(
        "duplicate_gpu",
        FAIL,
        "two ranks of one communicator are on the same GPU, which NCCL refuses",
        "give each rank its own GPU (CUDA_VISIBLE_DEVICES or the local rank); for a functional check on one GPU, "
        "set a different NCCL_HOSTID per rank (or NCCL_MULTI_RANK_GPU_ENABLE=1 on NCCL >= 2.30)",
        evidence[:3],
    )


def capture_error(s: NcclLogSummary) -> Finding | None:
    evidence = _warned(s, "captur")
    if not evidence:
        return None
    return Finding(
        "capture_error",
        FAIL,
        "NCCL failed under CUDA-graph capture: an engine that captures its step cannot use this setting",
        "capture only after an eager warm-up on every rank, with every rank capturing; drop settings seen to "
        "break capture (e.g. NCCL_ALGO=Tree) and keep the ones whose sweep points pass in graph mode",
        evidence[:3],
    )


def no_algorithm(s: NcclLogSummary) -> Finding | None:
    evidence = _warned(s, "no algorithm/protocol available")
    if not evidence:
        return None
    return Finding(
        "no_algorithm",
        FAIL,
        "NCCL found no algorithm/protocol for a collective: NCCL_ALGO / NCCL_PROTO leave it nothing it can run",
        'restrict the setting to the all-reduce, e.g. NCCL_ALGO="allreduce:tree" (NCCL >= 2.24), so broadcast '
        "and all-gather keep Ring",
        evidence[:3] + _lines(s, "NCCL_ALGO", "NCCL_PROTO"),
    )


# NCCL's check that its kernels' dynamic shared memory fits the device (src/enqueue.cc, ncclInitKernelsForDevice):
# 2.25.1 INFO "ncclMaxSharedMem %d exceeds device/fn maxSharedMem %zu" (it lowers the request, and on RTX 5090 the
# communicator then fails: NVIDIA/nccl#1637, fixed in 2.26); 2.26.2-2.29.2 WARN "cudaArch %d ncclMaxSharedMem %d
# exceeds device/fn maxSharedMem %zu" and 2.29.7-2.30.7 WARN "cudaArch %d dynamic smem %d exceeds device/fn
# maxSharedMem %d", both returning ncclSystemError.
_SHARED_MEM = re.compile(
    r"(?:cudaArch (\d+) )?(?:ncclMaxSharedMem|dynamic smem) (\d+) exceeds device/fn maxSharedMem (\d+)"
)
# CUDA errors NCCL prints while loading or launching its kernels: "Cuda failure '%s'" (src/include/checks.h) and
# "Cuda failure %d '%s'" (src/include/cudawrap.h, the driver calls: cuLaunchKernelEx in src/enqueue.cc), 2.21-2.30.
LAUNCH_ERRORS = {
    "no kernel image is available": "this NCCL has no kernels for this GPU's architecture",
    "invalid device function": "this NCCL has no kernels for this GPU's architecture",
    "too many resources requested for launch": "a kernel asks more registers or shared memory than the GPU has",
    "unspecified launch failure": "a kernel faulted (an illegal access, often a driver or P2P problem)",
    "launch timed out": "a kernel ran past the display watchdog (a GPU that drives a display)",
}


def shared_memory_too_small(s: NcclLogSummary) -> Finding | None:
    """NCCL's kernels ask more shared memory than the device allows them: their setup fails."""
    evidence = _lines(s, "shared_mem")
    if not evidence:
        return None
    m = _SHARED_MEM.search(evidence[0])
    arch = f"cudaArch {m.group(1)}: " if m and m.group(1) else ""
    figures = f" ({arch}{m.group(2)} B asked, {m.group(3)} B allowed)" if m else ""
    return Finding(
        "shared_memory_too_small",
        FAIL,
        f"NCCL's kernels ask more shared memory than the device allows them{figures}: NCCL cannot run its "
        "collectives on this GPU (the known failure of NCCL 2.25.1 on RTX 5090, NVIDIA/nccl#1637)",
        "upgrade NCCL to 2.26 or later (fixed there), or use an NCCL built for this GPU's architecture; the version "
        "line of NCCL_DEBUG=INFO says which one loaded (a PyTorch wheel brings its own)",
        evidence[:3],
    )


def launch_failure(s: NcclLogSummary) -> Finding | None:
    """A CUDA error while NCCL loads or launches its kernels, with what that error means."""
    evidence = _warned(s, *LAUNCH_ERRORS)
    if not evidence:
        return None
    first = evidence[0].lower()
    meaning = next(why for needle, why in LAUNCH_ERRORS.items() if needle in first)
    return Finding(
        "launch_failure",
        FAIL,
        f"NCCL's kernel failed to load or launch: {evidence[0].removeprefix('NCCL WARN ')} ({meaning})",
        "check that the NCCL loaded matches the GPU and the CUDA runtime (NCCL_DEBUG=INFO prints its version), "
        "that no other process holds the GPU, and run `commprof doctor`",
        evidence[:3],
    )


def net_within_node(s: NcclLogSummary) -> Finding | None:
    if not s.transports.get("NET") or s.nnodes != 1:
        return None
    return Finding(
        "net_within_node",
        WARN,
        "GPUs of one host talk over the network transport: the ranks share neither /dev/shm nor IPC "
        "(separate containers?)",
        "run the ranks in one container, or with --ipc=host and a shared /dev/shm",
        _lines(s, "transport:NET"),
    )


def other_warnings(s: NcclLogSummary) -> Finding | None:
    known = (*DUPLICATE_GPU, "captur", "no algorithm/protocol available", "exceeds device/fn", *LAUNCH_ERRORS)
    rest = [f"NCCL WARN {w}" for w in s.warnings if not any(k in w.lower() for k in known)]
    if not rest:
        return None
    return Finding(
        "nccl_warnings",
        WARN,
        f"NCCL printed {len(rest)} other warning(s); the first: {rest[0].removeprefix('NCCL WARN ')}",
        "read the warnings in order: the first usually names the cause",
        rest[:3],
    )


RULES: tuple[Callable[[NcclLogSummary], Finding | None], ...] = (
    shared_memory_too_small,
    launch_failure,
    duplicate_gpu,
    no_algorithm,
    capture_error,
    ll128_on_pcie,
    p2p_disabled,
    turin_graph,
    env_overrides_tuner,
    net_within_node,
    p2p_through_host,
    other_warnings,
)


def find_problems(summary: NcclLogSummary) -> list[Finding]:
    """Every rule's finding, most severe rules first."""
    return [finding for rule in RULES if (finding := rule(summary)) is not None]
