"""The token counts an engine captures CUDA graphs for, so a sweep measures only sizes the engine will send.

`[run] tokens = "engine:vllm"` or `"engine:sglang"` (optionally `":max_batch=<n>"`) expands here. Each rule is
the engine's own default, read from its released source and cited at the function; both engines pad a batch up
to the nearest captured size, so these are the T values the step's collectives carry. Pure.
"""

from __future__ import annotations

import re
from typing import Literal

from commprof.errors import UsageError

Engine = Literal["sglang", "vllm"]
ENGINES: tuple[Engine, ...] = ("sglang", "vllm")
ENGINE_TOKENS_FORM = (
    '"engine:sglang" or "engine:vllm", optionally with ":max_batch=<requests>" (SGLang also ":gpu_mem=<GiB>")'
)
_FORM = re.compile(
    r"^engine:(?P<engine>[a-z]+)(?::max_batch=(?P<max_batch>\d+))?(?::gpu_mem=(?P<gpu_mem>\d+(\.\d+)?))?$"
)

# vLLM 0.33 vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: the OpenAI server's defaults on a GPU of
# >= 70 GiB that is no A100 (H100, H200, RTX PRO 6000 96 GB).
VLLM_MAX_NUM_SEQS = 1024
VLLM_MAX_NUM_BATCHED_TOKENS = 8192
# SGLang 0.5.23 sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings: the default decode max_bs per GPU
# memory (GiB, upper bound of the bracket) as (below TP 4, from TP 4); above the last bracket 512 at any TP.
SGLANG_MAX_BS_BY_MEMORY = ((20, (8, 8)), (35, (48, 160)), (60, (32, 160)), (90, (256, 512)), (160, (256, 512)))
SGLANG_MAX_BS_LARGEST = 512
SGLANG_MAX_BS_TP4 = 512  # the 90-160 GiB bracket (H20, H200, RTX PRO 6000 96 GB): the default without gpu_mem
SGLANG_MAX_BS_SMALL_TP = 256
# The most requests `max_batch` may name: 128 x either engine's largest default, and with commprof's most draft
# steps (65 tokens a request) still within a record's largest T. Checked before any size is listed: SGLang's
# sizes grow with max_batch (every 32nd above 512), and 10**11 of them would fill any host's memory.
MAX_BATCH = 1 << 16


def sglang_default_max_bs(gpu_mem_gib: float | None, tp: int) -> int:
    """SGLang 0.5.23's decode CUDA-graph max_bs for a GPU of `gpu_mem_gib` (None: the 90-160 GiB bracket)."""
    if gpu_mem_gib is None:
        return SGLANG_MAX_BS_TP4 if tp >= 4 else SGLANG_MAX_BS_SMALL_TP
    for below, (small_tp, large_tp) in SGLANG_MAX_BS_BY_MEMORY:
        if gpu_mem_gib < below:
            return large_tp if tp >= 4 else small_tp
    return SGLANG_MAX_BS_LARGEST


def vllm_capture_sizes(
    max_num_seqs: int = VLLM_MAX_NUM_SEQS,
    max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
    num_speculative_tokens: int = 0,
    blackwell_datacenter: bool = False,
) -> list[int]:
    """vLLM 0.33's default `compilation_config.cudagraph_capture_sizes`, in tokens (vllm/config/vllm.py,
    VllmConfig._set_cudagraph_sizes, performance_mode "throughput", no dynamic speculative decoding).

    1, 2, 4, multiples of 8 below 256, multiples of 16 up to max_graph_size = min(max_num_seqs x query_len x 2,
    1024 on SM100 else 512), max_num_batched_tokens if it fits, and with draft tokens (query_len = 1 + k > 1) the
    uniform decode sizes n x query_len over the request grid; everything capped at max_num_batched_tokens."""
    default_max = 1024 if blackwell_datacenter else 512
    query_len = 1 + num_speculative_tokens
    max_size = min(max_num_seqs * query_len * 2, default_max)
    uniform: list[int] = []
    if query_len > 1:
        max_reqs = min(max_num_seqs, default_max)
        counts = [n for n in (1, 2, 4) if n <= max_reqs]
        counts += list(range(8, min(max_reqs + 1, 256), 8))
        counts += list(range(256, max_reqs + 1, 16))
        counts = sorted(set(counts + [max_reqs]))
        uniform = sorted({n * query_len for n in counts if n * query_len <= max_size})
    elif max_num_seqs <= max_size:
        uniform = [max_num_seqs]
    max_size = min(max_num_batched_tokens, max_size)
    sizes = [i for i in (1, 2, 4) if i <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    if max_num_batched_tokens <= max_size and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in uniform if s <= max_num_batched_tokens]
    return sorted(set(sizes))


def sglang_decode_batch_sizes(max_bs: int, speculative: bool) -> list[int]:
    """SGLang 0.5.23's default decode CUDA-graph batch sizes, in requests (sglang/srt/arg_groups/
    cuda_graph_hook.py, generate_decode_cuda_graph_batch_sizes, without --disable-cuda-graph-padding)."""
    if not speculative:
        sizes = (
            [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
        )
    else:  # "Spec decoding case: less padding for smaller batch sizes"
        sizes = (
            list(range(1, 9))
            + list(range(10, 33, 2))
            + list(range(40, 65, 4))
            + list(range(72, 257, 8))
            + list(range(272, max_bs + 1, 16))
        )
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def engine_tokens(text: str, tokens_per_request: int, tp: int | None) -> tuple[int, ...]:
    """The T values of `tokens = "engine:..."`: what the engine's captured graphs carry at `tokens_per_request`
    (1 in decode; K + 1 when verifying K draft tokens); UsageError naming the allowed forms.

    SGLang: each captured batch size x tokens per request (its verify graphs hold bs x num_draft_tokens rows:
    sglang/srt/model_executor/runner/decode_cuda_graph_runner.py, bs * captured_req_width).
    vLLM: its capture sizes; with draft tokens only the uniform decode sizes, the multiples of K + 1 (vLLM
    dispatches a verify batch only to an exact multiple of its query length)."""
    match = _FORM.match(text.strip()) if isinstance(text, str) else None
    if match is None or match["engine"] not in ENGINES:
        raise UsageError(f"expected {ENGINE_TOKENS_FORM}, got {text!r}")
    digits = match["max_batch"]
    if digits and (len(digits) > len(str(MAX_BATCH)) or int(digits) > MAX_BATCH):  # int() of 5000 digits raises
        raise UsageError(f"{text}: max_batch is above {MAX_BATCH} (allowed: 1..{MAX_BATCH} requests)")
    max_batch = int(digits) if digits else None
    if match["gpu_mem"] and match["engine"] != "sglang":
        raise UsageError(f"{text}: gpu_mem is SGLang's (its default max batch follows the GPU's memory)")
    if max_batch is not None and max_batch < 1:
        raise UsageError(f"{text}: max_batch must be >= 1")
    if match["engine"] == "sglang":
        default = sglang_default_max_bs(float(match["gpu_mem"]) if match["gpu_mem"] else None, tp or 8)
        batches = sglang_decode_batch_sizes(max_batch or default, speculative=tokens_per_request > 1)
        return tuple(sorted({bs * tokens_per_request for bs in batches}))
    sizes = vllm_capture_sizes(
        max_num_seqs=max_batch or VLLM_MAX_NUM_SEQS, num_speculative_tokens=tokens_per_request - 1
    )
    return tuple(s for s in sizes if s % tokens_per_request == 0)
