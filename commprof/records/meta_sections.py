"""The nested sections of meta.json (records.run_meta.RunMeta), each as its one writer builds it: the platform,
the floor, the doctor's verdicts, the kernel builds, the NCCL graph candidates, a simulation's calibration and
expected error, the nccl-tests imports and the parts of the topology probe. A key a section does not declare is
kept as written and not checked; the ones declared are what readers use."""

from __future__ import annotations

from typing import Any, TypedDict

from commprof.records.schema import KernelModelFacts
from commprof.records.validate import bounded
from commprof.records.values import ComputeCapability, Count, ErrorPct, Finite, NonNegative, Ranks
from commprof.records.vocab import BuildStatus, CheckStatus, FloorEvidence, FloorStatus


class MetaPlatform(TypedDict, total=False):
    """The host's platform (records.run_meta.launch_facts)."""

    system: str  # platform.system(): "Linux"
    machine: str  # platform.machine(): "x86_64"
    python: str  # the interpreter's path


class FloorFiguresFacts(TypedDict, total=False):
    """The figures a floor is computed from (commprof.floor.model.FloorFigures.to_dict)."""

    pair_write_gbps: NonNegative  # one GPU pair, one direction, nothing else on the fabric (GB/s)
    all_pairs_gbps: NonNegative  # per GPU, every GPU writing to every other at once (GB/s)
    write_latency_us: NonNegative  # one peer write, issue to visible on the peer
    sync_us: NonNegative  # one kernel launch plus the flag exchange a collective needs at least once
    evidence: FloorEvidence
    source: str  # where: the probe run, or the published measurements


class MetaFloor(TypedDict, total=False):
    """The box's floor (commprof.floor.record): its figures and where they come from, or why there are none."""

    status: FloorStatus
    figures: FloorFiguresFacts | None  # None: not measured
    why: str  # not measured: why
    how: str  # and how to get one
    ranks: Ranks | None  # the GPUs the probe measured on
    gpus: list[Any] | None  # the probe's GPUs, as `commprof floor` lists them
    not_measured: list[str]  # the figures the probe could not take
    file: str | None  # the floor.json it was read from or written to


class DoctorCheck(TypedDict, total=False):
    """One check's verdict (commprof.doctor.result.CheckResult.to_dict)."""

    id: str
    title: str
    status: CheckStatus
    detail: str  # the finding, or why the check was skipped
    evidence: list[str]  # the values read, each with where it came from
    fix: str  # what to apply (warn / fail)


class MetaDoctor(TypedDict, total=False):
    """The doctor's verdicts before the sweep (commprof.doctor.doctor_summary, plus the failed check ids)."""

    status: CheckStatus  # the worst verdict
    counts: dict[str, Count]  # checks per verdict
    checks: list[DoctorCheck]
    failed: list[str]  # the ids of the checks that failed


class KernelBuild(TypedDict, total=False):
    """One build's outcome (commprof.impls.jit_build.run_build)."""

    name: str  # the library's name for it
    status: BuildStatus
    seconds: NonNegative
    artifact: str  # the library it built or loaded
    error: str  # failed: the compiler's lines that say why


class KernelBuildReport(TypedDict, total=False):
    """One node's kernel builds before the sweep (commprof.sweep.running.prebuild.run_builder)."""

    cache_dir: str | None  # where the library keeps what it compiled
    builds: dict[str, KernelBuild]  # "module:callable" -> its outcome
    log: str  # the builder's log file
    error: str  # the builder itself failed: why


class GraphCandidate(TypedDict, total=False):
    """One NCCL graph file written for the box (commprof.nccl_graph.candidates.Candidate.to_dict)."""

    name: str  # the file's stem, e.g. "ring-4ch-same-hop"
    channels: Count
    variant: str
    ring: list[int]  # the ring of channel 0, NVML indices
    socket_crossings: Count  # hops of one ring that cross a socket boundary
    switch_crossings: Count  # hops that leave a PCIe switch
    speedintra: Finite
    typeintra: str
    built_from: str  # the box, its sources, the bandwidth
    sha256: str


class MetaGraphs(TypedDict, total=False):
    """The NCCL graph candidates written for this box (commprof.sweep.running.graph_run.prepare_graphs)."""

    folder: str  # where in the run folder
    candidates: list[GraphCandidate]
    why: str  # none were written: why
    box: dict[str, Any]  # what they were built from (commprof.nccl_graph.box.Box.to_dict)


class MetaCalibration(TypedDict, total=False):
    """A simulation's calibration (commprof.costmodel.latency.CostParams.to_dict, and the file it came from)."""

    file: str  # the calibration file
    source: str
    link: str  # the link it was fitted on
    channels: Count
    fit: dict[str, Any]  # the fit's figures (commprof calibrate)


class MetaModelError(TypedDict, total=False):
    """A simulation's expected error (commprof.evidence.ModelError.to_dict)."""

    pct: ErrorPct | None  # median |model - measured| / measured, %; None: unknown
    basis: str  # where that figure comes from
    boxes: str  # a calibration's "fitted on <box>, applied to <box>"


class ImportedRun(TypedDict, total=False):
    """One run of an imported nccl-tests log (commprof.costmodel.nccl_tests.log.Run.summary, and its point)."""

    point_id: str
    line: Count  # where it starts in the log
    collective: str | None
    ranks: Ranks | None
    nthread: int | None
    ngpus: int | None
    graph: bool  # -G: timed inside a CUDA graph
    iterations: Count | None
    warmup: Count | None
    devices: list[str]
    nccl_version: str | None
    env: dict[str, str]  # the NCCL settings the log states it ran under
    avg_busbw_gbps: NonNegative | None
    out_of_bounds: Count | None
    rows: Count  # sizes in its table


class ImportedLog(TypedDict, total=False):
    """One imported nccl-tests log (commprof.costmodel.command)."""

    file: str
    sha256: str
    warnings: list[str]
    nccl_versions: list[str]
    gpus: list[str]
    runs: list[ImportedRun]


class ReportOptions(TypedDict, total=False):
    """The sweep file's [report] table as its reader wrote it (commprof.sweep.planning.config)."""

    compute_ms: float | dict[str, float] | None  # one number for every T, or per T
    draft_ms: float | None
    accept_lengths: list[float]
    baseline: str  # the point id the report measures against


class NumaNode(TypedDict, total=False):
    """One NUMA node of the host (commprof.doctor.topology_probe.describe_host)."""

    node: Count
    cpus: str  # its CPU list, "0-63,128-191"


class TopologyLink(TypedDict, total=False):
    """NCCL's view of a simulated box's transport (commprof.costmodel.topology.LinkSpec.to_dict)."""

    channels: Count
    channel_bw_gbps: NonNegative
    nvls_channels: Count
    hop_us: dict[str, Finite]  # published per-hop latencies by protocol
    overhead_us: Finite
    nccl_bw_gbps: NonNegative
    max_bus_gbps: NonNegative
    source: str


class TopologyKernel(KernelModelFacts, total=False):
    """A simulated box's model of a non-NCCL kernel (commprof.costmodel.kernels.KernelModel.to_dict)."""

    points: list[list[float]]  # published: (bytes, µs)
    overhead_us: Finite  # floor basis: on top of the floor of the algorithm
    algorithm: str | None  # published: the algorithm the figures were taken with


class TopologyHost(TypedDict, total=False):
    """The host part of the topology probe (commprof.doctor.topology_probe.describe_host)."""

    hostname: str | None
    logical_cpus: int | None
    cpu_model: str | None
    cpu_vendor: str | None
    sockets: int | None
    numa_nodes: list[NumaNode] | None


# A PCIe generation or link width, or a GPU's active NVLinks: what the checks and the NCCL graph compute with.
Lanes = bounded(int, ge=0, le=64)


class TopologyGpu(TypedDict, total=False):
    """One GPU as the topology probe writes it (to meta.json, and to a bundle's nvml.json)."""

    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    compute_capability: ComputeCapability | None
    memory_total_mib: bounded(int, ge=0, le=1 << 40) | None
    pcie: dict[str, Lanes | None] | None
    numa_node: bounded(int, ge=0, le=1 << 16) | None
    cpu_affinity: str | None
    nvlink_active: Lanes | None


class TopologyPair(TypedDict, total=False):
    """One GPU pair as the topology probe writes it."""

    gpus: list[int]
    level: str | None
    nvlink: bool | None
    p2p: dict[str, str | None] | None
