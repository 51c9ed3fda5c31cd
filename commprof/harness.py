"""The replay harness: run a step plan's collectives as one step, repeatedly, timed and verified.

One harness for every all-reduce implementation (the nccl-tests way): tensors are allocated once, outside the
timed loop; each step starts from fresh activations (one untimed copy, as an engine reduces fresh activations
every layer, so values never drift to inf); verification is its own untimed pass against the exact reduction.
Timing (commprof/timing.py, docs/timing.md): a start aligned across ranks on the device, then two stamps per
step; the per-op breakdown is its own pass. Eager mode everywhere; on CUDA the whole step is also captured
once as a CUDA graph and replayed.
"""

from __future__ import annotations

import gc
import json
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from commprof.impls.base import AllReduceImpl
from commprof.planner.plan import StepPlan
from commprof.stats import summarize, summarize_columns
from commprof.timing import START_DELAY_US, make_clock

# torch 2.13 renamed all_gather_into_tensor; older releases (still what many GPU boxes run) lack the new name.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# Relative precision of each dtype: tolerances scale with it (bf16 keeps 8 significant bits).
DTYPE_EPS = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-23}


@dataclass(frozen=True)
class ReplayConfig:
    """How long to measure: warm-up steps, then timed steps."""

    iterations: int = 50
    warmup: int = 5
    rms_eps: float = 1e-6
    # CUDA: the spin between the aligning all-reduce and the start event (see commprof.timing).
    start_delay_us: float = START_DELAY_US


@dataclass(frozen=True)
class Verification:
    """Every op's output against the exact expected result; a mismatch names the first bad op."""

    ok: bool
    max_abs_err: float
    tolerance: float
    bad_ops: int
    first_bad_op: int | None
    first_bad_site: str | None
    bad_ranks: tuple[int, ...] = ()  # after agreement: the ranks whose outputs were wrong
    non_finite: int = 0  # NaN / Inf values among the outputs (max_abs_err covers the finite ones)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "max_abs_err": self.max_abs_err,
            "tolerance": self.tolerance,
            "bad_ops": self.bad_ops,
            "first_bad_op": self.first_bad_op,
            "first_bad_site": self.first_bad_site,
            "bad_ranks": list(self.bad_ranks),
            "non_finite": self.non_finite,
        }

    def describe(self) -> str:
        where = f" on rank(s) {', '.join(map(str, self.bad_ranks))}" if self.bad_ranks else ""
        text = f"{self.bad_ops} op(s) wrong{where}, first op {self.first_bad_op} ({self.first_bad_site}), "
        if self.non_finite:
            text += f"{self.non_finite} non-finite value(s) (NaN/Inf) in the outputs, "
        return text + f"max abs error {self.max_abs_err:.4g} (finite values) vs tolerance {self.tolerance:.3g}"


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
        }


def gather_via_store(
    store: dist.Store, key: str, rank: int, world_size: int, payload: Any, timeout: timedelta | None = None
) -> list[Any]:
    """Every rank's JSON payload under `key`, by rank, through the rendezvous store.

    The store keeps working when a communicator does not (a failed capture, a rank that gave up), so ranks
    agree through it on whether the next collective may run at all.
    """
    store.set(f"{key}/{rank}", json.dumps(payload))
    keys = [f"{key}/{r}" for r in range(world_size)]
    if timeout is None:
        store.wait(keys)
    else:
        store.wait(keys, timeout)
    return [json.loads(store.get(k)) for k in keys]


class StepReplay:
    """One rank's tensors for one plan, allocated once, and the three things done with them: run, verify, time.

    All-reduce inputs are rows of one [ops, T*H] block so a step's fresh activations are one copy.
    Rank r contributes pattern * (r + 1) with small-integer patterns, so the exact sum is known.
    """

    def __init__(
        self,
        plan: StepPlan,
        impl: AllReduceImpl,
        group: dist.ProcessGroup,
        device: torch.device,
        config: ReplayConfig,
        store: dist.Store | None = None,
    ):
        self.plan, self.impl, self.group, self.device, self.config = plan, impl, group, device, config
        # The rendezvous store: agreement that does not depend on the communicator being healthy.
        self.store = store if store is not None else dist.distributed_c10d._get_default_store()
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.dtype = TORCH_DTYPES[plan.model.dtype]
        self.fused = impl.fuses_rmsnorm
        ar_ops = [op for op in plan.ops if op.collective == "all_reduce"]
        self.row_of = {op.index: row for row, op in enumerate(ar_ops)}
        numel = plan.tokens * plan.model.hidden_size
        shape = (plan.tokens, plan.model.hidden_size)

        def pattern(rows: int, cols: int, step: int, modulus: int, offset: int) -> torch.Tensor:
            index = torch.arange(cols, device=device).unsqueeze(0) + step * torch.arange(rows, device=device).unsqueeze(
                1
            )
            return (index % modulus - offset).to(torch.float32)

        self.base = pattern(len(ar_ops), numel, 3, 9, 4)  # fp32, exact small ints
        self.pristine = (self.base * (self.rank + 1)).to(self.dtype)
        self.block = torch.empty_like(self.pristine)
        self.inputs = [self.block[row].view(shape) for row in range(len(ar_ops))]
        if self.fused:
            self.residual_pristine = (pattern(len(ar_ops), numel, 5, 7, 3) * 0.5).to(self.dtype)
            self.residual_block = torch.empty_like(self.residual_pristine)
            self.residuals = [self.residual_block[row].view(shape) for row in range(len(ar_ops))]
            self.weight = (1.0 + (torch.arange(plan.model.hidden_size, device=device) % 5 - 2) * 0.125).to(self.dtype)
        gather = next((op for op in plan.ops if op.collective == "all_gather"), None)
        if gather is not None:
            self.gather_base = pattern(1, gather.input_shape[0] * gather.input_shape[1], 0, 9, 4)[0]
            self.gather_in = (self.gather_base + self.rank).to(self.dtype).view(gather.input_shape)
            # Rank-major, as engines gather vocab-parallel logits before rearranging them to [T, V].
            rows, cols = gather.input_shape
            self.gather_out = torch.empty((self.world * rows, cols), dtype=self.dtype, device=device)
        self.outputs: list[Any] = [None] * len(plan.ops)
        self.graph = None
        self.clock = make_clock(group, device, len(plan.ops) + 1, config.start_delay_us)

    def agree(self, key: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's payload for `key`, through the store; waits at most the store's timeout."""
        return gather_via_store(self.store, f"commprof/agree/{key}", self.rank, self.world, payload)

    def refill(self) -> None:
        """Fresh activations for the next step (untimed)."""
        self.block.copy_(self.pristine)
        if self.fused:
            self.residual_block.copy_(self.residual_pristine)

    def run_ops(self, stamps: list | None = None) -> None:
        """Issue every collective of the step in order; `stamps` gets a clock stamp after each op."""
        impl, eps = self.impl, self.config.rms_eps
        for op in self.plan.ops:
            if op.collective == "all_gather":
                _all_gather_single(self.gather_out, self.gather_in, group=self.group)
                self.outputs[op.index] = self.gather_out
            else:
                row = self.row_of[op.index]
                if self.fused and op.rmsnorm_after:
                    self.outputs[op.index] = impl.all_reduce_rmsnorm(
                        self.inputs[row], self.residuals[row], self.weight, eps
                    )
                else:
                    self.outputs[op.index] = impl.all_reduce(self.inputs[row])
            if stamps is not None:
                stamps.append(self.clock.stamp())

    def verify(self) -> Verification:
        """Compare every op's output of the last step with the exact expected result, in fp32."""
        total = self.world * (self.world + 1) / 2
        eps = DTYPE_EPS[self.plan.model.dtype]
        worst, tolerance_used, bad, first, non_finite = 0.0, 0.0, 0, None, 0
        for op in self.plan.ops:
            out = self.outputs[op.index]
            if op.collective == "all_gather":
                got = out.float().view(self.world, -1) - self.gather_base
                expected = torch.arange(self.world, device=self.device, dtype=torch.float32).unsqueeze(1).expand_as(got)
                tolerance = 0.0
            else:
                row = self.row_of[op.index]
                summed = self.base[row] * total
                if self.fused and op.rmsnorm_after:
                    normed, residual_out = out
                    resid = summed + self.residual_pristine[row].float()
                    rows = resid.view(-1, self.plan.model.hidden_size)
                    rms = torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + self.config.rms_eps)
                    expected = (rows * rms * self.weight.float()).reshape(-1)
                    got = normed.float().reshape(-1)
                    # Normed values are O(1); the residual sum is rounded to the dtype before the norm.
                    tolerance = 8 * eps * max(1.0, float(expected.abs().max()))
                    resid_err, resid_non_finite = _finite_error(residual_out.float().reshape(-1), resid)
                    # The sum rounds as it accumulates over ranks (beyond 2^8 in bf16), then once more with the residual.
                    resid_tolerance = self.world * eps * float(summed.abs().max()) + eps * float(resid.abs().max())
                    if resid_non_finite or resid_err > resid_tolerance + 1e-6:
                        worst, bad, first = max(worst, resid_err), bad + 1, op if first is None else first
                        non_finite += resid_non_finite
                        continue
                else:
                    expected = summed
                    got = out.float().reshape(-1)
                    # Partial sums of small integers stay exact up to 2^8 in bf16; beyond, each add rounds.
                    tolerance = self.world * eps * float(summed.abs().max())
            err, op_non_finite = _finite_error(got, expected)
            if op_non_finite or err > tolerance:
                bad += 1
                first = op if first is None else first
                non_finite += op_non_finite
            worst = max(worst, err)
            tolerance_used = max(tolerance_used, tolerance)
        return Verification(
            ok=bad == 0,
            max_abs_err=worst,
            tolerance=tolerance_used,
            bad_ops=bad,
            first_bad_op=first.index if first else None,
            first_bad_site=first.site if first else None,
            non_finite=non_finite,
        )

    # -- timing ------------------------------------------------------------------------------------------------

    def time_steps(self, graph: bool) -> tuple[list[float], list[list[float]] | None]:
        """Warm-up then timed steps; returns per-step µs and, in eager mode, per-op µs rows from its own pass.

        Python's cyclic garbage collector is paused meanwhile: the timing records it allocates would
        otherwise trigger collections inside timed steps, a cost the engine being modelled does not pay.
        """
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            steps = self._timed_pass(graph, per_op=False, warmup=self.config.warmup)
            # The breakdown's stamps between ops cost host time: a pass of its own, never part of step_us.
            ops = None if graph else self._timed_pass(graph, per_op=True, warmup=min(1, self.config.warmup))
            return [row[0] for row in steps], ops
        finally:
            if gc_was_enabled:
                gc.enable()

    def _timed_pass(self, graph: bool, per_op: bool, warmup: int) -> list[list[float]]:
        """Samples of one pass: [step µs] per step, or [op µs, ...] per step with `per_op`."""
        clock, samples = self.clock, []
        for i in range(warmup + self.config.iterations):
            self.refill()
            clock.align()
            stamps = [clock.stamp()]
            if graph:
                self.graph.replay()
            else:
                self.run_ops(stamps if per_op else None)
            if not per_op:
                stamps.append(clock.stamp())
            clock.wait(stamps[-1])
            if i >= warmup:
                samples.append([clock.elapsed_us(a, b) for a, b in zip(stamps, stamps[1:])])
        return samples

    def capture(self) -> None:
        """Capture the whole step as one CUDA graph (the implementation was warmed up eagerly first)."""
        torch.cuda.synchronize(self.device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.run_ops()
        torch.cuda.synchronize(self.device)

    def gather_samples(self, steps: list[float], ops: list[list[float]] | None):
        """Per-sample maximum over ranks (a step ends when its slowest rank does), and each rank's median step."""
        stacked = self._gather([[s] for s in steps])  # [ranks, steps, 1]
        rank_medians = [float(x) for x in stacked[:, :, 0].median(dim=1).values]
        step_samples = stacked.max(dim=0).values[:, 0].tolist()
        op_rows = self._gather(ops).max(dim=0).values.tolist() if ops else None
        return step_samples, op_rows, rank_medians

    def _gather(self, rows: list[list[float]]) -> torch.Tensor:
        local = torch.tensor(rows, dtype=torch.float64, device=self.device)
        gathered = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(gathered, local, group=self.group)
        return torch.stack(gathered).cpu()


def replay_mode(replay: StepReplay, mode: str) -> ModeResult:
    """Verify, then time, one plan in one mode; failures become a status with a message, never an exception.

    Before timing, the ranks agree through the store (not the communicator, which a failed capture may have
    broken) on the capture verdict and the check, so every rank returns the same status and no rank is left
    waiting in a collective that its peers skipped.
    """
    timing = replay.clock.kind
    if mode == "graph":
        if replay.device.type != "cuda":
            return ModeResult(mode, "unsupported", "CUDA graphs need CUDA GPUs (this run is on CPU ranks)")
        if not replay.impl.capturable:
            return ModeResult(mode, "unsupported", f"{replay.impl.name} cannot be captured in a CUDA graph")
    local: dict[str, Any] = {"status": "ok", "message": None, "check": None}
    try:
        if mode == "graph":
            try:
                replay.capture()
            except Exception as exc:  # the capture verdict is the result, whatever raised
                local = {"status": "capture_failed", "message": _one_line(exc), "check": None}
        if local["status"] == "ok":
            replay.refill()
            if mode == "graph":
                replay.graph.replay()
            else:
                replay.run_ops()
            if replay.device.type == "cuda":
                torch.cuda.synchronize(replay.device)
            local["check"] = replay.verify().to_dict()
    except Exception as exc:
        local = {"status": "error", "message": _one_line(exc) + "\n" + traceback.format_exc(limit=4), "check": None}
    status, message, check = agree_ranks(replay.agree(f"{replay.plan.tokens}/{mode}", local))
    if status in ("capture_failed", "error"):
        return ModeResult(mode, status, message, timing)
    try:
        steps, ops = replay.time_steps(graph=mode == "graph")
        step_samples, op_rows, rank_medians = replay.gather_samples(steps, ops)
    except Exception as exc:
        return ModeResult(mode, "error", _one_line(exc) + "\n" + traceback.format_exc(limit=4), timing)
    if not check.ok:
        status = "replay_wrong" if mode == "graph" else "wrong"
        message = check.describe()
    op_us = None
    if op_rows:
        op_us = {
            "sites": [op.site for op in replay.plan.ops],
            "bytes": [op.bytes for op in replay.plan.ops],
            **summarize_columns(op_rows),
        }
    return ModeResult(mode, status, message, timing, summarize(step_samples), op_us, rank_medians, check)


def agree_ranks(outcomes: list[dict[str, Any]]) -> tuple[str, str | None, Verification | None]:
    """One verdict from every rank's (status, message, check): the first failing rank (by rank) decides a
    failure; checks combine to the worst (most bad ops, largest error, earliest bad op). Pure."""
    for rank, outcome in enumerate(outcomes):
        if outcome["status"] != "ok":
            prefix = f"rank {rank}: " if len(outcomes) > 1 else ""
            return outcome["status"], prefix + (outcome["message"] or ""), None
    checks = [o["check"] for o in outcomes]
    bad_ranks = [rank for rank, c in enumerate(checks) if not c["ok"]]
    firsts = [(c["first_bad_op"], c["first_bad_site"]) for c in checks if c["first_bad_op"] is not None]
    first = min(firsts) if firsts else (None, None)
    combined = Verification(
        ok=not bad_ranks,
        max_abs_err=max(c["max_abs_err"] for c in checks),
        tolerance=max(c["tolerance"] for c in checks),
        bad_ops=max(c["bad_ops"] for c in checks),
        first_bad_op=first[0],
        first_bad_site=first[1],
        bad_ranks=tuple(bad_ranks),
        non_finite=max(c.get("non_finite", 0) for c in checks),
    )
    return "ok", None, combined


def _finite_error(got: torch.Tensor, expected: torch.Tensor) -> tuple[float, int]:
    """(largest absolute error over the finite outputs, count of NaN / Inf outputs): a NaN never hides in a max."""
    if not got.numel():
        return 0.0, 0
    finite = torch.isfinite(got)
    non_finite = int(got.numel() - finite.sum())
    if non_finite == got.numel():
        return 0.0, non_finite
    return float((got[finite] - expected[finite]).abs().max()), non_finite


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:2000]
