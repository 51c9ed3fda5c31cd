"""The rules every all-reduce gate is built from: pure functions over an ImplContext, each failure a one-line reason.

Each implementation's own gate (its `support` / `support_tokens`, beside it in its module) combines these with
its kernel's facts and cites the kernel check each mirrors, so an unsupported point is recorded as
"unsupported: <reason>" before anything is allocated, instead of failing, hanging or silently falling back
inside a collective. Test any rule with a fabricated ImplContext.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from commprof.impls.base import SUPPORTED, ImplContext, Support, unsupported
from commprof.planner.models import DTYPE_BYTES

# How FlashInfer gets installed: it is an optional extra (its CUDA libraries weigh about 1.7 GB).
FLASHINFER = "flashinfer-python"  # the distribution FlashInfer's kernels come in
FLASHINFER_INSTALL = "pip install 'commprof[flashinfer]'"


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


def needs_p2p_atomics(ctx: ImplContext, kernel: str) -> str | None:
    """The kernel signals peers with system-scope atomics on their memory; None (not known) is let through."""
    if ctx.p2p_atomics is False:
        detail = f": {ctx.p2p_atomics_detail}" if ctx.p2p_atomics_detail else ""
        return (
            f"{kernel} signals peers with system-scope atomics on their memory, which need native P2P atomics "
            f"between every pair of GPUs (PCIe boxes usually lack them){detail}"
        )
    return None


def needs_flashinfer(ctx: ImplContext, minimum: str, what: str) -> str | None:
    if ctx.libraries_assumed:
        return None
    installed = ctx.version(FLASHINFER)
    if installed is None:
        return f"needs flashinfer-python >= {minimum}, which is not installed ({FLASHINFER_INSTALL})"
    if not version_at_least(installed, minimum):
        return (
            f"{what} needs flashinfer-python >= {minimum} (installed: {installed}; "
            f"pip install -U 'flashinfer-python>={minimum}')"
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
