"""The replay harness: run a step plan's collectives as one step, repeatedly, timed and verified.

One harness for every all-reduce implementation (the nccl-tests way): tensors are allocated once, outside the
timed loop; each step starts from fresh activations (one untimed kernel per shape, as an engine reduces fresh
activations every layer, so values never drift to inf, and different every step, so a stale output is wrong);
verification is untimed, against the exact reduction, of the first step and of the last timed step, each run
with its outputs poisoned with NaN first (commprof/replay/replay_tensors.py).
Timing (commprof/replay/timing.py, docs/timing.md): a start aligned across ranks on the device, then two stamps per
step; the per-op breakdown is its own pass, in each mode (graph: commprof/replay/captured_ops.py). Eager mode
everywhere; on CUDA the whole step is also captured once as a CUDA graph and replayed.
"""

from __future__ import annotations

import gc
import itertools
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from commprof.impls.base import AllReduceImpl
from commprof.planner.plan import StepPlan
from commprof.planner.spacing import ComputeSpec, SkewSpec
from commprof.replay.agreement import agree_ranks, gather_via_store, worse_check, wrong_status
from commprof.replay.captured_ops import OP_TIMING, capture_per_op, external_events_missing, time_per_op
from commprof.replay.replay_tensors import StepTensors, Verification
from commprof.replay.spacers import Spacer, make_arrivals, wait_per_step
from commprof.replay.step_counts import compute_steps, per_op_warmup
from commprof.replay.timing import START_DELAY_US, make_clock
from commprof.stats import median, summarize, summarize_columns

# torch 2.13 renamed all_gather_into_tensor (and reduce_scatter_tensor); older releases (still what many GPU boxes run) lack the new name.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass(frozen=True)
class ReplayConfig:
    """How long to measure: warm-up steps, then timed steps."""

    iterations: int = 50
    warmup: int = 5
    rms_eps: float = 1e-6
    # CUDA: the spin between the aligning all-reduce and the start event (see commprof.replay.timing).
    start_delay_us: float = START_DELAY_US
    # What each rank runs between two collectives, and which ranks start them late (commprof.planner.spacing).
    compute: ComputeSpec = ComputeSpec()
    skew: SkewSpec = SkewSpec()
    intermediate_size: int | None = None  # the model's, for compute = "gemm"


@dataclass
class ModeResult:
    """The outcome of one plan in one mode, identical on every rank (samples are gathered across ranks)."""

    mode: str
    status: str
    message: str | None = None
    timing: str | None = None
    step_us: dict[str, float] | None = None
    op_us: dict[str, list] | None = None
    rank_step_median_us: list[float] | None = None
    check: Verification | None = None
    compute_us: dict[str, float] | None = None  # the step's compute alone, per step
    wait_us: dict[str, float] | None = None  # per step, the first arrival's wait for the last, summed over ops
    wait_clock: str | None = None  # how arrivals were stamped, or why waiting was not measured
    op_timing: str | None = None  # which per-op pass op_us comes from (captured_ops.OP_TIMING)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "status": self.status,
            "message": self.message,
            "timing": self.timing,
            "step_us": self.step_us,
            "op_us": self.op_us,
            "rank_step_median_us": self.rank_step_median_us,
            "check": self.check.to_dict() if self.check else None,
            "compute_us": self.compute_us,
            "wait_us": self.wait_us,
            "wait_clock": self.wait_clock,
            "op_timing": self.op_timing,
        }


_REPLAY_SERIALS = itertools.count()  # per process: a fresh worker's replays count from 0 on every rank


class StepReplay:
    """One rank's replay of one plan: its tensors (commprof/replay/replay_tensors.py) and the three things done with
    them: run, verify, time."""

    def __init__(
        self,
        plan: StepPlan,
        impl: AllReduceImpl,
        group: dist.ProcessGroup,
        device: torch.device,
        config: ReplayConfig,
        store: dist.Store | None = None,
    ):
        # Every rank builds its replays in the same order: the serial keeps one replay's agreement keys apart
        # from the previous replay's on the same store (crossover sizes all have T = 1).
        self.serial = next(_REPLAY_SERIALS)
        self.plan, self.impl, self.group, self.device, self.config = plan, impl, group, device, config
        # The rendezvous store: agreement that does not depend on the communicator being healthy.
        self.store = store if store is not None else dist.distributed_c10d._get_default_store()
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.tensors = StepTensors(plan, self.rank, self.world, device, impl.fuses_rmsnorm)
        self.graph = None
        self.op_graph = None  # the step captured again with events between ops (graph-mode per-op pass)
        self.op_stamps = None
        self.clock = make_clock(group, device, len(plan.ops) + 1, config.start_delay_us)
        self.spacer = Spacer(plan, config.compute, config.skew, self.rank, device, config.intermediate_size)
        self.arrivals, self.no_arrivals = make_arrivals(len(plan.ops), device)

    def agree(self, key: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's payload for `key`, through the store; waits at most the store's timeout."""
        return gather_via_store(self.store, f"commprof/agree/{self.serial}/{key}", self.rank, self.world, payload)

    def refill(self) -> None:
        """Fresh activations for the next step (untimed)."""
        self.tensors.refill()

    def poison(self) -> None:
        """NaN in every output before a checked step (untimed; the refill after it restores the inputs)."""
        self.tensors.poison()

    def verify(self) -> Verification:
        """Every op's output of the last step against the exact expected result."""
        return self.tensors.verify(self.config.rms_eps)

    def agree_check(self, key: str, check: Verification) -> Verification:
        """One verdict from every rank's check of the same step, through the store (agree_ranks)."""
        outcomes = self.agree(key, {"status": "ok", "message": None, "check": check.to_dict()})
        return agree_ranks(outcomes)[2]

    def run_ops(self, stamps: list | None = None, arrivals=None, clock=None) -> None:
        """Issue every collective of the step in order, each after this rank's spacer (compute, lateness);
        `stamps` gets a stamp of `clock` (default: the step clock) after each op, `arrivals` one when this rank
        reaches it."""
        impl, eps, t = self.impl, self.config.rms_eps, self.tensors
        clock = clock or self.clock
        spacer = self.spacer if self.spacer.active else None
        for op in self.plan.ops:
            if spacer is not None:
                spacer.before(op.index)
            if arrivals is not None:
                arrivals.stamp(op.index)
            key = (op.input_shape, op.dtype)
            if op.collective == "all_gather":
                _all_gather_single(t.op_out[op.index], t.gather_in[key], group=self.group)
                t.outputs[op.index] = t.op_out[op.index]
            elif op.collective == "reduce_scatter":
                _reduce_scatter_single(t.op_out[op.index], t.scatter_in[key], group=self.group)
                t.outputs[op.index] = t.op_out[op.index]
            else:
                rows_key, row = t.row_of[op.index]
                rows = t.reduce_rows[rows_key]
                if t.fused and op.rmsnorm_after:
                    t.outputs[op.index] = impl.all_reduce_rmsnorm(rows.inputs[row], rows.residuals[row], t.weight, eps)
                elif op.dtype != self.plan.model.dtype:
                    # Not an activation (Mamba-2's fp32 sum of squares per token): the engine's plain all-reduce,
                    # not the implementation under test, whose workspace holds the activation dtype.
                    dist.all_reduce(rows.inputs[row], group=self.group)
                    t.outputs[op.index] = rows.inputs[row]
                else:
                    t.outputs[op.index] = impl.all_reduce(rows.inputs[row])
            if stamps is not None:
                stamps.append(clock.stamp())

    # -- timing ------------------------------------------------------------------------------------------------

    def time_steps(self, graph: bool) -> tuple[list[float], list[list[float]] | None]:
        """Warm-up then timed steps; returns per-step µs and per-op µs rows from a pass of their own: eager, one
        that also stamps every rank's arrival at each op (into `self.arrival_rows`); graph, the per-op graph's
        replays (None where it was not captured). The last timed step runs with its outputs poisoned and is
        verified after the pass (`self.last_check`, this rank's), so a kernel that goes stale or idle once warm
        is caught as one that is wrong from the start.

        Python's cyclic garbage collector is paused meanwhile: the timing records it allocates would
        otherwise trigger collections inside timed steps, a cost the engine being modelled does not pay.
        """
        gc_was_enabled = gc.isenabled()
        gc.disable()
        self.arrival_rows: list[list[int]] = []
        try:
            steps = self._timed_pass(graph, per_op=False, warmup=self.config.warmup)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.last_check = self.verify()
            # The breakdown's stamps between ops cost host time: a pass of its own, never part of step_us.
            ops_warmup = per_op_warmup(self.config.warmup)
            if not graph:
                ops = self._timed_pass(graph, per_op=True, warmup=ops_warmup)
            elif self.op_graph is not None:
                ops = time_per_op(self, self.op_graph, self.op_stamps, ops_warmup)
            else:
                ops = None
            return [row[0] for row in steps], ops
        finally:
            if gc_was_enabled:
                gc.enable()

    def time_compute(self) -> list[float]:
        """Per step, µs of the step's compute alone (every gap's, no collective, no lateness): what the
        communication is told apart from."""
        clock, samples = self.clock, []
        warmup = per_op_warmup(self.config.warmup)
        for i in range(compute_steps(self.config.iterations, self.config.warmup)):
            clock.align()
            start = clock.stamp()
            for op in self.plan.ops:
                self.spacer.compute(op.index)
            end = clock.stamp()
            clock.wait(end)
            if i >= warmup:
                samples.append(clock.elapsed_us(start, end))
        return samples

    def _timed_pass(self, graph: bool, per_op: bool, warmup: int) -> list[list[float]]:
        """Samples of one pass: [step µs] per step, or [op µs, ...] per step with `per_op`."""
        clock, samples = self.clock, []
        arrivals = self.arrivals if per_op else None
        last = warmup + self.config.iterations - 1
        for i in range(warmup + self.config.iterations):
            if i == last and not per_op:
                self.poison()  # the step verified after the pass (time_steps)
            self.refill()
            clock.align()
            if arrivals is not None:
                arrivals.stamp_reference()
            stamps = [clock.stamp()]
            if graph:
                self.graph.replay()
            else:
                self.run_ops(stamps if per_op else None, arrivals)
            if not per_op:
                stamps.append(clock.stamp())
            clock.wait(stamps[-1])
            if i >= warmup:
                samples.append([clock.elapsed_us(a, b) for a, b in zip(stamps, stamps[1:])])
                if arrivals is not None:
                    self.arrival_rows.append(arrivals.read())
        return samples

    def capture(self) -> None:
        """Capture the whole step as one CUDA graph (the implementation was warmed up eagerly first)."""
        torch.cuda.synchronize(self.device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.run_ops()
        torch.cuda.synchronize(self.device)

    def capture_op_pass(self) -> str | None:
        """Capture the graph-mode per-op pass (after the step graph was verified); None when captured, else why its
        per-op times are not measured. The step graph's outputs stay the ones checked: its last timed replay is
        verified, and an out-of-place kernel's captured outputs are the step graph's own."""
        missing = external_events_missing()
        if missing is not None:
            return missing
        step_outputs = list(self.tensors.outputs)
        try:
            self.op_graph, self.op_stamps = capture_per_op(self)
        except Exception as exc:  # the step's own graph stands; only its per-op split is lost
            self.op_graph = None
            return f"not measured: the per-op capture failed: {_one_line(exc)}"
        finally:
            self.tensors.outputs = step_outputs
        return None

    def gather_samples(self, steps: list[float], ops: list[list[float]] | None):
        """Per-sample maximum over ranks (a step ends when its slowest rank does), and each rank's median step."""
        stacked = self._gather([[s] for s in steps])  # [ranks, steps, 1]
        rank_medians = [median(row) for row in stacked[:, :, 0].tolist()]  # torch's median is the lower middle
        step_samples = stacked.max(dim=0).values[:, 0].tolist()
        op_rows = self._gather(ops).max(dim=0).values.tolist() if ops else None
        return step_samples, op_rows, rank_medians

    def gather_waits(self) -> list[float] | None:
        """Per step of the breakdown pass, the waiting for the last arrival summed over ops (every rank)."""
        if not self.arrival_rows:
            return None
        local = torch.tensor(self.arrival_rows, dtype=torch.int64, device=self.device)
        gathered = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(gathered, local, group=self.group)
        return wait_per_step([g.cpu().tolist() for g in gathered], self.arrivals.offsets)

    def _gather(self, rows: list[list[float]]) -> torch.Tensor:
        local = torch.tensor(rows, dtype=torch.float64, device=self.device)
        gathered = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(gathered, local, group=self.group)
        return torch.stack(gathered).cpu()


def verify_mode(replay: StepReplay, mode: str) -> tuple[ModeResult | None, Verification | None, str | None]:
    """Capture (graph mode), then one step run with its outputs poisoned and checked; the ranks agree on the
    outcome through the store (not the communicator, which a failed capture may have broken), so every rank
    returns the same. Returns (the mode's result where nothing may be timed, else None; the agreed check; why
    the graph-mode per-op pass is not measured, or None)."""
    timing = replay.clock.kind
    if mode == "graph":
        if replay.device.type != "cuda":
            return ModeResult(mode, "unsupported", "CUDA graphs need CUDA GPUs (this run is on CPU ranks)"), None, None
        if not replay.impl.capturable:
            return ModeResult(mode, "unsupported", f"{replay.impl.name} cannot be captured in a CUDA graph"), None, None
    local: dict[str, Any] = {"status": "ok", "message": None, "check": None}
    try:
        if mode == "graph":
            try:
                replay.capture()
            except Exception as exc:  # the capture verdict is the result, whatever raised
                local = {"status": "capture_failed", "message": _one_line(exc), "check": None}
        if local["status"] == "ok":
            replay.poison()
            replay.refill()
            if mode == "graph":
                replay.graph.replay()
            else:
                replay.run_ops()
            if replay.device.type == "cuda":
                torch.cuda.synchronize(replay.device)
            local["check"] = replay.verify().to_dict()
            if mode == "graph":
                local["op_pass"] = replay.capture_op_pass()
    except Exception as exc:
        local = {"status": "error", "message": _one_line(exc) + "\n" + traceback.format_exc(limit=4), "check": None}
    outcomes = replay.agree(f"{replay.plan.tokens}/{mode}", local)
    status, message, check = agree_ranks(outcomes)
    if status in ("capture_failed", "error"):
        return ModeResult(mode, status, message, timing), None, None
    no_op_pass = next((o["op_pass"] for o in outcomes if o.get("op_pass")), None)
    if no_op_pass is not None:  # every rank runs the per-op replays, or none does
        replay.op_graph = None
    return None, check, no_op_pass


def last_step_check(replay: StepReplay, mode: str) -> Verification:
    """The last timed step's check (time_steps), agreed by every rank."""
    return replay.agree_check(f"{replay.plan.tokens}/{mode}/last", replay.last_check)


def replay_mode(replay: StepReplay, mode: str) -> ModeResult:
    """Verify, then time, one plan in one mode; failures become a status with a message, never an exception.

    The first step and the last timed step are both checked (verify_mode, time_steps); either wrong makes the
    mode "wrong" ("replay_wrong" in graph mode), its times kept but never a tuning result.
    """
    timing = replay.clock.kind
    failed, first, no_op_pass = verify_mode(replay, mode)
    if failed is not None:
        return failed
    status, message = "ok", None
    try:
        steps, ops = replay.time_steps(graph=mode == "graph")
        check, wrong = worse_check(first, last_step_check(replay, mode))
        step_samples, op_rows, rank_medians = replay.gather_samples(steps, ops)
        waits, wait_clock = _waits(replay, mode)
        compute = None
        if replay.spacer.has_compute:
            compute = summarize(replay.gather_samples(replay.time_compute(), None)[0])
    except Exception as exc:
        return ModeResult(mode, "error", _one_line(exc) + "\n" + traceback.format_exc(limit=4), timing)
    if wrong is not None:
        status, message = wrong_status(mode), wrong
    op_us = None
    if op_rows:
        op_us = {
            "sites": [op.site for op in replay.plan.ops],
            "collectives": [op.collective for op in replay.plan.ops],
            "draft": [op.draft for op in replay.plan.ops],
            "bytes": [op.bytes for op in replay.plan.ops],
            **summarize_columns(op_rows),
        }
    elif status == "ok" and no_op_pass is not None:
        message = f"per-op times {no_op_pass}"
    result = ModeResult(mode, status, message, timing, summarize(step_samples), op_us, rank_medians, check)
    result.compute_us, result.wait_us, result.wait_clock = compute, waits, wait_clock
    result.op_timing = OP_TIMING[mode] if op_us else None
    return result


def _waits(replay: StepReplay, mode: str) -> tuple[dict[str, float] | None, str]:
    """The waiting for late ranks per step and the clock it was read on, or None and why it was not measured."""
    if mode == "graph":
        return None, "not measured: arrivals are stamped in eager mode (a stamp in the graph would be timed)"
    if replay.arrivals is None:
        replay.agree(f"{replay.plan.tokens}/arrivals", {"ok": False})
        return None, replay.no_arrivals or "not measured"
    # Every rank stamps, or none compares: agree first through the store.
    clocks = replay.agree(f"{replay.plan.tokens}/arrivals", {"ok": True})
    if not all(c["ok"] for c in clocks):
        return None, "not measured: a rank has no shared clock to stamp its arrivals"
    return summarize(replay.gather_waits()), replay.arrivals.kind


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:2000]
