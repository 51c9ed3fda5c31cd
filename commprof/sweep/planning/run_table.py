"""A sweep file's [run] table read into RunTable: the model and its layout, T, the step's options, timing and
spacing; each problem recorded under its key (commprof.sweep.planning.config reads the rest of the file)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from commprof.errors import UsageError
from commprof.planner.architectures import parse_layout
from commprof.planner.engine_sizes import engine_tokens
from commprof.planner.engines import parse_plan_engine
from commprof.planner.models import ModelShape, load_model, normalize_dtype
from commprof.planner.plan import PHASES, PlanOptions
from commprof.planner.spacing import ComputeSpec, SkewSpec
from commprof.planner.speculative import DRAFT_METHODS
from commprof.sweep.planning.settings import INTERCONNECTS, SweepProblems
from commprof.sweep.planning.spec import DEFAULT_ITERATIONS, DEFAULT_POINT_TIMEOUT_S, DEFAULT_WARMUP, BaselineEvery

RUN_KEYS = (
    "model",
    "tp",
    "tokens",
    "phase",
    "dtype",
    "iterations",
    "warmup",
    "point_timeout_s",
    "interconnect",
    "layout",
    "engine",
    "spec",
    "num_steps",
    "draft_vocab",
    "dp_attention",
    "compute",
    "skew",
    "baseline_every",
)
# The [run] keys that become PlanOptions (what the step holds beyond the target's forward pass).
PLAN_OPTION_KEYS = ("spec", "num_steps", "draft_vocab", "dp_attention")


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


def parse_run(run: dict, problems: SweepProblems) -> RunTable:
    """[run] read and checked, problems recorded in the order its keys are documented."""
    problems.unknown_keys(run, RUN_KEYS, "run")
    model, layout, engine, shape = _model(run, problems)
    plan_options = PlanOptions()
    try:
        plan_options = PlanOptions(**{key: run[key] for key in PLAN_OPTION_KEYS if key in run})
    except UsageError as exc:
        problems.error("run", str(exc))
    tp = problems.integer(run["tp"], "run.tp", 1) if "tp" in run else None
    problems.interconnect = (
        problems.choice(run.get("interconnect", "any"), "run.interconnect", INTERCONNECTS, "an interconnect") or "any"
    )
    tokens, tokens_from = _tokens(run.get("tokens", [1]), plan_options, tp, problems)
    phase = run.get("phase", "verify")
    problems.choice(phase, "run.phase", PHASES, "a phase")
    dtype = None
    if "dtype" in run:
        try:
            dtype = normalize_dtype(run["dtype"])
        except UsageError as exc:
            problems.error("run.dtype", str(exc))
    iterations = problems.integer(run.get("iterations", DEFAULT_ITERATIONS), "run.iterations", 1)
    warmup = problems.integer(run.get("warmup", DEFAULT_WARMUP), "run.warmup", 0)
    timeout = problems.number(
        run.get("point_timeout_s", DEFAULT_POINT_TIMEOUT_S), "run.point_timeout_s", 0.0, strict=True
    )
    compute, skew, every = _spacing(run, problems)
    return RunTable(
        model, layout, engine, shape, plan_options, tp, tokens, tokens_from, phase, dtype, iterations, warmup, timeout,
        compute, skew, every,
    )  # fmt: skip


def _model(run: dict, problems: SweepProblems) -> tuple[str, str | None, str | None, ModelShape | None]:
    """The model, its layout override, the engine its plan follows and its shape, loaded once (the spec carries it to
    every stage and trial)."""
    model = run.get("model", "kimi-k2.5")
    layout = run.get("layout")
    if layout is not None and problems.string(layout, "run.layout") is not None:
        try:
            parse_layout(layout)
        except UsageError as exc:
            problems.error("run.layout", str(exc))
            layout = None
    elif layout is not None:
        layout = None
    engine = run.get("engine")
    if engine is not None and problems.string(engine, "run.engine") is not None:
        try:
            engine = parse_plan_engine(engine)
        except UsageError as exc:
            problems.error("run.engine", str(exc))
            engine = None
    elif engine is not None:
        engine = None
    shape = None
    if problems.string(model, "run.model") is not None:
        try:
            shape = load_model(model, layout, engine)
        except UsageError as exc:
            problems.error("run.model", str(exc))
    return model, layout, engine, shape


def _tokens(
    raw: object, plan_options: PlanOptions, tp: int | None, problems: SweepProblems
) -> tuple[tuple[int, ...], str | None]:
    """run.tokens: a list of T, or "engine:<name>" for an engine's CUDA-graph sizes (and that name)."""
    if isinstance(raw, str) and raw.startswith("engine:"):
        per_request = plan_options.num_steps + 1 if plan_options.spec in DRAFT_METHODS else 1
        try:
            return engine_tokens(raw, per_request, tp), raw
        except UsageError as exc:
            problems.error("run.tokens", str(exc))
            return (), raw
    if not isinstance(raw, list) or not raw:
        problems.error("run.tokens", f"expected a non-empty list of integers >= 1, got {raw!r}")
        return (), None
    tokens = tuple(t for i, v in enumerate(raw) if (t := problems.integer(v, f"run.tokens[{i}]", 1)))
    if len(set(tokens)) != len(tokens):
        problems.error("run.tokens", f"{raw} lists a T twice")
    return tokens, None


def _spacing(run: dict, problems: SweepProblems) -> tuple[ComputeSpec, SkewSpec, BaselineEvery | None]:
    """[run] compute, skew and baseline_every; each problem recorded under its key."""
    compute, skew, every = ComputeSpec(), SkewSpec(), None
    try:
        compute = ComputeSpec.parse(run.get("compute", "none"))
    except UsageError as exc:
        problems.error("run.compute", str(exc))
    if "skew" in run:
        try:
            skew = SkewSpec.parse(run["skew"])
        except UsageError as exc:
            problems.error("run.skew", str(exc))
    if "baseline_every" in run:
        raw = run["baseline_every"]
        minutes = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*min\s*", raw) if isinstance(raw, str) else None
        if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
            every = BaselineEvery(points=raw)
        elif minutes and float(minutes[1]) > 0:
            every = BaselineEvery(seconds=60.0 * float(minutes[1]))
        else:
            problems.error(
                "run.baseline_every", f'expected a number of points >= 1 or minutes as "<M>min", got {raw!r}'
            )
    return compute, skew, every
