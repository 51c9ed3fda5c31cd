"""`--dry-run`: the expanded points of a sweep, its stages and an estimated duration, as plain text."""

from __future__ import annotations

from commprof.sweep.points import option_text
from commprof.sweep.spec import StageSpec, SweepSpec

# What the estimate assumes unless told otherwise: an 8-GPU box's start-up per point (process start,
# rendezvous, communicator init) and a verify step of Kimi-K2.5 at TP 8 over PCIe.
OVERHEAD_S = 3.0
STEP_MS = 30.0


def _stage_line(stage: StageSpec, spec: SweepSpec) -> str:
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
    return text + f": up to {stage.max_points()} points"


def format_points_table(
    spec: SweepSpec, per_point_overhead_s: float = OVERHEAD_S, step_ms_guess: float = STEP_MS, modes: int = 2
) -> str:
    """Every stage-0 point (id, label, implementation, environment), the stages, the count and an estimate.

    spec.warnings are not repeated here: the caller prints them.
    """
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
    rows = [("id", "label", "impl", "environment")]
    for point in spec.points:
        impl = " ".join([point.impl] + [f"{k}={option_text(v)}" for k, v in sorted(point.options.items())])
        env = " ".join(f"{k}={v}" for k, v in sorted(point.env.items())) or "-"
        rows.append((point.point_id, point.label, impl, env))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines.append("#")
    for number, row in enumerate(rows):
        lead = "#" if number == 0 else " "
        lines.append(f"{lead} {row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}".rstrip())
    if spec.stages:
        lines.append("#")
        lines += [_stage_line(stage, spec) for stage in spec.stages]
    seconds = spec.estimate_seconds(per_point_overhead_s, step_ms_guess, modes)
    mode_text = "eager + graph" if modes == 2 else "one mode"
    lines += [
        "#",
        f"# {len(spec.points)} points in stage 0, up to {spec.max_points()} in all; estimated "
        f"{seconds / 60:.1f} min (estimated: {per_point_overhead_s:g} s start-up per point, "
        f"{step_ms_guess:g} ms per step, {mode_text})",
    ]
    return "\n".join(lines)
