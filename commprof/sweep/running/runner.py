"""The sweep controller: one per torchrun rank; runs every point of a sweep, stage after stage.

Each point runs in fresh worker processes (commprof.sweep.running.measure); rank 0 appends the point's records to
results.jsonl as soon as the ranks agree on them, so a controller killed mid-sweep loses at most that point.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

from commprof.errors import RunStopped, UsageError
from commprof.records.files import (
    INTERLEAVED_FILE,
    RESULTS_FILE,
    append_plan,
    append_records,
    new_run_dir,
    read_records,
)
from commprof.records.folder import refuse_links
from commprof.records.plan_file import points_line, stages_line
from commprof.records.run_meta import read_meta, updated_meta, write_meta
from commprof.records.schema import MODES
from commprof.replay.forkserver import ForkServer, ForkServerDied
from commprof.sweep.planning.gate import launch_context, refusal
from commprof.sweep.planning.spec import SweepPoint, SweepSpec
from commprof.sweep.planning.staging import planned_stages, refine
from commprof.sweep.running.crossover_run import run_crossover_stage
from commprof.sweep.running.interleaved import confirm
from commprof.sweep.running.measure import (
    ControllerContext,
    PeerLost,
    SweepRun,
    all_gather_json,
    measure_point,
    point_status,
    refused_records,
)
from commprof.sweep.running.preparation import prepare_settings
from commprof.sweep.running.repeats import BaselineRepeats
from commprof.sweep.running.resume import completed_point_ids, repair_results
from commprof.sweep.running.run_lock import RunLock
from commprof.terminal import one_line

# Extra time, beyond a point's limit, that controllers wait for each other before giving up on a peer.
AGREEMENT_SLACK_S = 120.0


@dataclass
class SweepOptions:
    """What the entry point's flags decide about a sweep."""

    out: Path
    resume: Path | None = None
    nccl_debug: bool = True
    profile: bool = False
    strict: bool = False
    share_gpus: bool = False
    argv: list[str] = field(default_factory=list)
    floor_file: Path | None = None  # --floor: a floor.json measured earlier on this box, instead of probing now
    floor: dict | None = None  # its content, validated before any process started


class SweepProgress:
    """How a sweep tells a person what it is doing; the entry point passes a rich-backed one on rank 0."""

    def start(self, total: int, run_dir: Path) -> None: ...
    def add_points(self, count: int) -> None: ...
    def point_started(self, label: str) -> None: ...
    def point_done(self, label: str, status: str) -> None: ...
    def stop(self) -> None: ...
    def note(self, text: str) -> None: ...
    def point_measured(self, records: list[dict[str, Any]]) -> None: ...


def run_sweep(
    spec: SweepSpec,
    options: SweepOptions,
    server: ForkServer,
    progress: SweepProgress | None = None,
    prepare_run: Callable[..., dict] | None = None,
    preflight_s: float = 0.0,
) -> dict[str, Any]:
    """Run every point of `spec` (and its refinement stages) on this rank, its workers forked by `server`; returns
    a summary on every rank.

    `prepare_run(run_dir, backend)` is called on rank 0 once the run folder exists (writes meta.json); the other
    ranks wait for it up to `preflight_s`, its own limit, beyond the controllers' group timeout.
    """

    progress = progress or SweepProgress()
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    backend = choose_backend(options.share_gpus)
    tp = launch_tp(spec, world_size)
    spec.check_plans(tp)  # an impossible TP or T is refused before any process starts
    model = spec.model_shape.to_dict()

    lock = None
    with controllers(spec.point_timeout_s):
        try:
            setup = {"error": None}
            if rank == 0:
                setup, lock = _open_run_dir(spec, options, backend, tp, prepare_run)
            setup = _shared_setup(setup, rank, float(spec.point_timeout_s) + AGREEMENT_SLACK_S + preflight_s)
            if setup["error"]:
                raise UsageError(setup["error"])
            ctx = controller_context(backend, Path(setup["run_dir"]), setup["run_id"], setup["session"], options)
            install_interrupt_handlers(ctx)
            try:
                ctx.build_failures = _prebuild(ctx, spec, model, tp, progress)
                run = SweepRun(ctx, server, spec, model, tp)
                ctx.build_failures.update(prepare_settings(run, progress.note))
                return _sweep_loop(run, set(setup["done"]), progress)
            except (PeerLost, ForkServerDied, dist.DistError, OSError) as exc:
                progress.stop()
                raise RunStopped(f"rank {rank}: {_why_stopped(exc)}; the sweep stops", run_dir=ctx.run_dir) from None
        finally:
            if lock is not None:
                lock.release()


def _shared_setup(setup: dict[str, Any], rank: int, wait_s: float) -> dict[str, Any]:
    """Rank 0's setup on every rank, through the launcher's store: the other ranks wait out rank 0's pre-flight
    (floor probe, doctor) to its own limits, which a collective's group timeout does not cover."""
    store, key = dist.distributed_c10d._get_default_store(), "commprof/setup"
    if rank == 0:
        store.set(key, json.dumps(setup))
        return setup
    try:
        store.wait([key], timedelta(seconds=wait_s))
    except RuntimeError as exc:  # DistStoreError: rank 0 silent past its pre-flight's limit, or the store gone
        why = one_line(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)[:200]
        raise RunStopped(
            f"rank {rank}: rank 0 gave no run folder within {wait_s:g} s ({why}); the sweep stops"
        ) from None
    return json.loads(store.get(key))


def _why_stopped(exc: BaseException) -> str:
    """What ended the sweep under a rank, in words: a peer, the fork server, the launcher's store, the disk."""
    text = one_line(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)[:300]
    if isinstance(exc, PeerLost):
        return f"another rank's controller is gone ({text})"
    if isinstance(exc, ForkServerDied):
        return f"its fork server died ({text})"
    if isinstance(exc, OSError):  # ENOSPC, EDQUOT, EIO: what is on disk was fsynced record by record
        return f"cannot write the run folder ({exc.strerror or text}{f': {exc.filename}' if exc.filename else ''})"
    return f"the launcher's rendezvous store is gone, was the torchrun agent killed? ({text})"


def launch_tp(spec: SweepSpec, world_size: int) -> int:
    """The sweep's TP on this launch (the world size unless the sweep names one); UsageError when they differ."""
    tp = spec.tp or world_size
    if tp != world_size:
        raise UsageError(
            f"TP {tp} needs exactly {tp} ranks, but this launch has {world_size}: "
            f"run torchrun with {tp} processes in all (e.g. --nproc-per-node {tp})"
        )
    return tp


@contextmanager
def controllers(point_timeout_s: float) -> Iterator[None]:
    """The controllers' own gloo group, for the life of a sweep (or a probe)."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(point_timeout_s) + AGREEMENT_SLACK_S))
    try:
        yield
    finally:
        try:
            dist.destroy_process_group()
        except RuntimeError:  # the group went with a lost peer or launcher: the sweep already says why it stops
            pass


def _prebuild(ctx: ControllerContext, spec, model: dict, tp: int, progress: SweepProgress) -> dict[str, str]:
    """Build the kernels the sweep's implementations compile on first use; rank 0 records how in meta.json."""
    from commprof.sweep.running.prebuild import prebuild

    failed, reports = prebuild(ctx, spec, model, tp, progress.note)
    if ctx.is_writer and reports:
        write_meta(ctx.run_dir, updated_meta(read_meta(ctx.run_dir), kernel_builds=reports))
    return failed


def controller_context(
    backend: str, run_dir: Path, run_id: str, session: str, options: SweepOptions
) -> ControllerContext:
    """This rank's ControllerContext, inside controllers(); `options` says whether NCCL logs, the GPUs are shared
    and a profiling pass follows."""
    rank = int(os.environ.get("RANK", "0"))
    return ControllerContext(
        rank=rank,
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        device_index=_device_index(int(os.environ.get("LOCAL_RANK", "0")), backend),
        backend=backend,
        run_dir=run_dir,
        run_id=run_id,
        session=session,
        store=dist.distributed_c10d._get_default_store(),
        store_host=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        store_port=int(os.environ["MASTER_PORT"]),
        nccl_debug=options.nccl_debug,
        profile=options.profile,
        rank_env=shared_gpu_env(rank) if options.share_gpus and backend == "nccl" else {},
    )


def choose_backend(share_gpus: bool = False) -> str:
    """NCCL where this node has a GPU for each of its ranks, gloo (CPU ranks) where it has none."""
    import torch

    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        return "gloo"
    if gpus < local_world and not share_gpus:
        raise UsageError(
            f"{local_world} ranks on this node but only {gpus} GPU(s): "
            f"use --nproc-per-node {gpus} or fewer (or --share-gpus for a functional check)"
        )
    return "nccl"


def shared_gpu_env(rank: int) -> dict[str, str]:
    """Let several NCCL ranks use one GPU: NCCL 2.30's switch, or (older) one fake host per rank."""
    from commprof.records.run_meta import nccl_version

    version = tuple(int(x) for x in (nccl_version() or "0").split(".")[:2])
    if version >= (2, 30):
        return {"NCCL_MULTI_RANK_GPU_ENABLE": "1"}
    # Distinct host ids make NCCL treat each rank as its own node (network transport, no P2P/SHM).
    return {"NCCL_HOSTID": f"commprof-rank{rank}"}


def _device_index(local_rank: int, backend: str) -> int:
    if backend != "nccl":
        return 0
    import torch

    return local_rank % torch.cuda.device_count()


def _open_run_dir(
    spec: SweepSpec, options: SweepOptions, backend: str, tp: int, prepare_run: Callable[..., dict] | None
) -> tuple[dict[str, Any], RunLock | None]:
    """Rank 0: create (or reopen, for --resume) the run folder and lock it for this run's life.

    Returns (setup, lock); errors travel to every rank as text in setup["error"].
    """
    expected = len(spec.tokens) * 2
    lock = None
    try:
        if options.resume:
            run_dir = Path(options.resume)
            refuse_links(run_dir)  # a copied folder with links planted where its files belong is not written
            if not (run_dir / "meta.json").exists():
                return {"error": f"--resume {run_dir}: not a commprof run folder (no meta.json)"}, None
            lock = RunLock(run_dir)
            lock.acquire()  # before the repair: it rewrites results.jsonl
            done = completed_point_ids(repair_results(run_dir / RESULTS_FILE, expected), expected)
            (run_dir / INTERLEAVED_FILE).touch()  # the confirmation runs at the end of a resumed run too
        else:
            run_dir = new_run_dir(Path(options.out), f"{spec.name}-tp{tp}-{backend}".replace("/", "-"))
            lock = RunLock(run_dir)
            lock.acquire()
            (run_dir / RESULTS_FILE).touch()
            (run_dir / INTERLEAVED_FILE).touch()
            done = set()
        if prepare_run is not None:
            prepare_run(run_dir, backend)
    except (UsageError, OSError) as exc:
        if lock is not None:
            lock.release()
        if isinstance(exc, UsageError):
            return {"error": str(exc)}, None
        return {"error": f"cannot write the run folder under {options.out}: {exc.strerror or exc}"}, None
    setup = {
        "error": None,
        "run_dir": str(run_dir),
        "run_id": run_dir.name,
        "session": secrets.token_hex(4),
        "done": sorted(done),
    }
    return setup, lock


def _sweep_loop(run: SweepRun, done: set[str], progress: SweepProgress) -> dict[str, Any]:
    ctx, spec, model = run.ctx, run.spec, run.model
    results_path = ctx.run_dir / RESULTS_FILE
    points = list(spec.points)
    dtype = model["dtype"] if spec.dtype is None else spec.dtype
    context = launch_context(ctx.backend, ctx.world_size, dtype, spec.tokens, model["hidden_size"])
    statuses: dict[str, str] = {}
    per_point = len(spec.tokens) * len(MODES)
    if ctx.is_writer:
        progress.start(len(points), ctx.run_dir)
        append_plan(ctx.run_dir, [stages_line(planned_stages(spec)), points_line(0, _ids(points), per_point)])
    repeats = BaselineRepeats(run, progress, done)
    stage = 0
    while True:
        for point in points:
            if point.point_id in done:
                if ctx.is_writer:
                    progress.point_done(point.label, "done before resume")
                continue
            if ctx.is_writer:
                progress.point_started(point.label)
            # Every rank reaches the same verdict (a pure function of the point and the launch): no agreement needed.
            reason = refusal(point, ctx.backend, context)
            if reason:
                records = refused_records(run, point, reason)
            else:
                records = measure_point(run, point)
                if ctx.is_writer:
                    progress.point_measured(records)
            interrupted = all_gather_json(ctx.interrupted, ctx.world_size)
            if any(interrupted):
                ctx.interrupted = True
                break
            if ctx.is_writer:
                append_records(results_path, records)
                statuses[point.point_id] = point_status(records)
                progress.point_done(point.label, statuses[point.point_id])
            repeats.after(point)
        if ctx.interrupted:
            break
        stage += 1
        if stage > len(spec.stages):
            break
        if spec.stages[stage - 1].kind == "crossover":
            run_crossover_stage(run, spec.stages[stage - 1], progress)
            points = []  # a search writes its own records; the next stage ranks what came before
            continue
        refined = None
        if ctx.is_writer:
            refined = [p.to_dict() for p in refine(spec, stage, read_records(results_path))]
        points = [SweepPoint(**p) for p in all_gather_json(refined, ctx.world_size)[0]]
        if ctx.is_writer:
            append_plan(ctx.run_dir, [points_line(stage, _ids(points), per_point)])
            progress.add_points(len(points))
    if not ctx.interrupted:
        confirm(run, progress, shared_gpus=ctx.shares_gpus)
    if not ctx.interrupted:
        repeats.at_end()
    if ctx.is_writer:
        progress.stop()
    return {
        "run_dir": str(ctx.run_dir),
        "run_id": ctx.run_id,
        "interrupted": ctx.interrupted,
        "statuses": statuses,
        "backend": ctx.backend,
    }


def _ids(points: list[SweepPoint]) -> list[str]:
    return [p.point_id for p in points]


def install_interrupt_handlers(ctx: ControllerContext) -> None:
    """SIGINT or SIGTERM stops the sweep after killing the running workers (every rank's, through the store);
    finished points are already on disk. (torchrun repeats a Ctrl-C to its workers: a second signal is no
    reason to stop less cleanly; torchrun's own SIGKILL follows 30 s later.)"""

    def handler(signum, frame):
        ctx.interrupted = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
