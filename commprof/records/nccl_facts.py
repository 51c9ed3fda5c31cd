"""What a step record says NCCL did (its `nccl` section): the facts of the point's INFO log, or the cost model's
choices, with the graphs NCCL's topology search settled on, what the log means (findings) and the graph file a
point ran with. docs/results-schema.md documents every field."""

from __future__ import annotations

from typing import TypedDict

from commprof.records.validate import bounded
from commprof.records.values import Bytes, Count, ErrorPct, Finite, Ranks
from commprof.records.vocab import Severity


class NcclChoice(TypedDict, total=False):
    """One distinct algorithm / protocol NCCL chose for a size (commprof.nccl_log.parse, or the cost model's)."""

    coll: str | None  # NCCL's spelling ("AllReduce"); None where the log line does not say (2.20-2.22)
    bytes: Bytes  # as the log counts them (bytes_scope)
    algo: str
    proto: str
    channels: bounded(int, ge=1, le=64) | None
    bytes_scope: str  # "per_rank" (>= 2.24) or "largest_buffer" (<= 2.23)
    count: bounded(int, ge=1, le=1 << 40)  # ops that took this choice
    model_time_us: Finite  # NCCL's own estimate, where the log prints it
    calibrated: bool  # simulated: False where the size is outside the calibration's judged sizes (the prior's)


class NcclGraph(TypedDict, total=False):
    """One graph NCCL's topology search settled on, from its GRAPH line (commprof.nccl_log.parse._add_graph)."""

    pattern: int  # NCCL_TOPO_PATTERN_* as the line prints it
    kind: str  # the pattern's name (nccl_vocab.GRAPH_PATTERNS), "unknown" for a number it does not know
    cross_nic: int  # crossNic as printed
    channels: Count  # nChannels
    bw_intra_gbps: Finite  # bandwidth per channel inside a node, GB/s
    bw_inter_gbps: Finite  # and between nodes
    type_intra: str  # the path type inside a node ("PIX", "SYS", "NVL", ...)
    type_inter: str
    same_channels: int  # sameChannels as printed
    line: str  # the log line itself
    gpus: list[list[str]]  # per channel, its GPUs' topology ids (hex PCI bus ids) in ring / chain order


class NcclFinding(TypedDict, total=False):
    """One thing the log shows that matters (commprof.nccl_log.findings.Finding.to_dict)."""

    id: str  # the rule that found it
    severity: Severity
    text: str  # the finding, in one sentence
    fix: str  # what to do
    evidence: list[str]  # the log's own lines that show it


class SimulatedGraph(TypedDict, total=False):
    """The graph file a simulated point ran with (commprof.costmodel.simulate.graph_error)."""

    file: str  # the candidate's name
    sha256: str  # of the file's text
    channels: Count  # the channels the file holds


class GraphFileCheck(TypedDict, total=False):
    """The NCCL_GRAPH_FILE a measured point ran with and whether NCCL loaded it (commprof.nccl_graph.load_check)."""

    path: str
    sha256: str  # of the file's text
    loaded: bool | None  # None: the log cannot tell
    why: str  # what the log shows, in one sentence
    evidence: list[str]  # the log lines (or facts) it rests on


class OutsideCalibration(TypedDict, total=False):
    """A calibrated simulation's ops outside the sizes the calibration was judged on (commprof.costmodel.calibrated_sizes
    Pricing.note): priced by NCCL's uncalibrated model, with its error."""

    label: str  # "outside the calibrated sizes"
    judged: str  # the judged sizes, as people read them ("8 KB-1 MB")
    judged_bytes: list[Bytes]  # and as [low, high), bytes
    ops: Count  # the step's ops outside them
    sizes: list[Bytes]  # their distinct sizes (the first 32)
    expected_error_pct: ErrorPct | None  # the error they carry: the prior's
    error_basis: str


class NcclEngagement(TypedDict, total=False):
    """Whether NCCL engaged one setting of the point (commprof.nccl_log.engagement.Engagement.to_dict)."""

    variable: str  # NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS or NCCL_MAX_NCHANNELS
    asked: str  # the point's value
    engaged: bool | None  # None: the log cannot tell
    why: str  # what the log shows
    tokens_not_engaged: list[Count]  # the T whose ops ran something else (their records: "not_engaged")


class NcclFacts(TypedDict, total=False):
    """What NCCL did for a point, from its INFO log (commprof.sweep.running.nccl_summary.RECORD_KEYS) or the cost
    model."""

    version: str | None
    nranks: Ranks | None
    nnodes: Ranks | None
    transports: dict[str, int | str]  # kind -> connections (measured) or the modelled link's name (simulated)
    peer_transports: dict[str, list[str]]
    channels: Ranks | None
    channel_counts: dict[str, int]
    graphs: list[NcclGraph]
    rings: list[list[int]]
    choices: list[NcclChoice]
    p2p_level: str | None
    env: dict[str, str]
    warnings: list[str]
    findings: list[NcclFinding]
    # simulated: the cost model's expected error and its basis, and the graph file a point ran with
    expected_error_pct: ErrorPct | None
    error_basis: str | None
    graph: SimulatedGraph | None
    outside_calibration: OutsideCalibration | None  # simulated with a calibration: the ops it was not judged at
    # measured: the NCCL_GRAPH_FILE the point ran with and whether NCCL loaded it
    graph_file: GraphFileCheck | None
    # measured: whether NCCL engaged each algorithm, protocol and channel setting of the point
    engagement: list[NcclEngagement]
