"""The sections of meta.json (records.run_meta.RunMeta), each a typed structure as its one writer builds it: the
platform, the GPUs, the plan and sweep file, the floor, the doctor's verdicts, the kernel builds, the NCCL graph
candidates, a simulation's calibration and expected error, and the nccl-tests imports (the topology's parts:
meta_topology.py). Every field is None where the file does not say it; a key a section does not declare is not
read (the reader reads the declared ones, and run_meta's constructor refuses a writer's undeclared one)."""

from __future__ import annotations

from typing import Any

import msgspec

from commprof.records.validate import bounded
from commprof.records.values import (
    MAX_POINT_TIMEOUT_S,
    MAX_TOKENS,
    ComputeCapability,
    Count,
    ErrorPct,
    Finite,
    NonNegative,
    Ranks,
)
from commprof.records.vocab import BuildStatus, CheckStatus, FloorEvidence, FloorStatus

_TIMEOUT = "{path} {value} is out of range (allowed: above 0, at most a week)"
PlanT = bounded(int, "plan.tokens: a T out of range (allowed: {low}..{high})", ge=1, le=MAX_TOKENS)  # a plan's T


class MetaSection(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A part of meta.json: read by attribute, None where the file does not say it (and then not written)."""


class MetaPlatform(MetaSection):
    """The host's platform (records.run_meta.launch_facts)."""

    system: str | None = None  # platform.system(): "Linux"
    machine: str | None = None  # platform.machine(): "x86_64"
    python: str | None = None  # the interpreter's path


class MetaGpu(MetaSection):
    """One visible GPU as records.run_meta.gpu_inventory writes it (an import: the name its log prints)."""

    index: int | None = None
    name: str | None = None
    compute_capability: ComputeCapability | None = None
    memory_gib: Finite | None = None
    pci_bus_id: str | None = None


class MetaPlan(MetaSection):
    """What the sweep replayed (commprof.sweep.running.run_folder; a simulation: model to tokens)."""

    model: str | None = None
    tp: Ranks | None = None
    phase: str | None = None
    dtype: str | None = None  # None: the model's
    tokens: list[PlanT] | None = None
    iterations: Count | None = None
    warmup: Count | None = None
    point_timeout_s: bounded(float, _TIMEOUT, gt=0, le=MAX_POINT_TIMEOUT_S) | None = None
    layout: str | None = None  # None: the one the model's architecture implies
    compute: str | None = None  # what each rank ran between two collectives, as the sweep file (or --compute) said
    skew: str | None = None
    spec: str | None = None  # the draft cycle and DP attention (commprof.planner.speculative.PlanOptions)
    num_steps: int | None = None
    draft_vocab: int | None = None
    dp_attention: bool | None = None


class SweepReport(MetaSection, forbid_unknown_fields=True):
    """The sweep file's [report] table as its reader kept it (commprof.sweep.planning.config); an option the
    report does not know is refused, never dropped."""

    compute_ms: float | dict[str, float] | None = None  # one number for every T, or per T
    draft_ms: float | None = None
    accept_lengths: list[float] | None = None
    baseline: str | None = None  # the point id the report measures against


class MetaSweep(MetaSection):
    """The sweep file the run was made from, as it was (a --resume rebuilds the sweep from it)."""

    path: str | None = None
    name: str | None = None
    content: str | None = None
    sha256: str | None = None
    report: SweepReport | None = None  # its [report] table


class FloorFiguresFacts(MetaSection):
    """The figures a floor is computed from (commprof.floor.model.FloorFigures.to_dict)."""

    pair_write_gbps: NonNegative | None = None  # one GPU pair, one direction, nothing else on the fabric (GB/s)
    all_pairs_gbps: NonNegative | None = None  # per GPU, every GPU writing to every other at once (GB/s)
    write_latency_us: NonNegative | None = None  # one peer write, issue to visible on the peer
    sync_us: NonNegative | None = None  # one kernel launch plus the flag exchange a collective needs at least once
    evidence: FloorEvidence | None = None
    source: str | None = None  # where: the probe run, or the published measurements


class FloorRow(MetaSection):
    """The floor at one size (commprof.floor.measure.floor_table)."""

    bytes: int | None = None
    floor_us: Finite | None = None
    algorithm: str | None = None
    one_shot_us: Finite | None = None
    two_shot_us: Finite | None = None
    ring_us: Finite | None = None


class MetaFloor(MetaSection):
    """The box's floor (commprof.floor.record): its figures and where they come from, or why there are none."""

    status: FloorStatus | None = None
    figures: FloorFiguresFacts | None = None  # None: not measured
    why: str | None = None  # not measured: why
    how: str | None = None  # and how to get one
    ranks: Ranks | None = None  # the GPUs the probe measured on
    gpus: list[str] | None = None  # the probe's GPUs, by name
    not_measured: list[str] | None = None  # the figures the probe could not take
    table: list[FloorRow] | None = None  # the floor at each size, as `commprof floor` gave it
    file: str | None = None  # the floor.json it was read from or written to


class DoctorCheck(MetaSection, kw_only=True, omit_defaults=False):
    """One check's verdict (commprof.doctor.result.CheckResult.to_dict)."""

    id: str = ""
    title: str = ""
    status: CheckStatus
    detail: str = ""  # the finding, or why the check was skipped
    evidence: list[str] = []  # the values read, each with where it came from
    fix: str = ""  # what to apply (warn / fail)


class MetaDoctor(MetaSection):
    """The doctor's verdicts before the sweep (commprof.doctor.doctor_summary, plus the failed check ids)."""

    status: CheckStatus | None = None  # the worst verdict
    counts: dict[str, Count] | None = None  # checks per verdict
    checks: list[DoctorCheck] | None = None
    failed: list[str] | None = None  # the ids of the checks that failed


class KernelBuild(MetaSection):
    """One build's outcome (commprof.impls.jit_build.run_build)."""

    name: str | None = None  # the library's name for it
    status: BuildStatus | None = None
    seconds: NonNegative | None = None
    artifact: str | None = None  # the library it built or loaded
    error: str | None = None  # failed: the compiler's lines that say why


class KernelBuildReport(MetaSection):
    """One node's kernel builds before the sweep (commprof.sweep.running.prebuild.run_builder)."""

    cache_dir: str | None = None  # where the library keeps what it compiled
    builds: dict[str, KernelBuild] | None = None  # "module:callable" -> its outcome
    log: str | None = None  # the builder's log file
    error: str | None = None  # the builder itself failed: why


class GraphCandidate(MetaSection):
    """One NCCL graph file written for the box (commprof.nccl_graph.candidates.Candidate.to_dict)."""

    name: str | None = None  # the file's stem, e.g. "ring-4ch-same-hop"
    channels: Count | None = None
    variant: str | None = None
    ring: list[int] | None = None  # the ring of channel 0, NVML indices
    socket_crossings: Count | None = None  # hops of one ring that cross a socket boundary
    switch_crossings: Count | None = None  # hops that leave a PCIe switch
    speedintra: Finite | None = None
    typeintra: str | None = None
    built_from: str | None = None  # the box, its sources, the bandwidth
    sha256: str | None = None


class GraphBoxGpu(MetaSection):
    """One GPU as a graph file needs it (commprof.nccl_graph.box.BoxGpu)."""

    index: int | None = None
    bus_id: str | None = None
    socket: int | None = None  # NUMA node; None: unknown
    switch: str | None = None  # the PCIe switch above it; None: none


class GraphBox(MetaSection):
    """The box the graph files were built from (commprof.nccl_graph.box.Box.to_dict)."""

    origin: str | None = None
    gpus: list[GraphBoxGpu] | None = None
    hop_gbps: NonNegative | None = None  # one ring hop, one direction
    bandwidth_measured: bool | None = None
    bandwidth_source: str | None = None
    sources: list[str] | None = None


class MetaGraphs(MetaSection):
    """The NCCL graph candidates written for this box (commprof.sweep.running.graph_run.prepare_graphs)."""

    folder: str | None = None  # where in the run folder
    candidates: list[GraphCandidate] | None = None
    why: str | None = None  # none were written: why
    box: GraphBox | None = None  # what they were built from


class MetaCalibration(MetaSection):
    """A simulation's calibration file: its parameters (commprof.costmodel.latency.CostParams.to_dict), the file,
    and whether its points use it (a calibration is applied whole or not at all) and why."""

    file: str | None = None  # the calibration file
    link: str | None = None  # the link it was fitted on
    arch: str | None = None
    channels: Count | None = None
    channel_bw_gbps: NonNegative | None = None
    hop_us: dict[str, Finite] | None = None
    overhead_us: Finite | None = None
    nvls_channels: Count | None = None
    nccl_bw_gbps: NonNegative | None = None
    max_bus_gbps: NonNegative | None = None
    source: str | None = None
    # How it was fitted: calibration.toml's [fit] as CostParams carries it (its keys the cost model's own, typed by
    # commprof.costmodel.calibration_file.FitTable); the report reads `why` instead.
    fit: dict[str, Any] | None = None
    applied: bool | None = None  # its points use it
    why: str | None = None  # why they do, or do not

    @property
    def reason(self) -> str:
        """Why the calibration is (not) applied, as the simulation recorded it; for a simulation written before
        `why` was, what its fit says of the boxes or of its error."""
        fit = self.fit or {}
        return str(self.why or fit.get("applied") or fit.get("error_basis") or "")


class MetaModelError(MetaSection):
    """A simulation's expected error (commprof.evidence.ModelError.to_dict)."""

    pct: ErrorPct | None = None  # median |model - measured| / measured, %; None: unknown
    basis: str | None = None  # where that figure comes from
    boxes: str | None = None  # a calibration's "fitted on <box>, applied to <box>"


class ImportedRun(MetaSection):
    """One run of an imported nccl-tests log (commprof.costmodel.nccl_tests.log.Run.summary, and its point)."""

    point_id: str | None = None
    line: Count | None = None  # where it starts in the log
    collective: str | None = None
    ranks: Ranks | None = None
    nthread: int | None = None
    ngpus: int | None = None
    graph: bool | None = None  # -G: timed inside a CUDA graph
    iterations: Count | None = None
    warmup: Count | None = None
    devices: list[str] | None = None
    hosts: list[str] | None = None  # the hosts its rank lines name
    nodes: Ranks | None = None
    nccl_version: str | None = None
    env: dict[str, str] | None = None  # the NCCL settings the log states it ran under
    avg_busbw_gbps: NonNegative | None = None
    out_of_bounds: Count | None = None
    rows: Count | None = None  # sizes in its table


class ImportedLog(MetaSection):
    """One imported nccl-tests log (commprof.costmodel.command)."""

    file: str | None = None
    sha256: str | None = None
    warnings: list[str] | None = None
    nccl_versions: list[str] | None = None
    gpus: list[str] | None = None
    runs: list[ImportedRun] | None = None
