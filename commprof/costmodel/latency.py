"""Latency of one collective: NCCL's own tuning model (src/graph/tuning.cc) as the prior, plus fitted parameters.

NCCL estimates, for each algorithm x protocol, time = latency + bytes / bandwidth and runs the fastest
enabled pair. This module reproduces that estimate for a single-node all-reduce (and ring all-gather /
reduce-scatter) and lets three things that NCCL hard-codes be fitted to a real box: a fixed per-op
overhead, the per-hop latency of each protocol, and the per-channel bus bandwidth. Pure functions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from commprof.errors import UsageError
from commprof.nccl_vocab import MODEL_PROTOCOLS, PLAN_COLLECTIVES

PROTOS = MODEL_PROTOCOLS
LINKS = ("nvlink", "pci", "shm")
ARCHS = ("volta", "ampere", "hopper", "blackwell")
COLLECTIVES = PLAN_COLLECTIVES

# NCCL 2.23-2.32 tuning.cc constants (ncclTunerConstantsDefaults, treeCorrectionFactor), microseconds and GB/s.
# Index = PROTOS. 2.31.2's libnccl.so.2 holds 2.30.7's tables byte for byte; 2.32.3's raise Blackwell's N1 llMaxBws
# to 282.4 (LL_MAX_BW keeps 282.0: 0.14 % apart, far inside any model error) and its N2 perChMaxTreeLL128Bws (one
# node is modelled: unused); commprof/nccl_vocab.py's note on NCCL 2.31.2 and 2.32.3 says how they were read.
BASE_LATENCY_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0)}
# Per-hop hardware latency by link type. NCCL has no SHM row: host-staged paths are not NVLink, so "pci".
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0)},
}
# Single-node (N1) caps by GPU generation.
LL_MAX_BW = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
PER_CH_MAX_RING_LL128_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}
PER_CH_MAX_TREE_LL128_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 55.6}
PER_CH_MAX_TREE_BW = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7, "blackwell": 70.0}
# Tree all-reduce bandwidth correction for sizes 64 B << k, k = 0..22 (ncclTopoGetAlgoTime).
TREE_CORRECTION = {
    "LL": (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    "LL128": (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.8,
        0.9,
        0.9,
        0.9,
        0.9,
        1.0,
        1.0,
    ),
    "Simple": (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
    ),
}
# Per-op trimming (enqueue.cc): channels, then threads, shrink while bytes < channels x threads x threshold.
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
PCI_BW = 12.0  # GB/s; NCCL runs Ring/Simple on 256 threads when channels x bandwidth <= this


# GPU product names -> NCCL's generation (compute capabilities from NVIDIA's CUDA GPU list; Ada, 8.9, counts as
# Ampere in NCCL's tables, Turing, 7.5, as Volta). Blackwell first: "RTX PRO 6000 Blackwell" is no RTX 6000 Ada.
_GPU_GENERATIONS = (
    ("blackwell", re.compile(r"Blackwell|\bG?B[123]00\b|\bGB10\b|RTX 50[5-9]0")),
    ("hopper", re.compile(r"\bG?H(100|200|800|20)\b")),
    ("ampere", re.compile(r"\bA(100|800|10|16|2|30|40)\b|RTX A\d{4}|RTX [34]0[5-9]0|\bL(4|20|40S?)\b|\bAda\b")),
    ("volta", re.compile(r"V100|TITAN V|\bT4\b|RTX 20[5-9]0|Quadro RTX")),
)


def arch_of_gpu_name(name: str) -> str | None:
    """NCCL's generation of a GPU by the name nvidia-smi / nccl-tests print, or None when it is not known."""
    for arch, pattern in _GPU_GENERATIONS:
        if pattern.search(name):
            return arch
    return None


def arch_of(compute_capability: float) -> str:
    """NCCL's generation index: >= 10 Blackwell, >= 9 Hopper, >= 8 Ampere, else Volta."""
    if compute_capability >= 10:
        return "blackwell"
    if compute_capability >= 9:
        return "hopper"
    if compute_capability >= 8:
        return "ampere"
    return "volta"


@dataclass(frozen=True)
class CostParams:
    """The parameters of one (link type, GPU generation) cost model; the NCCL prior has overhead 0.

    hop_us: per-hop Ring latency per protocol (Tree scales it by NCCL's Tree/Ring ratio for the link).
    channel_bw_gbps: bus bandwidth of one channel (NCCL's bwIntra). channels: NCCL's channel count.
    """

    link: str
    arch: str
    channels: int
    channel_bw_gbps: float
    hop_us: dict[str, float]
    overhead_us: float = 0.0
    nvls_channels: int = 0
    nccl_bw_gbps: float | None = None  # per-channel bandwidth NCCL's own search assumes; drives its choice
    # NCCL_THREAD_THRESHOLDS (tree LL, LL128, Simple, ring LL, LL128, Simple; < 0 keeps the default) and
    # NCCL_NTHREADS: they decide the per-op trimming of channels.
    thread_thresholds: tuple[int, ...] | None = None
    nthreads: int | None = None
    bus_cap_gbps: float | None = None  # the links' capacity when NCCL_MIN_NCHANNELS adds duplicated rings
    # The links' measured capacity, which no protocol's bus bandwidth passes whatever NCCL's figures say (NCCL's own
    # model has no such bound, so its choice ignores it); None: NCCL's figures alone.
    max_bus_gbps: float | None = None
    source: str = "nccl-prior"
    fit: dict = field(default_factory=dict, compare=False)
    # A calibration that fell back to a latency + bandwidth line (commprof.costmodel.cohorts): (intercept µs,
    # µs per byte) replaces the time of whatever NCCL picks; None: the cost model's own estimate.
    line: tuple[float, float] | None = None

    def to_dict(self) -> dict:
        return {
            "link": self.link,
            "arch": self.arch,
            "channels": self.channels,
            "channel_bw_gbps": self.channel_bw_gbps,
            "hop_us": dict(self.hop_us),
            "overhead_us": self.overhead_us,
            "nvls_channels": self.nvls_channels,
            "nccl_bw_gbps": self.selection_bw_gbps,
            **({"max_bus_gbps": self.max_bus_gbps} if self.max_bus_gbps is not None else {}),
            "source": self.source,
            "fit": dict(self.fit),
        }

    @property
    def selection_bw_gbps(self) -> float:
        return self.channel_bw_gbps if self.nccl_bw_gbps is None else self.nccl_bw_gbps

    def selector(self) -> CostParams:
        """What NCCL itself believes about this box (its table latencies, its bandwidth): it picks with this."""
        ring = HW_LATENCY_US[_hw(self.link)]["ring"]
        channel_bw = self.selection_bw_gbps
        if self.bus_cap_gbps is not None:  # NCCL halves a duplicated ring's bandwidth in its own model
            channel_bw = min(
                channel_bw, self.bus_cap_gbps * self.selection_bw_gbps / self.channel_bw_gbps / self.channels
            )
        return replace(
            self,
            hop_us=dict(zip(PROTOS, ring)),
            overhead_us=0.0,
            channel_bw_gbps=channel_bw,
            nccl_bw_gbps=None,
            bus_cap_gbps=None,
            max_bus_gbps=None,
        )


def nccl_prior(link: str, arch: str, channels: int, channel_bw_gbps: float, nvls_channels: int = 0) -> CostParams:
    """NCCL's own figures for a box: Ring per-hop latency from its table, no extra overhead."""
    if link not in LINKS:
        raise UsageError(f"unknown link type {link!r}; known: {', '.join(LINKS)}")
    if arch not in ARCHS:
        raise UsageError(f"unknown GPU generation {arch!r}; known: {', '.join(ARCHS)}")
    ring = HW_LATENCY_US[_hw(link)]["ring"]
    return CostParams(
        link=link,
        arch=arch,
        channels=channels,
        channel_bw_gbps=channel_bw_gbps,
        hop_us=dict(zip(PROTOS, ring)),
        nvls_channels=nvls_channels,
    )


@dataclass(frozen=True)
class Choice:
    """One algorithm x protocol estimate for one message."""

    algo: str
    proto: str
    channels: int
    latency_us: float
    algbw_gbps: float
    time_us: float


def _hw(link: str) -> str:
    return "nvlink" if link == "nvlink" else "pci"


def _steps(collective: str, ranks: int) -> int:
    return 2 * (ranks - 1) if collective == "all_reduce" else ranks - 1


def default_protocols(link: str) -> tuple[str, ...]:
    """LL128 is on by default only where every intra-node path is NVLink (tuning.cc, NCCL >= 2.27)."""
    return PROTOS if link == "nvlink" else ("LL", "Simple")


def default_algorithms(collective: str, nvls: bool) -> tuple[str, ...]:
    if collective != "all_reduce":
        return ("nvls", "ring") if nvls else ("ring",)
    return ("tree", "ring", "nvls") if nvls else ("tree", "ring")


@dataclass(frozen=True)
class Op:
    """One collective call as the cost model sees it."""

    collective: str
    """The collective ("all_reduce", "all_gather", ...)."""
    nbytes: int
    """Its message size in bytes."""
    ranks: int
    """The ranks taking part."""


def trimmed_channels(params: CostParams, op: Op, algo: str, proto: str) -> int:
    """Channels NCCL actually launches for this message after per-op trimming (enqueue.cc topoGetAlgoInfo), from
    the channels `params` gives the algorithm, their bandwidth and its NCCL_THREAD_THRESHOLDS and NCCL_NTHREADS."""
    if algo == "nvls":
        return params.nvls_channels
    channels = params.channels
    threads = MAX_THREADS[proto]
    if proto == "Simple" and algo == "ring" and channels * params.channel_bw_gbps <= PCI_BW:
        threads = 256
    if params.nthreads and proto != "LL128":  # NCCL_NTHREADS sets LL and Simple; LL128 has NCCL_LL128_NTHREADS
        threads = params.nthreads
    threshold = THREAD_THRESHOLD[proto] * (op.ranks if (algo == "ring" and proto == "LL") else 1)
    if params.thread_thresholds is not None:
        override = params.thread_thresholds[(3 if algo == "ring" else 0) + PROTOS.index(proto)]
        if override >= 0:
            threshold = override
    # NCCL's loop (`while (nBytes < nc * nt * threshold && nc >= 2) nc--`) in closed form: one step, whatever
    # the channel count.
    unit = threads * threshold
    if channels < 2 or unit <= 0 or op.nbytes >= channels * unit:
        return channels
    return max(1, min(channels, int(op.nbytes // unit)))


def estimate(params: CostParams, op: Op, algo: str, proto: str, trim: bool = True) -> Choice | None:
    """NCCL's estimate for one pair with `params`; None where NCCL does not offer the pair.

    trim=False is NCCL's own selection-time view (all channels); trim=True uses the channels the op runs on.
    """
    collective, nbytes, ranks = op.collective, op.nbytes, op.ranks
    if collective not in COLLECTIVES:
        raise UsageError(f"the cost model knows {', '.join(COLLECTIVES)}, not {collective!r}")
    if ranks < 2:
        return Choice(algo, proto, 0, 0.0, math.inf, 0.0)
    if algo == "nvls" and (proto != "Simple" or params.nvls_channels < 2 or params.link != "nvlink"):
        return None
    if algo == "tree" and collective != "all_reduce":
        return None
    steps = _steps(collective, ranks)
    hw = _hw(params.link)
    p = PROTOS.index(proto)
    channels = params.nvls_channels if algo == "nvls" else params.channels
    if trim:
        channels = trimmed_channels(params, op, algo, proto)
    bus = channels * params.channel_bw_gbps
    if params.bus_cap_gbps is not None:
        bus = min(bus, params.bus_cap_gbps)
    if algo == "ring":
        if proto == "LL":
            bus = min(LL_MAX_BW[params.arch], bus * 0.5)
        elif proto == "LL128":
            bus = min(bus * 0.92, channels * PER_CH_MAX_RING_LL128_BW[params.arch])
        if params.max_bus_gbps is not None:
            bus = min(bus, params.max_bus_gbps)
        algbw = bus * ranks / steps
        latency = BASE_LATENCY_US["ring"][p] + steps * params.hop_us[proto]
    elif algo == "tree":
        bus = min(bus * 0.92, channels * PER_CH_MAX_TREE_BW[params.arch])
        if proto == "LL":
            bus = min(bus / 3.8, LL_MAX_BW[params.arch])
        elif proto == "LL128":
            bus = min(bus * 7.0 / 9.0, channels * PER_CH_MAX_TREE_LL128_BW[params.arch])
        log_size = int(math.log2(nbytes >> 6)) if nbytes >= 64 else -1
        if 0 <= log_size < 23:
            bus *= TREE_CORRECTION[proto][log_size]
        if params.max_bus_gbps is not None:
            bus = min(bus, params.max_bus_gbps)
        algbw = bus * 0.5
        ring_hw = HW_LATENCY_US[hw]["ring"][p]
        tree_hop = params.hop_us[proto] * HW_LATENCY_US[hw]["tree"][p] / ring_hw
        latency = BASE_LATENCY_US["tree"][p] + 2 * (ranks - 1) * tree_hop
    else:
        algbw = bus * ranks / steps
        latency = HW_LATENCY_US["nvlink"]["nvls"][p] * params.hop_us["Simple"] / HW_LATENCY_US["nvlink"]["ring"][2]
    latency += params.overhead_us
    time_us = latency + nbytes / (1000.0 * algbw)
    return Choice(algo, proto, channels, latency, algbw, time_us)


def predict(
    params: CostParams,
    collective: str,
    nbytes: int,
    ranks: int,
    algos: tuple[str, ...] | None = None,
    protos: tuple[str, ...] | None = None,
) -> Choice:
    """The pair NCCL picks (fastest by its own untrimmed estimate, params.selector()) and, with `params`,
    its time on the channels it runs on. UsageError when no pair is enabled ("No algorithm/protocol available").
    """
    if algos is None:
        algos = default_algorithms(collective, params.nvls_channels >= 2 and params.link == "nvlink")
    if protos is None:
        protos = default_protocols(params.link)
    selector = params.selector()
    op = Op(collective, nbytes, ranks)
    best: tuple[float, str, str] | None = None
    for algo in algos:
        for proto in protos:
            choice = estimate(selector, op, algo, proto, trim=False)
            if choice is not None and (best is None or choice.time_us < best[0]):
                best = (choice.time_us, algo, proto)
    if best is None:
        raise UsageError(
            f"no algorithm/protocol available for {collective} with algorithms {', '.join(algos)} "
            f"and protocols {', '.join(protos)}"
        )
    chosen = estimate(params, op, best[1], best[2], trim=True)
    assert chosen is not None
    if params.line is not None:
        intercept, slope = params.line
        return replace(chosen, latency_us=intercept, time_us=intercept + slope * nbytes)
    return chosen
