"""One trial: one sweep point measured in a fresh process group, in a fresh worker process on every rank.

`run_trial` runs inside the worker (forked by commprof.replay.forkserver with the point's environment already applied,
because NCCL reads most of its variables once per process). It joins the point's own rendezvous, gates the
implementation, replays the step plan for every T in eager and graph mode, and writes its outcome as JSON.
A request with `crossover` set is one round of a crossover search instead: the point's implementation and the
baseline, set up side by side, timed at each of the round's sizes (`run_crossover_round`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commprof.planner.models import ModelShape
from commprof.records.folder import open_nofollow
from commprof.records.schema import MODES, Mode

if TYPE_CHECKING:  # torch is imported inside the worker only
    import torch
    import torch.distributed as dist

    from commprof.impls.base import AllReduceImpl, ImplContext
    from commprof.planner.plan import StepPlan


@dataclass
class TrialRequest:
    """Everything a worker needs; JSON-able so the fork server can pass it through a pipe."""

    run_id: str
    point: dict[str, Any]  # SweepPoint.to_dict()
    model: dict[str, Any]  # ModelShape.to_dict()
    tp: int
    tokens: list[int]
    phase: str
    dtype: str
    iterations: int
    warmup: int
    backend: str
    rank: int
    world_size: int
    device_index: int  # the CUDA device this rank uses (ranks may share one, see --share-gpus)
    store_host: str
    store_port: int
    store_prefix: str
    result_path: str
    timeout_s: float
    modes: list[Mode] = field(default_factory=lambda: list(MODES))
    profile_dir: str | None = None  # set: write Kineto traces of a few steps there instead of timing
    plan_options: dict[str, Any] = field(default_factory=dict)  # PlanOptions fields
    # set: a crossover search round, {"baseline": point dict, "sizes": [bytes], "mode", "rounds", "warmup"}
    crossover: dict[str, Any] | None = None
    # What runs between collectives: {"compute": ComputeSpec.to_dict(), "skew": SkewSpec.to_dict()}; {}: nothing
    spacing: dict[str, Any] = field(default_factory=dict)
    # The implementation's state_dir (AllReduceImpl.state_dir): its setting's folder where it has a preparation,
    # else the point's own; None: the library's default
    state_dir: str | None = None
    # set: the setting's preparation (AllReduceImpl.preparation): setup and prepare on every rank, nothing timed
    prepare_only: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TrialRequest:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class ReadyImpl:
    """The point's implementation, set up on this rank's process group, with the facts its gates read."""

    impl: AllReduceImpl  # set up and prepared for every all-reduce shape of the point's plans
    impl_cls: type[AllReduceImpl]  # its class (support_tokens gates each T)
    ctx: ImplContext  # this run's facts, as the gates read them
    group: dist.ProcessGroup  # the trial's process group
    device: torch.device  # this rank's device


def _entry(tokens: int, mode: str, status: str, message: str | None = None, **extra) -> dict[str, Any]:
    return {"tokens": tokens, "mode": mode, "status": status, "message": message, **extra}


def _agree(
    store, rank: int, world_size: int, verdict: tuple[bool, str], timeout_s: float, key: str = "support"
) -> str | None:
    """Share each rank's verdict through the store; the first refusal (by rank) applies to all ranks."""
    from commprof.replay.agreement import gather_via_store

    verdicts = gather_via_store(store, key, rank, world_size, list(verdict), timedelta(seconds=timeout_s))
    for r, (ok, reason) in enumerate(verdicts):
        if not ok:
            return reason if world_size == 1 else f"{reason} (rank {r})"
    return None


def _join(request: TrialRequest):
    """This rank's device and the point's own store (a prefix of the launch's)."""
    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if request.backend == "nccl":
        device = torch.device("cuda", request.device_index)
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=request.timeout_s)
    store = dist.PrefixStore(
        request.store_prefix, dist.TCPStore(request.store_host, request.store_port, is_master=False, timeout=timeout)
    )
    return device, store, timeout


def _init_group(request: TrialRequest, store, device, timeout) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        request.backend,
        store=store,
        rank=request.rank,
        world_size=request.world_size,
        timeout=timeout,
        **({"device_id": device} if device.type == "cuda" else {}),
    )


def run_trial(request: TrialRequest, emit: Callable[[dict[str, Any]], None]) -> None:
    """Measure one point on this rank, emitting one entry per (T, mode) as soon as it is known.

    Every rank emits the same entries (samples are gathered across ranks before they are summarized).
    """
    import torch.distributed as dist

    from commprof.impls.context import build_impl_context
    from commprof.impls.registry import load_impl, resolve_impl_name
    from commprof.planner.plan import PlanOptions, build_step_plan

    if request.crossover is not None:
        run_crossover_round(request, emit)
        return
    point = request.point
    impl_name = resolve_impl_name(point["impl"], request.backend)
    model = ModelShape(**request.model)
    device, store, timeout = _join(request)

    impl_cls = load_impl(impl_name)
    ctx = build_impl_context(
        request.backend,
        request.world_size,
        request.dtype,
        tuple(request.tokens),
        model.hidden_size,
        point.get("options", {}),
    )
    support = impl_cls.gate(ctx)
    refusal = _agree(store, request.rank, request.world_size, (support.ok, support.reason), request.timeout_s)
    if refusal is not None:
        for t in request.tokens:
            for m in request.modes:
                emit(_entry(t, m, "unsupported", refusal))
        return

    _init_group(request, store, device, timeout)
    group = dist.group.WORLD
    options = PlanOptions(**request.plan_options)
    plans = {t: build_step_plan(model, request.tp, t, request.phase, request.dtype, options) for t in request.tokens}
    impl = None
    setup_error = None
    try:
        impl = impl_cls(point.get("options", {}))
        impl.state_dir = Path(request.state_dir) if request.state_dir else None
        impl.setup(group, plans[max(plans)], device)
        # Every all-reduce shape of every plan (a draft's decode steps reduce [batch, H]).
        impl.prepare(
            sorted(
                {
                    op.shape
                    for plan in plans.values()
                    for op in plan.ops
                    if op.collective == "all_reduce" and op.dtype == plan.model.dtype
                }
            )
        )
    except Exception as exc:  # a kernel library refusing this box is a result, not a crash
        setup_error = f"{impl_name} setup failed: {type(exc).__name__}: {exc}"[:2000]
    # Peers of a rank whose setup failed would wait in setup collectives forever: agree first, via the store.
    refusal = _agree(
        store,
        request.rank,
        request.world_size,
        (setup_error is None, setup_error or ""),
        request.timeout_s,
        key="setup",
    )
    if refusal is not None:
        for t in request.tokens:
            for m in request.modes:
                emit(_entry(t, m, "error", refusal))
        return  # no teardown: its collectives would wait for the rank that failed
    ready = ReadyImpl(impl, impl_cls, ctx, group, device)
    try:
        if request.prepare_only:
            emit({"status": "ok", "message": impl.detail()})
        elif request.profile_dir:
            _profile_all(request, ready, plans, emit)
        else:
            _replay_all(request, ready, plans, emit)
    finally:
        impl.teardown()
        dist.destroy_process_group()


def _replay_all(
    request: TrialRequest, ready: ReadyImpl, plans: dict[int, StepPlan], emit: Callable[[dict[str, Any]], None]
) -> None:
    """Eager mode for every T first, then graph mode: a failed capture can leave the communicator unusable,
    so after one, the remaining captures are not attempted and the eager numbers are already safe."""
    from commprof.planner.spacing import ComputeSpec, SkewSpec
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    impl = ready.impl
    config = ReplayConfig(
        iterations=request.iterations,
        warmup=request.warmup,
        compute=ComputeSpec.from_dict(request.spacing.get("compute")),
        skew=SkewSpec.from_dict(request.spacing.get("skew")),
        intermediate_size=request.model.get("intermediate_size"),
    )
    replays = {}
    for tokens, plan in plans.items():
        # Gated on every row count the implementation reduces (a draft's decode steps reduce fewer rows than T).
        rows = sorted({op.shape[0] for op in plan.ops if op.collective == "all_reduce"}, reverse=True) or [tokens]
        verdicts = [ready.impl_cls.support_tokens(ready.ctx, r) for r in rows]
        per_t = next((verdict for verdict in verdicts if not verdict), verdicts[0])
        if per_t:
            replays[tokens] = StepReplay(plan, impl, ready.group, ready.device, config)
        else:
            for m in request.modes:
                emit(_entry(tokens, m, "unsupported", per_t.reason))
    broken = None
    for mode in request.modes:
        for tokens, replay in replays.items():
            if broken is not None:
                emit(_entry(tokens, mode, "error", f"not attempted: {broken}"))
                continue
            started = time.perf_counter()
            result = replay_mode(replay, mode).to_dict()
            emit(
                _entry(
                    tokens,
                    **result,
                    fused_rmsnorm=impl.fuses_rmsnorm,
                    impl_detail=impl.detail(),
                    measure_s=round(time.perf_counter() - started, 4),
                )
            )
            if result["status"] in ("capture_failed", "error"):
                broken = f"{mode} mode at T={tokens} ended {result['status']}; the communicator may be unusable"


def _profile_all(
    request: TrialRequest, ready: ReadyImpl, plans: dict[int, StepPlan], emit: Callable[[dict[str, Any]], None]
) -> None:
    """The profiling pass: a trace of a few eager steps per T, one entry per T saying where it went."""
    from commprof.replay.harness import ReplayConfig, StepReplay
    from commprof.replay.profile_pass import profile_steps, trace_path

    for tokens, plan in plans.items():
        if not ready.impl_cls.support_tokens(ready.ctx, tokens):
            continue
        path = trace_path(request.profile_dir, tokens, request.rank)
        profile_steps(StepReplay(plan, ready.impl, ready.group, ready.device, ReplayConfig()), path)
        emit(_entry(tokens, "eager", "ok", trace=str(path)))


def run_crossover_round(request: TrialRequest, emit: Callable[[dict[str, Any]], None]) -> None:
    """One round of a crossover search on this rank: the point's implementation and the baseline, gated and set up
    side by side in one process group, then per size (smallest first) the implementation and the baseline timed
    one after the other; one entry per size {"bytes", "status", "impl_us", "baseline_us", "message"}."""
    import torch.distributed as dist

    from commprof.impls.context import build_impl_context
    from commprof.impls.registry import load_impl, resolve_impl_name
    from commprof.planner.models import DTYPE_BYTES
    from commprof.replay.size_timing import SizeTiming, size_plan, time_size

    search = request.crossover
    sizes = sorted(int(n) for n in search["sizes"])
    settings = {"impl": request.point, "baseline": search["baseline"]}
    device, store, timeout = _join(request)

    def emit_all(status: str, message: str | None) -> None:
        for nbytes in sizes:
            emit({"bytes": nbytes, "status": status, "message": message})

    classes = {role: load_impl(resolve_impl_name(p["impl"], request.backend)) for role, p in settings.items()}
    hidden = max(max(sizes) // DTYPE_BYTES[request.dtype], 1)
    verdicts = []
    for role, cls in classes.items():
        ctx = build_impl_context(
            request.backend, request.world_size, request.dtype, (1,), hidden, settings[role].get("options", {})
        )
        verdicts.append(cls.gate(ctx))
    refused = next((v for v in verdicts if not v.ok), verdicts[0])
    refusal = _agree(store, request.rank, request.world_size, (refused.ok, refused.reason), request.timeout_s)
    if refusal is not None:
        emit_all("unsupported", refusal)
        return
    _init_group(request, store, device, timeout)
    group = dist.group.WORLD
    plans = {nbytes: size_plan(nbytes, request.world_size, request.dtype) for nbytes in sizes}
    shapes = sorted({op.shape for plan in plans.values() for op in plan.ops if op.collective == "all_reduce"})
    impls, setup_error = {}, None
    try:
        for role, cls in classes.items():
            impls[role] = cls(settings[role].get("options", {}))
            impls[role].state_dir = Path(request.state_dir) if request.state_dir and role == "impl" else None
            impls[role].setup(group, plans[sizes[-1]], device)
            impls[role].prepare(shapes)
    except Exception as exc:  # a kernel library refusing this box is a result, not a crash
        setup_error = f"{role} setup failed: {type(exc).__name__}: {exc}"[:2000]
    refusal = _agree(
        store, request.rank, request.world_size, (setup_error is None, setup_error or ""), request.timeout_s, "setup"
    )
    if refusal is not None:
        emit_all("error", refusal)
        return  # no teardown: its collectives would wait for the rank that failed
    timing = SizeTiming(int(search["rounds"]), int(search["warmup"]), search["mode"], request.dtype)
    broken = None
    try:
        for nbytes in sizes:
            if broken is not None:
                emit({"bytes": nbytes, "status": "error", "message": f"not attempted: {broken}"})
                continue
            timed = {}
            for role in ("impl", "baseline"):
                timed[role] = time_size(impls[role], nbytes, group, device, timing)
                if timed[role].status != "ok":
                    break
            failed = next((t for t in timed.values() if t.status != "ok"), None)
            entry = {"bytes": nbytes, "status": "ok", "message": None}
            if failed is not None:
                role = next(r for r, t in timed.items() if t is failed)
                entry.update(status=failed.status, message=f"{role}: {failed.message}")
                if failed.status in ("capture_failed", "error"):
                    broken = f"{nbytes} B ended {failed.status}; the communicator may be unusable"
            else:
                entry.update(impl_us=timed["impl"].time_us, baseline_us=timed["baseline"].time_us)
            emit(entry)
    finally:
        for impl in impls.values():
            impl.teardown()
        dist.destroy_process_group()


def worker_main(request: TrialRequest) -> int:
    """Entry point in the forked worker: run the trial, appending each entry to the result file as it ends.

    Entries are flushed one by one, so a worker that later hangs or dies leaves what it finished.
    """
    fd = open_nofollow(request.result_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with os.fdopen(fd, "a", encoding="utf-8") as out:

        def emit(entry: dict[str, Any]) -> None:
            out.write(json.dumps(entry) + "\n")
            out.flush()

        run_trial(request, emit)
    return 0
