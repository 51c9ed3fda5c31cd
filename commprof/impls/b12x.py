"""b12x's PCIe collectives for SM12x (b12x.comm.pcie, CuTe DSL): `b12x` and the fused `b12x-fused`.

Read from b12x 1.5.1 (PyPI wheel; local-inference-lab/b12x): every runtime is a caller-owned CUDA-IPC channel
built collectively from a process group; each [T, H] shape gets a Plan (`pcie.query_from_runtime` +
`pcie.plan`) that a `b12x.preparation.PreparationSession` compiles and primes before use (a shape first seen
inside a CUDA-graph capture fails), with one priming launch per shape, a collective the ranks agree on
through the process group. The session owns the prepared plans: closing it releases them (session.close ->
_release_payload), so it stays open until teardown. The priming calls are b12x's own per surface
(b12x.comm.pcie._oneshot_preparation._prepare_plain_call / _prepare_fused_call,
_twoshot_preparation.prepared_call, _dma_preparation.prepared_call). Variants:
- oneshot: `OneshotAllReduce` (all-peer one-shot; world size 2, 4, 6, 8, 10), staged through its eager buffers;
- twoshot: `PCIeTwoShotBF16` (single-rounding BF16 reduce-scatter + all-gather; world size 4 only, T a multiple
  of the world size); captures inside `runtime.capture(plan=...)`;
- dma: `DmaAllReduce` (copy-engine ring, for MB-sized messages);
- auto (default): one-shot up to 64 KiB and two-shot above where two-shot runs (world size 4), else one-shot,
  as engines switch by size; the record's impl_detail says which ran.
`b12x-fused` is `OneshotAllReduce.all_reduce_fused_add_rms_norm` (at most 36 rows), set against nccl+rmsnorm.
Not gated (no SM count is probed): b12x refuses a GPU with fewer resident SMs than one-shot's 36 or
two-shot's 64 when building the runtime (ONESHOT_REQUIRED_SMS, TWOSHOT_REQUIRED_SMS), which then fails the point.
In a sweep every setting is prepared once before its points (`preparation`): its CuTe kernels compile then into
b12x's on-disk compile cache, outside every point's time limit, and each point's session finds them there.
What is timed per op: one kernel into a caller-owned output (allocated per op, as for the other kernels).
"""

from __future__ import annotations

import os
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
)
from commprof.impls.gating import (
    first_failure,
    needs_cuda,
    needs_dtype,
    needs_p2p,
    needs_world_size,
    sm_name,
    version_at_least,
)
from commprof.planner.models import DTYPE_BYTES

B12X_INSTALL = "pip install 'commprof[b12x]'"
B12X = "b12x"  # the distribution on PyPI
B12X_MIN = "1.5"  # 1.5.0: first with b12x.preparation and PCIeTwoShotBF16 (1.3.0 has neither; no 1.4 on PyPI)
B12X_CAPABILITIES = ((12, 0), (12, 1))  # b12x._lib.gating.is_b12x: SM120 / SM121
ONESHOT_WORLD_SIZES = (2, 4, 6, 8, 10)  # pcie_oneshot.SUPPORTED_WORLD_SIZES
TWOSHOT_WORLD_SIZES = (4,)  # pcie_twoshot_bf16.SUPPORTED_WORLD_SIZES
DMA_WORLD_SIZES = (2, 4, 6, 8, 10)  # pcie_dma.SUPPORTED_WORLD_SIZES
ONESHOT_DTYPES = ("bfloat16", "float16", "float32")
TWOSHOT_DTYPES = ("bfloat16",)
PACK_BYTES = 16  # one-shot: bytes % 16; fused: hidden x element size % 16
FUSED_MAX_ROWS = 36  # _oneshot_preparation: "fused allreduce RMSNorm supports at most 36 rows"
DMA_ALIGN_ELEMENTS = 8  # pcie_dma.should_allreduce: numel % (world x 8)
PRIMING_EPS = 1e-6  # the fused priming launch's RMSNorm epsilon (its output is discarded)
VARIANTS = ("auto", "oneshot", "twoshot", "dma")
SURFACES = {
    "oneshot": "OneshotAllReduce.all_reduce",
    "fused": "OneshotAllReduce.all_reduce_fused_add_rms_norm",
    "twoshot": "PCIeTwoShotBF16.all_reduce",
    "dma": "DmaAllReduce.all_reduce",
}
KERNEL = "b12x's PCIe all-reduce"


def needs_b12x(ctx: ImplContext) -> str | None:
    if ctx.libraries_assumed:
        return None
    installed = ctx.version(B12X)
    if installed is None:
        return f"needs b12x >= {B12X_MIN}, which is not installed ({B12X_INSTALL})"
    if not version_at_least(installed, B12X_MIN):
        return f"needs b12x >= {B12X_MIN} (installed: {installed}; pip install -U 'b12x>={B12X_MIN}')"
    return None


def needs_sm12x(ctx: ImplContext) -> str | None:
    """b12x's kernels are built for consumer Blackwell only (is_b12x: SM120 / SM121)."""
    cap = ctx.compute_capability
    if cap is None:
        return "needs a known compute capability (no GPU was probed)"
    if tuple(cap) not in B12X_CAPABILITIES:
        return f"b12x's kernels run on SM120 / SM121 (consumer Blackwell), not {sm_name(tuple(cap))}"
    return None


def variant_algorithm(variant: str, nbytes: int, world_size: int) -> str:
    """The algorithm a variant runs for one all-reduce; auto: one-shot up to the default ceiling, two-shot above
    where b12x has a two-shot for this world size."""
    if variant == "oneshot":
        return algorithms.ONE_SHOT
    if variant in ("twoshot", "dma"):  # the DMA ring moves what a reduce-scatter + all-gather moves
        return algorithms.TWO_SHOT
    choice = algorithms.by_size(nbytes)
    return choice if world_size in TWOSHOT_WORLD_SIZES else algorithms.ONE_SHOT


def runtime_variant(variant: str, nbytes: int, world_size: int) -> str:
    """Which b12x runtime serves one all-reduce: "oneshot", "twoshot" or "dma"."""
    if variant != "auto":
        return variant
    return "oneshot" if variant_algorithm(variant, nbytes, world_size) == algorithms.ONE_SHOT else "twoshot"


def shape_problem(ctx: ImplContext, tokens: int, runtime: str) -> str | None:
    """Per-T shapes each runtime refuses: one-shot should_allreduce (bytes % 16), PCIeTwoShotBF16 (row_elems % 8,
    accepts: numel % (row_elems x world size)), DMA should_allreduce (numel % (world size x 8))."""
    elem = DTYPE_BYTES.get(ctx.dtype, 2)
    numel = tokens * ctx.hidden_size
    if runtime == "oneshot" and numel * elem % PACK_BYTES:
        return f"{KERNEL} one-shot needs a multiple of 16 bytes; T = {tokens} gives {numel * elem}"
    if runtime == "twoshot":
        if ctx.hidden_size % 8:
            return f"b12x two-shot needs hidden size divisible by 8, not {ctx.hidden_size}"
        if tokens % ctx.world_size:
            return f"b12x two-shot needs T divisible by the world size ({ctx.world_size}), not T = {tokens}"
    if runtime == "dma" and numel % (ctx.world_size * DMA_ALIGN_ELEMENTS):
        return f"b12x DMA ring needs T x hidden divisible by {ctx.world_size * DMA_ALIGN_ELEMENTS}; T = {tokens}"
    return None


def oneshot_kwargs(group, device, max_bytes: int) -> dict[str, Any]:
    """OneshotAllReduce.from_exchange_group: staged through eager buffers sized to the largest op."""
    return {"exchange_group": group, "device": device, "eager_buffer_bytes": max_bytes, "max_size": max_bytes}


def twoshot_kwargs(group, device, max_rows: int, row_elems: int) -> dict[str, Any]:
    """PCIeTwoShotBF16.from_exchange_group: max_rows a multiple of the world size, rows of `row_elems`."""
    return {"exchange_group": group, "device": device, "max_rows": max_rows, "row_elems": row_elems}


def dma_kwargs(group, device, max_bytes: int) -> dict[str, Any]:
    """DmaAllReduce(...): one lossless ring channel."""
    return {"exchange_group": group, "device": device, "max_bytes": max_bytes}


def session_kwargs(device, cache_dir: str | None = None) -> dict[str, Any]:
    """PreparationSession(...): compile and prime the default configuration, no autotuning race; `cache_dir` the
    setting's own folder for the plan selections b12x would otherwise read from a cache every process on the box
    shares (b12x 1.5.1 preparation/session.py _selection_cache: cache_dir, else the compile cache's
    "preparation" folder, looked up for every request even without autotuning)."""
    return {"device": device, "autotune": False, "cache_dir": cache_dir}


class B12xAllReduce(AllReduceImpl):
    """b12x.comm.pcie all-reduce; option variant: auto (default), oneshot, twoshot or dma."""

    name: ClassVar[str] = "b12x"
    library: ClassVar[str | None] = B12X
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = ()  # no engine flag acts on it
    trace_kernels: ClassVar[TraceKernels | str] = TraceKernels(
        "b12x PCIe all-reduce",
        # The CuTe DSL names a kernel "kernel_" + "cutlass_" + the function's name + each non-IR argument as
        # text with ".<>" dropped, so a method's `self` gives "..._oneshot_cute_OneshotLaunch_object_at_...".
        r"^kernel_cutlass_kernel_b12xcommpcie.*(_OneshotLaunch|_FusedOneshotLaunch|_TwoShotLaunch"
        r"|_TwoShotBf16Launch|_TwoShotPullAllReduceLaunch|_HierarchicalLaunch|_IslandRSLaunch"
        # The DMA all-reduce moves data with copy engines; these are its flag and reduction kernels.
        r"|_dma_kernels_(Add|Flag|Quant|DequantAccum|DequantAccum9|DequantAddQuant|DequantStore)Launch)_object_at_",
        "all_reduce",
        "b12x 1.5.1 b12x/comm/pcie/_oneshot_cute.py, _twoshot_cute.py, _twoshot_bf16_cute.py, "
        "_hierarchical_cute.py, _island_rs_cute.py, _dma_kernels.py (the @cute.kernel method `kernel` of each "
        "*Launch class); "
        "the name's form: nvidia-cutlass-dsl 4.8.0 (b12x's pin) base_dsl/dsl.py kernel_launcher and mangle_name, "
        "cutlass_dsl/cutlass.py mangle_name",
    )
    # Each name was read in the engine's own source at the PR or commit named; "open PR": the name exists only on
    # that PR's branch (not merged when checked), so a stock release ignores it.
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = (
        EngineSwitch(
            "SGLang",
            "SGLANG_B12X_PCIE_AR=1",
            "SGLANG_B12X_ONESHOT_MAX_BYTES",
            "bytes",
            "an SGLang build with the open PR sgl-project/sglang#32479 (not merged when checked): b12x one-shot on "
            "SM12x, TP 2 / 4 / 8; the revisions read call OneshotAllReducePool.all_reduce without the plan= that "
            "b12x 1.5 requires, so it runs a b12x before 1.5, not the 1.5 kernels commprof measures",
        ),
        EngineSwitch(
            "vLLM (community PCIe fork)",
            "VLLM_ENABLE_PCIE_ALLREDUCE=1 VLLM_PCIE_ALLREDUCE_BACKEND=b12x",
            "VLLM_PCIE_ONESHOT_ALLREDUCE_MAX_SIZE",
            "bytes",
            "the vLLM fork local-inference-lab/vllm (vllm/distributed/device_communicators/b12x_pcie_all_reduce.py "
            "at cdbbc9d: the bound also sizes the one-shot buffers; the revision read calls b12x without plan=, "
            "b12x's pre-1.5 API); revisions with VLLM_PCIE_TWOSHOT_ALLREDUCE_MAX_SIZE bound two-shot with it, "
            "default 768 KB in some and off in others",
        ),
    )
    smoke: ClassVar[SmokeCase | str] = SmokeCase("b12x one-shot", {"variant": "oneshot"})
    capturable: ClassVar[bool] = True
    option_kinds: ClassVar[dict[str, OptionKind] | None] = {"variant": VARIANTS}

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        self.variant: str = self.options.get("variant", "auto")
        self.runtimes: dict[str, Any] = {}
        self.plans: dict[tuple, Any] = {}
        self._session = None
        self._ran: set[str] = set()

    @classmethod
    def runtimes_for(cls, ctx: ImplContext) -> set[str]:
        elem = DTYPE_BYTES.get(ctx.dtype, 2)
        return {
            runtime_variant(ctx.options.get("variant", "auto"), t * ctx.hidden_size * elem, ctx.world_size)
            for t in ctx.tokens
        }

    @classmethod
    def support(cls, ctx: ImplContext) -> Support:
        runtimes = cls.runtimes_for(ctx) or {"oneshot"}
        sizes = {"oneshot": ONESHOT_WORLD_SIZES, "twoshot": TWOSHOT_WORLD_SIZES, "dma": DMA_WORLD_SIZES}
        return first_failure(
            needs_cuda(ctx),
            needs_b12x(ctx),
            needs_sm12x(ctx),
            *(needs_world_size(ctx, sizes[r], f"b12x {r}") for r in sorted(runtimes)),
            needs_dtype(ctx, TWOSHOT_DTYPES if "twoshot" in runtimes else ONESHOT_DTYPES, KERNEL),
            # b12x checks no peer access itself: it maps peers' buffers with cudaIpcOpenMemHandle (_cuda_ipc.py)
            needs_p2p(ctx),
        )

    @classmethod
    def support_tokens(cls, ctx: ImplContext, tokens: int) -> Support:
        nbytes = tokens * ctx.hidden_size * DTYPE_BYTES.get(ctx.dtype, 2)
        return first_failure(
            shape_problem(ctx, tokens, runtime_variant(ctx.options.get("variant", "auto"), nbytes, ctx.world_size))
        )

    @classmethod
    def algorithm(cls, options, nbytes: int, world_size: int) -> str:
        return variant_algorithm(options.get("variant", "auto"), nbytes, world_size)

    @classmethod
    def preparation(cls, backend: str, options: dict[str, Any]) -> str | None:
        if backend != "nccl":
            return None
        return "compiles its CuTe kernels and primes a plan per shape (b12x.preparation.PreparationSession)"

    def setup(self, group, plan, device) -> None:
        """Sizes only: the runtimes are built collectively in prepare(), once the shapes say which are needed."""
        import torch
        import torch.distributed as dist
        from b12x.comm import pcie

        super().setup(group, plan, device)
        torch.cuda.set_device(device)
        self._torch, self._pcie, self._dist = torch, pcie, dist
        self.world_size = dist.get_world_size(group)
        self._dtype = getattr(torch, plan.model.dtype)
        self._max_bytes = plan.max_numel * DTYPE_BYTES[plan.model.dtype]
        self._max_rows = -(-plan.tokens // self.world_size) * self.world_size
        self._hidden = plan.model.hidden_size

    def _runtime(self, runtime: str):
        """The b12x channel for `runtime`, built on first need (a collective: every rank builds the same ones)."""
        if runtime not in self.runtimes:
            group, device, pcie = self.group, self.device, self._pcie
            if runtime == "oneshot":
                built = pcie.OneshotAllReduce.from_exchange_group(**oneshot_kwargs(group, device, self._max_bytes))
            elif runtime == "twoshot":
                built = pcie.PCIeTwoShotBF16.from_exchange_group(
                    **twoshot_kwargs(group, device, self._max_rows, self._hidden)
                )
            else:
                built = pcie.DmaAllReduce(**dma_kwargs(group, device, self._max_bytes))
            self.runtimes[runtime] = built
        return self.runtimes[runtime]

    def prepare(self, shapes) -> None:
        """One Plan per [T, H] and runtime, compiled and primed (a collective launch each) before any capture."""
        from b12x.preparation import CollectiveRequirement, PreparationSession

        requests = []
        for t, h in sorted(shapes):
            sample = self._torch.zeros((t, h), dtype=self._dtype, device=self.device)
            for runtime in self._runtimes_of(sample):
                requests.append(self._request(runtime, sample, CollectiveRequirement))
        selections = None
        if self.state_dir is not None:
            selections = str(self.state_dir / "b12x-selections")
            os.makedirs(selections, exist_ok=True)
        self._session = PreparationSession(**session_kwargs(self.device, selections))
        self._session.prepare(requests, coordinator=self._coordinate)

    def _runtimes_of(self, sample) -> tuple[str, ...]:
        return (runtime_variant(self.variant, sample.numel() * sample.element_size(), self.world_size),)

    def _request(self, runtime: str, sample, requirement):
        surface = SURFACES[runtime]
        target = self._runtime("oneshot" if runtime == "fused" else runtime)
        query = self._pcie.query_from_runtime(target, surface=surface, call={"inp": sample})
        plan = self._pcie.plan(query, runtime=target)
        self.plans[(runtime, tuple(sample.shape))] = plan
        out = self._torch.empty_like(sample)
        name = f"commprof.{self.name}.{runtime}.{'x'.join(map(str, sample.shape))}"
        norm, residual_out = None, None
        if runtime == "fused":
            weight = self._torch.ones(sample.shape[-1], dtype=sample.dtype, device=sample.device)
            norm = RmsNormOperands(sample, self._torch.zeros_like(sample), weight, PRIMING_EPS)
            residual_out = self._torch.empty_like(sample)
        return plan.request(
            name=name,
            prepare_call=lambda state: _priming_call(runtime, state, sample, out, norm, residual_out),
            collective=requirement(key=name, ranks=tuple(range(self.world_size))),
        )

    def _coordinate(self, progress):
        """Ranks reach each collective priming launch together: a barrier, then its key (no tuning shards)."""
        if progress.ready_tuning or progress.ready_cache is not None:
            raise RuntimeError("b12x asked for sharded tuning, which commprof never requests (autotune=False)")
        if progress.ready_collectives:
            self._dist.barrier(group=self.group)
            return progress.ready_collectives[0].key
        return None

    def all_reduce(self, x):
        runtime = runtime_variant(self.variant, x.numel() * x.element_size(), self.world_size)
        self._ran.add(runtime)
        plan = self.plans[(runtime, tuple(x.shape))]
        target = self.runtimes[runtime]
        out = self._torch.empty_like(x)
        if runtime == "twoshot":
            if self._torch.cuda.is_current_stream_capturing():
                with target.capture(plan=plan):
                    return target.all_reduce(x, out, plan=plan)
            return target.all_reduce(x, out, plan=plan)
        return target.all_reduce(x, plan=plan, out=out)

    def detail(self) -> str:
        chosen_by = algorithms.DEFAULT_RULE if self.variant == "auto" else f"variant {self.variant}"
        ran, self._ran = self._ran, set()
        return f"b12x.comm.pcie {algorithms.ran_text(ran, chosen_by)}"

    def teardown(self) -> None:
        """The session first (it releases the plans, which use the runtimes), then each runtime: b12x closes a
        runtime collectively, and every rank built the same ones in the same order."""
        if self._session is not None:
            self._session.close()
            self._session = None
        for runtime in self.runtimes.values():
            runtime.close()
        self.runtimes.clear()
        self.plans.clear()


class B12xFusedAllReduce(B12xAllReduce):
    """b12x one-shot all-reduce + residual add + RMSNorm in one kernel (OneshotAllReduce), at most 36 rows."""

    name: ClassVar[str] = "b12x-fused"
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = ()  # no engine flag acts on it
    trace_kernels: ClassVar[TraceKernels | str] = "b12x"  # its fused kernel is b12x's _FusedOneshotLaunch
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = ()  # no engine runs b12x's fused kernel
    smoke: ClassVar[SmokeCase | str] = SmokeCase("b12x-fused")
    fuses_rmsnorm: ClassVar[bool] = True
    option_kinds: ClassVar[dict[str, OptionKind] | None] = {}

    @classmethod
    def runtimes_for(cls, ctx: ImplContext) -> set[str]:
        return {"oneshot"}

    @classmethod
    def support_tokens(cls, ctx: ImplContext, tokens: int) -> Support:
        return first_failure(
            None
            if tokens <= FUSED_MAX_ROWS
            else f"b12x's fused all-reduce + RMSNorm takes at most {FUSED_MAX_ROWS} rows, not T = {tokens}",
            None
            if ctx.hidden_size * DTYPE_BYTES.get(ctx.dtype, 2) % PACK_BYTES == 0
            else f"b12x's fused all-reduce + RMSNorm needs rows of whole 16-byte packs, not hidden {ctx.hidden_size}",
        )

    @classmethod
    def algorithm(cls, options, nbytes: int, world_size: int) -> str:
        return algorithms.ONE_SHOT

    def _runtimes_of(self, sample) -> tuple[str, ...]:
        return ("oneshot", "fused")  # the embedding's all-reduce has no RMSNorm after it

    def all_reduce(self, x):
        self._ran.add("oneshot")
        out = self._torch.empty_like(x)
        return self.runtimes["oneshot"].all_reduce(x, plan=self.plans[("oneshot", tuple(x.shape))], out=out)

    def all_reduce_rmsnorm(self, x, residual, weight, eps: float):
        self._ran.add("oneshot")
        out, residual_out = self._torch.empty_like(x), self._torch.empty_like(residual)
        return self.runtimes["oneshot"].all_reduce_fused_add_rms_norm(
            **fused_call_kwargs(
                RmsNormOperands(x, residual, weight, eps), self.plans[("fused", tuple(x.shape))], out, residual_out
            )
        )

    def detail(self) -> str:
        self._ran = set()
        return "b12x.comm.pcie OneshotAllReduce.all_reduce_fused_add_rms_norm (one-shot)"


def fused_call_kwargs(norm: RmsNormOperands, plan, out, residual_out) -> dict[str, Any]:
    """OneshotAllReduce.all_reduce_fused_add_rms_norm's arguments."""
    return {
        "inp": norm.x,
        "residual": norm.residual,
        "weight": norm.weight,
        "epsilon": norm.eps,
        "plan": plan,
        "out": out,
        "residual_out": residual_out,
    }


def _priming_call(runtime: str, state, sample, out, norm: RmsNormOperands | None = None, residual_out=None):
    """The one launch per shape that primes a prepared plan (collective: every rank makes it); norm and
    residual_out only for the fused runtime (norm.x is sample)."""
    from b12x.preparation import PreparedCall

    if runtime == "oneshot":
        state.bind_input(sample)
        return PreparedCall(run=lambda: state.run_plain(sample, out), output=out)
    if runtime == "fused":
        state.bind_input(sample)
        return PreparedCall(
            run=lambda: state.run_fused(sample, norm.residual, norm.weight, out, residual_out, norm.eps),
            output=(out, residual_out),
        )
    if runtime == "twoshot":
        rows = sample.view(-1, sample.shape[-1])
        return PreparedCall(
            # the launch controls query_from_runtime records when the call names none; run() checks they match
            run=lambda: state.run(rows, None, out.view_as(rows), threads=512, block_limit=64),
            output=out,
            capture_safe=False,
        )
    return PreparedCall(run=lambda: state.prime(sample, out=out), output=out, capture_safe=False)
