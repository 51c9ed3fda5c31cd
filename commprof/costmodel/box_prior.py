"""The simulator's topology of a box read from its bundle, with a prior that covers the paths PCIe boxes go wrong on.

NCCL's own model prices every host-memory (SHM) hop as a PCIe hop and knows nothing of its own graph search's
misfits, so on a box whose pairs cross host bridges it predicts a healthy box. Here each pathology takes its
figures from a published measurement, named in `PATHOLOGIES`:
- SHM through host memory (pairs beyond NCCL's P2P level, or P2P disabled): the fit of a real 8-GPU nccl-tests log
  of a dual-socket box without P2P, its bandwidth scaled to the box's PCIe generation;
- cross-socket P2P on AMD hosts (NCCL_P2P_LEVEL=SYS): the graph NCCL's search settles on there, 2 channels at
  15 GB/s (the AMD Turin graph misdetection);
- same-socket P2P: NCCL's figures for the link generation.
Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from commprof.costmodel.box import BoxTopology, Fact, box_from_bundle, link_figures, with_nccl_log
from commprof.costmodel.kernels import KernelModel
from commprof.costmodel.latency import predict
from commprof.costmodel.topology import LinkSpec, Topology, link_for, load_topology
from commprof.errors import UsageError
from commprof.evidence import ModelError
from commprof.nccl_log.parse import parse_nccl_log
from commprof.nccl_vocab import P2P_LEVELS
from commprof.textfiles import LOG_BYTES, read_text

# NCCL's PCIe link bandwidth by generation in its topology (src/graph/topo.cc: Gen3 12, Gen4 24, Gen5 48 GB/s at
# x16), and the per-channel speed its ring search settles on with 2 rings (half the link).
NCCL_PCI_GBPS = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}
RINGS = 2


@dataclass(frozen=True)
class Pathology:
    """Figures of one path measured on a real box, replacing NCCL's table figures for that path."""

    hop_us: dict[str, float]
    overhead_us: float
    channel_bw_gbps: float  # per channel, at `measured_gen`
    measured_gen: int
    source: str


# Fit of rtx4090x8_sys_noP2P_charlie0129 (8 x RTX 4090, PCIe Gen4 x16, 2 x EPYC, every pair SYS, P2P refused by
# the driver, so NCCL goes through host memory): `commprof calibrate` on all 50 rows (docs/cost-model.md, Measured
# accuracy; tests/test_costmodel_box.py refits the log and checks these). LL128 is off on PCIe: NCCL's LL128/LL ratio.
SHM_HOST_MEMORY = Pathology(
    hop_us={"LL": 2.26, "LL128": 2.26 * 2.5, "Simple": 6.27},
    overhead_us=1.03,
    channel_bw_gbps=7.52,
    measured_gen=4,
    source=(
        "SHM through host memory: fit of the real nccl-tests log of 8 x RTX 4090, dual EPYC, all pairs SYS, no P2P "
        "(charlie0129 blog 'RTX4090 GPUDirect P2P Unlocked!', 2025-02-07; tests/fixtures/nccl-tests/"
        "rtx4090x8_sys_noP2P_charlie0129.txt): overhead 1.03 us, per hop LL 2.26 / Simple 6.27 us, 7.52 GB/s per "
        "channel at PCIe Gen4"
    ),
)
# NCCL's search on dual-socket AMD Turin with 8 GPUs and P2P at SYS: "Pattern 4, crossNic 0, nChannels 2,
# bw 15/15, type SYS/PIX" (NVIDIA/nccl PR #2127, 8 x RTX PRO 6000 Blackwell, NCCL_P2P_LEVEL=SYS; PR #2113 and
# #2036: AMD_BW = 16 GB/s in src/graph/topo.h underestimates Zen 4/5 socket links and ends the search early).
AMD_CROSS_SOCKET_GBPS = 15.0
AMD_CROSS_SOCKET_SOURCE = (
    "cross-socket P2P on AMD: the graph NCCL's search picks on 8 x RTX PRO 6000, dual Turin, NCCL_P2P_LEVEL=SYS: "
    "2 channels at 15 GB/s (NVIDIA/nccl PR #2127; AMD_BW 16 GB/s in src/graph/topo.h, PRs #2113, #2036)"
)
PATHOLOGIES = {"shm": SHM_HOST_MEMORY.source, "amd_cross_socket_p2p": AMD_CROSS_SOCKET_SOURCE}
# The box prior against the published figures of a box it was not fitted on: 8 x RTX PRO 6000, dual EPYC Turin,
# NCCL's defaults, 48-56 us at 32-256 KB (commprof's NCCL reference notes, from local-inference-lab/rtx6kpro
# optimization/nccl-tuning.md). tests/test_costmodel_box.py recomputes the error on the ASUS bundle and fails on drift.
PUBLISHED_DEFAULTS_SIZES = (32 << 10, 64 << 10, 128 << 10, 256 << 10)
PUBLISHED_DEFAULTS_US = (48.0, 56.0)
BOX_PRIOR_ERROR_PCT = 25.0
BOX_PRIOR_ERROR_BASIS = (
    "the box prior's largest error at 32-256 KB against the published NCCL defaults of 8 x RTX PRO 6000 on dual "
    "EPYC Turin (48-56 us; rtx6kpro optimization/nccl-tuning.md), a box it was not fitted on; its SHM figures "
    "fit one log (7 % held out)"
)
LAUNCH_OVERHEAD_US = 4.0  # CPU launch of one NCCL kernel that a CUDA graph removes (assumed, as in the presets)


def _worst_level(box: BoxTopology) -> str:
    levels = {p.level.value.upper() for p in box.pairs}
    if any(level.startswith("NV") for level in levels) and len(levels) == 1:
        return "NVL"
    ranked = [("PHB" if level == "NODE" else level) for level in levels if not level.startswith("NV")]
    ranked = [level for level in ranked if level in P2P_LEVELS]
    return max(ranked, key=P2P_LEVELS.index) if ranked else "SYS"


def topology_from_box(box: BoxTopology) -> Topology:
    """The simulator's topology of the box: its facts, the pathology figures its paths need, every assumption."""
    if all(p.path == "NVL" for p in box.pairs):
        raise UsageError(
            f"--from-bundle {box.origin}: every GPU pair is NVLink ({box.pairs[0].level.source}); the box prior "
            "models PCIe boxes: simulate with an NVLink preset (--topology nvlink-h100 or nvlink-b200)"
        )
    link = link_figures(box)
    gen, width = link.gen.value, link.width.value
    scale = width / 16.0
    nccl_link = NCCL_PCI_GBPS.get(gen, 24.0) * scale
    assumptions = list(box.assumptions)
    assumptions.append(
        f"PCIe Gen{gen} x{width} ({link.gen.source}; {link.width.source}): NCCL's link figure {nccl_link:g} GB/s, "
        f"{RINGS} rings of {nccl_link / RINGS:g} GB/s each (src/graph/topo.cc, search.cc; not recorded by NCCL here)"
    )
    shm_bw = (
        SHM_HOST_MEMORY.channel_bw_gbps * NCCL_PCI_GBPS.get(gen, 24.0) / NCCL_PCI_GBPS[SHM_HOST_MEMORY.measured_gen]
    )
    shm_bw *= scale
    assumptions.append(
        f"SHM bandwidth scales with the GPUs' PCIe link: {SHM_HOST_MEMORY.channel_bw_gbps:g} GB/s per channel "
        f"measured at Gen{SHM_HOST_MEMORY.measured_gen} x16, {shm_bw:.2f} here"
    )
    cross_socket = any(p.level.value == "SYS" for p in box.pairs)
    pci_bw, pci_source = nccl_link / RINGS, f"NCCL's figures for PCIe Gen{gen} x{width}"
    if cross_socket and box.cpu_vendor.value == "AMD" and len(box.gpus) > 2:
        pci_bw, pci_source = min(pci_bw, AMD_CROSS_SOCKET_GBPS), AMD_CROSS_SOCKET_SOURCE
        assumptions.append(
            f"P2P across the sockets ({box.cpu_vendor.source}: AMD; pairs SYS) runs on the graph NCCL's search finds "
            "on dual-socket AMD hosts; NCCL's per-hop latencies used (no published cross-socket figure)"
        )
    gpu0 = box.gpus[0]
    atomics = {g.atomics_outbound.value for g in box.gpus}
    p2p_atomics = None if atomics & {None} else not (atomics <= {"N/A"})
    impls = published_kernels(float(box.gpus[0].compute_capability.value), gen, len(box.gpus))
    assumptions.append(
        f"the other all-reduces: predicted from published figures {PUBLISHED_KERNELS_NOTE}"
        if impls
        else "no published kernel figures for this box: only NCCL is predicted; other all-reduces are refused with "
        "why (measure them on the box)"
    )
    return Topology(
        name=f"bundle:{box.name}",
        path=box.origin,
        description=_description(box, gen, width),
        gpus=len(box.gpus),
        compute_capability=float(gpu0.compute_capability.value),
        gpu_path=_worst_level(box),
        p2p_supported=all(p.p2p_ok.value is not False for p in box.pairs),
        p2p_atomics=p2p_atomics,
        launch_overhead_us=LAUNCH_OVERHEAD_US,
        links={
            "pci": LinkSpec(RINGS, pci_bw, source=pci_source),
            "shm": LinkSpec(
                RINGS,
                round(shm_bw, 3),
                hop_us=dict(SHM_HOST_MEMORY.hop_us),
                overhead_us=SHM_HOST_MEMORY.overhead_us,
                nccl_bw_gbps=min(nccl_link / RINGS, 12.0),
                source=SHM_HOST_MEMORY.source,
            ),
        },
        impls=impls,
        assumptions="\n".join(assumptions),
        sources=(
            f"doctor bundle {box.origin} (every fact's file and line: meta.json topology.box)",
            *PATHOLOGIES.values(),
        ),
        box=box,
        prior_error=ModelError(BOX_PRIOR_ERROR_PCT, BOX_PRIOR_ERROR_BASIS),
    )


# GPU and PCIe class -> the preset whose published kernel figures were taken on that class of box.
PUBLISHED_KERNELS = {(12.0, 5, 8): "pcie-gen5-switch-p2p"}
CONFIRM_COMMAND = "torchrun --nproc-per-node 8 -m commprof.allreduce_sweep --sweep pcie8-verify"
PUBLISHED_KERNELS_NOTE = (
    "of another box of this class, 8 x SM120 on PCIe Gen5, not measured on this one: confirm with this command on "
    f"the box: {CONFIRM_COMMAND}"
)


def published_kernels(compute_capability: float, gen: int, gpus: int) -> dict[str, KernelModel]:
    """The other all-reduces' published figures for a box of this GPU and PCIe class (none where none exist),
    each labelled as another box's figures with the command that measures them on this one."""
    preset = PUBLISHED_KERNELS.get((compute_capability, gen, gpus))
    if preset is None:
        return {}
    return {
        name: replace(model, source=f"{PUBLISHED_KERNELS_NOTE}; {model.source}")
        for name, model in load_topology(preset).impls.items()
    }


def published_defaults_error(topology: Topology) -> float:
    """The largest % by which the prior's NCCL defaults (8 ranks, all-reduce) fall outside the published 48-56 us
    band at 32-256 KB: what BOX_PRIOR_ERROR_PCT records, rounded up, for the bundle of that box."""
    low, high = PUBLISHED_DEFAULTS_US
    params = topology.prior(link_for(topology, {}, 8))
    worst = 0.0
    for nbytes in PUBLISHED_DEFAULTS_SIZES:
        time_us = predict(params, "all_reduce", nbytes, 8).time_us
        miss = (low - time_us) / low if time_us < low else (time_us - high) / high if time_us > high else 0.0
        worst = max(worst, 100.0 * miss)
    return worst


def load_bundle_topology(bundle: Path, nccl_log: Path | None = None) -> Topology:
    """`simulate --from-bundle DIR [--nccl-log FILE]`: read the bundle (and the log) and build the topology."""
    box = box_from_bundle(bundle)
    if nccl_log is None:
        return topology_from_box(box)
    text = read_text(nccl_log, "NCCL log", LOG_BYTES, errors="replace")
    log = parse_nccl_log(text)
    box = with_nccl_log(box, text, str(nccl_log), log.env)
    return with_logged_ring(topology_from_box(box), log, str(nccl_log))


def one_box(command: str, topology_name: str | None, bundle: Path | None, nccl_log: Path | None) -> Topology:
    """The box `command` prices: a preset or topology file (--topology), or the user's own box read from a doctor
    bundle (--from-bundle) and refined by its NCCL log (--nccl-log); UsageError unless exactly one box is given."""
    if (topology_name is None) == (bundle is None):
        raise UsageError(f"{command} needs one box: --topology PRESET_OR_FILE or --from-bundle DIR")
    return load_bundle_topology(bundle, nccl_log) if bundle is not None else load_topology(topology_name)


def with_logged_ring(topology: Topology, log, path: str) -> Topology:
    """The ring graph NCCL printed ("Pattern 4, ..., nChannels 2, bw 15/15, ...") as the channels and NCCL's own
    per-channel bandwidth of the transport the log ran on; the measured figures of that path stay."""
    rings = [g for g in log.graphs if g["kind"] == "ring"]
    if not rings or topology.box is None:
        return topology
    ring = rings[0]
    link = link_for(topology, topology.box.nccl_log_env, log.nranks or topology.gpus)
    spec = topology.links[link]
    bw = ring["bw_intra_gbps"]
    logged = replace(
        spec,
        channels=ring["channels"],
        channel_bw_gbps=spec.channel_bw_gbps if spec.hop_us is not None else bw,
        nccl_bw_gbps=bw if spec.hop_us is not None else spec.nccl_bw_gbps,
        source=f"{spec.source}; channels and NCCL's bandwidth from {path}: {ring['line']}",
    )
    note = f"{link} rings: {ring['channels']} channels at {bw:g} GB/s as NCCL's search chose them ({path})"
    return replace(
        topology,
        links={**topology.links, link: logged},
        assumptions=f"{topology.assumptions}\n{note}",
    )


def _description(box: BoxTopology, gen: int, width: int) -> str:
    names = sorted({str(g.name.value or "unnamed GPU") for g in box.gpus})
    cpu: Fact = box.cpu_model
    sockets = box.sockets.value
    return (
        f"{len(box.gpus)} x {' / '.join(names)} (PCIe Gen{gen} x{width}), {sockets} x {cpu.value or 'CPU'}, "
        f"read from doctor bundle {box.name}"
    )
