"""What a results record is: the step, the collective and the crossover record, one TypedDict and one
constructor each, and the values their fields take. docs/results-schema.md documents every field.

Every writer (the sweep, the simulator, the nccl-tests importer, the tests' builders) builds records with
`step_record` / `collective_record` / `crossover_record`, so every record of a kind has the same fields in the same order; readers
(the report, calibration, resume) read them back as these types.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal, TypedDict, get_args

SCHEMA_VERSION = 2
# Versions this commprof reads. Version 1 said "model" where version 2 says "simulated" (source and timing of
# cost-model predictions); `upgraded` reads a version-1 record as version 2.
READABLE_VERSIONS = (1, 2)

# Where a record's numbers come from: timed here, predicted by the cost model, or imported from nccl-tests.
Source = Literal["measured", "simulated", "nccl-tests"]
SOURCES: tuple[Source, ...] = get_args(Source)
KINDS = ("step", "collective", "crossover")
Mode = Literal["eager", "graph"]  # run as issued; captured once in a CUDA graph and replayed
MODES: tuple[Mode, ...] = get_args(Mode)
# What an eager step or op time includes that a replayed graph does not pay: said wherever eager times are shown.
EAGER_INCLUDES = "incl. host issue cost"
EAGER_INCLUDES_WHY = (
    "each collective's host issue cost: its launch from Python by the process group (PGNCCL on NCCL) or by a kernel "
    "library's own Python call, which a replayed CUDA graph does not pay"
)
# The modes in the order searches and answers take them: graph first, the mode a serving engine decodes in.
GRAPH_FIRST: tuple[Mode, ...] = ("graph", "eager")
# All-reduce + residual add + RMSNorm in one collective (fused kinds), set against the unfused reference.
FUSED = "all_reduce+rmsnorm"
# Trial outcomes. "ok" is the only one whose numbers are a tuning result.
STATUSES = (
    "ok",  # measured and verified
    "wrong",  # ran, but results differ from the exact reduction (eager)
    "capture_failed",  # CUDA-graph capture raised
    "replay_wrong",  # graph replay gave results that differ from the exact reduction
    "timeout",  # killed after the point's time limit, on every rank
    "crashed",  # a worker died: signal, abort or non-zero exit
    "unsupported",  # the implementation or mode does not apply here; message says why
    "error",  # a Python exception in the trial; message has it
)
# Statuses that mean "the setting does not work here"; "unsupported" only means it does not apply.
FAILED_STATUSES = tuple(s for s in STATUSES if s not in ("ok", "unsupported"))


class _StatsTail(TypedDict, total=False):
    p99: float  # only from 100 samples on (commprof.stats.P99_MIN_SAMPLES); records before that: always
    max: float  # absent in records written before it was kept


class Stats(_StatsTail):
    """A latency over the timed steps (or one op's over the steps), µs."""

    n: int  # samples
    min: float
    median: float
    mean: float
    p90: float
    cv: float  # standard deviation / mean, unitless


class Point(TypedDict, total=False):
    """The configuration a record measured (commprof.sweep.planning.points.SweepPoint.to_dict())."""

    point_id: str
    label: str
    impl: str  # the all-reduce implementation (commprof.impls)
    env: dict[str, str]  # only what the point sets on top of the run's environment
    options: dict[str, Any]  # the implementation's options
    stage: int  # the staged search's stage that produced the point
    repeat: int  # the baseline measured again (baseline-repeats.jsonl): which re-measurement; absent: the first


class NcclChoice(TypedDict, total=False):
    """One distinct algorithm / protocol NCCL chose for a size (commprof.nccl_log.parse, or the cost model's)."""

    coll: str | None  # NCCL's spelling ("AllReduce"); None where the log line does not say (2.20-2.22)
    bytes: int  # as the log counts them (bytes_scope)
    algo: str
    proto: str
    channels: int | None
    bytes_scope: str  # "per_rank" (>= 2.24) or "largest_buffer" (<= 2.23)
    count: int  # ops that took this choice
    model_time_us: float  # NCCL's own estimate, where the log prints it


class NcclFacts(TypedDict, total=False):
    """What NCCL did for a point, from its INFO log (commprof.sweep.running.measure.RECORD_KEYS) or the cost model."""

    version: str | None
    nranks: int | None
    nnodes: int | None
    transports: dict[str, int | str]  # kind -> connections (measured) or the modelled link's name (simulated)
    peer_transports: dict[str, list[str]]
    channels: int | None
    channel_counts: dict[str, int]
    graphs: list[dict[str, Any]]
    rings: list[list[int]]
    choices: list[NcclChoice]
    p2p_level: str | None
    env: dict[str, str]
    warnings: list[str]
    findings: list[dict[str, Any]]


class StepPlanSummary(TypedDict, total=False):
    """StepPlan.summary(): the numbers of the replayed step a reader uses (the other keys are words)."""

    tp: int
    tokens: int
    hidden_size: int
    num_layers: int
    vocab_size: int
    all_reduce: int
    all_gather: int
    reduce_scatter: int
    draft_ops: int
    total_bytes: int


class _Record(TypedDict):
    """The fields every record has."""

    schema: int  # SCHEMA_VERSION
    kind: str  # KINDS
    source: str  # SOURCES
    run_id: str  # the run folder's name
    point_id: str  # point_ids.py
    point: Point
    backend: str | None  # "nccl" or "gloo"; None for imported or simulated records without one
    world_size: int | None  # ranks in the process group
    status: str  # STATUSES
    message: str | None  # why a status is not "ok"; notes on an "ok" simulated record
    time: str  # ISO-8601 UTC time the record was built
    calibration: str | None  # simulated records: which calibration ("nccl-prior" or a file) predicted them


class StepRecord(_Record):
    """One replayed step plan at one T in one mode: kind "step"."""

    model: str | None  # the LLM's name (commprof.planner.models)
    phase: str | None  # "decode" or "verify"
    tp: int | None  # tensor-parallel degree
    tokens: int  # T, tokens in the step
    dtype: str | None  # activation dtype
    plan: StepPlanSummary | None  # StepPlan.summary(): collective counts, bytes, hidden size, layers
    mode: str  # MODES
    timing: str | None  # "cuda_events", "cpu_clock" or "simulated"
    step_us: Stats | None  # per-step latency over the timed steps
    op_us: dict[str, list] | None  # per-op Stats, columnar, with "sites", "collectives", "draft", "bytes"; both
    # modes (records before the graph-mode per-op pass: eager only)
    op_timing: str | None  # which per-op pass op_us comes from and what its times include (docs/timing.md)
    rank_step_median_us: list[float] | None  # each rank's median step time
    check: dict[str, Any] | None  # correctness, agreed across ranks
    impl_detail: str | None  # what exactly ran where the implementation chooses at setup
    fused_rmsnorm: bool  # the layer all-reduces include residual add + RMSNorm
    nccl: NcclFacts | None  # what NCCL did, from its INFO log (or the cost model's choices)
    iterations: int | None  # timed steps
    warmup: int | None  # warm-up steps
    duration_s: float | None  # wall time of the whole point on the controller
    measure_s: float | None  # wall time of this (T, mode) inside the worker
    kernel_model: dict[str, Any] | None  # simulated non-NCCL points: the kernel model behind them, its expected error
    # What ran between the collectives ({"compute": "uniform:500", "skew": "rank 1 late by 1000 µs"}); None: nothing,
    # the collectives back to back.
    spacing: dict[str, Any] | None
    compute_us: Stats | None  # the step's compute alone, per step (timed on its own): communication = step - compute
    wait_us: Stats | None  # per step, the first rank's wait at each op for the last arrival, summed over ops
    wait_clock: str | None  # the clock arrivals were stamped on ("host_monotonic", "cuda_globaltimer"), or why not


class _CollectiveExtras(TypedDict, total=False):
    per_iteration: dict[str, float]  # nccl-tests -I columns: min_us, max_us, p99_us, cv_pct


class CollectiveRecord(_Record, _CollectiveExtras):
    """One collective at one size, as nccl-tests reports it: kind "collective"."""

    collective: str  # "all_reduce", "all_gather", ...
    bytes: int  # message size (nccl-tests' "size")
    count: int | None  # elements
    dtype: str | None
    redop: str | None
    root: int | None  # -1 where none
    in_place: bool  # nccl-tests' in-place column
    graph: bool  # measured inside a CUDA graph (nccl-tests -G)
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None  # algbw × 2(n−1)/n for all-reduce
    wrong: int | None  # nccl-tests' #wrong (None for "N/A")
    file: str | None  # where an imported row came from
    line: int | None


class CrossoverRecord(_Record):
    """One message size measured by a crossover search: an implementation setting (`point`) against the baseline
    at that size, both timed in the same worker processes: kind "crossover". A search that could not run at all
    leaves one record with its status and no size."""

    collective: str  # "all_reduce", or "all_reduce+rmsnorm" for fused kinds (against their unfused reference)
    mode: str  # MODES: the searches in graph and eager mode are separate
    bytes: int | None  # the all-reduce's size; None: the search did not run (status says why)
    dtype: str | None
    impl_us: float | None  # the setting's time per all-reduce: max over ranks of the min over rounds
    baseline_us: float | None  # the baseline's, timed the same way in the same processes
    baseline: Point  # what the setting is timed against (the sweep's baseline, or the unfused reference)
    search_round: int | None  # which measure() round of the search timed this size (1 = the powers of two)
    step_bytes: int | None  # the search's resolution: bisection stops when a boundary is this narrow
    rounds: int | None  # timed rounds per size
    warmup: int | None
    model_error: dict[str, Any] | None  # simulated: {"impl_pct", "baseline_pct", "basis"}, the models' errors


class MetaPlan(TypedDict, total=False):
    """meta.json's plan: what the sweep replayed (commprof.sweep.running.run_folder)."""

    model: str | None
    tp: int | None
    phase: str | None
    dtype: str | None
    tokens: list[int] | None
    iterations: int | None
    warmup: int | None
    point_timeout_s: float | None
    layout: str | None
    compute: str | None  # what each rank ran between two collectives, as the sweep file (or --compute) said
    skew: str | None
    spec: str | None  # the draft cycle and DP attention (commprof.planner.speculative.PlanOptions)
    num_steps: int | None
    draft_vocab: int | None
    dp_attention: bool | None


class MetaSweep(TypedDict, total=False):
    """meta.json's sweep: the file the run was made from, as it was (a --resume rebuilds the sweep from it)."""

    path: str | None
    name: str | None
    content: str | None
    sha256: str | None
    report: dict[str, Any] | None


class MetaGpu(TypedDict, total=False):
    """One visible GPU as commprof.runmeta.gpu_inventory writes it."""

    index: int
    name: str
    compute_capability: str
    memory_gib: float
    pci_bus_id: str | None


class TopologyHost(TypedDict, total=False):
    """The host part of the topology probe (commprof.doctor.topology_probe.describe_host)."""

    hostname: str | None
    logical_cpus: int | None
    cpu_model: str | None
    cpu_vendor: str | None
    sockets: int | None
    numa_nodes: list[dict[str, Any]] | None


class TopologyGpu(TypedDict, total=False):
    """One GPU as the topology probe writes it."""

    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    compute_capability: str | None
    memory_total_mib: int | None
    pcie: dict[str, int | None] | None
    numa_node: int | None
    cpu_affinity: str | None
    nvlink_active: int | None


class TopologyPair(TypedDict, total=False):
    """One GPU pair as the topology probe writes it."""

    gpus: list[int]
    level: str | None
    nvlink: bool | None
    p2p: dict[str, str | None] | None


class MetaTopology(TypedDict, total=False):
    """meta["topology"]: the topology probe's answer, or a simulation's preset summary (`gpus` a count there)."""

    source: str | None
    reason: str | None
    host: TopologyHost | None
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: list[TopologyGpu] | int | None
    pairs: list[TopologyPair] | None
    links: dict[str, Any] | None
    impls: dict[str, Any] | None
    sources: list[str] | None


class RunMeta(TypedDict, total=False):
    """meta.json, built by commprof.records.run_meta.run_meta for the sweep, simulate and the imports; a reader
    relies on these types (records.checks.meta_problem), and a key an older writer left out is None."""

    run_id: str
    created: str | None
    command: list[str] | None
    cwd: str | None
    hostname: str | None
    world_size: int | None
    nnodes: int | None
    backend: str | None
    source: str | None
    versions: dict[str, str | None] | None
    platform: dict[str, Any] | None
    gpus: list[MetaGpu] | None
    env: dict[str, str] | None
    plan: MetaPlan | None
    sweep: MetaSweep | None
    shared_gpus: bool | None
    topology: MetaTopology | None
    floor: dict[str, Any] | None
    doctor: dict[str, Any] | None
    kernel_builds: list[dict[str, Any]] | None  # one report per node that built kernels (sweep.prebuild)
    nccl_graphs: dict[str, Any] | None  # the NCCL graph candidates written for this box (sweep.graph_run)
    simulated: bool | None  # `commprof simulate` wrote the run
    calibration: dict[str, Any] | str | None  # simulated: the calibration file's fit, or "nccl-prior"
    model_error: dict[str, Any] | None  # simulated: the expected error of its predictions (evidence.ModelError)
    imported: list[dict[str, Any]] | None  # nccl-tests imports: each log's file, sha256, warnings and runs


# What a builder may leave out (None otherwise); the rest must be given.
REQUIRED_FIELDS = ("source", "run_id", "point_id", "point", "status")
_FLAGS = {"fused_rmsnorm": False, "in_place": False, "graph": False}


def step_record(**fields: Any) -> StepRecord:
    """A step record with every StepRecord field, in order; required: source, run_id, point_id, point, status,
    tokens and mode (the rest default to None, fused_rmsnorm to False, time to now)."""
    record = _build(StepRecord, "step", (*REQUIRED_FIELDS, "tokens", "mode"), fields)
    if record["mode"] not in MODES:
        raise ValueError(f"step record: mode {record['mode']!r} is not one of {MODES}")
    return record


def collective_record(**fields: Any) -> CollectiveRecord:
    """A collective record with every CollectiveRecord field, in order (per_iteration only where given);
    required: source, run_id, point_id, point, status, collective and bytes (in_place, graph default to False)."""
    return _build(CollectiveRecord, "collective", (*REQUIRED_FIELDS, "collective", "bytes"), fields)


def crossover_record(**fields: Any) -> CrossoverRecord:
    """A crossover record with every CrossoverRecord field, in order; required: source, run_id, point_id, point,
    status, collective, mode and baseline."""
    record = _build(CrossoverRecord, "crossover", (*REQUIRED_FIELDS, "collective", "mode", "baseline"), fields)
    if record["mode"] not in MODES:
        raise ValueError(f"crossover record: mode {record['mode']!r} is not one of {MODES}")
    return record


def _build(record_type: Any, kind: str, required: tuple[str, ...], fields: dict[str, Any]) -> Any:
    optional = record_type.__optional_keys__
    names = [n for n in record_type.__annotations__ if n not in optional] + [n for n in optional if n in fields]
    unknown = sorted(set(fields) - set(record_type.__annotations__))
    missing = [name for name in required if name not in fields]
    if unknown or missing:
        raise TypeError(f"{kind} record: unknown field(s) {unknown}, missing field(s) {missing}")
    if fields["source"] not in SOURCES:
        raise ValueError(f"{kind} record: source {fields['source']!r} is not one of {SOURCES}")
    if fields["status"] not in STATUSES:
        raise ValueError(f"{kind} record: status {fields['status']!r} is not one of {STATUSES}")
    values = {"schema": SCHEMA_VERSION, "kind": kind, **fields}
    if values.get("time") is None:
        values["time"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {name: values.get(name, _FLAGS.get(name)) for name in names}


def upgraded(record: dict[str, Any]) -> dict[str, Any]:
    """A record of a readable older version as this version writes it, changed in place (version 1: source and
    timing "model" become "simulated")."""
    if record.get("schema") == 1:
        for name in ("source", "timing"):
            if record.get(name) == "model":
                record[name] = "simulated"
        record["schema"] = SCHEMA_VERSION
    return record
