"""The all-reduce implementation interface: what the replay harness needs from NCCL, FlashInfer or your kernel.

An implementation is a class. The harness asks it, before anything is allocated, whether it runs here
(`support(ctx)`, a pure function of the facts in `ImplContext`), then, in every rank of one fresh
process group: `setup()` once, `prepare()` with every shape it will see before CUDA-graph capture,
`all_reduce()` (or `all_reduce_rmsnorm()` for fused kinds) per op, `teardown()` at the end.
See docs/implementations.md for a worked example.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist

    from commprof.planner.plan import StepPlan


@dataclass(frozen=True)
class Support:
    """Whether an implementation can run here, and if not, why (shown to the user as "unsupported: <reason>")."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


SUPPORTED = Support(True)


def unsupported(reason: str) -> Support:
    return Support(False, reason)


@dataclass(frozen=True)
class ImplContext:
    """Facts about this run that decide whether an implementation applies; fabricate one to test gating."""

    backend: str  # "nccl" or "gloo"
    world_size: int
    dtype: str  # canonical name, e.g. "bfloat16"
    tokens: tuple[int, ...]  # every T of the run
    hidden_size: int
    device_type: str = "cpu"  # "cuda" or "cpu"
    compute_capability: tuple[int, int] | None = None
    p2p_all_pairs: bool | None = None  # None: unknown (no GPUs, or not probed)
    p2p_detail: str = ""
    flashinfer_version: str | None = None
    torch_version: str = ""
    options: dict[str, Any] = field(default_factory=dict)


class AllReduceImpl:
    """Base class of all-reduce implementations; subclasses override what differs.

    The defaults describe an implementation that captures into CUDA graphs, needs no preparation
    and does not fuse RMSNorm. `all_reduce` returns the reduced tensor (it may reduce in place).
    """

    name: ClassVar[str] = ""
    fuses_rmsnorm: ClassVar[bool] = False  # True: replaces all-reduce + residual add + RMSNorm
    capturable: ClassVar[bool] = True  # False: graph mode is recorded unsupported, eager still runs

    def __init__(self, options: dict[str, Any] | None = None):
        self.options = dict(options or {})

    @classmethod
    def support(cls, ctx: ImplContext) -> Support:
        return SUPPORTED

    @classmethod
    def support_tokens(cls, ctx: ImplContext, tokens: int) -> Support:
        """Per-T gating (e.g. two-shot kernels need T > world size); asked after support(ctx) passed."""
        return SUPPORTED

    def setup(self, group: dist.ProcessGroup, plan: StepPlan, device: torch.device) -> None:
        """Called once per process group, with the run's largest plan (workspaces are sized from it)."""
        self.group = group
        self.device = device

    def prepare(self, shapes: list[tuple[int, ...]]) -> None:
        """Called with every [T, H] shape before CUDA-graph capture; collective on some implementations."""

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def all_reduce_rmsnorm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused kinds: returns (rmsnorm(sum(x) + residual) * weight, sum(x) + residual)."""
        raise NotImplementedError

    def detail(self) -> str | None:
        """What exactly ran, where an implementation chooses at setup (recorded with every result)."""
        return None

    def teardown(self) -> None:
        """Release workspaces; called on every rank, also after a failure."""
