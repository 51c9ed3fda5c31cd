"""FlashInfer's fused all-reduce + residual add + RMSNorm (TRT-LLM kernels), one-shot or two-shot.

One `allreduce_fusion` call replaces the engine's all-reduce and the RMSNorm after it, so the sweep records
it against the `nccl+rmsnorm` reference, not the bare all-reduce. Ops with no RMSNorm after them (the
embedding's) run the same kernels with the plain kAllReduce pattern.

What is timed per op: the one kernel (it stages the input into the IPC workspace itself: no separate copy)
plus allocating its outputs (norm_out, residual_out, and the all-reduce output FlashInfer allocates), as
SGLang does; under a CUDA graph the allocations cost nothing. No PDL: launch_with_pdl=False with
trigger_completion_at_end=True, the safe pairing when the next kernel is not PDL-aware; its unfused reference
(`nccl+rmsnorm`) runs FlashInfer's RMSNorm with the same setting, so the comparison is like for like.
"""

from __future__ import annotations

from typing import Any, ClassVar

from commprof.impls import algorithms
from commprof.impls.base import (
    AllReduceImpl,
    EngineFlag,
    EngineSwitch,
    ImplContext,
    OptionKind,
    RmsNormOperands,
    SmokeCase,
    Support,
    TraceKernels,
    whole_names,
)
from commprof.impls.gating import (
    FLASHINFER,
    first_failure,
    needs_cuda,
    needs_dtype,
    needs_flashinfer,
    needs_p2p,
    needs_row_alignment,
    needs_world_size,
    sm_name,
    two_shot_tokens,
    version_at_least,
)
from commprof.planner.models import DTYPE_BYTES

# FlashInfer's unified allreduce_fusion API with create_allreduce_fusion_workspace(group=...): the PyPI wheel of
# 0.6.10.post1 is the first with group= (0.6.10's has none); gating's versions do not order post-releases, so the
# gate asks for the next release.
FLASHINFER_FUSED_MIN = "0.6.11"
# Its TRT-LLM kernels (flashinfer/jit/comm.py gen_trtllm_comm_module builds them for majors 9, 10 and, from the
# 0.6.17 wheel on, 12 (0.6.16's: 9, 10); they launch thread-block clusters, so nothing older) and the release
# that supports each major.
TRTLLM_ARCH_MIN_FLASHINFER = {9: FLASHINFER_FUSED_MIN, 10: FLASHINFER_FUSED_MIN, 12: "0.6.17"}
TRTLLM_WORLD_SIZES = (2, 4, 8, 16)  # allreduce_fusion_kernel_launcher's NRanks dispatch
TRTLLM_DTYPES = ("bfloat16", "float16", "float32")
TRTLLM_ACCESS_BYTES = 16  # each thread moves 16 bytes: hidden % (16 / element size) == 0
# trtllm_ar.MAX_COMM_SIZE: above it FlashInfer silently runs two-shot when one-shot was asked for.
TRTLLM_MAX_COMM_BYTES = 2147483647 & ~((1 << 21) - 1)
KERNEL = "FlashInfer's TRT-LLM all-reduce"

# Programmatic dependent launch, for this kernel and for the reference's RMSNorm kernel alike (FlashInfer's
# RMSNorm turns it on by default from SM90): one setting, recorded with every result.
LAUNCH_WITH_PDL = False


def needs_trtllm_arch(ctx: ImplContext) -> str | None:
    """SM90 / SM100-family / SM12x, the latter only with a FlashInfer that builds the kernels for it."""
    cap = ctx.compute_capability
    if cap is None:
        return "needs a known compute capability (no GPU was probed)"
    minimum = TRTLLM_ARCH_MIN_FLASHINFER.get(cap[0])
    if minimum is None:
        return f"FlashInfer's TRT-LLM all-reduce kernels build for SM90, SM10x and SM12x, not {sm_name(cap)}"
    installed = ctx.version(FLASHINFER)
    if installed is not None and not version_at_least(installed, minimum):
        return (
            f"FlashInfer's TRT-LLM all-reduce kernels support {sm_name(cap)} from flashinfer-python "
            f"{minimum} (installed: {installed})"
        )
    return None


def one_shot_fits(ctx: ImplContext, tokens: int) -> str | None:
    """One-shot above TRT-LLM's Lamport buffer limit silently runs two-shot: refuse the mislabelled point."""
    comm_elem = 4 if ctx.dtype == "float32" else 2  # its Lamport buffer holds fp16 for bf16/fp16 input
    if tokens * ctx.hidden_size * comm_elem * ctx.world_size > TRTLLM_MAX_COMM_BYTES:
        return (
            f"FlashInfer one-shot needs T x hidden x world size within its {TRTLLM_MAX_COMM_BYTES >> 20} MiB "
            f"buffer (beyond it FlashInfer runs two-shot); T = {tokens} exceeds it"
        )
    return None


def workspace_kwargs(world_size: int, rank: int, max_token_num: int, hidden_dim: int, dtype, group) -> dict[str, Any]:
    """Arguments of flashinfer.comm.create_allreduce_fusion_workspace: always the TRT-LLM backend.

    backend="trtllm" explicitly: "auto" may pick MNNVL, which needs NVLink multicast and cannot be captured.
    """
    return {
        "backend": "trtllm",
        "world_size": world_size,
        "rank": rank,
        "max_token_num": max_token_num,
        "hidden_dim": hidden_dim,
        "dtype": dtype,
        "group": group,
    }


def allreduce_kwargs(x, workspace, pattern: int, use_oneshot: bool) -> dict[str, Any]:
    """Arguments of flashinfer.comm.allreduce_fusion for a plain all-reduce (pattern kAllReduce)."""
    return {
        "input": x,
        "workspace": workspace,
        "pattern": pattern,
        "launch_with_pdl": LAUNCH_WITH_PDL,
        "trigger_completion_at_end": True,
        "use_oneshot": use_oneshot,
    }


def fused_kwargs(
    norm: RmsNormOperands, workspace, pattern: int, use_oneshot: bool, residual_out, norm_out
) -> dict[str, Any]:
    """Arguments of flashinfer.comm.allreduce_fusion for all-reduce + residual add + RMSNorm."""
    return {
        **allreduce_kwargs(norm.x, workspace, pattern, use_oneshot),
        "residual_in": norm.residual,
        "rms_gamma": norm.weight,
        "rms_eps": norm.eps,
        "residual_out": residual_out,
        "norm_out": norm_out,
    }


class FlashInferFusedAllReduce(AllReduceImpl):
    """flashinfer.comm.allreduce_fusion on a backend="trtllm" workspace; option use_oneshot (true/false; absent:
    by size as engines switch, never FlashInfer's own table, which was tuned on B200)."""

    name: ClassVar[str] = "flashinfer-fused"
    library: ClassVar[str | None] = FLASHINFER
    trace_kernels: ClassVar[TraceKernels | str] = TraceKernels(
        "FlashInfer TRT-LLM all-reduce fusion",
        whole_names(
            "allreduce_fusion_kernel_oneshot_lamport",
            "allreduce_fusion_kernel_twoshot_sync",
            "oneShotAllReduceKernel",
            "one_shot_all_reduce_norm_kernel",
            "lamport_style_one_shot_all_reduce_norm_kernel",
            "one_shot_prenorm_all_reduce_norm_kernel",
        ),
        "all_reduce+rmsnorm",
        "FlashInfer 0.7.2 data/include/flashinfer/comm/trtllm_allreduce_fusion.cuh and trtllm_allreduce.cuh",
    )
    # No switch routes a band of plain all-reduces to its kernels' plain pattern (kAllReduce): vLLM 0.33 / 0.34 run
    # it for every plain all-reduce its workspace takes by default (VLLM_ALLREDUCE_USE_FLASHINFER=1:
    # FlashInferAllReduce), SGLang 0.5.23 with --flashinfer-allreduce-fusion-backend (parallel_state.py:
    # _can_use_flashinfer_allreduce), both on SM90 / SM10x only (vLLM has no FI_ALLREDUCE_FUSION_MAX_SIZE_MB entry
    # elsewhere, SGLang raises at start-up): the engines' own path (engine_vllm.py, engine_sglang_fusion.py), never
    # a size band. The engines fuse through flags, below.
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = ()
    # Each flag with the engine version it was written for and where that was checked.
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = (
        EngineFlag(
            "SGLang",
            "--flashinfer-allreduce-fusion-backend auto",
            "SGLang 0.5.23 (sglang/srt/arg_groups/fields/exec_.py: auto / trtllm / mnnvl / cutedsl, cutedsl "
            "Blackwell-only bf16; SM90 or SM10x only) from sgl-project/sglang#12787, which logs "
            "--enable-flashinfer-allreduce-fusion as its deprecated alias; older releases (v0.5.10 takes it) need "
            "that flag instead; the first release with this one was not checked",
        ),
        EngineFlag(
            "vLLM",
            '--compilation-config \'{"pass_config": {"fuse_allreduce_rms": true}}\'',
            "vLLM 0.18 (docs.vllm.ai/en/v0.18.2/design/fusions: PassConfig.fuse_allreduce_rms; "
            "vLLM 0.10-0.11 named it enable_fi_allreduce_fusion)",
        ),
        EngineFlag(
            "vLLM",
            "VLLM_FLASHINFER_ALLREDUCE_BACKEND=auto   # or trtllm / mnnvl",
            "vLLM with vllm-project/vllm#34109 (2026)",
            note="chooses FlashInfer's all-reduce backend for the fused kernels",
        ),
        EngineFlag(
            "SGLang",
            "--enforce-disable-flashinfer-allreduce-fusion",
            "SGLang 2026 main (sgl-project/sglang#21446): turns off the fusion SGLang auto-enables",
            when="lost",
        ),
        EngineFlag(
            "vLLM",
            '--compilation-config \'{"pass_config": {"fuse_allreduce_rms": false}}\'',
            "vLLM 0.18 (PassConfig.fuse_allreduce_rms; on by default at -O2 on Hopper/Blackwell, TP > 1)",
            when="lost",
        ),
    )
    smoke: ClassVar[SmokeCase | str] = SmokeCase("flashinfer-fused one-shot", {"use_oneshot": True})
    fuses_rmsnorm: ClassVar[bool] = True
    capturable: ClassVar[bool] = True
    option_kinds: ClassVar[dict[str, OptionKind] | None] = {"use_oneshot": bool}

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        self.use_oneshot: bool | None = self.options.get("use_oneshot")
        self.workspace = None
        self._ran: set[str] = set()

    @classmethod
    def algorithm(cls, options, nbytes: int, world_size: int) -> str:
        chosen = options.get("use_oneshot")
        if chosen is None:
            return algorithms.by_size(nbytes)
        return algorithms.ONE_SHOT if chosen else algorithms.TWO_SHOT

    @classmethod
    def support(cls, ctx: ImplContext) -> Support:
        """allreduce_fusion on a backend="trtllm" workspace, one-shot or two-shot as ctx.options says."""
        return first_failure(
            needs_cuda(ctx),
            needs_flashinfer(ctx, FLASHINFER_FUSED_MIN, "allreduce_fusion"),
            needs_trtllm_arch(ctx),
            needs_world_size(ctx, TRTLLM_WORLD_SIZES, KERNEL),
            needs_dtype(ctx, TRTLLM_DTYPES, KERNEL),
            needs_row_alignment(ctx, TRTLLM_ACCESS_BYTES, KERNEL),
            needs_p2p(ctx),
        )

    @classmethod
    def support_tokens(cls, ctx: ImplContext, tokens: int) -> Support:
        """Per T: two-shot needs T > world size; one-shot must fit the Lamport buffer (else it is two-shot)."""
        nbytes = tokens * ctx.hidden_size * DTYPE_BYTES.get(ctx.dtype, 2)
        if cls.algorithm(ctx.options, nbytes, ctx.world_size) == algorithms.ONE_SHOT:
            return first_failure(one_shot_fits(ctx, tokens))
        return first_failure(two_shot_tokens(ctx, tokens, "FlashInfer"))

    @classmethod
    def jit_builds(cls, backend: str, options: dict[str, Any]) -> tuple[str, ...]:
        # trtllm_ar.get_trtllm_comm_module builds it on first use
        return ("flashinfer.jit.comm:gen_trtllm_comm_module",) if backend == "nccl" else ()

    def setup(self, group, plan, device) -> None:
        import flashinfer.comm as comm
        import torch
        import torch.distributed as dist

        super().setup(group, plan, device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        self._comm = comm
        self._torch = torch
        self._patterns = comm.AllReduceFusionPattern
        self.workspace = comm.create_allreduce_fusion_workspace(
            **workspace_kwargs(
                world_size=dist.get_world_size(group),
                rank=dist.get_rank(group),
                max_token_num=plan.tokens,
                hidden_dim=plan.model.hidden_size,
                dtype=getattr(torch, plan.model.dtype),
                group=group,
            )
        )

    def _one_shot(self, x) -> bool:
        """This op's choice, passed to FlashInfer explicitly (its use_oneshot=None table is not for this box)."""
        algorithm = self.algorithm(self.options, x.numel() * x.element_size(), 0)
        self._ran.add(algorithm)
        return algorithm == algorithms.ONE_SHOT

    def all_reduce(self, x):
        return self._comm.allreduce_fusion(
            **allreduce_kwargs(x, self.workspace, self._patterns.kAllReduce, self._one_shot(x))
        )

    def all_reduce_rmsnorm(self, x, residual, weight, eps: float):
        residual_out = self._torch.empty_like(residual)
        norm_out = self._torch.empty_like(x)
        self._comm.allreduce_fusion(
            **fused_kwargs(
                RmsNormOperands(x, residual, weight, eps),
                self.workspace,
                self._patterns.kARResidualRMSNorm,
                self._one_shot(x),
                residual_out,
                norm_out,
            )
        )
        return norm_out, residual_out

    def detail(self) -> str:
        """What ran since the last record (one T per record), and why: the option, or the default's size rule."""
        chosen_by = (
            algorithms.DEFAULT_RULE if self.use_oneshot is None else f"use_oneshot = {str(self.use_oneshot).lower()}"
        )
        ran, self._ran = self._ran, set()
        return (
            f"allreduce_fusion {algorithms.ran_text(ran, chosen_by)} on a trtllm workspace, "
            f"PDL {'on' if LAUNCH_WITH_PDL else 'off'}"
        )

    def teardown(self) -> None:
        if self.workspace is not None:
            self.workspace.destroy()
            self.workspace = None
