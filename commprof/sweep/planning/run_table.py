"""A sweep file's [run] table: its typed structure (RunSection) and its reading into RunTable: the model and its
layout, T, the step's options, timing and spacing; each problem recorded under its key
(commprof.sweep.planning.config reads the rest of the file)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from commprof.errors import UsageError
from commprof.planner.architectures import parse_layout
from commprof.planner.engine_sizes import engine_tokens
from commprof.planner.engines import parse_plan_engine
from commprof.planner.models import ModelShape, load_model, normalize_dtype
from commprof.planner.plan import PHASES, PlanOptions
from commprof.planner.spacing import ComputeSpec, SkewSpec
from commprof.planner.speculative import DRAFT_METHODS
from commprof.problems import String, choice, integer, number
from commprof.records.values import MAX_COUNT, MAX_POINT_TIMEOUT_S, MAX_RANKS, MAX_TOKENS
from commprof.sweep.planning.settings import INTERCONNECTS, SweepProblems
from commprof.sweep.planning.spec import DEFAULT_ITERATIONS, DEFAULT_POINT_TIMEOUT_S, DEFAULT_WARMUP, BaselineEvery

_TOKENS = "a non-empty list of integers >= 1"
_EVERY = 'a number of points >= 1 or minutes as "<M>min"'


class RunSection(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """[run] as the file says it (docs/sweep-files.md); what a type cannot say (a model preset, a layout, an engine,
    T from an engine, the draft cycle, the spacing grammar) parse_run checks."""

    model: String = "kimi-k2.5"  # a preset's name or a config.json path
    tp: integer(1, most=MAX_RANKS) | None = None  # tensor-parallel degree; None: the world size
    # the T values, or "engine:<name>" for that engine's CUDA-graph sizes
    tokens: Annotated[
        Annotated[list[integer(1, most=MAX_TOKENS)], msgspec.Meta(min_length=1)] | str,
        msgspec.Meta(extra={"want": _TOKENS}),
    ] = msgspec.field(default_factory=lambda: [1])
    phase: choice(PHASES, "a phase") = "verify"
    dtype: String | None = None  # activation dtype (normalize_dtype's spellings); None: the model's
    iterations: integer(1, most=MAX_COUNT) = DEFAULT_ITERATIONS  # timed steps per point
    warmup: integer(0, most=MAX_COUNT) = DEFAULT_WARMUP
    point_timeout_s: number(0.0, strict=True, most=MAX_POINT_TIMEOUT_S) = DEFAULT_POINT_TIMEOUT_S
    interconnect: choice(INTERCONNECTS, "an interconnect") = "any"  # decides which trap warnings apply
    layout: String | None = None  # the layer layout ("standard", "parallel", "hybrid:..."); None: the model's
    engine: String | None = None  # the engine whose model files the plan follows ("vllm==0.33")
    spec: Any = None  # the draft cycle: this and the next three are checked by PlanOptions, as on the command line
    num_steps: Any = None
    draft_vocab: Any = None
    dp_attention: Any = False
    compute: Any = "none"  # what each rank runs between two collectives (ComputeSpec.parse's grammar)
    skew: Any = None  # a rank late at each op (SkewSpec.parse's grammar); None: none
    # the baseline measured again every N points or "<M>min"
    baseline_every: Annotated[int | str, msgspec.Meta(extra={"want": _EVERY})] | None = None


@dataclass(frozen=True)
class RunTable:
    """[run] as the sweep uses it; a value with a problem is its default (the problems stop the sweep)."""

    model: str  # the model's name or config path, as given
    layout: str | None  # the layer layout the file overrides, or None
    engine: str | None  # the engine whose model files the plan follows ("vllm==0.33"); None: the default
    shape: ModelShape | None  # the model loaded once (None: it could not be)
    plan_options: PlanOptions  # the draft cycle and DP attention
    tp: int | None  # None: the world size
    tokens: tuple[int, ...]  # the T values
    tokens_from: str | None  # "engine:<name>": T taken from that engine's CUDA-graph sizes
    phase: str
    dtype: str | None
    iterations: int | None
    warmup: int | None
    point_timeout_s: float | None
    compute: ComputeSpec  # what each rank runs between two collectives
    skew: SkewSpec
    baseline_every: BaselineEvery | None  # the baseline measured again every N points or minutes


def parse_run(run: RunSection, problems: SweepProblems) -> RunTable:
    """[run], read as its type, checked for what its type cannot say; problems recorded in the order its keys are
    documented."""
    model, layout, engine, shape = _model(run, problems)
    plan_options = PlanOptions()
    try:
        plan_options = PlanOptions(
            spec=run.spec, num_steps=run.num_steps, draft_vocab=run.draft_vocab, dp_attention=run.dp_attention
        )
    except UsageError as exc:
        problems.error("run", str(exc))
    problems.interconnect = run.interconnect or "any"
    tokens, tokens_from = _tokens(run.tokens, plan_options, run.tp, engine, problems)
    dtype = None
    if run.dtype is not None:
        try:
            dtype = normalize_dtype(run.dtype)
        except UsageError as exc:
            problems.error("run.dtype", str(exc))
    compute, skew, every = _spacing(run, problems)
    return RunTable(
        model, layout, engine, shape, plan_options, run.tp, tokens, tokens_from, run.phase, dtype, run.iterations,
        run.warmup, run.point_timeout_s, compute, skew, every,
    )  # fmt: skip


def _model(run: RunSection, problems: SweepProblems) -> tuple[str, str | None, str | None, ModelShape | None]:
    """The model, its layout override, the engine its plan follows and its shape, loaded once (the spec carries it to
    every stage and trial)."""
    layout, engine, shape = run.layout, run.engine, None
    if layout is not None:
        try:
            parse_layout(layout)
        except UsageError as exc:
            problems.error("run.layout", str(exc))
            layout = None
    if engine is not None:
        try:
            engine = parse_plan_engine(engine)
        except UsageError as exc:
            problems.error("run.engine", str(exc))
            engine = None
    if run.model is not None:
        try:
            shape = load_model(run.model, layout, engine)
        except UsageError as exc:
            problems.error("run.model", str(exc))
    return run.model, layout, engine, shape


def _tokens(
    raw: list[int] | str | None,
    plan_options: PlanOptions,
    tp: int | None,
    engine: str | None,
    problems: SweepProblems,
) -> tuple[tuple[int, ...], str | None]:
    """run.tokens: a list of T, or "engine:<name>" for an engine's CUDA-graph sizes (and that name), at `tp`
    and for the engine release [run] engine names."""
    if raw is None:  # its problem is recorded
        return (), None
    if isinstance(raw, str) and raw.startswith("engine:"):
        per_request = plan_options.num_steps + 1 if plan_options.spec in DRAFT_METHODS else 1
        try:
            return engine_tokens(raw, per_request, tp, engine), raw
        except UsageError as exc:
            problems.error("run.tokens", str(exc))
            return (), raw
    if isinstance(raw, str):
        problems.error("run.tokens", f"expected {_TOKENS}, got {raw!r}")
        return (), None
    tokens = tuple(t for t in raw if t is not None)
    if len(set(tokens)) != len(tokens):
        problems.error("run.tokens", f"{raw} lists a T twice")
    return tokens, None


def _spacing(run: RunSection, problems: SweepProblems) -> tuple[ComputeSpec, SkewSpec, BaselineEvery | None]:
    """[run] compute, skew and baseline_every; each problem recorded under its key."""
    compute, skew, every = ComputeSpec(), SkewSpec(), None
    try:
        compute = ComputeSpec.parse(run.compute)
    except UsageError as exc:
        problems.error("run.compute", str(exc))
    if run.skew is not None:
        try:
            skew = SkewSpec.parse(run.skew)
        except UsageError as exc:
            problems.error("run.skew", str(exc))
    raw = run.baseline_every
    minutes = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*min\s*", raw) if isinstance(raw, str) else None
    if isinstance(raw, int) and raw >= 1:
        every = BaselineEvery(points=raw)
    elif minutes and 0 < float(minutes[1]) < math.inf:
        every = BaselineEvery(seconds=60.0 * float(minutes[1]))
    elif raw is not None:
        problems.error("run.baseline_every", f"expected {_EVERY}, got {raw!r}")
    return compute, skew, every
