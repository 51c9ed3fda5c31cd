"""`--dry-run`: the expanded points of a sweep, which of them will really run on this launch, its stages and an
estimated duration from what one point costs here (commprof.sweep.running.probe measures it), as plain text. Pure."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from commprof.impls.base import AllReduceImpl
from commprof.impls.registry import BACKEND_IMPLS, load_impl, resolve_impl_name, unfused_reference
from commprof.replay.size_timing import CROSSOVER_LAYERS
from commprof.replay.step_counts import PROFILED_STEPS, compute_steps, steps_per_mode
from commprof.sweep.planning import crossover as cx
from commprof.sweep.planning import interleave
from commprof.sweep.planning.gate import inert_variables
from commprof.sweep.planning.points import option_text, preparation, sweep_impls
from commprof.sweep.planning.spec import CrossoverStage, Stage, StageSpec, SweepPoint, SweepSpec, SweepTooLarge
from commprof.terminal import one_line

# What an estimate assumes when nothing was measured: an 8-GPU box's start-up per worker set (process start,
# rendezvous, communicator init) and a verify step of Kimi-K2.5 at TP 8 over PCIe, in each of two modes.
ASSUMED_OVERHEAD_S = 3.0
ASSUMED_STEP_MS = 30.0
# A crossover size's all-reduce beyond the probe's own (which times the plan's small sizes only): its bytes at an
# assumed algorithm bandwidth, low on purpose (PCIe NCCL at 8 GPUs; gloo over loopback) so the estimate stays high.
ASSUMED_ALGBW_GBPS = {"nccl": 10.0, "gloo": 1.0}


@dataclass(frozen=True)
class StepCost:
    """What one point costs on a launch: its start-up, and one step per T over the modes that run."""

    overhead_s: float  # a worker set's wall time beyond its steps: fork, rendezvous, communicator init, verification
    step_ms: dict[int, float] = field(default_factory=dict)  # T -> one step, ms, summed over the modes that run
    basis: str = ""  # where the figures come from, in words
    failed: str | None = None  # the probe ended without a cost (crashed, timed out, ...): why; then no estimate
    # Worker sets a point that runs on NCCL forks, each paying the start-up: the timed one, NCCL's untimed logging
    # worker (on NCCL with its logs on: `logged`; only for points whose all-reduce is NCCL's own), the profiling
    # pass (--profile: `profiled`).
    worker_sets: int = 1
    logged: bool = False
    profiled: bool = False
    compute_ms: dict[int, float] = field(default_factory=dict)  # T -> the compute-only pass's step, where it runs

    def step_for(self, tokens: int) -> float:
        return self.step_ms.get(tokens, 2 * ASSUMED_STEP_MS)


ASSUMED = StepCost(
    ASSUMED_OVERHEAD_S,
    {},
    f"assumed, not measured here: {ASSUMED_OVERHEAD_S:g} s start-up per worker set and {ASSUMED_STEP_MS:g} ms per "
    "step in each of eager and graph mode (an 8-GPU PCIe box)",
)


def cost_from_records(records: list[dict], iterations: int, warmup: int) -> StepCost | None:
    """A probe's StepCost from its records: None unless every T has an ok step. Its start-up is its duration less
    every step it ran (step_counts.steps_per_mode per T and mode, and the compute-only pass where there is one)."""
    steps = [r for r in records if r.get("kind") == "step" and r.get("status") == "ok" and r.get("step_us")]
    step_ms: dict[int, float] = {}
    compute_ms: dict[int, float] = {}
    for record in steps:
        tokens = int(record["tokens"])
        step_ms[tokens] = step_ms.get(tokens, 0.0) + float(record["step_us"]["median"]) / 1000.0
        if (record.get("compute_us") or {}).get("median") is not None:
            compute_ms[tokens] = compute_ms.get(tokens, 0.0) + float(record["compute_us"]["median"]) / 1000.0
    wanted = {int(r["tokens"]) for r in records if r.get("kind") == "step"}
    if not wanted or set(step_ms) != wanted:
        return None
    timed_s = (
        sum(step_ms.values()) * steps_per_mode(iterations, warmup)
        + sum(compute_ms.values()) * compute_steps(iterations, warmup)
    ) / 1000.0
    duration = max((float(r.get("duration_s") or 0.0) for r in records), default=0.0)
    modes = sorted({r["mode"] for r in steps})
    return StepCost(
        max(duration - timed_s, 0.0),
        step_ms,
        f"measured on this launch: the baseline with {iterations} timed + {warmup} warm-up steps per T "
        f"({' + '.join(modes)} mode), {duration:.1f} s",
        compute_ms=compute_ms,
    )


def probe_cost(records: list[dict], iterations: int, warmup: int) -> StepCost:
    """The probe's StepCost, or one that says how the probe ended when it gave none (no estimate is made then)."""
    cost = cost_from_records(records, iterations, warmup)
    if cost is not None:
        return cost
    statuses = sorted({str(r.get("status")) for r in records}) or ["no record"]
    message = next((str(r["message"]) for r in records if r.get("status") != "ok" and r.get("message")), "")
    why = f"the probe of the baseline on this launch ended {', '.join(statuses)}"
    return replace(ASSUMED, failed=why + (f" ({one_line(message)[:300]})" if message else ""))


def worker_sets(backend: str, nccl_debug: bool, profile: bool) -> int:
    """Worker sets a point on NCCL forks on this launch (commprof.sweep.running.measure.measure_point)."""
    return 1 + (backend == "nccl" and nccl_debug) + profile


def on_launch(cost: StepCost, backend: str, nccl_debug: bool, profile: bool) -> StepCost:
    """`cost` with the worker sets a point forks on this launch."""
    return replace(
        cost,
        worker_sets=worker_sets(backend, nccl_debug, profile),
        logged=backend == "nccl" and nccl_debug,
        profiled=profile,
    )


def point_seconds(spec: SweepSpec, cost: StepCost, iterations: int, warmup: int, on_nccl: bool = True) -> float:
    """One point: each worker set's start-up, and every step each runs per T (both modes are in step_for): the timed
    workers' (steps_per_mode, the compute-only pass), NCCL's logging worker's (1 timed, 0 warm-up) where the point
    runs on NCCL, the profiling pass's warm-up and PROFILED_STEPS eager steps."""
    logged = cost.logged and on_nccl
    sets = cost.worker_sets - (cost.logged and not on_nccl)
    steps = steps_per_mode(iterations, warmup) + (steps_per_mode(1, 0) if logged else 0)
    steps += (1 + PROFILED_STEPS) if cost.profiled else 0
    return sets * cost.overhead_s + sum(
        (steps * cost.step_for(t) + compute_steps(iterations, warmup) * cost.compute_ms.get(t, 0.0)) / 1000.0
        for t in spec.tokens
    )


def runs_on_nccl(impl: str, backend: str) -> bool:
    """Whether a point of `impl` forks NCCL's logging worker on `backend` (its all-reduce is NCCL's own)."""
    return backend == "nccl" and load_impl(resolve_impl_name(impl, backend)).runs_on_nccl


def preparations(spec: SweepSpec, backend: str) -> int:
    """Settings of the sweep prepared before their points here (points.preparation), one worker set each. A
    sweep whose points' implementations have no preparation at all (a million points of NCCL variables) is not
    walked point by point."""
    impls = {p.impl for p in spec.points}
    if not spec.stages and not any(_has_preparation(impl, backend) for impl in impls):
        return 0
    return sum(1 for impl, options in sweep_impls(spec) if preparation(impl, options, backend))


def _has_preparation(impl: str, backend: str) -> bool:
    """Whether an implementation defines a preparation at all (for some options)."""
    cls = load_impl(resolve_impl_name(impl, backend))
    return cls.preparation.__func__ is not AllReduceImpl.preparation.__func__


def runnable_combinations(stage: StageSpec, backend: str) -> int:
    """A stage's axis combinations that set no variable `backend` ignores (the others are recorded unsupported).

    Off NCCL a candidate that ran carries no NCCL variable, so a combination that only unsets variables gives the
    candidate itself, which a stage that does not re-measure skips (staging.refine)."""
    count = 0
    for combination in itertools.product(*(axis.settings for axis in stage.axes)):
        env = {k: v for setting in combination for k, v in setting.set_env.items()}
        changes = bool(env) or any(setting.impl is not None for setting in combination)
        repeats = backend != "nccl" and not changes and stage.iterations is None
        count += not inert_variables(env, backend) and not repeats
    return count


def stage_runnable_points(stage: Stage, backend: str) -> int:
    """Points of a stage that can run on `backend`, at most (a crossover stage builds none)."""
    if stage.kind == "crossover":
        return 0
    per_candidate = runnable_combinations(stage, backend) if stage.axes else 1
    return stage.top_k * per_candidate + int(stage.include_baseline)


def estimate_seconds(
    spec: SweepSpec, cost: StepCost, running: int, backend: str, on_nccl: int | None = None, prepared: int | None = None
) -> float:
    """Wall time of `running` stage-0 points (`on_nccl` of them NCCL's own all-reduce; None: all), the stages'
    runnable points, the interleaved confirmation and the settings' preparations (`prepared`: how many; None:
    counted here), each at its upper bound."""
    nccl = running if on_nccl is None else on_nccl
    total = nccl * point_seconds(spec, cost, spec.iterations, spec.warmup)
    total += (running - nccl) * point_seconds(spec, cost, spec.iterations, spec.warmup, on_nccl=False)
    confirming = interleave.bound(spec)
    total += confirming * point_seconds(spec, cost, spec.iterations, spec.warmup)
    total += (preparations(spec, backend) if prepared is None else prepared) * cost.overhead_s
    for stage in spec.stages:
        if stage.kind == "crossover":
            total += crossover_seconds(spec, stage, cost, backend)
            continue
        warmup = spec.warmup if stage.warmup is None else stage.warmup
        total += stage_runnable_points(stage, backend) * point_seconds(
            spec, cost, stage.iterations or spec.iterations, warmup
        )
    return total


def crossover_searches(spec: SweepSpec, stage: CrossoverStage, backend: str) -> tuple[int, tuple[str, ...]]:
    """(searches at most, the modes they run in on `backend`): one per named implementation, else per stage-0
    setting of another implementation (those that fail are not searched)."""
    if stage.impls:
        settings = sum(1 for p in spec.points if p.impl in stage.impls and not p.env) or len(stage.impls)
    else:
        others = (*BACKEND_IMPLS, unfused_reference())
        settings = sum(1 for p in spec.points if p.impl not in others and not p.env)
    modes = tuple(m for m in stage.modes if m != "graph" or backend == "nccl")
    return settings, modes


def search_work(stage: CrossoverStage, plan_sizes: int = 4) -> tuple[int, int]:
    """(rounds, sizes) of one search at most as the estimate counts them: the powers of two and the plan's sizes,
    then one round per halving of the widest gap down to the step, two boundaries each."""
    rounds, sizes = _search_rounds(stage, plan_sizes)
    return rounds, len(sizes)


def _search_rounds(stage: CrossoverStage, plan_sizes: int = 4) -> tuple[int, list[int]]:
    """(rounds, every size one search measures at most): the powers of two, the plan's sizes (counted at the
    smallest), then two per bisection round (counted at the largest: the gap may lie anywhere)."""
    measured = cx.powers(stage.min_bytes, stage.max_bytes)
    widest = max(stage.max_bytes // 2, stage.step_bytes)
    rounds = min(stage.max_rounds, 1 + max(math.ceil(math.log2(widest / stage.step_bytes)), 0))
    return rounds, measured + [measured[0]] * plan_sizes + [measured[-1]] * (2 * (rounds - 1))


def crossover_seconds(spec: SweepSpec, stage: CrossoverStage, cost: StepCost, backend: str) -> float:
    """A crossover stage at its upper bound: per round a point's start-up, per size the setting and the baseline
    each verified then timed over their rounds (a step pass and a per-op pass) on 2 x layers + 1 all-reduces, each
    all-reduce costed as a share of the probe's smallest step plus its bytes at ASSUMED_ALGBW_GBPS."""
    settings, modes = crossover_searches(spec, stage, backend)
    rounds, sizes = _search_rounds(stage)
    smallest = min(spec.tokens)
    op_s = cost.step_for(smallest) / 1000.0 / 2 / max(_ops_per_step(spec), 1)  # step_for sums two modes
    bandwidth = ASSUMED_ALGBW_GBPS.get(backend, ASSUMED_ALGBW_GBPS["gloo"]) * 1e9
    # the setting and the baseline, each verified then timed once (a step pass and a per-op pass)
    all_reduces = 2 * steps_per_mode(stage.rounds, stage.warmup) * (2 * CROSSOVER_LAYERS + 1)
    per_search = sum(all_reduces * (op_s + size / bandwidth) for size in sizes)
    return settings * len(modes) * (rounds * cost.overhead_s + per_search)


def _ops_per_step(spec: SweepSpec) -> int:
    """Collectives of the sweep's smallest step (at TP 8 where the sweep does not name one)."""
    from commprof.errors import UsageError
    from commprof.planner.plan import build_step_plan

    try:
        model = spec.model_shape
        plan = build_step_plan(model, spec.tp or 8, min(spec.tokens), spec.phase, spec.dtype, spec.plan_options)
    except UsageError:
        return 1
    return len(plan.ops)


def _crossover_line(stage: CrossoverStage, spec: SweepSpec, backend: str) -> str:
    settings, modes = crossover_searches(spec, stage, backend)
    rounds, sizes = search_work(stage)
    which = ", ".join(stage.impls) if stage.impls else "every other implementation that runs ok"
    text = (
        f'# stage {stage.index} "{stage.name}": crossover search of {which} against the baseline (fused kinds: '
        f"against {unfused_reference()}), {cx.powers(stage.min_bytes, stage.max_bytes)[0]}-{stage.max_bytes} B by "
        f"powers of two plus the plan's sizes, bisected to {stage.step_bytes} B; {stage.rounds} timed + "
        f"{stage.warmup} warm-up rounds per size; up to {settings} x {len(modes)} searches of up to {rounds} rounds "
        f"({sizes} sizes) each, every round in fresh processes"
    )
    if not modes:
        text += f"; none can run on {backend} (graph mode only, and CUDA graphs need GPUs)"
    elif len(modes) < len(stage.modes):
        text += f"; eager mode only on {backend} (CUDA graphs need GPUs)"
    return text


def _stage_line(stage: Stage, spec: SweepSpec, backend: str) -> str:
    if stage.kind == "crossover":
        return _crossover_line(stage, spec, backend)
    pool = "best finished point" if stage.top_k == 1 else f"best {stage.top_k} finished points"
    where = f" where {stage.candidates.describe()}" if stage.candidates else ""
    text = f'# stage {stage.index} "{stage.name}": {pool}{where} (ranked by {stage.rank_by} over T)'
    if stage.axes:
        text += " x " + " x ".join(f"{axis.name} ({len(axis.settings)})" for axis in stage.axes)
    if stage.iterations is not None:
        warmup = spec.warmup if stage.warmup is None else stage.warmup
        text += f", re-measured with {stage.iterations} timed + {warmup} warm-up steps"
    if stage.include_baseline:
        text += ", with the baseline"
    text += f": up to {stage.max_points()} points"
    runnable = stage_runnable_points(stage, backend)
    if runnable == 0:
        text += f", none of which can run on {backend}"
    elif runnable < stage.max_points():
        text += f", of which up to {runnable} can run on {backend}"
    return text


def format_points_table(
    spec: SweepSpec,
    cost: StepCost = ASSUMED,
    refused: dict[str, str] | None = None,
    backend: str = "nccl",
    world_size: int | None = None,
) -> str:
    """points_table_lines as one text."""
    return "\n".join(points_table_lines(spec, cost, refused, backend, world_size))


def points_table_lines(
    spec: SweepSpec,
    cost: StepCost = ASSUMED,
    refused: dict[str, str] | None = None,
    backend: str = "nccl",
    world_size: int | None = None,
    on_nccl: int | None = None,
) -> Iterator[str]:
    """The points that will not run on this launch first (with why), then every stage-0 point, the stages, the
    counts and an estimate from `cost`, line by line: a million points are listed without holding their rows.
    `refused`: point id -> reason (commprof.sweep.planning.gate.refusals).

    spec.warnings are not repeated here: the caller prints them.
    """
    refused = refused or {}
    source = spec.path or "built in"
    lines = [f'# sweep "{spec.name}" ({source}, sha256 {spec.sha256[:12]})']
    if spec.description:
        lines += [f"# {line}".rstrip() for line in spec.description.splitlines()]
    tp = spec.tp if spec.tp is not None else "world size"
    lines.append(
        f"# replay: {spec.model}, tp {tp}, phase {spec.phase}, dtype {spec.dtype or 'the model’s'}, "
        f"T = {' '.join(map(str, spec.tokens))}; {spec.iterations} timed + {spec.warmup} warm-up steps "
        f"per (T, mode); {spec.point_timeout_s:g} s limit per point"
    )
    options = spec.plan_options
    extras = [f"layout {spec.layout}"] if spec.layout else []
    if options.spec:
        extras.append(
            f"speculative {options.spec}" + (f", {options.num_steps} draft steps" if options.num_steps else "")
        )
    if options.dp_attention:
        extras.append("DP attention (T per rank)")
    if spec.tokens_from:
        extras.append(f"T from {spec.tokens_from} (the engine's captured sizes)")
    if spec.compute.kind != "none":
        extras.append(f"compute between collectives {spec.compute.text}")
    if spec.skew.active:
        extras.append(f"late ranks: {spec.skew.text}")
    if spec.baseline_every is not None:
        every = spec.baseline_every
        extras.append(
            "baseline again every "
            + (f"{every.points} points" if every.points else f"{every.seconds / 60:g} min")
            + " and at the end"
        )
    if extras:
        lines.append(f"# step: {'; '.join(extras)}")
    launch = f"{backend} backend" + (f", {world_size} rank{'s' if world_size != 1 else ''}" if world_size else "")
    running = len(spec.points) - len(refused)
    lines.append(f"# this launch: {launch}: {running} of {len(spec.points)} stage-0 points will run")
    if refused:
        lines.append(f"# {len(refused)} will be recorded unsupported, never timed:")
        by_reason: dict[str, list[str]] = {}
        for point_id, reason in refused.items():
            by_reason.setdefault(reason, []).append(point_id)
        for reason, ids in by_reason.items():
            shown = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
            lines.append(f"#   {reason}: {shown}")
    header = ("id", "label", "impl", "environment")
    widths = [len(name) for name in header[:3]]  # a first pass for the column widths, holding no row
    for point in spec.points:
        for column, text in enumerate((point.point_id, point.label, _impl_text(point))):
            widths[column] = max(widths[column], len(text))
    lines.append("#")
    yield from lines
    yield _row("#", header, widths)
    for point in spec.points:
        env = " ".join(f"{k}={v}" for k, v in sorted(point.env.items())) or "-"
        row = (point.point_id, point.label, _impl_text(point), env)
        yield _row("x" if point.point_id in refused else " ", row, widths)
    if refused:
        yield "# (x: will not run on this launch, see above)"
    if spec.stages:
        yield "#"
        yield from (_stage_line(stage, spec, backend) for stage in spec.stages)
    yield "#"
    yield from ("# " + line for line in size_lines(spec, cost, running, backend, on_nccl))


def _impl_text(point: SweepPoint) -> str:
    return " ".join([point.impl] + [f"{k}={option_text(v)}" for k, v in sorted(point.options.items())])


def _row(lead: str, row: tuple[str, ...], widths: list[int]) -> str:
    return f"{lead} {row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}".rstrip()


def size_lines(spec: SweepSpec, cost: StepCost, running: int, backend: str, on_nccl: int | None = None) -> list[str]:
    """How many points will run and how long they should take, then what the estimate rests on (`on_nccl`: the
    running points whose all-reduce is NCCL's own, which fork NCCL's logging worker; None: all of them)."""
    prepared = preparations(spec, backend)
    seconds = estimate_seconds(spec, cost, running, backend, on_nccl, prepared)
    searches = 0
    for stage in spec.stages:
        if stage.kind == "crossover":
            settings, modes = crossover_searches(spec, stage, backend)
            searches += settings * len(modes)
    also = f" and up to {searches} crossover search{'es' if searches != 1 else ''}" if searches else ""
    basis = cost.basis
    if backend != "nccl":
        basis += f"; on {backend}: CPU ranks, not what this sweep takes on GPUs"
    if searches:
        bandwidth = ASSUMED_ALGBW_GBPS.get(backend, ASSUMED_ALGBW_GBPS["gloo"])
        basis += f"; a crossover size's bytes at an assumed {bandwidth:g} GB/s ({backend}, not measured here)"
    confirming = interleave.bound(spec)
    counts = (
        f"{running} point{'s' if running != 1 else ''} will run in stage 0, up to "
        f"{running + sum(stage_runnable_points(s, backend) for s in spec.stages)} in all{also}, then up to "
        f"{confirming} measurements confirming the answers beside the baseline (or a fused kind's unfused reference)"
        + (f", after {prepared} setting(s) prepared (their compiling or tuning not estimated)" if prepared else "")
    )
    if cost.failed:
        return [f"{counts}; no estimate: {cost.failed}: a run would likely end the same way"]
    per_mode = steps_per_mode(spec.iterations, spec.warmup)
    return [
        f"{counts}; estimated {_duration(seconds)}",
        "per point: "
        f"{cost.worker_sets} x {cost.overhead_s:.2f} s start-up (worker sets) + {per_mode} steps per T and mode "
        f"(1 checked + {spec.warmup} warm-up + {spec.iterations} timed + {per_mode - 1 - spec.warmup - spec.iterations} "
        "per-op), one step at " + ", ".join(f"T={t}: {cost.step_for(t):.1f} ms" for t in spec.tokens) + f"; {basis}",
    ]


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds / 60:.2f} min"
    return f"{seconds / 60:.1f} min" if seconds < 6000 else f"{seconds / 3600:,.0f} h"


def format_too_large(refused: SweepTooLarge) -> str:
    """A dry run of a sweep above its point budget: its size and an assumed estimate, from counts alone (no point
    is built and nothing is probed)."""
    step_s = 2 * ASSUMED_STEP_MS / 1000.0  # one step per T in each of eager and graph mode
    seconds = sum(
        points * (ASSUMED.overhead_s + (iterations + warmup) * refused.tokens * step_s)
        for points, iterations, warmup in refused.work
    )
    return "\n".join(
        [
            f'# sweep "{refused.name}" ({refused.source}): above the budget of {refused.budget} points',
            f"# up to {refused.total} points ({refused.stage0} in stage 0); estimated {_duration(seconds)} "
            f"({ASSUMED.basis})",
            f"# a run is refused; allow it with --max-points {refused.total} "
            "(with --dry-run, that lists every point: slow for this many)",
        ]
    )
