"""meta.json's topology (records.run_meta.RunMeta.topology): the topology probe's answer on the box a sweep ran on
(commprof.doctor.topology_probe.probe_topology, also a doctor bundle's nvml.json), or the topology preset a
simulation ran on (commprof.costmodel.topology.Topology.summary, `simulated` true), the box read from a doctor
bundle included. One structure holds both: the probe's fields and the preset's, each None where the file does not
say it."""

from __future__ import annotations

from typing import Any

from commprof.records.meta_sections import FloorFiguresFacts, MetaModelError, MetaSection
from commprof.records.schema import Mode
from commprof.records.validate import bounded
from commprof.records.values import Bytes, ComputeCapability, Count, ErrorPct, Finite, NonNegative, Ranks
from commprof.records.vocab import KernelBasis

# A PCIe generation or link width, or a GPU's active NVLinks: what the checks and the NCCL graph compute with.
Lanes = bounded(int, ge=0, le=64)


class NumaNode(MetaSection):
    """One NUMA node of the host (commprof.doctor.topology_probe.describe_host)."""

    node: Count | None = None
    cpus: str | None = None  # its CPU list, "0-63,128-191"


class TopologyHost(MetaSection):
    """The host part of the topology probe (commprof.doctor.topology_probe.describe_host)."""

    hostname: str | None = None
    logical_cpus: int | None = None
    cpu_model: str | None = None
    cpu_vendor: str | None = None
    sockets: int | None = None
    numa_nodes: list[NumaNode] | None = None


class PcieLink(MetaSection):
    """A GPU's PCIe link as NVML reports it: generation and width, now and at most."""

    gen_current: Lanes | None = None
    gen_max: Lanes | None = None
    gen_gpu_max: Lanes | None = None  # the GPU's own most (the slot's may be lower)
    width_current: Lanes | None = None
    width_max: Lanes | None = None


class TopologyGpu(MetaSection):
    """One GPU as the topology probe writes it (to meta.json, and to a bundle's nvml.json)."""

    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    compute_capability: ComputeCapability | None = None
    memory_total_mib: bounded(int, ge=0, le=1 << 40) | None = None
    pcie: PcieLink | None = None
    numa_node: bounded(int, ge=0, le=1 << 16) | None = None
    cpu_affinity: str | None = None
    nvlink_active: Lanes | None = None


class P2pStatus(MetaSection):
    """NVML's P2P status between two GPUs per capability ("ok", or why not; None: not probed)."""

    read: str | None = None
    write: str | None = None
    nvlink: str | None = None
    atomics: str | None = None


class TopologyPair(MetaSection):
    """One GPU pair as the topology probe writes it."""

    gpus: list[int] | None = None
    level: str | None = None  # NVML's common ancestor, as nvidia-smi topo -m names it
    nvlink: bool | None = None
    p2p: P2pStatus | None = None


class TopologyLink(MetaSection):
    """NCCL's view of a simulated box's transport (commprof.costmodel.topology.LinkSpec.to_dict)."""

    channels: Count | None = None
    channel_bw_gbps: NonNegative | None = None
    nvls_channels: Count | None = None
    hop_us: dict[str, Finite] | None = None  # published per-hop latencies by protocol
    overhead_us: Finite | None = None
    nccl_bw_gbps: NonNegative | None = None
    max_bus_gbps: NonNegative | None = None
    source: str | None = None


class TopologyKernel(MetaSection):
    """A simulated box's model of a non-NCCL kernel (commprof.costmodel.kernels.KernelModel.to_dict)."""

    impl: str | None = None  # the implementation it predicts
    basis: KernelBasis | None = None
    source: str | None = None  # where its figures come from
    timed: Mode | None = None  # what the published figures (or the floor model) time
    max_bytes: Bytes | None = None  # NCCL above this size; None: any size
    expected_error_pct: ErrorPct | None = None  # None: unknown
    error_basis: str | None = None
    points: list[list[int | float]] | None = None  # published: [bytes, µs]
    overhead_us: Finite | None = None  # floor basis: on top of the floor of the algorithm
    algorithm: str | None = None  # published: the algorithm the figures were taken with


class BoxFact(MetaSection, omit_defaults=False):
    """One fact of a box read from a doctor bundle, and the file and line it was read from
    (commprof.costmodel.box.Fact.to_dict); a value of None is a fact too (not recorded), and written."""

    value: Any = None
    source: str | None = None


class BoxGpuFacts(MetaSection):
    """One GPU of a box read from a doctor bundle (commprof.costmodel.box.BoxGpu.to_dict)."""

    index: int | None = None
    name: BoxFact | None = None
    bus_id: BoxFact | None = None
    numa_node: BoxFact | None = None
    compute_capability: BoxFact | None = None
    pcie_gen_max: BoxFact | None = None
    pcie_width_max: BoxFact | None = None
    bar1_mib: BoxFact | None = None
    atomics_outbound: BoxFact | None = None


class PairTransport(MetaSection):
    """NCCL's transport for a GPU pair under one setting, and where that comes from."""

    transport: str | None = None
    source: str | None = None


class BoxPairFacts(MetaSection):
    """One GPU pair of a box read from a doctor bundle (commprof.costmodel.box.BoxTopology.pair_table)."""

    pair: list[int] | None = None
    level: BoxFact | None = None
    nccl_path: str | None = None
    p2p_ok: BoxFact | None = None
    transport: dict[str, PairTransport] | None = None  # per named setting ("defaults", "NCCL_P2P_LEVEL=SYS", ...)


class BundleBox(MetaSection):
    """A box read from a doctor bundle (commprof.costmodel.box.BoxTopology.summary): every fact with its file."""

    name: str | None = None
    origin: str | None = None  # the bundle directory
    nccl_log: str | None = None  # the NCCL log given with it
    nccl_log_env: dict[str, str] | None = None  # the P2P variables that log ran under
    cpu_vendor: BoxFact | None = None
    cpu_model: BoxFact | None = None
    sockets: BoxFact | None = None
    gpus: list[BoxGpuFacts] | None = None
    pairs: list[BoxPairFacts] | None = None
    transport_rule: str | None = None
    assumptions: list[str] | None = None


class MetaTopology(MetaSection):
    """The topology probe's answer (source to pairs, nvml_unanswered), or a simulation's preset (simulated true:
    name to prior_error; `gpus` a count there)."""

    source: str | None = None  # "nvml": NVML answered
    reason: str | None = None  # why NVML gave no GPUs
    host: TopologyHost | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[TopologyGpu] | Ranks | None = None
    pairs: list[TopologyPair] | None = None
    nvml_unanswered: dict[str, str] | None = None  # each NVML call that gave no answer, and why
    simulated: bool | None = None  # a simulation's preset
    name: str | None = None
    path: str | None = None  # the topology file
    description: str | None = None
    compute_capability: Finite | None = None
    gpu_path: str | None = None  # the GPUs' path type ("NV18", "PIX", "SYS")
    p2p_supported: bool | None = None
    p2p_atomics: bool | None = None
    launch_overhead_us: Finite | None = None
    links: dict[str, TopologyLink | str] | None = None  # its transports by name; text is shown as it is
    impls: dict[str, TopologyKernel] | None = None  # its kernel models by implementation
    floor: FloorFiguresFacts | None = None  # its published floor figures
    assumptions: str | None = None
    sources: list[str] | None = None
    box: BundleBox | None = None  # read from a doctor bundle
    prior_error: MetaModelError | None = None  # the prior's expected error on this box

    @property
    def probed_gpus(self) -> list[TopologyGpu]:
        """The GPUs the probe lists (a simulation's preset gives a count, not a list: none)."""
        return self.gpus if isinstance(self.gpus, list) else []


# The fields of the probe's answer (commprof.doctor.topology_probe.probe_topology), each written, None included.
PROBE_FIELDS = ("source", "reason", "host", "driver_version", "cuda_driver_version", "gpus", "pairs")


def probe_answer(topology: MetaTopology) -> dict[str, Any]:
    """The probe's answer as probe_topology() returns it, read back from meta.json: every field of the probe, its
    GPUs and pairs, None where it said none (the doctor's checks read it as the probe gave it)."""
    answer = {name: _every_field(getattr(topology, name)) for name in PROBE_FIELDS}
    if topology.nvml_unanswered is not None:
        answer["nvml_unanswered"] = dict(topology.nvml_unanswered)
    return answer


def _every_field(value: Any) -> Any:
    if isinstance(value, MetaSection):
        return {name: _every_field(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, list):
        return [_every_field(item) for item in value]
    return dict(value) if isinstance(value, dict) else value
