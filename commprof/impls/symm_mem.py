"""torch symmetric-memory all-reduce (torch.ops.symm_mem), one-shot or two-shot, without multicast.

The kernels read peers' buffers directly, so the input must live in a symmetric buffer that every rank
allocated with symm_mem.empty and joined with rendezvous. The harness hands us ordinary tensors, so each op
copies its input in, which is counted: an engine pays the same copy unless it allocates its activations in
the symmetric buffer, and then this copy is the difference between the two.

What is timed per op:
- one_shot: one kernel, one_shot_all_reduce_copy_out, that copies the input into the symmetric buffer,
  syncs, reduces every peer's copy and writes a freshly allocated output.
- two_shot: a copy kernel into the symmetric buffer, then two_shot_all_reduce_out (reduce-scatter and
  all-gather through the buffers), which writes the sum back into the input tensor.
- auto (the default): one of the two per op by size, as engines switch (commprof.impls.algorithms); the record's
  impl_detail says which ran.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, ClassVar

from commprof.impls import algorithms
from commprof.impls.base import (
    AllReduceImpl,
    EngineFlag,
    EngineSwitch,
    ImplContext,
    OptionKind,
    SmokeCase,
    Support,
    TraceKernels,
    whole_names,
)
from commprof.impls.gating import (
    first_failure,
    needs_cuda,
    needs_dtype,
    needs_p2p,
    needs_p2p_atomics,
    needs_world_size,
)
from commprof.planner.models import DTYPE_BYTES

# torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu: kernels are dispatched for bf16 and fp32
# only; two_shot_all_reduce_out has no generic world-size fallback.
SYMM_MEM_DTYPES = ("bfloat16", "float32")
SYMM_MEM_VARIANT_OPS = {"one_shot": "one_shot_all_reduce_copy_out", "two_shot": "two_shot_all_reduce_out"}
SYMM_MEM_VARIANT_ALGORITHMS = {"one_shot": algorithms.ONE_SHOT, "two_shot": algorithms.TWO_SHOT}
AUTO = "auto"
SYMM_MEM_TWO_SHOT_WORLD_SIZES = (2, 4, 8)
SYMM_MEM_ALIGN_BYTES = 4


def installed_symm_mem_ops() -> frozenset[str]:
    """Which of the ops commprof uses this torch registers (CPU builds register them too: gate on CUDA)."""
    import torch

    namespace = torch.ops.symm_mem
    return frozenset(op for op in SYMM_MEM_VARIANT_OPS.values() if hasattr(namespace, op))


def symm_mem_variants(ctx: ImplContext) -> tuple[str, ...]:
    """The variants a point may run: the one it names, or (auto) both, by size."""
    variant = ctx.options.get("variant", AUTO)
    if variant != AUTO:
        return (variant,)
    sizes = [t * ctx.hidden_size * DTYPE_BYTES.get(ctx.dtype, 2) for t in ctx.tokens] or [0]
    wanted = {algorithms.by_size(n) for n in sizes}
    return tuple(v for v, a in SYMM_MEM_VARIANT_ALGORITHMS.items() if a in wanted)


def symm_mem_support(ctx: ImplContext, available_ops: Collection[str]) -> Support:
    """One-shot / two-shot as ctx.options["variant"] says (auto: those its sizes need); `available_ops` are the
    torch.ops.symm_mem ops torch has."""
    variants = symm_mem_variants(ctx)
    missing = [
        SYMM_MEM_VARIANT_OPS[v]
        for v in variants
        if SYMM_MEM_VARIANT_OPS[v] not in available_ops and not ctx.libraries_assumed
    ]
    return first_failure(
        needs_cuda(ctx),
        None
        if not missing
        else f"this torch ({ctx.torch_version or 'unknown version'}) has no torch.ops.symm_mem.{missing[0]}",
        needs_dtype(ctx, SYMM_MEM_DTYPES, "torch symmetric-memory all-reduce"),
        needs_world_size(ctx, SYMM_MEM_TWO_SHOT_WORLD_SIZES, "torch symmetric-memory two-shot")
        if "two_shot" in variants
        else None,
        needs_p2p(ctx),
        # CUDASymmetricMemory-inl.cuh: sync_remote_blocks -> put_signal / wait_signal, a compare-and-swap
        # through cuda::atomic_ref<uint32_t, thread_scope_system> on the peer's signal pad.
        needs_p2p_atomics(ctx, "torch symmetric memory's one-shot / two-shot all-reduce"),
    )


def symm_mem_alignment(ctx: ImplContext, tokens: int) -> str | None:
    if (tokens * ctx.hidden_size * DTYPE_BYTES.get(ctx.dtype, 2)) % SYMM_MEM_ALIGN_BYTES:
        return f"torch symmetric memory needs a tensor size that is a multiple of 4 bytes; T = {tokens} is not"
    return None


def buffer_args(numel: int, dtype, device) -> tuple[tuple, dict[str, Any]]:
    """(args, kwargs) of torch.distributed._symmetric_memory.empty: one flat buffer for the largest op."""
    return (numel,), {"dtype": dtype, "device": device}


def rendezvous_args(buffer, group_name: str) -> tuple[tuple, dict[str, Any]]:
    """(args, kwargs) of torch.distributed._symmetric_memory.rendezvous (a group name works on every torch)."""
    return (buffer, group_name), {}


def one_shot_args(symm_view, x, group_name: str, out) -> tuple:
    """Positional arguments of torch.ops.symm_mem.one_shot_all_reduce_copy_out."""
    return (symm_view, x, "sum", group_name, out)


def two_shot_args(symm_view, group_name: str, out) -> tuple:
    """Positional arguments of torch.ops.symm_mem.two_shot_all_reduce_out."""
    return (symm_view, "sum", group_name, out)


class SymmMemAllReduce(AllReduceImpl):
    """torch symmetric-memory all-reduce; option variant: "auto" (default, by size), "one_shot" or "two_shot"."""

    name: ClassVar[str] = "symm-mem"
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = ()  # no engine flag acts on it
    trace_kernels: ClassVar[TraceKernels | str] = TraceKernels(
        "torch symmetric memory",
        whole_names(
            "one_shot_all_reduce_kernel",
            "two_shot_all_reduce_kernel",
            "multimem_all_reduce_kernel",
            "multimem_one_shot_all_reduce_kernel",
        ),
        "all_reduce",
        "PyTorch 2.11 torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu",
    )
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = ()  # no engine switch read in their sources runs it
    smoke: ClassVar[SmokeCase | str] = SmokeCase("symm-mem one-shot", {"variant": "one_shot"})
    capturable: ClassVar[bool] = True
    option_kinds: ClassVar[dict[str, OptionKind] | None] = {"variant": (AUTO, *SYMM_MEM_VARIANT_OPS)}

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        self.variant: str = self.options.get("variant", AUTO)
        self.buffer = None
        self.handle = None
        self._ran: set[str] = set()

    @classmethod
    def algorithm(cls, options, nbytes: int, world_size: int) -> str:
        variant = options.get("variant", AUTO)
        return algorithms.by_size(nbytes) if variant == AUTO else SYMM_MEM_VARIANT_ALGORITHMS[variant]

    @classmethod
    def support(cls, ctx: ImplContext) -> Support:
        return symm_mem_support(ctx, installed_symm_mem_ops())

    @classmethod
    def support_tokens(cls, ctx: ImplContext, tokens: int) -> Support:
        return first_failure(symm_mem_alignment(ctx, tokens))

    def setup(self, group, plan, device) -> None:
        import torch
        import torch.distributed._symmetric_memory as symm_mem

        super().setup(group, plan, device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        self._torch = torch
        self.world_size = group.size()
        self.group_name = group.group_name
        # Earlier torch releases need the group registered before rendezvous; the call is idempotent.
        symm_mem.enable_symm_mem_for_group(self.group_name)
        args, kwargs = buffer_args(plan.max_numel, getattr(torch, plan.model.dtype), device)
        self.buffer = symm_mem.empty(*args, **kwargs)
        args, kwargs = rendezvous_args(self.buffer, self.group_name)
        self.handle = symm_mem.rendezvous(*args, **kwargs)
        self._ops = {v: getattr(torch.ops.symm_mem, op, None) for v, op in SYMM_MEM_VARIANT_OPS.items()}

    def all_reduce(self, x):
        algorithm = self.algorithm(self.options, x.numel() * x.element_size(), self.world_size)
        self._ran.add(algorithm)
        symm_view = self.buffer[: x.numel()].view(x.shape)
        if algorithm == algorithms.ONE_SHOT:
            out = self._torch.empty_like(x)
            return self._ops["one_shot"](*one_shot_args(symm_view, x, self.group_name, out))
        symm_view.copy_(x)
        return self._ops["two_shot"](*two_shot_args(symm_view, self.group_name, x))

    def detail(self) -> str:
        """What ran since the last record (one T per record): the variant named, or auto's choice by size."""
        chosen_by = algorithms.DEFAULT_RULE if self.variant == AUTO else f"variant {self.variant}"
        ran, self._ran = self._ran, set()
        return "torch.ops.symm_mem " + algorithms.ran_text(ran, chosen_by)

    def teardown(self) -> None:
        self.handle = None
        self.buffer = None
