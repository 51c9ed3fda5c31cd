"""The sweep's command, run as `torchrun --nproc-per-node N -m commprof.allreduce_sweep`: replay a model's step
collectives and sweep settings.

Each torchrun rank becomes a sweep controller; every sweep point runs in fresh worker processes (see
commprof.sweep.running.measure). NCCL on GPUs, gloo on CPU-only machines, with no flag changed. Rank 0 writes
runs/<run-id>/results.jsonl and meta.json and prints the table; the other ranks stay quiet.
"""

from __future__ import annotations

import itertools
import os
import shlex
import socket
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import click

from commprof.errors import EXIT_INTERRUPTED, RunStopped, UsageError, run_command
from commprof.planner.plan import PHASES
from commprof.records.files import ensure_writable_dir
from commprof.records.folder import refuse_links
from commprof.records.values import MAX_COUNT, MAX_POINT_TIMEOUT_S, MAX_RANKS
from commprof.replay.forkserver import ForkServer
from commprof.shipped_files import sweep_file, sweep_option_help
from commprof.sweep.planning.spec import DEFAULT, DEFAULT_MAX_POINTS, RunOverrides, SweepSpec, SweepTooLarge
from commprof.terminal import echo

PROG_NAME = "commprof.allreduce_sweep"


def _tokens(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        tokens = tuple(int(t) for t in str(value).replace(" ", "").split(",") if t)
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not tokens or any(t < 1 for t in tokens):
        raise click.BadParameter(f"tokens must be >= 1, got {value}")
    return tokens


def _count_option(name: str, low: int, limit: int, description: str) -> Callable:
    """A count flag: click's own line below `low`; above `limit` (its record type's, records.values) one saying so."""

    def at_most(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
        if value is not None and value > limit:
            raise click.BadParameter(f"{value} is above {limit}, the most a run records", param=param)
        return value

    return click.option(name, type=click.IntRange(min=low), callback=at_most, default=None, help=description)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--sweep",
    "sweep_file",
    type=click.Path(dir_okay=False),
    default=None,
    callback=lambda ctx, param, value: sweep_file(value),
    help=sweep_option_help(without="Without it: the baseline point only."),
)
@click.option("--model", default=None, help="Preset name or path to a config.json [kimi-k2.5].")
@click.option("--tokens", callback=_tokens, default=None, help="T values, comma-separated [1,4,8].")
@click.option("--phase", type=click.Choice(PHASES), default=None, help="decode or verify [verify].")
@click.option("--dtype", default=None, help="Activation dtype [the model's].")
@_count_option("--tp", 1, MAX_RANKS, "Tensor parallel degree [world size].")
@click.option("--impl", "impls", multiple=True, help="All-reduce implementation(s) to compare with the baseline.")
@_count_option("--iterations", 1, MAX_COUNT, "Timed steps per (T, mode).")
@_count_option("--warmup", 0, MAX_COUNT, "Warm-up steps per (T, mode).")
@click.option(
    "--compute",
    default=None,
    help='Work between two collectives: "none", "uniform:<µs>", "trace:<commprof trace --json file>" or "gemm" '
    "[the sweep file's run.compute, else none].",
)
@click.option(
    "--point-timeout",
    type=click.FloatRange(min=0, min_open=True, max=MAX_POINT_TIMEOUT_S),
    default=None,
    help="Seconds before a point is killed.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="runs",
    show_default=True,
    help="Parent folder of the run's own folder.",
)
@click.option(
    "--resume", type=click.Path(file_okay=False), default=None, help="Continue an interrupted run: runs/<run-id>."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the expanded points, which of them will run here, and an estimate from a quick probe of the "
    "baseline (a few steps); write nothing.",
)
@click.option(
    "--max-points",
    type=click.IntRange(min=1),
    default=None,
    help=f"Allow a sweep of up to this many points (default: refuse one above {DEFAULT_MAX_POINTS}).",
)
@click.option(
    "--nccl-debug/--no-nccl-debug",
    default=True,
    show_default=True,
    help="Capture NCCL's INFO log per point to record what NCCL chose.",
)
@click.option(
    "--profile",
    is_flag=True,
    help="After each point's timed run, write a Kineto trace per rank of a few steps per T (read with "
    "`commprof trace`; points/<id>/profile/T<T>/).",
)
@click.option(
    "--share-gpus",
    is_flag=True,
    help="Let several ranks share a GPU (a functional check of NCCL paths, not a tuning result).",
)
@click.option("--strict", is_flag=True, help="Refuse to sweep when `commprof doctor` finds a failing check.")
@click.option(
    "--single-rank",
    is_flag=True,
    help="Run on one rank anyway (refused otherwise: every collective of one rank is a copy, nothing is measured).",
)
@click.option(
    "--doctor/--no-doctor",
    "with_doctor",
    default=True,
    show_default=True,
    help="Run the doctor's quick checks first and store the verdicts in meta.json.",
)
@click.option(
    "--floor",
    "floor_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A floor.json from `commprof floor --out` on this box, recorded instead of probing the GPUs first.",
)
def sweep_command(
    sweep_file: str | None,
    model: str | None,
    tokens: tuple[int, ...] | None,
    phase: str | None,
    dtype: str | None,
    tp: int | None,
    impls: tuple[str, ...],
    iterations: int | None,
    warmup: int | None,
    compute: str | None,
    point_timeout: float | None,
    out: str,
    resume: str | None,
    dry_run: bool,
    max_points: int | None,
    nccl_debug: bool,
    profile: bool,
    share_gpus: bool,
    strict: bool,
    with_doctor: bool,
    floor_file: Path | None,
    single_rank: bool,
) -> None:
    """Replay the step's collectives at their real sizes and sweep NCCL settings and implementations."""
    from commprof.sweep.planning.config import default_sweep, load_sweep

    rank = int(os.environ.get("RANK", "0"))
    budget = max_points or DEFAULT_MAX_POINTS
    overrides = RunOverrides(model, tokens, phase, dtype, tp, iterations, warmup, point_timeout, compute)
    if resume:
        given = {
            "--sweep": sweep_file,
            "--model": model,
            "--tokens": tokens,
            "--phase": phase,
            "--dtype": dtype,
            "--tp": tp,
            "--impl": impls,
            "--iterations": iterations,
            "--warmup": warmup,
            "--point-timeout": point_timeout,
            "--compute": compute,
            "--floor": floor_file,
        }
        extra = [flag for flag, value in given.items() if value not in (None, ())]
        if extra:
            raise UsageError(f"--resume continues a run exactly as it started: drop {', '.join(extra)}")
        refuse_links(Path(resume))  # before any process starts; the run folder's writer checks again
        spec = _resumed_sweep(Path(resume), budget)
    elif sweep_file:
        try:
            spec = load_sweep(sweep_file, max_points=budget)
        except SweepTooLarge as refused:
            if not dry_run:
                raise
            if rank == 0:
                from commprof.sweep.planning.dryrun import format_too_large

                echo(format_too_large(refused))
            return
        spec = spec.with_overrides(overrides)
    else:
        spec = default_sweep(overrides, impls=(DEFAULT, *impls))
    # Fail fast, before any process starts: the model, and every step at this launch's TP.
    spec.check_plans(spec.tp or int(os.environ.get("WORLD_SIZE", "1")))
    # The points' fork server is forked from here before anything here loads torch or queries CUDA (the
    # implementations' imports, the GPU count): see ForkServer.start.
    with ForkServer.start() as server:
        from commprof.sweep.running.runner import SweepOptions, run_sweep

        _check_impls(spec)
        _check_memory(spec, share_gpus)
        floor = _floor_file(floor_file, share_gpus) if floor_file else None
        if rank == 0:
            for warning in spec.warnings:
                echo(f"commprof: warning: {warning}", err=True)
        if dry_run:
            _dry_run(spec, rank, server, share_gpus, (nccl_debug, profile))
            return
        _refuse_one_rank(spec, meant=single_rank or resume is not None)  # a resumed run was meant as it started
        if resume is None:
            ensure_writable_dir(Path(out), "output folder")
        options = SweepOptions(
            out=Path(out),
            resume=Path(resume) if resume else None,
            nccl_debug=nccl_debug,
            profile=profile,
            strict=strict,
            share_gpus=share_gpus,
            argv=list(sys.argv),
            floor_file=floor_file,
            floor=floor,
        )
        from commprof.sweep.planning.dryrun import ASSUMED, on_launch, size_lines
        from commprof.sweep.running.console import SweepConsole
        from commprof.sweep.running.run_folder import PREFLIGHT_S, prepare_run_folder

        backend, _, refused = _launch_refusals(spec, share_gpus)
        nccl_points = _nccl_points(spec, refused, backend)

        def estimate(cost=ASSUMED) -> list[str]:
            cost = on_launch(cost, backend, nccl_debug, profile)
            return size_lines(spec, cost, len(spec.points) - len(refused), backend, nccl_points)

        console = SweepConsole(enabled=rank == 0, estimate=estimate, steps=(spec.iterations, spec.warmup))
        try:
            summary = run_sweep(
                spec,
                options,
                server,
                progress=console,
                prepare_run=lambda run_dir, backend: prepare_run_folder(
                    run_dir, backend, spec, options, with_doctor, console
                ),
                preflight_s=PREFLIGHT_S,
            )
        except RunStopped as stopped:
            if stopped.run_dir is None:
                raise
            raise RunStopped(
                f"{stopped}. Finished points are saved; continue with: {resume_command(stopped.run_dir)}"
            ) from None
        if rank == 0:
            console.print_summary(Path(summary["run_dir"]), spec)
            from commprof.report.command import answer_lines

            for line in answer_lines(Path(summary["run_dir"])):
                console.note(line)
            if summary["interrupted"]:
                echo(
                    f"Interrupted. Finished points are saved; continue with:\n  {resume_command(summary['run_dir'])}",
                    err=True,
                )
        if summary["interrupted"]:
            raise SystemExit(EXIT_INTERRUPTED)


def _nccl_points(spec: SweepSpec, refused: dict[str, str], backend: str) -> int:
    """Stage-0 points that will run and fork NCCL's logging worker (their all-reduce is NCCL's own)."""
    from commprof.sweep.planning.dryrun import runs_on_nccl

    on_nccl: dict[str, bool] = {}
    for point in spec.points:
        if point.point_id not in refused and point.impl not in on_nccl:
            on_nccl[point.impl] = runs_on_nccl(point.impl, backend)
    return sum(1 for p in spec.points if p.point_id not in refused and on_nccl[p.impl])


def _refuse_one_rank(spec: SweepSpec, meant: bool) -> None:
    """One rank measures no communication: refused unless meant, after the sweep's own TP has had its say."""
    from commprof.sweep.running.runner import launch_tp

    if launch_tp(spec, int(os.environ.get("WORLD_SIZE", "1"))) == 1 and not meant:
        raise UsageError(
            "a sweep on 1 rank measures no communication (each all-reduce is a copy): launch one rank per GPU, "
            f"`torchrun --nproc-per-node N -m {PROG_NAME} ...`, or add --single-rank to run it anyway"
        )


def _dry_run(
    spec: SweepSpec, rank: int, server: ForkServer, share_gpus: bool, logs_profile: tuple[bool, bool] = (True, False)
) -> None:
    """The points, which of them will really run on this launch and why not, and an estimate from a quick probe
    of this machine (every rank takes part in the probe; rank 0 prints). `logs_profile`: --nccl-debug and
    --profile, the worker sets a point forks beside the timed one."""
    from commprof.sweep.planning.dryrun import on_launch, points_table_lines
    from commprof.sweep.running.probe import probe_step_cost

    backend, world_size, refused = _launch_refusals(spec, share_gpus)
    cost = on_launch(probe_step_cost(spec, backend, server, share_gpus), backend, *logs_profile)
    if rank == 0:  # streamed in blocks of lines: a million points are never one string
        lines = points_table_lines(spec, cost, refused, backend, world_size, _nccl_points(spec, refused, backend))
        while block := list(itertools.islice(lines, 10_000)):
            echo("\n".join(block))


def _launch_refusals(spec: SweepSpec, share_gpus: bool) -> tuple[str, int, dict[str, str]]:
    """(backend, world size, point id -> why it cannot run on this launch); UsageError where the run would give
    one (a TP that is not the world size, too few GPUs)."""
    from commprof.sweep.planning.gate import launch_context, refusals
    from commprof.sweep.running.runner import choose_backend, launch_tp

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    launch_tp(spec, world_size)
    backend = choose_backend(share_gpus)
    model = spec.model_shape
    context = launch_context(backend, world_size, spec.dtype or model.dtype, spec.tokens, model.hidden_size)
    return backend, world_size, refusals(spec.points, backend, context)


def _check_memory(spec: SweepSpec, share_gpus: bool) -> None:
    from commprof.sweep.running.memory import check_memory
    from commprof.sweep.running.runner import choose_backend

    check_memory(spec, int(os.environ.get("WORLD_SIZE", "1")), choose_backend(share_gpus))


def _floor_file(path: Path, share_gpus: bool) -> dict:
    """--floor's content, checked before any process starts (UsageError: missing, garbled, another GPU count)."""
    from commprof.floor.record import check_floor_gpus, load_floor_file
    from commprof.sweep.running.runner import choose_backend

    data = load_floor_file(path)
    backend = choose_backend(share_gpus)
    if backend != "nccl":
        raise UsageError(
            f"--floor {path}: this launch runs on {backend} (no GPU): a GPU floor says nothing of its times"
        )
    check_floor_gpus(path, data, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return data


def resume_command(run_dir: str | Path) -> str:
    """The command that continues a run, its path quoted for a shell."""
    return (
        f"torchrun --nproc-per-node {os.environ.get('LOCAL_WORLD_SIZE', '1')} -m {PROG_NAME} "
        f"--resume {shlex.quote(str(run_dir))}"
    )


def _check_impls(spec: SweepSpec) -> None:
    """Every implementation of the sweep imports and follows the interface (UsageError names the bad one).

    A plug-in is imported in a throwaway child first: its import may exit or abort (commprof.impls.plugin_check).
    """
    from commprof.impls.plugin_check import check_plugin_import
    from commprof.impls.registry import BUILTINS, load_impl

    for name in dict.fromkeys(p.impl for p in spec.points):
        if name != DEFAULT:
            if name not in BUILTINS:
                check_plugin_import(name)
            load_impl(name)


def _resumed_sweep(run_dir: Path, max_points: int) -> SweepSpec:
    """The sweep a run started with, from its meta.json (every node needs the run folder to resume)."""
    from commprof.records.meta_sections import MetaPlan
    from commprof.records.run_meta import read_meta
    from commprof.sweep.planning.config import parse_sweep

    meta = read_meta(run_dir)
    if meta.sweep is None or not meta.sweep.content:
        raise UsageError(f"--resume {run_dir}: not a commprof run folder (no sweep in meta.json)")
    spec = parse_sweep(meta.sweep.content, meta.sweep.path, max_points=max_points)
    plan = meta.plan or MetaPlan()
    return spec.with_overrides(RunOverrides(**{f.name: getattr(plan, f.name) for f in fields(RunOverrides)}))


def _single_process_defaults() -> None:
    """Without torchrun, run as a world of one rank (useful for one GPU, and for --dry-run)."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )


def terminate_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM stops as Ctrl-C does, cleanly through `finally`, until the sweep loop takes over both signals."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the sweep command on this rank; its exit status (errors are printed by rank 0 only)."""
    _single_process_defaults()
    return run_command(sweep_command, argv, PROG_NAME, quiet=int(os.environ["RANK"]) != 0)
