"""What a sweep is, once validated: its points, the axes and rules that build them, its stages and itself.

Plain frozen dataclasses, built by commprof.sweep.planning.config from a sweep file (or the command line) and read by
the runner, the staged search, the dry run and the simulator. No I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from commprof.errors import UsageError
from commprof.planner.models import ModelShape, load_model, normalize_dtype
from commprof.planner.plan import PHASES, PlanOptions, build_step_plan
from commprof.planner.spacing import ComputeSpec, SkewSpec
from commprof.records.schema import GRAPH_FIRST, Mode
from commprof.records.values import MAX_TOKENS

# The replay harness's defaults (commprof.replay.harness.ReplayConfig), repeated so parsing never imports torch.
DEFAULT_ITERATIONS = 50
DEFAULT_WARMUP = 5
DEFAULT_POINT_TIMEOUT_S = 180.0

# Points a sweep may have unless --max-points allows more: at seconds per point on GPUs, already hours. The
# shipped sweeps have under 100.
DEFAULT_MAX_POINTS = 1000

BASELINE_LABEL = "defaults"

# Written in an axis, a rule or a point, "default" means "leave unset" (NCCL's own choice); in a rule, "*"
# means "set to anything".
DEFAULT = "default"
ANY = "*"


def point_key(impl: str, env: dict[str, str], options: dict[str, Any]) -> str:
    """Canonical identity of a point (implementation, sorted environment and options)."""
    return json.dumps({"impl": impl, "env": env, "options": options}, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class SweepPoint:
    """One configuration to measure: an implementation, its options and the environment it runs under."""

    point_id: str  # "p012" in stage 0, "s2-p003" in stage 2
    label: str  # for people: "ALGO=Ring PROTO=LL ch=4", or the file's own label
    impl: str  # "default", a built-in name or "package.module:Class"
    env: dict[str, str]  # variables set for this point; everything else is left as the run found it
    options: dict[str, Any]  # the implementation's options
    stage: int = 0

    def key(self) -> str:
        """Canonical identity (implementation, sorted environment and options) for de-duplication and resume."""
        return point_key(self.impl, self.env, self.options)

    def __hash__(self) -> int:  # env and options are dicts: hash what identifies the point
        return hash((self.point_id, self.key(), self.stage))

    def to_dict(self) -> dict[str, Any]:
        return {
            "point_id": self.point_id,
            "label": self.label,
            "impl": self.impl,
            "env": dict(self.env),
            "options": dict(self.options),
            "stage": self.stage,
        }

    @property
    def is_baseline(self) -> bool:
        return self.impl == DEFAULT and not self.env and not self.options


@dataclass(frozen=True)
class Setting:
    """One value of one axis: what it changes in a point (implementation, and variables set or unset)."""

    impl: str | None = None  # None: keeps the point's implementation
    options: dict[str, Any] | None = None
    set_env: dict[str, str] = field(default_factory=dict)
    unset_env: tuple[str, ...] = ()  # "default": back to NCCL's own choice

    def apply(
        self, impl: str, env: dict[str, str], options: dict[str, Any]
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        if self.impl is not None:
            impl, options = self.impl, dict(self.options or {})
        env = {k: v for k, v in env.items() if k not in self.unset_env}
        env.update(self.set_env)
        return impl, env, options


@dataclass(frozen=True)
class Axis:
    """One swept key (as written in the file, e.g. "channels" or "NCCL_PROTO") and its values in order."""

    name: str
    settings: tuple[Setting, ...]


def combinations(axes: tuple[Axis, ...]) -> int:
    """How many points crossing these axes makes from one base point."""
    count = 1
    for axis in axes:
        count *= len(axis.settings)
    return count


@dataclass(frozen=True)
class Rule:
    """A selection: a point matches when every condition does. Conditions map an implementation ("impl")
    or variable name to the accepted values, where "default" accepts unset and "*" any set value."""

    conditions: tuple[tuple[str, frozenset[str]], ...]
    reason: str = ""  # an [[exclude]]'s reason, shown by the dry run

    def describe(self) -> str:
        """E.g. "impl = default, NCCL_PROTO in LL, LL128"."""
        parts = []
        for name, accepted in self.conditions:
            values = sorted(accepted)
            parts.append(f"{name} = {values[0]}" if len(values) == 1 else f"{name} in {', '.join(values)}")
        return ", ".join(parts)

    def matches(self, point: SweepPoint) -> bool:
        for name, accepted in self.conditions:
            if name == "impl":
                if point.impl not in accepted:
                    return False
                continue
            value = point.env.get(name)
            if value is None:
                if DEFAULT not in accepted:
                    return False
            elif ANY not in accepted and value not in accepted:
                return False
        return True


@dataclass(frozen=True)
class StageSpec:
    """A refinement stage: the best `top_k` finished points (among `candidates`), crossed with `axes`."""

    kind: ClassVar[str] = "refine"
    index: int  # 1 for the first stage after stage 0
    name: str
    description: str
    top_k: int  # how many of the best earlier points it refines
    axes: tuple[Axis, ...] = ()  # crossed with each of them
    candidates: Rule | None = None  # only points matching this rank
    rank_by: str = "geomean"  # how a point's median step times over T combine: "geomean" or "sum"
    iterations: int | None = None  # set: this stage re-measures its points with these iterations
    warmup: int | None = None  # None: the run's
    include_baseline: bool = False  # re-measure the baseline beside them

    def max_points(self) -> int:
        """Points this stage can produce at most (fewer when candidates are missing or repeat)."""
        return self.top_k * combinations(self.axes) + int(self.include_baseline)


@dataclass(frozen=True)
class CrossoverStage:
    """A crossover search stage: per implementation setting and mode, the message size from which it beats the
    baseline (commprof.sweep.planning.crossover), each round of sizes timed in fresh worker processes."""

    kind: ClassVar[str] = "crossover"
    index: int
    name: str
    description: str
    impls: tuple[str, ...] = ()  # implementations to search; (): every non-baseline one that ran ok earlier
    modes: tuple[Mode, ...] = GRAPH_FIRST  # searched apart; graph only where the setting captured earlier
    min_bytes: int = 1024  # powers of two from here ...
    max_bytes: int = 1 << 20  # ... to here, plus the plan's own all-reduce sizes
    step_bytes: int = 1024  # bisection stops when the last win and the first loss are this close
    max_rounds: int = 10  # measure() rounds per search at most, each a fresh set of worker processes
    rounds: int = 10  # timed rounds per size: a size's time is the max over ranks of the min over these
    warmup: int = 2  # untimed rounds per size first

    def max_points(self) -> int:
        """A search is no sweep point: it adds none to the point budget."""
        return 0


Stage = StageSpec | CrossoverStage

# (points, timed steps, warm-up steps) of one group of points: stage 0, or a stage at its upper bound.
StageWork = tuple[int, int, int]


def stage_work(stage0_points: int, stages: tuple[Stage, ...], iterations: int, warmup: int) -> list[StageWork]:
    """The work of stage 0 and of every stage at its upper bound, from counts alone (nothing expanded)."""
    work = [(stage0_points, iterations, warmup)]
    for stage in stages:
        if stage.kind == "crossover":
            continue
        work.append(
            (stage.max_points(), stage.iterations or iterations, warmup if stage.warmup is None else stage.warmup)
        )
    return work


class SweepTooLarge(UsageError):
    """A sweep with more points than its budget, refused from counts alone, before one point is built."""

    def __init__(self, source: str, name: str, work: list[StageWork], tokens: int, budget: int):
        self.source, self.name, self.work, self.tokens, self.budget = source, name, work, tokens, budget
        self.stage0, self.total = work[0][0], sum(points for points, _, _ in work)
        super().__init__(
            f"{source}: up to {self.total} points ({self.stage0} in stage 0), above the budget of {budget} points: "
            f"narrow [axes] or [[exclude]] combinations (--dry-run shows the estimate), or allow it with "
            f"--max-points {self.total}"
        )


@dataclass(frozen=True)
class BaselineEvery:
    """`[run] baseline_every`: re-measure the baseline after this many points or this many seconds, whichever
    comes first, and once more at the end (A/B/.../A), so the run's drift is measured, not assumed away."""

    points: int | None = None
    seconds: float | None = None

    def due(self, points_since: int, seconds_since: float) -> bool:
        if self.points is not None and points_since >= self.points:
            return True
        return self.seconds is not None and seconds_since >= self.seconds


@dataclass(frozen=True)
class RunOverrides:
    """Values of a sweep's [run] table given elsewhere (the command line, a resumed run's plan); None: not given."""

    model: str | None = None  # a built-in model name or a config path
    tokens: tuple[int, ...] | list[int] | None = None  # every T (empty or None: not given)
    phase: str | None = None  # one of PHASES
    dtype: str | None = None  # any spelling normalize_dtype takes
    tp: int | None = None  # tensor-parallel ranks
    iterations: int | None = None  # timed replays per point
    warmup: int | None = None  # untimed replays per point
    point_timeout_s: float | None = None  # one point's time limit
    compute: str | None = None  # the compute model, as --compute spells it


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: what to replay, the points of stage 0 and the stages that refine them."""

    path: str | None  # the sweep file; None when built from the command line
    content: str  # its text, kept in meta.json so a run can be resumed and reproduced
    sha256: str  # of `content`
    name: str
    description: str
    model: str  # a preset name or a path to a config.json
    tp: int | None  # tensor-parallel degree; None: the world size
    tokens: tuple[int, ...]  # every T to replay, in order
    phase: str  # "decode" or "verify"
    dtype: str | None  # activation dtype; None: the model's
    iterations: int  # timed steps per (T, mode)
    warmup: int  # untimed steps before them
    point_timeout_s: float  # a point still running after this is killed and recorded "timeout"
    points: tuple[SweepPoint, ...]  # stage 0, the baseline first
    stages: tuple[Stage, ...] = ()  # refinement and crossover stages, in the file's order
    warnings: tuple[str, ...] = ()  # known traps, "file: key: warning"
    report: dict[str, Any] = field(default_factory=dict)  # the file's [report] table, validated
    excludes: tuple[Rule, ...] = ()  # points no stage builds
    interconnect: str = "any"  # what the file is written for: "any", "pcie" or "nvlink" (trap warnings only)
    layout: str | None = None  # overrides the layout the model's architecture implies
    engine: str | None = None  # the engine whose model files the plan follows ("vllm==0.33"); None: the default
    plan_options: PlanOptions = field(default_factory=PlanOptions)  # draft cycle and DP attention
    compute: ComputeSpec = field(default_factory=ComputeSpec)  # what each rank runs between two collectives
    skew: SkewSpec = field(default_factory=SkewSpec)  # which rank starts each collective late
    tokens_from: str | None = None  # "engine:vllm", ...: tokens are the engine's captured sizes
    baseline_every: BaselineEvery | None = None  # the baseline measured again at intervals and at the end
    # `model` resolved (config.json read, layout applied) once, where the spec is built; None: resolved on first use
    shape: ModelShape | None = field(default=None, compare=False, repr=False)

    @property
    def model_shape(self) -> ModelShape:
        """The model this sweep replays, resolved once per spec (every stage, size plan and trial reuses it)."""
        if self.shape is None:
            object.__setattr__(self, "shape", load_model(self.model, self.layout, self.engine))
        return self.shape  # type: ignore[return-value]

    @property
    def spacing(self) -> dict[str, Any]:
        """What a trial request carries about the spacing (commprof.replay.trial.TrialRequest.spacing)."""
        return {"compute": self.compute.to_dict(), "skew": self.skew.to_dict()}

    def check_plans(self, tp: int) -> None:
        """UsageError in one line when a step of this sweep is one no engine runs (e.g. an impossible TP)."""
        model = self.model_shape
        spaced_us = 0.0  # the compute and lateness alone of one point's timed steps, every T
        try:
            for tokens in self.tokens:
                plan = build_step_plan(model, tp, tokens, self.phase, self.dtype, self.plan_options)
                # a traced step of another shape is refused now, not in every point
                step_us = sum(self.compute.gaps_us(plan))
                if self.skew.active:
                    self.skew.check_world(tp)
                    step_us += max(sum(self.skew.lags_us(plan, rank)) for rank in range(tp))
                spaced_us += (self.warmup + self.iterations) * step_us
            if spaced_us > self.point_timeout_s * 1e6:
                raise UsageError(
                    f"compute {self.compute.text} and skew {self.skew.text} add {spaced_us / 1e6:.3g} s to one "
                    f"point's {self.warmup} + {self.iterations} steps per T, more than its point_timeout_s of "
                    f"{self.point_timeout_s:g} s: every point would time out (shorten them or raise point_timeout_s)"
                )
        except UsageError as exc:
            raise UsageError(f"{self.path or 'command line'}: run: {exc}") from None

    def iterations_for(self, point: SweepPoint) -> tuple[int, int]:
        """(iterations, warmup) for a point: its stage's own when that stage re-measures, else the run's."""
        stage = self.stages[point.stage - 1] if point.stage >= 1 else None
        if stage is not None and stage.kind == "crossover":
            return stage.rounds, stage.warmup
        if stage is not None:
            return (stage.iterations or self.iterations, self.warmup if stage.warmup is None else stage.warmup)
        return self.iterations, self.warmup

    def max_points(self) -> int:
        return len(self.points) + sum(stage.max_points() for stage in self.stages)

    def with_overrides(self, given: RunOverrides) -> SweepSpec:
        """This sweep with command-line values in place of the file's; None (or no tokens) keeps the file's."""
        model, tokens, phase, dtype, compute = given.model, given.tokens, given.phase, given.dtype, given.compute
        tp, iterations, warmup, point_timeout_s = given.tp, given.iterations, given.warmup, given.point_timeout_s
        changes: dict[str, Any] = {}
        if compute is not None:
            try:
                changes["compute"] = ComputeSpec.parse(compute)
            except UsageError as exc:
                raise UsageError(f"--compute: {exc}") from None
        if model is not None:
            changes["shape"] = load_model(model, self.layout, self.engine)
            changes["model"] = model
        if tokens:
            tokens = tuple(tokens)
            if any(isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= MAX_TOKENS for t in tokens):
                raise UsageError(f"tokens must be integers from 1 to {MAX_TOKENS}, got {list(tokens)}")
            changes["tokens"] = tuple(dict.fromkeys(tokens))
            changes["tokens_from"] = None
        if phase is not None:
            if phase not in PHASES:
                raise UsageError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
            changes["phase"] = phase
        if dtype is not None:
            changes["dtype"] = normalize_dtype(dtype)
        for name, value, minimum in (("tp", tp, 1), ("iterations", iterations, 1), ("warmup", warmup, 0)):
            if value is not None:
                if value < minimum:
                    raise UsageError(f"{name} must be >= {minimum}, got {value}")
                changes[name] = value
        if point_timeout_s is not None:
            if point_timeout_s <= 0:
                raise UsageError(f"the point time limit must be > 0 s, got {point_timeout_s}")
            changes["point_timeout_s"] = float(point_timeout_s)
        return replace(self, **changes)
