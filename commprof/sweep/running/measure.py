"""One sweep point on one controller: run its worker within the limit, agree on its status, build its records.

Per point, every controller forks a worker (through its fork server) with the point's environment, joined to
the point's own rendezvous prefix on the launch's store; it enforces the point's time limit by killing the
worker's process group, and aborts early when a peer rank reports a crash. The controllers then agree on the
point's status over their own gloo group, and rank 0 builds the point's records.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch.distributed as dist

from commprof.impls.registry import load_impl, resolve_impl_name
from commprof.planner.spacing import describe_request as describe_spacing
from commprof.records.folder import make_folders
from commprof.records.schema import StepRecord, step_record
from commprof.replay.forkserver import ForkServer
from commprof.replay.trial import TrialRequest
from commprof.sweep.planning.spec import SweepPoint, SweepSpec
from commprof.sweep.running.graph_run import dump_env, graph_env, graph_refusal, loaded_graph
from commprof.sweep.running.nccl_summary import point_nccl
from commprof.sweep.running.prebuild import build_refusal, state_dir

STDERR_TAIL_LINES = 15
NCCL_INIT_SUBSYS = "INIT,ENV,GRAPH"  # logged once, at communicator init: safe to time
NCCL_TUNING_SUBSYS = "INIT,ENV,GRAPH,TUNING"  # one line per enqueued op: only in the untimed probe

# When ranks disagree, the most telling status wins: a crash explains its peers' timeouts.
_FAILURE_PRECEDENCE = ("crashed", "timeout", "aborted")


@dataclass
class ControllerContext:
    """This controller's place in the launch and the run it works on."""

    rank: int
    world_size: int
    device_index: int  # CUDA device of this rank's workers (local rank, modulo GPUs when shared)
    backend: str
    run_dir: Path
    run_id: str
    session: str  # fresh per launch, so a resumed run never reuses a rendezvous prefix
    store: Any  # the launch's store (controllers' default group)
    store_host: str
    store_port: int
    nccl_debug: bool = True
    profile: bool = False  # after the timed run, an untimed pass writes Kineto traces (commprof.replay.profile_pass)
    rank_env: dict[str, str] = field(default_factory=dict)  # set for this rank's workers at every point
    build_failures: dict[str, str] = field(
        default_factory=dict
    )  # kernel build -> its error (sweep/running/prebuild.py)
    interrupted: bool = field(default=False, repr=False)

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    @property
    def shares_gpus(self) -> bool:
        """Ranks share GPUs (--share-gpus on NCCL): a functional check, never a tuning result."""
        return bool(self.rank_env)


@dataclass(frozen=True)
class SweepRun:
    """What every point of one sweep runs with on this controller."""

    ctx: ControllerContext  # this controller's place in the launch and the run folder
    server: ForkServer  # forks this rank's workers
    spec: SweepSpec  # the sweep being run
    model: dict  # the sweep's ModelShape.to_dict()
    tp: int  # the launch's tensor-parallel size


@dataclass
class PointOutcome:
    """One controller's view of one point (or the status the ranks agreed on, with this rank's entries)."""

    status: str  # ok / crashed / timeout / aborted (a peer failed first); agreed: also unsupported / error
    message: str | None
    entries: list[dict[str, Any]]  # what the worker finished before it ended


@dataclass(frozen=True)
class Again:
    """A point measured again: its folder under points/<id>/ ("again3", "interleaved2"), what its records' point
    says of it ({"repeat": 3}: the baseline's drift; {"interleaved": 2, "against": "p000"}: the interleaved
    confirmation) and the T it is measured at (None: every T of the sweep)."""

    folder: str
    tag: dict[str, int | str]
    tokens: tuple[int, ...] | None = None


def measure_point(run: SweepRun, point: SweepPoint, again: Again | None = None) -> list[dict[str, Any]]:
    """Run one point on this rank, agree on its status with the other ranks; rank 0 returns its records.

    With NCCL, the timed workers log only NCCL's init (transports, rings, channels); for a point whose
    all-reduce is NCCL's own (`runs_on_nccl`), NCCL's per-op choices come from a second, untimed logging worker
    with TUNING on, because NCCL logs every enqueued op there and that logging would be timed with the op; a
    setting NCCL did not engage at some T makes the point's records there "not_engaged" (sweep/running/
    nccl_summary.py). With `ctx.profile`, a third untimed worker writes
    Kineto traces of a few steps per T to points/<id>/profile/T<T>/rank<r>.json.gz. `again`: a re-measurement, kept
    in its own folder under points/<id>/ and tagged in its records' point.
    """
    ctx, server = run.ctx, run.server
    parts = ("points", point.point_id, *((again.folder,) if again else ()))
    point_dir = make_folders(ctx.run_dir, *parts)
    request = trial_request(run, point, point_dir, again)
    prefix = request.store_prefix
    Path(request.result_path).unlink(missing_ok=True)
    refusal = build_refusal(point, ctx.backend, ctx.build_failures)
    if refusal is None and ctx.backend == "nccl":
        refusal = graph_refusal(point.env, ctx.run_dir)
    if refusal is not None:  # its kernels could not be built before the sweep: no worker would get further
        return build_records(ctx, request, PointOutcome("unsupported", refusal, []), None, 0.0) if ctx.is_writer else []
    logs = ctx.backend == "nccl" and ctx.nccl_debug
    init_log = point_dir / f"nccl.rank{ctx.rank}.log"
    started = time.monotonic()
    outcome = run_point(
        ctx, server, request, point_env(ctx, point, init_log if logs else None, NCCL_INIT_SUBSYS), point_dir
    )
    outcomes = all_gather_json({"status": outcome.status, "message": outcome.message}, ctx.world_size)
    status, message = agree(outcomes)
    duration = time.monotonic() - started
    tuning_log = point_dir / f"nccl-tuning.rank{ctx.rank}.log"
    if logs and status == "ok" and runs_on_nccl(point, ctx.backend):
        probe = replace(
            request,
            iterations=1,
            warmup=0,
            store_prefix=f"{prefix}/probe",
            result_path=str(point_dir / f"probe.rank{ctx.rank}.jsonl"),
        )
        Path(probe.result_path).unlink(missing_ok=True)
        probe_env = point_env(ctx, point, tuning_log, NCCL_TUNING_SUBSYS) | dump_env(point_dir, ctx.rank)
        run_point(ctx, server, probe, probe_env, point_dir)
        all_gather_json(None, ctx.world_size)  # every rank's probe has ended before the next point starts
    if ctx.profile and status == "ok":
        profiled = replace(
            request,
            warmup=0,
            modes=["eager"],
            store_prefix=f"{prefix}/profile",
            result_path=str(point_dir / f"profile.rank{ctx.rank}.jsonl"),
            profile_dir=str(point_dir / "profile"),
        )
        Path(profiled.result_path).unlink(missing_ok=True)
        run_point(ctx, server, profiled, point_env(ctx, point, None, ""), point_dir)
        all_gather_json(None, ctx.world_size)  # every rank's trace is written before the next point starts
    if not ctx.is_writer:
        return []
    nccl, not_engaged = point_nccl(request, init_log, tuning_log) if logs else (None, {})
    graph = loaded_graph(point.env, ctx.run_dir, init_log) if ctx.backend == "nccl" else None
    if graph is not None:
        nccl = {**(nccl or {}), "graph_file": graph}
        if graph["loaded"] is False and status == "ok":  # it measured some other graph: never ranked as this one
            status, message = "error", f"NCCL did not load NCCL_GRAPH_FILE={graph['path']}: {graph['why']}"
    outcome = PointOutcome(status, message, outcome.entries)
    return build_records(ctx, request, outcome, nccl, duration, not_engaged)


def runs_on_nccl(point: SweepPoint, backend: str) -> bool:
    """Whether the point's all-reduce is NCCL's own on this launch (its NCCL choices then say what it ran)."""
    return backend == "nccl" and load_impl(resolve_impl_name(point.impl, backend)).runs_on_nccl


def trial_request(run: SweepRun, point: SweepPoint, point_dir: Path, again: Again | None = None) -> TrialRequest:
    """What this rank's worker gets for one point: the replay, the point, the rendezvous and where to write."""
    ctx, spec, model = run.ctx, run.spec, run.model
    iterations, warmup = spec.iterations_for(point)
    prefix = f"commprof/{ctx.run_id}/{ctx.session}/{point.point_id}" + (f"/{again.folder}" if again else "")
    return TrialRequest(
        run_id=ctx.run_id,
        point=point.to_dict() | (again.tag if again else {}),
        model=model,
        tp=run.tp,
        tokens=list(again.tokens if again and again.tokens else spec.tokens),
        phase=spec.phase,
        plan_options=asdict(spec.plan_options),
        dtype=model["dtype"] if spec.dtype is None else spec.dtype,
        iterations=iterations,
        warmup=warmup,
        backend=ctx.backend,
        rank=ctx.rank,
        world_size=ctx.world_size,
        device_index=ctx.device_index,
        store_host=ctx.store_host,
        store_port=ctx.store_port,
        store_prefix=prefix,
        result_path=str(point_dir / f"result.rank{ctx.rank}.jsonl"),
        timeout_s=float(spec.point_timeout_s),
        spacing=spec.spacing,
        state_dir=str(state_dir(ctx.run_dir, point, ctx.backend, point_dir)),
    )


def refused_records(run: SweepRun, point: SweepPoint, reason: str) -> list[dict[str, Any]]:
    """The records of a point that cannot act on this launch (commprof.sweep.planning.gate): unsupported, never
    timed."""
    ctx = run.ctx
    request = trial_request(run, point, ctx.run_dir / "points" / point.point_id)
    return build_records(ctx, request, PointOutcome("unsupported", reason, []), None, 0.0) if ctx.is_writer else []


def point_env(ctx: ControllerContext, point: SweepPoint, log_path: Path | None, subsystems: str) -> dict[str, str]:
    """The point's variables on top of the launch's, plus NCCL's INFO log to `log_path` where asked for."""
    env = {**ctx.rank_env, **graph_env({str(k): str(v) for k, v in point.env.items()}, ctx.run_dir)}
    if log_path is not None:
        env.setdefault("NCCL_DEBUG", "INFO")
        env.setdefault("NCCL_DEBUG_SUBSYS", subsystems)
        env.setdefault("NCCL_DEBUG_FILE", str(log_path))
    return env


def run_point(
    ctx: ControllerContext, server: ForkServer, request: TrialRequest, env: dict[str, str], point_dir: Path
) -> PointOutcome:
    """Run this rank's worker for one point, within the point's time limit; never raises for worker failures."""
    log_path = point_dir / f"rank{ctx.rank}.log"
    abort_key = f"{request.store_prefix}/abort"
    pid = server.launch(request.to_json(), env, str(log_path))
    deadline = time.monotonic() + request.timeout_s
    status, message = None, None
    last_store_check = 0.0
    while True:
        exit_status = server.poll_exit(0.02)
        if exit_status is not None:
            break
        now = time.monotonic()
        if ctx.interrupted:
            status, message = "aborted", "interrupted"
        elif now > deadline:
            status, message = "timeout", f"no result within the point's limit of {request.timeout_s:g} s"
        elif now - last_store_check > 0.1:
            last_store_check = now
            if ctx.store.check([abort_key]):
                status, message = "aborted", ctx.store.get(abort_key).decode()
        if status:
            _kill_group(pid)
            exit_status = server.poll_exit(None)
            break
    entries = _read_entries(Path(request.result_path))
    if status is None:
        if exit_status.ok:
            return PointOutcome("ok", None, entries)
        status = "crashed"
        message = f"rank {ctx.rank}: worker {exit_status.describe()}"
        tail = _tail(log_path)
        if tail:
            message += f"; stderr tail:\n{tail}"
        ctx.store.set(abort_key, f"rank {ctx.rank} crashed first")
    elif status == "timeout":
        message = f"rank {ctx.rank}: {message}"
        ctx.store.set(abort_key, f"rank {ctx.rank} timed out")
    elif ctx.interrupted:  # peers stop their workers now, not at the point's time limit
        ctx.store.set(abort_key, f"rank {ctx.rank} was interrupted")
    return PointOutcome(status, message, entries)


def _kill_group(pid: int) -> None:
    """SIGKILL the worker's process group (it called setsid()); the worker alone if it had not yet."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            continue


def agree(outcomes: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The point's status from every rank's outcome: ok only if all are; else the most telling failure."""
    statuses = [o["status"] for o in outcomes]
    for status in _FAILURE_PRECEDENCE:
        if status in statuses:
            messages = [o["message"] for o in outcomes if o["status"] == status and o["message"]]
            # All ranks "aborted" only when the sweep is interrupted, and then no record is written.
            return ("crashed" if status == "crashed" else "timeout"), "\n".join(messages[:4]) or None
    return "ok", None


def build_records(
    ctx: ControllerContext,
    request: TrialRequest,
    outcome: PointOutcome,
    nccl: dict | None,
    duration_s: float,
    not_engaged: dict[int, str] | None = None,
) -> list[StepRecord]:
    """One record per (T, mode) of the point: the worker's entries (`outcome`, its status the ranks' agreed one),
    and the failure status for the rest; an ok entry at a T where NCCL did not engage the point's setting
    (`not_engaged`: T -> why) is "not_engaged", its numbers kept but never ranked as that setting."""
    from commprof.planner.models import ModelShape
    from commprof.planner.plan import PlanOptions, build_step_plan

    model = ModelShape(**request.model)
    options = PlanOptions(**request.plan_options)
    # Points that never ran (unsupported, crashed at start) still say whether their kind fuses RMSNorm.
    fuses = load_impl(resolve_impl_name(request.point["impl"], ctx.backend)).fuses_rmsnorm
    status, message = outcome.status, outcome.message
    by_key = {(e["tokens"], e["mode"]): e for e in outcome.entries}
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    records = []
    for tokens in request.tokens:
        plan = build_step_plan(model, request.tp, tokens, request.phase, request.dtype, options)
        for mode in request.modes:
            entry = by_key.get((tokens, mode))
            if entry is None and status == "ok":
                entry = {"status": "error", "message": "the workers ended without a result for this T and mode"}
            elif entry is None or (status != "ok" and entry["status"] == "error"):
                # A peer's crash or hang is the cause of this rank's error (e.g. "connection closed").
                entry = {"status": status, "message": message}
            elif entry["status"] == "ok" and tokens in (not_engaged or {}):
                entry = {**entry, "status": "not_engaged", "message": not_engaged[tokens]}
            records.append(
                step_record(
                    source="measured",
                    run_id=ctx.run_id,
                    point_id=request.point["point_id"],
                    point=request.point,
                    backend=ctx.backend,
                    world_size=ctx.world_size,
                    status=entry["status"],
                    message=entry.get("message"),
                    time=now,
                    model=model.name,
                    phase=request.phase,
                    tp=request.tp,
                    tokens=tokens,
                    dtype=request.dtype,
                    plan=plan.summary(),
                    mode=mode,
                    timing=entry.get("timing"),
                    step_us=entry.get("step_us"),
                    op_us=entry.get("op_us"),
                    op_timing=entry.get("op_timing"),
                    rank_step_median_us=entry.get("rank_step_median_us"),
                    check=entry.get("check"),
                    impl_detail=entry.get("impl_detail"),
                    fused_rmsnorm=entry.get("fused_rmsnorm", fuses),
                    nccl=nccl,
                    iterations=request.iterations,
                    warmup=request.warmup,
                    duration_s=round(duration_s, 3),
                    measure_s=entry.get("measure_s"),
                    spacing=describe_spacing(request.spacing),
                    compute_us=entry.get("compute_us"),
                    wait_us=entry.get("wait_us"),
                    wait_clock=entry.get("wait_clock"),
                )
            )
    return records


def point_status(records: list[dict[str, Any]]) -> str:
    """One word for a point: "ok" when every measurable (T, mode) is; else its failure statuses.

    Graph mode on CPU ranks is unsupported by nature and does not make a point "not ok".
    """
    bad = sorted(
        {
            r["status"]
            for r in records
            if r["status"] != "ok"
            and not (r["status"] == "unsupported" and r["mode"] == "graph" and r.get("backend") == "gloo")
        }
    )
    return ", ".join(bad) if bad else "ok"


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    useful = [line for line in text if not line.startswith(("NCCL INFO", "[")) or "Error" in line or "error" in line]
    return "\n".join((useful or text)[-lines:])


def _read_entries(path: Path) -> list[dict[str, Any]]:
    entries = []
    try:
        for line in path.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a worker killed mid-line: what came before is whole
    except OSError:
        pass
    return entries


class PeerLost(RuntimeError):
    """Another rank's controller left the controllers' group (killed, crashed, its node lost)."""


def all_gather_json(payload: Any, world_size: int) -> list[Any]:
    """Every controller's payload (small, picklable), through the controllers' gloo group; PeerLost when a
    controller is gone (gloo reports "Connection closed by peer" or a timeout)."""
    gathered: list[Any] = [None] * world_size
    try:
        dist.all_gather_object(gathered, payload)
    except RuntimeError as exc:  # gloo's DistBackendError / DistNetworkError are RuntimeErrors
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        # "[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:51946. This is typically..."
        raise PeerLost(re.sub(r"^\[[^\]]*\]\s*", "", lines[0]).split(". ")[0][:300]) from None
    return gathered
