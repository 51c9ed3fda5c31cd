"""A replayed step's tensors: inputs whose exact reduction is known, allocated once, and the check of every output.

The harness (commprof/replay/harness.py) issues the collectives and times them; this module owns what they read and
write, the untimed refill before each step, the NaN poisoning before a checked step, and the verification against
the exact result in fp32.

Exact means exact: every input is a small integer, and each step shifts every value by an amount that differs from
the step before (SHIFTS), so an output left over from an earlier step is wrong, not merely close. While every
partial sum of the reduction is an integer the dtype holds exactly (at most 2^8 in bf16, 2^11 in fp16), the
tolerance is zero; beyond, each add may round and the tolerance grows with the ranks and the dtype's precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from commprof.planner.plan import StepPlan

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# Relative precision of each dtype: tolerances scale with it (bf16 keeps 8 significant bits).
DTYPE_EPS = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-23}
# The largest integer up to which every integer is exact in each dtype (its significand's bits, the implicit one
# included): a reduction whose partial sums all stay within it has one right answer, bit for bit.
EXACT_INTEGERS = {"bfloat16": 2**8, "float16": 2**11, "float32": 2**24}
# Each step's shift of every input value (step k takes SHIFTS[k % 7]): consecutive steps always differ (3 and 7
# are coprime), so a kernel that returns the previous step's output, or leaves its output unwritten over it, is
# wrong at every element.
SHIFTS = tuple((3 * k) % 7 - 3 for k in range(7))
PATTERN_MAX = 4  # the patterns' values lie in [-4, 4] (_pattern(..., modulus 9, offset 4))
RESIDUAL_MAX = 3  # the residuals' in [-3, 3] (modulus 7, offset 3)


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


def _pattern(rows: int, cols: int, step: int, modulus: int, offset: int, device) -> torch.Tensor:
    """Small exact integers (fp32), different in every row: values a reduction can be checked against."""
    index = torch.arange(cols, device=device).unsqueeze(0) + step * torch.arange(rows, device=device).unsqueeze(1)
    return (index % modulus - offset).to(torch.float32)


@dataclass
class _Rows:
    """The all-reduce ops of one (shape, dtype): rows of one block, refilled by one kernel per step."""

    shape: tuple[int, ...]
    dtype: str
    count: int = 0
    rmsnorm: bool = False  # some op of this shape is followed by residual add + RMSNorm

    def allocate(self, rank: int, device, with_residual: bool) -> None:
        numel, dtype = math.prod(self.shape), TORCH_DTYPES[self.dtype]
        self.scale = rank + 1
        self.base = _pattern(self.count, numel, 3, 9, PATTERN_MAX, device)  # fp32, exact small ints
        self.pristine = (self.base * self.scale).to(dtype)
        self.block = torch.empty_like(self.pristine)
        self.inputs = [self.block[row].view(self.shape) for row in range(self.count)]
        self.residuals = []
        if with_residual:
            self.residual_pristine = _pattern(self.count, numel, 5, 7, RESIDUAL_MAX, device).to(dtype)
            self.residual_block = torch.empty_like(self.residual_pristine)
            self.residuals = [self.residual_block[row].view(self.shape) for row in range(self.count)]

    def refill(self, shift: int) -> None:
        """This rank's inputs of a step shifted by `shift`: (pattern + shift) x (rank + 1), one kernel."""
        torch.add(self.pristine, shift * self.scale, out=self.block)
        if self.residuals:
            self.residual_block.copy_(self.residual_pristine)


class StepTensors:
    """One rank's tensors for one plan, allocated once: every op's input, output and exact expected result.

    All-reduce inputs of one shape are rows of one block, so a step's fresh activations are one kernel per shape;
    every all-gather and reduce-scatter writes its own output, so each op is verified on its own.
    Rank r contributes (pattern + shift) * (r + 1) (all-gather: pattern + shift + r) with small-integer patterns
    and the step's shift (SHIFTS), so the exact result is known and changes every step.
    """

    def __init__(self, plan: StepPlan, rank: int, world: int, device: torch.device, fused: bool):
        self.plan, self.rank, self.world, self.device, self.fused = plan, rank, world, device, fused
        self.steps = 0  # refills so far: step k's inputs are shifted by SHIFTS[(k - 1) % 7]
        self.shift = 0
        hidden = plan.model.hidden_size
        self.weight = (1.0 + (torch.arange(hidden, device=device) % 5 - 2) * 0.125).to(TORCH_DTYPES[plan.model.dtype])
        # All-reduce ops grouped by (shape, dtype): key -> _Rows; op index -> (key, row).
        self.reduce_rows: dict[tuple, _Rows] = {}
        self.row_of: dict[int, tuple[tuple, int]] = {}
        for op in plan.ops:
            if op.collective == "all_reduce":
                key = (op.shape, op.dtype)
                rows = self.reduce_rows.setdefault(key, _Rows(op.shape, op.dtype))
                self.row_of[op.index] = (key, rows.count)
                rows.count += 1
                rows.rmsnorm |= op.rmsnorm_after
        for rows in self.reduce_rows.values():
            rows.allocate(rank, device, with_residual=self.fused and rows.rmsnorm)
        # All-gather and reduce-scatter inputs by (input shape, dtype), one output per op.
        self.gather_base: dict[tuple, torch.Tensor] = {}
        self.gather_pristine: dict[tuple, torch.Tensor] = {}
        self.gather_in: dict[tuple, torch.Tensor] = {}
        self.scatter_base: dict[tuple, torch.Tensor] = {}
        self.scatter_pristine: dict[tuple, torch.Tensor] = {}
        self.scatter_in: dict[tuple, torch.Tensor] = {}
        self.op_out: dict[int, torch.Tensor] = {}
        for op in plan.ops:
            key, dtype = (op.input_shape, op.dtype), TORCH_DTYPES[op.dtype]
            numel = math.prod(op.input_shape)
            if op.collective == "all_gather":
                if key not in self.gather_in:
                    self.gather_base[key] = _pattern(1, numel, 0, 9, PATTERN_MAX, device)[0]
                    self.gather_pristine[key] = (self.gather_base[key] + self.rank).to(dtype).view(op.input_shape)
                    self.gather_in[key] = torch.empty_like(self.gather_pristine[key])
                # Rank-major, as engines gather before rearranging (logits to [T, V]; DP tokens stay rank-major).
                rows, cols = op.input_shape[0], numel // op.input_shape[0]
                self.op_out[op.index] = torch.empty((self.world * rows, cols), dtype=dtype, device=device)
            elif op.collective == "reduce_scatter":
                if key not in self.scatter_in:
                    self.scatter_base[key] = _pattern(1, numel, 0, 9, PATTERN_MAX, device)[0]
                    self.scatter_pristine[key] = (
                        (self.scatter_base[key] * (self.rank + 1)).to(dtype).view(op.input_shape)
                    )
                    self.scatter_in[key] = torch.empty_like(self.scatter_pristine[key])
                self.op_out[op.index] = torch.empty(op.shape, dtype=dtype, device=device)
        self.outputs: list[Any] = [None] * len(plan.ops)

    def refill(self) -> None:
        """Fresh activations for the next step (untimed), shifted by the next of SHIFTS: every rank refills in
        lockstep (the harness runs the same steps on all), so the ranks' shifts agree."""
        self.shift = SHIFTS[self.steps % len(SHIFTS)]
        self.steps += 1
        for rows in self.reduce_rows.values():
            rows.refill(self.shift)
        for key, pristine in self.scatter_pristine.items():
            torch.add(pristine, self.shift * (self.rank + 1), out=self.scatter_in[key])
        for key, pristine in self.gather_pristine.items():
            torch.add(pristine, self.shift, out=self.gather_in[key])

    def poison(self) -> None:
        """NaN in every output the step holds, before a checked step: an op that does not write its output, or
        hands back a block of the caching allocator that held an earlier output, leaves NaN there (untimed).
        In-place inputs are poisoned too; the refill that follows restores them."""
        for out in self.op_out.values():
            out.fill_(math.nan)
        for out in self.outputs:
            for tensor in out if isinstance(out, tuple) else (out,):
                if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                    tensor.fill_(math.nan)

    def exact(self, dtype: str, rmsnorm: bool = False) -> bool:
        """Whether every partial sum of an op in `dtype` is an integer the dtype holds exactly: then its output
        has one right value and the tolerance is zero. The largest partial sum is the largest input value
        (pattern + shift) times the sum of the ranks' factors 1..world (plus the residual, fused)."""
        largest = (PATTERN_MAX + max(abs(s) for s in SHIFTS)) * self.world * (self.world + 1) // 2
        return largest + (RESIDUAL_MAX if rmsnorm else 0) <= EXACT_INTEGERS[dtype]

    def buffers(self, op) -> tuple[torch.Tensor, ...]:
        """The tensors `op` works on: (input,) for an all-reduce (in place), (output, input) otherwise."""
        if op.collective == "all_reduce":
            key, row = self.row_of[op.index]
            return (self.reduce_rows[key].inputs[row],)
        inputs = self.gather_in if op.collective == "all_gather" else self.scatter_in
        return self.op_out[op.index], inputs[(op.input_shape, op.dtype)]

    def verify(self, rms_eps: float) -> Verification:
        """Compare every op's output of the last step with the exact expected result, in fp32: equal where every
        partial sum is exact in the op's dtype (`exact`), else within the rounding the adds may do."""
        total = self.world * (self.world + 1) / 2
        shift = self.shift
        worst, tolerance_used, bad, first, non_finite = 0.0, 0.0, 0, None, 0
        for op in self.plan.ops:
            out = self.outputs[op.index]
            eps = DTYPE_EPS[op.dtype]
            key = (op.input_shape, op.dtype)
            if op.collective == "all_gather":
                got = out.float().view(self.world, -1) - self.gather_base[key] - shift
                expected = torch.arange(self.world, device=self.device, dtype=torch.float32).unsqueeze(1).expand_as(got)
                tolerance = 0.0
            elif op.collective == "reduce_scatter":
                summed = (self.scatter_base[key].view(self.world, -1)[self.rank] + shift) * total
                expected, got = summed, out.float().reshape(-1)
                tolerance = 0.0 if self.exact(op.dtype) else self.world * eps * float(summed.abs().max())
            else:
                rows_key, row = self.row_of[op.index]
                rows = self.reduce_rows[rows_key]
                summed = (rows.base[row] + shift) * total
                if self.fused and op.rmsnorm_after:
                    normed, residual_out = out
                    # The residual sum as the dtype holds it (exact while `exact`), which the norm reads.
                    resid = (summed + rows.residual_pristine[row].float()).to(TORCH_DTYPES[op.dtype]).float()
                    hidden = op.shape[-1]
                    by_token = resid.view(-1, hidden)
                    rms = torch.rsqrt(by_token.pow(2).mean(-1, keepdim=True) + rms_eps)
                    expected = (by_token * rms * self.weight.float()).reshape(-1)
                    got = normed.float().reshape(-1)
                    # Normed values are O(1) and pass through rsqrt: a few units of the dtype's precision.
                    tolerance = 8 * eps * max(1.0, float(expected.abs().max()))
                    resid_err, resid_non_finite = _finite_error(residual_out.float().reshape(-1), resid)
                    # Exact: one right value. Beyond: the sum rounds as it accumulates over ranks, then once more
                    # with the residual.
                    resid_tolerance = (
                        0.0
                        if self.exact(op.dtype, rmsnorm=True)
                        else self.world * eps * float(summed.abs().max()) + eps * float(resid.abs().max()) + 1e-6
                    )
                    if resid_non_finite or resid_err > resid_tolerance:
                        worst, bad, first = max(worst, resid_err), bad + 1, op if first is None else first
                        non_finite += resid_non_finite
                        continue
                else:
                    expected = summed
                    got = out.float().reshape(-1)
                    # Partial sums of small integers are exact while `exact`; beyond, each add may round.
                    tolerance = 0.0 if self.exact(op.dtype) else self.world * eps * float(summed.abs().max())
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


def step_tensor_bytes(plan: StepPlan, world: int, fused: bool) -> int:
    """Bytes one rank's StepTensors keep for `plan` (the layout above, without the RMSNorm weight): what a sweep
    checks against the memory a rank has before it starts any process."""
    total, seen = 0, set()
    elem = {name: torch.empty((), dtype=dtype).element_size() for name, dtype in TORCH_DTYPES.items()}
    rows: dict[tuple, list] = {}
    for op in plan.ops:
        if op.collective == "all_reduce":
            entry = rows.setdefault((op.shape, op.dtype), [0, False])
            entry[0] += 1
            entry[1] |= op.rmsnorm_after
    for (shape, dtype), (count, rmsnorm) in rows.items():
        numel = count * math.prod(shape)
        total += numel * (4 + 2 * elem[dtype]) + (2 * numel * elem[dtype] if fused and rmsnorm else 0)
    for op in plan.ops:
        numel, size = math.prod(op.input_shape), elem[op.dtype]
        if op.collective == "all_gather":
            total += world * numel * size + (0 if (op.input_shape, op.dtype, "g") in seen else numel * (4 + 2 * size))
            seen.add((op.input_shape, op.dtype, "g"))
        elif op.collective == "reduce_scatter":
            total += math.prod(op.shape) * size + (
                0 if (op.input_shape, op.dtype, "s") in seen else numel * (4 + 2 * size)
            )
            seen.add((op.input_shape, op.dtype, "s"))
    return total


def _finite_error(got: torch.Tensor, expected: torch.Tensor) -> tuple[float, int]:
    """(largest absolute error over the finite outputs, count of NaN / Inf outputs): a NaN never hides in a max."""
    if not got.numel():
        return 0.0, 0
    finite = torch.isfinite(got)
    non_finite = int(got.numel() - finite.sum())
    if non_finite == got.numel():
        return 0.0, non_finite
    return float((got[finite] - expected[finite]).abs().max()), non_finite
