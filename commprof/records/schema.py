"""What a results record is: the step, the collective and the crossover record, one TypedDict and one
constructor each, and the values their fields take. docs/results-schema.md documents every field.

Every writer (the sweep, the simulator, the nccl-tests importer, the tests' builders) builds records with
`step_record` / `collective_record` / `crossover_record`, so every record of a kind has the same fields in the same order; readers
(the report, calibration, resume) read them back as these types.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal, TypedDict, get_args

from commprof.records.nccl_facts import NcclFacts
from commprof.records.point_ids import POINT_ID, RUN_ID
from commprof.records.validate import bounded
from commprof.records.values import LARGEST as _LARGEST
from commprof.records.values import (
    MAX_BYTES,
    MAX_SETTINGS,
    MAX_TOKENS,
    Bytes,
    Count,
    ErrorPct,
    NonNegative,
    Ranks,
    Time,
)
from commprof.records.vocab import KernelBasis

SCHEMA_VERSION = 2
# Versions this commprof reads. Version 1 said "model" where version 2 says "simulated" (source and timing of
# cost-model predictions); `upgraded` reads a version-1 record as version 2.
READABLE_VERSIONS = (1, 2)

# Where a record's numbers come from: timed here, predicted by the cost model, or imported from nccl-tests.
Source = Literal["measured", "simulated", "nccl-tests"]
SOURCES: tuple[Source, ...] = get_args(Source)
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
Status = Literal[
    "ok",  # measured and verified
    "wrong",  # ran, but results differ from the exact reduction (eager)
    "capture_failed",  # CUDA-graph capture raised
    "replay_wrong",  # graph replay gave results that differ from the exact reduction
    "timeout",  # killed after the point's time limit, on every rank
    "crashed",  # a worker died: signal, abort or non-zero exit
    "unsupported",  # the implementation or mode does not apply here; message says why
    "error",  # a Python exception in the trial; message has it
    "not_engaged",  # ran and verified, but NCCL's log shows it did not engage the point's setting; message says what
]
STATUSES: tuple[Status, ...] = get_args(Status)
# Statuses that mean "the setting does not work here"; "unsupported" only means it does not apply.
FAILED_STATUSES = tuple(s for s in STATUSES if s not in ("ok", "unsupported"))

RunId = bounded(str, "run id {value!r} is not one (letters, digits, '.', '_', '-')", pattern=rf"\A{RUN_ID.pattern}\Z")
PointId = bounded(
    str, "point id {value!r} is not one (p000, p001, ..., s1-p000, ...)", pattern=rf"\A{POINT_ID.pattern}\Z"
)
Tokens = bounded(int, ge=1, le=MAX_TOKENS)


class Stats(TypedDict, total=False):
    """A latency over the timed steps (or one op's over the steps), µs."""

    n: Count  # samples
    min: Time
    median: Time
    mean: Time
    p90: Time
    p99: Time  # only from 100 samples on (commprof.stats.P99_MIN_SAMPLES); records before that: always
    max: Time  # absent in records written before it was kept
    cv: Time  # standard deviation / mean, unitless


# op_us's columns: a wrong item is named by its column ("op_us.median: a negative or non-finite time").
_WRONG_ITEM = "{field}: an item of the wrong type"
_OP_TIME = "{field}: a negative or non-finite time"
OpTime = bounded(float, _OP_TIME, ge=0, le=_LARGEST)


class OpColumns(TypedDict, total=False):
    """A step's per-op statistics, columnar: one item per op site of the step plan in every column, µs."""

    sites: bounded(list[str], _WRONG_ITEM)  # the op's site in the step (embed, attn, mlp, moe, logits, ...)
    collectives: bounded(list[str], _WRONG_ITEM)  # "all_reduce", "all_gather", ...
    draft: bounded(list[bool], _WRONG_ITEM)  # the op belongs to the draft model's step
    bytes: bounded(list[bounded(int, _WRONG_ITEM, ge=0, le=MAX_BYTES)], _WRONG_ITEM)  # the op's message size
    min: bounded(list[OpTime | None], _OP_TIME)
    median: bounded(list[OpTime | None], _OP_TIME)
    mean: bounded(list[OpTime | None], _OP_TIME)
    p90: bounded(list[OpTime | None], _OP_TIME)
    p99: bounded(list[OpTime | None], _OP_TIME)
    max: bounded(list[OpTime | None], _OP_TIME)
    cv: bounded(list[OpTime | None], _OP_TIME)  # standard deviation / mean, unitless


class Point(TypedDict, total=False):
    """The configuration a record measured (commprof.sweep.planning.points.SweepPoint.to_dict())."""

    point_id: PointId
    label: str
    impl: str  # the all-reduce implementation (commprof.impls)
    env: bounded(
        dict[str, str],
        f"{{field}}: more than {MAX_SETTINGS} settings (allowed: at most {MAX_SETTINGS})",
        max_length=MAX_SETTINGS,
    )  # only what the point sets on top of the run's environment
    options: dict[str, Any]  # the implementation's options
    stage: Count  # the staged search's stage that produced the point
    repeat: Count  # the baseline measured again (baseline-repeats.jsonl): which re-measurement; absent: the first
    interleaved: Count  # the interleaved confirmation (interleaved.jsonl): this measurement's place in its sequence
    against: PointId  # and the reference it is judged against (the baseline, or a fused kind's unfused reference)


class Check(TypedDict, total=False):
    """A step's correctness, agreed across ranks (commprof.replay.replay_tensors.Verification.to_dict)."""

    ok: bool  # every op's output matched the exact result on every rank
    max_abs_err: NonNegative | None  # the largest error among the finite values; null where it was not finite
    tolerance: NonNegative | None  # the largest error allowed (scales with the dtype's precision)
    bad_ops: Count  # ops with a wrong output (the worst rank's count)
    first_bad_op: Count | None  # the earliest wrong op's index in the step plan
    first_bad_site: str | None  # and its site ("layer.3.moe")
    bad_ranks: list[Count]  # the ranks whose outputs were wrong; absent in records written before it was kept
    non_finite: Count  # NaN / Inf values among the outputs; absent likewise


class Spacing(TypedDict, total=False):
    """What ran between a step's collectives, as people read it (commprof.planner.spacing.describe)."""

    compute: str  # each rank's compute between two collectives ("uniform:500")
    skew: str  # the late rank and by how much ("rank 1 late by 1000 µs"), or "none"


class KernelModelFacts(TypedDict, total=False):
    """The model behind a simulated point's non-NCCL kernel ops (commprof.costmodel.kernels.KernelModel.describe)."""

    impl: str  # the implementation it predicts
    basis: KernelBasis
    source: str  # where its figures come from
    timed: Mode  # what the published figures (or the floor model) time: graph replay or eager launches
    max_bytes: Bytes | None  # NCCL above this size (the kernel's ceiling); null: any size
    expected_error_pct: ErrorPct | None  # null: unknown, and then no predicted difference counts
    error_basis: str  # where that error comes from


class CrossoverModelError(TypedDict, total=False):
    """A simulated crossover size's expected errors (commprof.costmodel.crossover_sim), %."""

    impl_pct: NonNegative | None  # the setting's model's; null: unknown
    baseline_pct: NonNegative | None  # the baseline's
    basis: str  # where both come from
    outside_calibration: bool  # the size is outside the calibration's judged sizes: both priced by the prior


class StepPlanSummary(TypedDict, total=False):
    """StepPlan.summary(): what the replayed step was (commprof.planner.plan.StepPlan)."""

    model: str | None  # the LLM's name
    tp: Ranks
    tokens: Tokens
    phase: str | None
    dtype: str | None
    hidden_size: Count
    num_layers: Count
    vocab_size: Count
    layout: str | None  # the layer layout ("standard", "parallel", "hybrid:...")
    architecture: str | None  # the config's architectures[0], the class the engine loads (ModelShape)
    all_reduce: Count  # collectives of each kind in the step
    all_gather: Count
    reduce_scatter: Count
    draft_ops: Count  # of them, the draft model's
    spec: str | None  # the draft cycle (commprof.planner.speculative.PlanOptions)
    num_steps: Count | None
    draft_vocab: Count | None
    dp_attention: bool | None
    total_bytes: int


class _Record(TypedDict):
    """The fields every record has; a reader needs these (the others an older writer may have left out)."""

    schema: Literal[1, 2]  # SCHEMA_VERSION
    kind: str  # KINDS: each record type names its own
    source: Source
    run_id: RunId  # the run folder's name
    point_id: PointId  # point_ids.py
    point: Point
    status: Status


class _Common(_Record, total=False):
    backend: str | None  # "nccl" or "gloo"; None for imported or simulated records without one
    world_size: Ranks | None  # ranks in the process group
    message: str | None  # why a status is not "ok"; notes on an "ok" simulated record
    time: str  # ISO-8601 UTC time the record was built
    calibration: str | None  # simulated records: which calibration ("nccl-prior" or a file) predicted them


class _Step(_Common):
    kind: Literal["step"]
    tokens: Tokens  # T, tokens in the step
    mode: Mode


class StepRecord(_Step, total=False):
    """One replayed step plan at one T in one mode: kind "step"."""

    model: str | None  # the LLM's name (commprof.planner.models)
    phase: str | None  # "decode" or "verify"
    tp: Ranks | None  # tensor-parallel degree
    dtype: str | None  # activation dtype
    plan: StepPlanSummary | None  # StepPlan.summary(): collective counts, bytes, hidden size, layers
    timing: str | None  # "cuda_events", "cpu_clock" or "simulated"
    step_us: Stats | None  # per-step latency over the timed steps
    op_us: OpColumns | None  # per-op statistics, columnar; both modes (records before the graph-mode per-op pass:
    # eager only)
    op_timing: str | None  # which per-op pass op_us comes from and what its times include (docs/timing.md)
    rank_step_median_us: list[Time] | None  # each rank's median step time
    check: Check | None  # correctness, agreed across ranks
    impl_detail: str | None  # what exactly ran where the implementation chooses at setup
    fused_rmsnorm: bool  # the layer all-reduces include residual add + RMSNorm
    nccl: NcclFacts | None  # what NCCL did, from its INFO log (or the cost model's choices)
    iterations: Count | None  # timed steps
    warmup: Count | None  # warm-up steps
    duration_s: NonNegative | None  # wall time of the whole point on the controller
    measure_s: NonNegative | None  # wall time of this (T, mode) inside the worker
    kernel_model: KernelModelFacts | None  # simulated non-NCCL points: the kernel model behind them, its expected error
    # What ran between the collectives ({"compute": "uniform:500", "skew": "rank 1 late by 1000 µs"}); None: nothing,
    # the collectives back to back.
    spacing: Spacing | None
    compute_us: Stats | None  # the step's compute alone, per step (timed on its own): communication = step - compute
    wait_us: Stats | None  # per step, the first rank's wait at each op for the last arrival, summed over ops
    wait_clock: str | None  # the clock arrivals were stamped on ("host_monotonic", "cuda_globaltimer"), or why not


class _Collective(_Common):
    kind: Literal["collective"]
    collective: str  # "all_reduce", "all_gather", ...
    bytes: Bytes  # message size (nccl-tests' "size"); -b 0 times a 0-byte collective


class CollectiveRecord(_Collective, total=False):
    """One collective at one size, as nccl-tests reports it: kind "collective"."""

    count: Bytes | None  # elements
    dtype: str | None
    redop: str | None
    root: int | None  # -1 where none
    in_place: bool  # nccl-tests' in-place column
    graph: bool  # measured inside a CUDA graph (nccl-tests -G)
    time_us: NonNegative | None
    algbw_gbps: NonNegative | None
    busbw_gbps: NonNegative | None  # algbw × 2(n−1)/n for all-reduce
    wrong: Bytes | None  # nccl-tests' #wrong (None for "N/A")
    file: str | None  # where an imported row came from
    line: bounded(int, ge=0, le=1 << 40) | None
    per_iteration: dict[str, Time]  # nccl-tests -I columns: min_us, max_us, p99_us, cv_pct; written where given


class _Crossover(_Common):
    kind: Literal["crossover"]
    collective: str  # "all_reduce", or "all_reduce+rmsnorm" for fused kinds (against their unfused reference)
    mode: Mode  # the searches in graph and eager mode are separate
    baseline: Point  # what the setting is timed against (the sweep's baseline, or the unfused reference)


class CrossoverRecord(_Crossover, total=False):
    """One message size measured by a crossover search: an implementation setting (`point`) against the baseline
    at that size, both timed in the same worker processes: kind "crossover". A search that could not run at all
    leaves one record with its status and no size."""

    bytes: bounded(int, "bytes {value} is below 1", ge=1, le=MAX_BYTES) | None  # the all-reduce's size; None: the
    # search did not run (status says why)
    dtype: str | None
    impl_us: NonNegative | None  # the setting's time per all-reduce: max over ranks of the min over rounds
    baseline_us: NonNegative | None  # the baseline's, timed the same way in the same processes
    search_round: Count | None  # which measure() round of the search timed this size (1 = the powers of two)
    step_bytes: bounded(int, ge=1, le=MAX_BYTES) | None  # the search's resolution: bisection stops when a boundary
    # is this narrow
    rounds: Count | None  # timed rounds per size
    warmup: Count | None
    model_error: CrossoverModelError | None  # simulated: the models' errors


RECORD_TYPES = {"step": StepRecord, "collective": CollectiveRecord, "crossover": CrossoverRecord}
KINDS = tuple(RECORD_TYPES)


# What a builder may leave out (None otherwise); the rest must be given.
REQUIRED_FIELDS = ("source", "run_id", "point_id", "point", "status")
_FLAGS = {"fused_rmsnorm": False, "in_place": False, "graph": False}
_WHERE_GIVEN = ("per_iteration",)  # written only where the writer gives them


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
    names = [n for n in record_type.__annotations__ if n not in _WHERE_GIVEN]
    names += [n for n in _WHERE_GIVEN if n in fields]
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
