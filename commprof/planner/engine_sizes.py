"""The token counts an engine captures CUDA graphs for, so a sweep measures only sizes the engine will send.

`[run] tokens = "engine:vllm"` or `"engine:sglang"` (optionally `":max_batch=<n>"`) expands here, for the engine
release the sweep's `[run] engine` names. Each rule is the engine's own default, read from its released source and
cited at the function; both engines pad a batch up to the nearest captured size, so these are the T values the
step's collectives carry. The engines' dispatch tables read the largest capture size here too. Pure.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from dataclasses import dataclass
from typing import Literal, get_args

from commprof.errors import UsageError
from commprof.planner.engines import engine_name

Engine = Literal["sglang", "vllm"]
ENGINES: tuple[Engine, ...] = get_args(Engine)
ENGINE_TOKENS_FORM = (
    '"engine:sglang" or "engine:vllm", optionally with ":max_batch=<requests>" (SGLang also ":gpu_mem=<GiB>", '
    'vLLM also ":sm=<compute capability>", e.g. ":sm=10.0" for a B200)'
)
_FORM = re.compile(
    r"^engine:(?P<engine>[a-z]+)(?::max_batch=(?P<max_batch>\d+))?(?::gpu_mem=(?P<gpu_mem>\d+(\.\d+)?))?"
    r"(?::sm=(?P<sm>\d{1,2}\.\d))?$"
)

# The vLLM releases whose capture sizes are read here, and the one a sweep's sizes follow when its [run] engine names
# no vLLM release.
VLLM_RELEASES = ("0.33", "0.34")
VLLM_DEFAULT_RELEASE = "0.33"
# vLLM 0.33 and 0.34 vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: the OpenAI server's defaults on a GPU
# of >= 70 GiB that is no A100 (H100, H200, RTX PRO 6000 96 GB; B200 and B300, >= 160 GiB, batch 16384 tokens).
VLLM_MAX_NUM_SEQS = 1024
VLLM_MAX_NUM_BATCHED_TOKENS = 8192
# vLLM 0.34 config/vllm.py _split_cudagraph_capture_sizes on the SM100 family (its "wide defaults"): the prefill
# grid reaches min(8192, max_num_batched_tokens) tokens, and a decode graph holds at most 8192
# (max_decode_cudagraph_capture_tokens).
VLLM_WIDE_TOKENS = 8192
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
    sm100: bool = False,
) -> list[int]:
    """vLLM 0.33's default `compilation_config.cudagraph_capture_sizes`, in tokens (vllm/config/vllm.py,
    VllmConfig._set_cudagraph_sizes, performance_mode "throughput", no dynamic speculative decoding); 0.34 computes
    the same list first, then splits it (vllm_graphs).

    1, 2, 4, multiples of 8 below 256, multiples of 16 up to max_graph_size = min(max_num_seqs x query_len x 2,
    1024 on the SM100 family else 512), max_num_batched_tokens if it fits, and with draft tokens (query_len = 1 + k
    > 1) the uniform decode sizes n x query_len over the request grid; everything capped at max_num_batched_tokens."""
    default_max = 1024 if sm100 else 512
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


def vllm_request_grid(max_requests: int) -> list[int]:
    """vLLM 0.34's decode request counts on the SM100 family (config/compilation.py decode_cudagraph_capture_grid):
    every count up to 6, then steps of the largest power of two not above 0.65 x n^(2/3) (2 from 8, 4 from 16, 8 from
    48, 16 from 128, 32 from 352), and `max_requests` itself: 64 counts at 1024."""
    counts, n = [], 1
    while n < max_requests:
        counts.append(n)
        step = 2 ** max(0, math.floor(math.log2(max(1.0, 0.65 * n ** (2 / 3)))))
        n += step - n % step  # the next multiple of the step
    return counts + [max_requests] if max_requests else []


@dataclass(frozen=True)
class VllmGraphs:
    """The CUDA graphs a vLLM release captures by default, by its default mode (FULL_AND_PIECEWISE)."""

    decode: tuple[int, ...]  # the tokens a decode or verify batch is dispatched to (multiples of its query length)
    largest: int  # the largest graph's tokens (compilation_config.max_cudagraph_capture_size)


@functools.lru_cache(maxsize=64)  # the dispatch tables ask per op and T
def vllm_graphs(
    release: str = VLLM_DEFAULT_RELEASE,
    sm100: bool = False,
    tokens_per_request: int = 1,
    max_num_seqs: int = VLLM_MAX_NUM_SEQS,
    max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
) -> VllmGraphs:
    """The graphs of `release` for batches of `tokens_per_request` tokens per request (K + 1 when verifying K
    draft tokens), on the SM100 family or not.

    0.33 dispatches a uniform decode batch to a capture size that is an exact multiple of its query length (the
    comment at VllmConfig._set_cudagraph_sizes). 0.34 captures decode graphs by request count
    (config/vllm.py _split_cudagraph_capture_sizes, config/compilation.py decode_cudagraph_capture_shapes, dispatched
    by v1/worker/gpu/cudagraph_utils.py CudaGraphManager.dispatch): off SM100, each capture size rounded up to whole
    requests within the largest; on the SM100 family, vllm_request_grid up to max_num_seqs, within 8192 tokens, and a
    prefill grid up to 8192 tokens beside them. A count past the token limit is captured at the limit."""
    query = tokens_per_request
    shared = vllm_capture_sizes(max_num_seqs, max_num_batched_tokens, query - 1, sm100)
    if release == "0.33":
        return VllmGraphs(tuple(s for s in shared if s % query == 0), shared[-1])
    if sm100:
        largest = min(VLLM_WIDE_TOKENS, max_num_batched_tokens)
        requests = vllm_request_grid(max_num_seqs)
    else:
        largest = shared[-1]
        requests = sorted({min(-(-s // query), max_num_seqs) for s in shared if -(-s // query) * query <= largest})
    limit = min(max_num_seqs, min(largest, VLLM_WIDE_TOKENS) // query)
    reached = requests[: bisect.bisect_left(requests, limit) + 1] if limit >= 1 else []
    return VllmGraphs(tuple(sorted({min(n, limit) * query for n in reached})), largest)


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


def engine_tokens(text: str, tokens_per_request: int, tp: int | None, engine: str | None = None) -> tuple[int, ...]:
    """The T values of `tokens = "engine:..."`: what the engine's captured graphs carry at `tokens_per_request`
    (1 in decode; K + 1 when verifying K draft tokens); UsageError naming the allowed forms. `engine`: the release
    the sweep's [run] engine names ("vllm==0.34"); vLLM's sizes follow it (VLLM_DEFAULT_RELEASE otherwise).

    SGLang: each captured batch size x tokens per request (its verify graphs hold bs x num_draft_tokens rows:
    sglang/srt/model_executor/runner/decode_cuda_graph_runner.py, bs * captured_req_width).
    vLLM: the decode graphs' sizes (vllm_graphs), on the SM100 family where ":sm=" names a 10.x GPU."""
    match = _FORM.match(text.strip()) if isinstance(text, str) else None
    if match is None or match["engine"] not in ENGINES:
        raise UsageError(f"expected {ENGINE_TOKENS_FORM}, got {text!r}")
    digits = match["max_batch"]
    if digits and (len(digits) > len(str(MAX_BATCH)) or int(digits) > MAX_BATCH):  # int() of 5000 digits raises
        raise UsageError(f"{text}: max_batch is above {MAX_BATCH} (allowed: 1..{MAX_BATCH} requests)")
    max_batch = int(digits) if digits else None
    if match["gpu_mem"] and match["engine"] != "sglang":
        raise UsageError(f"{text}: gpu_mem is SGLang's (its default max batch follows the GPU's memory)")
    if match["sm"] and match["engine"] != "vllm":
        raise UsageError(f"{text}: sm is vLLM's (its default capture sizes widen on the SM100 family)")
    if max_batch is not None and max_batch < 1:
        raise UsageError(f"{text}: max_batch must be >= 1")
    if match["engine"] == "sglang":
        default = sglang_default_max_bs(float(match["gpu_mem"]) if match["gpu_mem"] else None, tp or 8)
        batches = sglang_decode_batch_sizes(max_batch or default, speculative=tokens_per_request > 1)
        return tuple(sorted({bs * tokens_per_request for bs in batches}))
    release = engine.partition("==")[2] if engine and engine_name(engine) == "vllm" else VLLM_DEFAULT_RELEASE
    if release not in VLLM_RELEASES:
        raise UsageError(f"{text}: vLLM {release}'s capture sizes are not read (known: {', '.join(VLLM_RELEASES)})")
    sm100 = bool(match["sm"]) and match["sm"].split(".")[0] == "10"  # vLLM's is_device_capability_family(100)
    return vllm_graphs(release, sm100, tokens_per_request, max_batch or VLLM_MAX_NUM_SEQS).decode
