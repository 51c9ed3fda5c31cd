"""Where each built-in all-reduce can run: pure rules over an ImplContext, each failure a one-line reason.

Every rule below mirrors a check the kernel itself makes (cited per rule), so an unsupported point is
recorded as "unsupported: <reason>" before anything is allocated, instead of failing, hanging or silently
falling back inside a collective. Test any rule with a fabricated ImplContext.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from commprof.impls.base import SUPPORTED, ImplContext, Support, unsupported
from commprof.planner.models import DTYPE_BYTES

# How FlashInfer gets installed: it is an optional extra (its CUDA libraries weigh about 1.7 GB).
FLASHINFER_INSTALL = "pip install 'commprof[flashinfer]'"
# FlashInfer's unified allreduce_fusion API with create_allreduce_fusion_workspace(group=...) (0.6.10.post1).
FLASHINFER_FUSED_MIN = "0.6.11"
# Its TRT-LLM kernels (flashinfer/jit/comm.py builds them for majors 9, 10 and, since 0.6.17, 12; they
# launch thread-block clusters, so nothing older) and the release that supports each major.
TRTLLM_ARCH_MIN_FLASHINFER = {9: FLASHINFER_FUSED_MIN, 10: FLASHINFER_FUSED_MIN, 12: "0.6.17"}
TRTLLM_WORLD_SIZES = (2, 4, 8, 16)  # allreduce_fusion_kernel_launcher's NRanks dispatch
TRTLLM_DTYPES = ("bfloat16", "float16", "float32")
TRTLLM_ACCESS_BYTES = 16  # each thread moves 16 bytes: hidden % (16 / element size) == 0
# trtllm_ar.MAX_COMM_SIZE: above it FlashInfer silently runs two-shot when one-shot was asked for.
TRTLLM_MAX_COMM_BYTES = 2147483647 & ~((1 << 21) - 1)

# flashinfer.comm.PcieIpcAllReduceWorkspace (pcie_ipc_ar.py, pcie_ipc_policy._admits). It landed after
# 0.6.18rc7 (flashinfer PR #4393). Its kernels use plain loads/stores over CUDA IPC: no SM restriction.
PCIE_IPC_MIN_FLASHINFER = "0.6.18"
PCIE_IPC_WORLD_SIZES = (2, 4, 8)
PCIE_IPC_DTYPES = ("bfloat16", "float16")
PCIE_IPC_PACK_BYTES = 16

# torch symmetric memory (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu): kernels are
# dispatched for bf16 and fp32 only; two_shot_all_reduce_out has no generic world-size fallback.
SYMM_MEM_DTYPES = ("bfloat16", "float32")
SYMM_MEM_VARIANT_OPS = {"one_shot": "one_shot_all_reduce_copy_out", "two_shot": "two_shot_all_reduce_out"}
SYMM_MEM_TWO_SHOT_WORLD_SIZES = (2, 4, 8)
SYMM_MEM_ALIGN_BYTES = 4


def parse_version(text: str) -> tuple[tuple[int, ...], int]:
    """Sortable key for "0.6.17", "0.6.18rc7", "0.7.4.post1": a pre-release sorts below its release."""
    match = re.match(r"v?(\d+(?:\.\d+)*)(.*)", text.strip())
    if not match:
        return (), 0
    release = tuple(int(part) for part in match.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    suffix = match.group(2).lstrip(".-_").lower()
    is_pre = suffix.startswith(("rc", "a", "b", "dev", "pre"))
    return release, 0 if is_pre else 1


def version_at_least(installed: str, minimum: str) -> bool:
    return parse_version(installed) >= parse_version(minimum)


def first_failure(*reasons: str | None) -> Support:
    """The first reason that is not None as an unsupported Support, else SUPPORTED."""
    for reason in reasons:
        if reason:
            return unsupported(reason)
    return SUPPORTED


def sm_name(capability: tuple[int, int]) -> str:
    return f"SM{capability[0]}{capability[1]}"


def _join(values: Iterable) -> str:
    items = [str(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


# --- single rules: each returns a reason, or None when the rule holds -------------------------------------


def needs_cuda(ctx: ImplContext) -> str | None:
    if ctx.backend != "nccl" or ctx.device_type != "cuda":
        return f"needs CUDA GPUs and the NCCL backend (this run: {ctx.backend} on {ctx.device_type})"
    return None


def needs_world_size(ctx: ImplContext, allowed: Collection[int], kernel: str) -> str | None:
    if ctx.world_size not in allowed:
        return f"{kernel} runs at world size {_join(allowed)}, not {ctx.world_size}"
    return None


def needs_dtype(ctx: ImplContext, allowed: Collection[str], kernel: str) -> str | None:
    if ctx.dtype not in allowed:
        return f"{kernel} takes {_join(allowed)}, not {ctx.dtype}"
    return None


def needs_p2p(ctx: ImplContext) -> str | None:
    """Every pair of GPUs must reach each other's memory; None (not probed) is let through."""
    if ctx.p2p_all_pairs is False:
        detail = f": {ctx.p2p_detail}" if ctx.p2p_detail else ""
        return f"needs peer-to-peer access between every pair of GPUs{detail}"
    return None


def needs_flashinfer(ctx: ImplContext, minimum: str, what: str) -> str | None:
    if ctx.flashinfer_version is None:
        return f"needs flashinfer-python >= {minimum}, which is not installed ({FLASHINFER_INSTALL})"
    if not version_at_least(ctx.flashinfer_version, minimum):
        return (
            f"{what} needs flashinfer-python >= {minimum} (installed: {ctx.flashinfer_version}; "
            f"pip install -U 'flashinfer-python>={minimum}')"
        )
    return None


def needs_trtllm_arch(ctx: ImplContext) -> str | None:
    """SM90 / SM100-family / SM12x, the latter only with a FlashInfer that builds the kernels for it."""
    cap = ctx.compute_capability
    if cap is None:
        return "needs a known compute capability (no GPU was probed)"
    minimum = TRTLLM_ARCH_MIN_FLASHINFER.get(cap[0])
    if minimum is None:
        return f"FlashInfer's TRT-LLM all-reduce kernels build for SM90, SM10x and SM12x, not {sm_name(cap)}"
    if ctx.flashinfer_version is not None and not version_at_least(ctx.flashinfer_version, minimum):
        return (
            f"FlashInfer's TRT-LLM all-reduce kernels support {sm_name(cap)} from flashinfer-python "
            f"{minimum} (installed: {ctx.flashinfer_version})"
        )
    return None


def needs_row_alignment(ctx: ImplContext, access_bytes: int, kernel: str) -> str | None:
    elem = DTYPE_BYTES.get(ctx.dtype)
    if elem and ctx.hidden_size % (access_bytes // elem):
        return (
            f"{kernel} needs hidden size divisible by {access_bytes // elem} "
            f"({access_bytes}-byte accesses), not {ctx.hidden_size}"
        )
    return None


def two_shot_tokens(ctx: ImplContext, tokens: int, kernel: str) -> str | None:
    """Two-shot splits the tokens across ranks: FlashInfer asserts T > world size."""
    if tokens <= ctx.world_size:
        return f"{kernel} two-shot needs T > world size ({ctx.world_size}), not T = {tokens}"
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


def pcie_ipc_shape(ctx: ImplContext, tokens: int) -> str | None:
    """pcie_ipc_policy._admits: whole 16-byte packs, and at least one pack per rank."""
    pack = PCIE_IPC_PACK_BYTES // DTYPE_BYTES.get(ctx.dtype, 2)
    numel = tokens * ctx.hidden_size
    if numel % pack or numel < pack * ctx.world_size:
        return (
            f"FlashInfer's PCIe IPC all-reduce needs T x hidden to be a multiple of {pack} and at least "
            f"{pack * ctx.world_size} elements; T = {tokens} gives {numel}"
        )
    return None


def symm_mem_alignment(ctx: ImplContext, tokens: int) -> str | None:
    if (tokens * ctx.hidden_size * DTYPE_BYTES.get(ctx.dtype, 2)) % SYMM_MEM_ALIGN_BYTES:
        return f"torch symmetric memory needs a tensor size that is a multiple of 4 bytes; T = {tokens} is not"
    return None


# --- options: user input, checked before anything runs ------------------------------------------------------


def bool_option(options: dict, key: str, *, required: bool, default: bool = False) -> bool:
    """A true/false option; ValueError with a one-line message when missing (if required) or not a bool."""
    if key not in options:
        if required:
            raise ValueError(f"option {key!r} is required: true or false")
        return default
    value = options[key]
    if not isinstance(value, bool):
        raise ValueError(f"option {key!r} must be true or false, got {value!r}")
    return value


def choice_option(options: dict, key: str, choices: Collection[str]) -> str:
    value = options.get(key)
    if value not in choices:
        shown = "missing" if key not in options else repr(value)
        raise ValueError(f"option {key!r} must be one of {', '.join(choices)} ({shown})")
    return value


def unknown_options(options: dict, known: Collection[str]) -> str | None:
    extra = sorted(set(options) - set(known))
    if extra:
        return f"unknown option {', '.join(map(repr, extra))}; known: {', '.join(known) or 'none'}"
    return None


def option_problem(check) -> str | None:
    """Runs an option check; its ValueError message becomes a reason."""
    try:
        check()
    except ValueError as exc:
        return str(exc)
    return None


# --- one gate per built-in ----------------------------------------------------------------------------------

# Options of the built-in implementations (the sweep file's validation and the built-ins' own gates both read these): a type, or
# the tuple of allowed strings. Built-ins not listed here, and package.module:Class plug-ins, take any
# options (their own code checks them).
BUILTIN_OPTIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "nccl": {},
    "gloo": {},
    "nccl+rmsnorm": {"norm": ("flashinfer", "torch")},
    "flashinfer-fused": {"use_oneshot": bool},
    "flashinfer-pcie-ipc": {"tune": bool},
    "symm-mem": {"variant": ("one_shot", "two_shot")},
}
# Options a built-in cannot run without (FlashInfer's own one-shot heuristic is tuned for other machines).
REQUIRED_OPTIONS: dict[str, tuple[str, ...]] = {"flashinfer-fused": ("use_oneshot",), "symm-mem": ("variant",)}

FLASHINFER_FUSED_OPTIONS = tuple(BUILTIN_OPTIONS["flashinfer-fused"])
PCIE_IPC_OPTIONS = tuple(BUILTIN_OPTIONS["flashinfer-pcie-ipc"])
SYMM_MEM_OPTIONS = tuple(BUILTIN_OPTIONS["symm-mem"])


def flashinfer_fused_support(ctx: ImplContext) -> Support:
    """allreduce_fusion on a backend="trtllm" workspace, one-shot or two-shot as ctx.options says."""
    options = ctx.options
    problem = unknown_options(options, FLASHINFER_FUSED_OPTIONS) or option_problem(
        lambda: bool_option(options, "use_oneshot", required=True)
    )
    return first_failure(
        problem,
        needs_cuda(ctx),
        needs_flashinfer(ctx, FLASHINFER_FUSED_MIN, "allreduce_fusion"),
        needs_trtllm_arch(ctx),
        needs_world_size(ctx, TRTLLM_WORLD_SIZES, "FlashInfer's TRT-LLM all-reduce"),
        needs_dtype(ctx, TRTLLM_DTYPES, "FlashInfer's TRT-LLM all-reduce"),
        needs_row_alignment(ctx, TRTLLM_ACCESS_BYTES, "FlashInfer's TRT-LLM all-reduce"),
        needs_p2p(ctx),
    )


def flashinfer_fused_tokens(ctx: ImplContext, tokens: int) -> Support:
    """Per T: two-shot needs T > world size; one-shot must fit the Lamport buffer (else it is two-shot)."""
    if ctx.options.get("use_oneshot") is True:
        return first_failure(one_shot_fits(ctx, tokens))
    return first_failure(two_shot_tokens(ctx, tokens, "FlashInfer"))


def pcie_ipc_support(ctx: ImplContext) -> Support:
    """PcieIpcAllReduceWorkspace: 2/4/8 ranks, 2-byte dtypes, P2P between all GPUs; any SM."""
    options = ctx.options
    problem = unknown_options(options, PCIE_IPC_OPTIONS) or option_problem(
        lambda: bool_option(options, "tune", required=False)
    )
    return first_failure(
        problem,
        needs_cuda(ctx),
        needs_flashinfer(ctx, PCIE_IPC_MIN_FLASHINFER, "PcieIpcAllReduceWorkspace"),
        needs_world_size(ctx, PCIE_IPC_WORLD_SIZES, "FlashInfer's PCIe IPC all-reduce"),
        needs_dtype(ctx, PCIE_IPC_DTYPES, "FlashInfer's PCIe IPC all-reduce"),
        needs_p2p(ctx),
    )


def pcie_ipc_tokens(ctx: ImplContext, tokens: int) -> Support:
    return first_failure(pcie_ipc_shape(ctx, tokens))


def symm_mem_support(ctx: ImplContext, available_ops: Collection[str]) -> Support:
    """torch symmetric-memory one-shot / two-shot; `available_ops` are the torch.ops.symm_mem ops torch has."""
    options = ctx.options
    problem = unknown_options(options, SYMM_MEM_OPTIONS) or option_problem(
        lambda: choice_option(options, "variant", tuple(SYMM_MEM_VARIANT_OPS))
    )
    if problem:
        return unsupported(problem)
    variant = options["variant"]
    op = SYMM_MEM_VARIANT_OPS[variant]
    return first_failure(
        needs_cuda(ctx),
        None
        if op in available_ops
        else f"this torch ({ctx.torch_version or 'unknown version'}) has no torch.ops.symm_mem.{op}",
        needs_dtype(ctx, SYMM_MEM_DTYPES, "torch symmetric-memory all-reduce"),
        needs_world_size(ctx, SYMM_MEM_TWO_SHOT_WORLD_SIZES, "torch symmetric-memory two-shot")
        if variant == "two_shot"
        else None,
        needs_p2p(ctx),
    )


def symm_mem_tokens(ctx: ImplContext, tokens: int) -> Support:
    return first_failure(symm_mem_alignment(ctx, tokens))
