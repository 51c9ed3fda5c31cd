"""The conditions that make a box's collectives slower than the cost model predicts, each a transformation of the
modelled box (commprof.costmodel) at one magnitude, and the time of an observed collective under it.

How each is priced, and where its magnitude comes from:
- p2p-off-shm: P2P disabled (NCCL_P2P_DISABLE=1, or a driver that refuses peer access): NCCL connects every pair
  through host memory. The cost model's own SHM transport under NCCL_P2P_DISABLE=1 (topology.link_for), with the
  topology's [links.shm] figures (a box read from a bundle: the measured SHM figures of
  costmodel.box_prior.SHM_HOST_MEMORY). No free magnitude.
- acs-redirect: ACS request redirect on the bridges above the GPUs sends every peer write up to the root complex
  and back. NCCL does not see ACS (ncclTopoCheckP2p reads the path type and NVML's status: costmodel.nccl_paths),
  so its choice stands and every P2P hop pays the detour. Modelling assumption: a latency added to each hop of
  every protocol (the cost model's hop_us, which NCCL's own choice does not read), fitted to the observation
  within HOP_DETOUR_US. The upper bound is the hop through the host that field reports give for P2P pushed through
  the root complex or the IOMMU, about 14 us (p2pBandwidthLatencyTest with P2P off, rtx6kpro pcie-bandwidth.md;
  commprof's field-evidence notes, section 3).
- iommu-translation: the IOMMU translates every DMA access of the GPUs, to peers and to host memory. Priced as
  acs-redirect (same assumption, same bound: the field reports give one figure for both), on every PCIe hop, P2P or
  SHM; on a P2P box the two predict the same times, and the doctor's acs and iommu checks tell them apart.
- link-downtrained: a GPU link trained below its generation or width. NCCL reads max_link_speed / max_link_width
  from sysfs (src/graph/xml.cc ncclTopoGetXmlFromSys), so it chooses as for a full link while the data moves at
  the trained rate: the per-lane rate of each PCIe generation (PCIE_GTS, PCIE_ENCODING: the PCI-SIG base
  specifications' signalling rates and line codes) times the lanes.
- channels-limited: NCCL_MAX_NCHANNELS below the channels the model runs, priced by the cost model's own rule
  (costmodel.simulate.params_for), each count from 1 up.
- proto-forced: NCCL_PROTO forcing one protocol, or NCCL_ALGO one all-reduce algorithm: NCCL's choice among what
  is left (costmodel.simulate.nccl_setting).
- late-rank: one rank reaches each collective late and every rank waits for it: a fixed delay per op, fitted to
  the observation. No published figure bounds it: the delay is what the observation measures.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal, get_args

from commprof.costmodel.box import link_figures
from commprof.costmodel.latency import predict
from commprof.costmodel.simulate import nccl_setting, params_for
from commprof.costmodel.topology import Topology, link_for
from commprof.errors import UsageError
from commprof.nccl_vocab import PROTOCOLS

Condition = Literal[
    "as-modelled",
    "p2p-off-shm",
    "acs-redirect",
    "iommu-translation",
    "link-downtrained",
    "channels-limited",
    "proto-forced",
    "late-rank",
]
# In the order the field reports name them as causes of slow small all-reduce on PCIe boxes, most repeated first
# (broken P2P: commprof's field-evidence notes, section 4); the order breaks ties between equal fits.
CONDITIONS: tuple[Condition, ...] = get_args(Condition)
AS_MODELLED: Condition = "as-modelled"

HOP_DETOUR_US = (0.0, 14.0)  # acs-redirect / iommu-translation: the added latency per hop (module docstring)
HOP_DETOUR_SOURCE = (
    "modelling assumption: a latency added to every hop, fitted to the observation within 0-14 us; 14 us is the hop "
    "through the host field reports give for P2P pushed through the root complex or the IOMMU "
    "(p2pBandwidthLatencyTest, rtx6kpro pcie-bandwidth.md)"
)
# PCIe per-lane signalling rate (GT/s) and line code by generation: PCI Express Base Specifications 1.0-5.0.
PCIE_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130}
WIDTHS = (16, 8, 4, 2, 1)
RATE_DIVISORS = (2, 4, 8, 16)  # a link of unknown generation: each halving is a generation down or half the lanes
DOWNTRAINED_SOURCE = (
    "NCCL reads max_link_speed / max_link_width (src/graph/xml.cc), so it chooses as for a full link; data moves at "
    "the trained rate (PCIe per-lane rates of the PCI-SIG base specifications)"
)
LATE_SOURCE = "a fixed delay per op, fitted to the observation: no published figure bounds it"
SHM_SOURCE = "the cost model's SHM transport under NCCL_P2P_DISABLE=1, with the topology's [links.shm] figures"
NCCL_RULE_SOURCE = "NCCL's own rule in the cost model (costmodel.simulate: nccl_setting, params_for)"
SOURCES: dict[Condition, str] = {
    "as-modelled": "the cost model of the box as it stands",
    "p2p-off-shm": SHM_SOURCE,
    "acs-redirect": f"NCCL does not see ACS, its choice stands; P2P hops only; {HOP_DETOUR_SOURCE}",
    "iommu-translation": f"NCCL does not see the IOMMU, its choice stands; every PCIe hop; {HOP_DETOUR_SOURCE}",
    "link-downtrained": DOWNTRAINED_SOURCE,
    "channels-limited": NCCL_RULE_SOURCE,
    "proto-forced": NCCL_RULE_SOURCE,
    "late-rank": LATE_SOURCE,
}
# Pairs that are no combination: no P2P left to redirect once P2P is off; two names for the same per-hop latency.
EXCLUSIVE = ({"p2p-off-shm", "acs-redirect"}, {"acs-redirect", "iommu-translation"})
HopScope = Literal["p2p", "pcie"]
HOP_LINKS: dict[str, tuple[str, ...]] = {"p2p": ("pci",), "pcie": ("pci", "shm")}  # the links each scope slows


@dataclass(frozen=True)
class Variant:
    """One condition (or two together) at one discrete magnitude; the continuous magnitudes (a per-hop latency,
    a late rank's delay) are fitted to the observation (commprof.explain.ranking)."""

    conditions: tuple[Condition, ...]
    """The conditions it stands for; () is the box as modelled."""
    env: tuple[tuple[str, str], ...] = ()
    """NCCL variables the conditions set (NCCL_P2P_DISABLE, NCCL_MAX_NCHANNELS, NCCL_PROTO, NCCL_ALGO)."""
    rate_divisor: float = 1.0
    """link-downtrained: the full link's rate over the trained one."""
    per_hop: HopScope | None = None
    """acs-redirect ("p2p": P2P hops) or iommu-translation ("pcie": every PCIe hop): a fitted latency per hop."""
    late: bool = False
    """late-rank: a fitted delay per op."""
    magnitude: str = ""
    """The discrete part in words: "NCCL_MAX_NCHANNELS=1", "Gen4 x8 of Gen5 x16"."""

    @property
    def name(self) -> str:
        return "+".join(self.conditions) or AS_MODELLED

    def joined(self, other: Variant) -> Variant:
        """Both variants at once."""
        return Variant(
            self.conditions + other.conditions,
            self.env + other.env,
            self.rate_divisor * other.rate_divisor,
            self.per_hop or other.per_hop,
            self.late or other.late,
            "; ".join(m for m in (self.magnitude, other.magnitude) if m),
        )


@dataclass(frozen=True)
class OpTime:
    """The time of one op under a variant, as a line in its fitted magnitudes: base + per_hop_us x the per-hop
    latency (per_hop_us: the op's hops, 0 where the variant's hops do not apply), and the link it runs on."""

    base_us: float
    per_hop_us: float
    link: str


def _modelled_link(topology: Topology, env: Mapping[str, str], ranks: int) -> str:
    return link_for(topology, dict(env), ranks)


def op_time(
    topology: Topology, variant: Variant, collective: str, nbytes: int, ranks: int, env: Mapping[str, str]
) -> OpTime:
    """One op's predicted time under the variant; UsageError where NCCL (or the model) would refuse it."""
    merged = {**env, **dict(variant.env)}
    setting = nccl_setting(topology, merged, ranks)
    params, _ = params_for(topology, setting, None, ranks)
    if variant.rate_divisor != 1.0:  # NCCL chooses as for the full link (selection_bw_gbps), data moves slower
        params = replace(
            params,
            channel_bw_gbps=params.channel_bw_gbps / variant.rate_divisor,
            nccl_bw_gbps=params.selection_bw_gbps,
            max_bus_gbps=params.max_bus_gbps / variant.rate_divisor if params.max_bus_gbps else None,
            bus_cap_gbps=params.bus_cap_gbps / variant.rate_divisor if params.bus_cap_gbps else None,
        )
    algos, protos = setting.algos[collective], setting.protos[collective]
    base = predict(params, collective, nbytes, ranks, algos, protos).time_us
    if setting.link not in HOP_LINKS.get(variant.per_hop or "", ()):
        return OpTime(base, 0.0, setting.link)
    # NCCL's choice reads its own table latencies, never hop_us (CostParams.selector): the line is exact.
    slower = replace(params, hop_us={p: h + 1.0 for p, h in params.hop_us.items()})
    per_hop = predict(slower, collective, nbytes, ranks, algos, protos).time_us - base
    return OpTime(base, per_hop, setting.link)


def _downtrained(topology: Topology) -> list[Variant]:
    """The trained states below the box's link (a bundle's generation and width), else rate divisors."""
    box = topology.box
    gen = width = None
    if box is not None:
        figures = link_figures(box)
        if not figures.gen.assumed and not figures.width.assumed:
            gen, width = figures.gen.value, figures.width.value
    if gen not in PCIE_GTS or width not in WIDTHS:
        return [
            Variant(("link-downtrained",), rate_divisor=k, magnitude=f"the GPU links at 1/{k} of their rate")
            for k in RATE_DIVISORS
        ]
    full = PCIE_GTS[gen] * PCIE_ENCODING[gen] * width
    states: dict[float, list[str]] = {}
    for g in range(gen, 0, -1):
        for w in WIDTHS:
            if w <= width and (g, w) != (gen, width):
                divisor = round(full / (PCIE_GTS[g] * PCIE_ENCODING[g] * w), 2)
                states.setdefault(divisor, []).append(f"Gen{g} x{w}")
    return [
        Variant(
            ("link-downtrained",),
            rate_divisor=divisor,
            magnitude=f"GPU links at {' or '.join(names[:2])} of Gen{gen} x{width}",
        )
        for divisor, names in sorted(states.items())
        if divisor <= 32
    ]


def variants(topology: Topology, env: Mapping[str, str], ranks: int) -> tuple[dict[Condition, list[Variant]], dict]:
    """Per condition, its variants on this box; and the conditions that are no change here, with why."""
    link = _modelled_link(topology, env, ranks)
    out: dict[Condition, list[Variant]] = {AS_MODELLED: [Variant(())]}
    same: dict[Condition, str] = {}
    if link == "shm":
        same["p2p-off-shm"] = "the modelled box already moves every ring hop through host memory (SHM)"
        same["acs-redirect"] = "no P2P hop in the modelled ring to redirect (it runs over SHM)"
    else:
        out["p2p-off-shm"] = [Variant(("p2p-off-shm",), (("NCCL_P2P_DISABLE", "1"),), magnitude="NCCL_P2P_DISABLE=1")]
        if link == "nvlink":
            same["acs-redirect"] = "the GPUs talk over NVLink, which ACS does not redirect"
        else:
            out["acs-redirect"] = [Variant(("acs-redirect",), per_hop="p2p")]
    if link == "nvlink":
        same["iommu-translation"] = "the GPUs talk over NVLink, which the IOMMU does not translate"
    else:
        out["iommu-translation"] = [Variant(("iommu-translation",), per_hop="pcie")]
    out["link-downtrained"] = _downtrained(topology)
    channels = params_for(topology, nccl_setting(topology, dict(env), ranks), None, ranks)[0].channels
    if channels > 1:
        out["channels-limited"] = [
            Variant(("channels-limited",), (("NCCL_MAX_NCHANNELS", str(c)),), magnitude=f"NCCL_MAX_NCHANNELS={c}")
            for c in range(1, channels)
        ]
    else:
        same["channels-limited"] = "NCCL runs one channel here already"
    forced = [("NCCL_PROTO", p.env) for p in PROTOCOLS]
    forced += [("NCCL_ALGO", f"allreduce:{a}") for a in ("ring", "tree")]
    out["proto-forced"] = [
        Variant(("proto-forced",), ((name, value),), magnitude=f"{name}={value}")
        for name, value in forced
        if name not in env
    ]
    out["late-rank"] = [Variant(("late-rank",), late=True)]
    return {c: v for c, v in out.items() if v}, same


def check_ranks(topology: Topology, ranks: int, where: str) -> None:
    """UsageError where an observation's rank count cannot run on the box."""
    if not 2 <= ranks <= topology.gpus:
        raise UsageError(
            f"{where}: {ranks} ranks cannot be priced on {topology.name} ({topology.gpus} GPUs): the model prices "
            f"2 to {topology.gpus} ranks of this box"
        )
