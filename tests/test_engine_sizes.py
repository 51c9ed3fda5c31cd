"""`tokens = "engine:..."`: the T values vLLM 0.33 and SGLang 0.5.23 capture CUDA graphs for, by their defaults.

The expected lists are written out from the engines' source (vllm/config/vllm.py VllmConfig._set_cudagraph_sizes;
sglang/srt/arg_groups/cuda_graph_hook.py generate_decode_cuda_graph_batch_sizes), not from commprof's code.
"""

import pytest

from commprof.errors import UsageError
from commprof.planner.engine_sizes import engine_tokens, sglang_decode_batch_sizes, vllm_capture_sizes
from commprof.sweep.planning.config import parse_sweep
from commprof.sweep.planning.spec import RunOverrides


def test_vllm_default_capture_sizes():
    # max_num_seqs 1024 (>= 70 GiB GPU), query length 1: max_graph_size = min(1024 * 1 * 2, 512) = 512; the
    # 8192 batched tokens lie beyond it and max_num_seqs is no uniform size below it.
    expected = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert vllm_capture_sizes() == expected
    assert engine_tokens("engine:vllm", 1, 8) == tuple(expected)
    # SM100: a ceiling of 1024.
    assert vllm_capture_sizes(blackwell_datacenter=True)[-1] == 1024


def test_vllm_speculative_sizes_are_the_uniform_decode_batches():
    # 3 draft tokens: query length 4; the uniform sizes 4 x {1, 2, 4, 8, 16, ...} up to 512, merged with the grid.
    sizes = vllm_capture_sizes(num_speculative_tokens=3)
    assert {4, 8, 16, 32, 64, 96, 128, 512} <= set(sizes) and 12 not in sizes  # 12 = 4 x 3 is no request count
    verify = engine_tokens("engine:vllm", 4, 8)
    assert verify and all(t % 4 == 0 for t in verify) and verify == tuple(s for s in sizes if s % 4 == 0)
    # A small server: 8 requests, query length 2 -> max_graph_size 32; uniform 2 x {1, 2, 4, 8}.
    assert vllm_capture_sizes(max_num_seqs=8, num_speculative_tokens=1) == [1, 2, 4, 8, 16, 24, 32]


def test_sglang_default_decode_batches_times_tokens_per_request():
    plain = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + [512]
    assert sglang_decode_batch_sizes(512, speculative=False) == plain
    assert engine_tokens("engine:sglang", 1, 8) == tuple(plain)
    spec = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
    spec += list(range(272, 513, 16))
    assert sglang_decode_batch_sizes(512, speculative=True) == spec
    assert engine_tokens("engine:sglang", 4, 8) == tuple(4 * bs for bs in spec)
    # Below TP 4 the default max batch is 256; a max_batch off the grid is captured too.
    assert engine_tokens("engine:sglang", 1, 2)[-1] == 256
    assert engine_tokens("engine:sglang:max_batch=20", 1, 8) == (1, 2, 4, 8, 12, 16, 20)


def test_sglang_default_max_batch_follows_the_gpus_memory():
    # memory_hook.handle_gpu_memory_settings: 48 / 160 below 35 GiB, 32 / 160 at 35-60 GiB, 512 above 160 GiB.
    assert engine_tokens("engine:sglang:gpu_mem=32", 1, 2)[-1] == 48  # RTX 5090, TP 2
    assert engine_tokens("engine:sglang:gpu_mem=24", 1, 8)[-1] == 160  # RTX 4090, TP 8
    assert engine_tokens("engine:sglang:gpu_mem=48", 1, 2)[-1] == 32
    assert engine_tokens("engine:sglang:gpu_mem=180", 1, 2)[-1] == 512
    with pytest.raises(UsageError, match="gpu_mem"):
        engine_tokens("engine:vllm:gpu_mem=32", 1, 8)


def test_bad_engine_forms_are_refused():
    for bad in ("engine:trt", "engine:vllm:max_batch=0", "engine:vllm:bs=4", "vllm"):
        with pytest.raises(UsageError, match="engine:sglang|max_batch"):
            engine_tokens(bad, 1, 8)


def test_a_sweep_file_expands_engine_tokens_with_its_draft_tokens():
    text = '[run]\nmodel = "kimi-k2.5"\ntokens = "engine:sglang:max_batch=8"\nspec = "eagle"\nnum_steps = 3\n'
    spec = parse_sweep(text)
    assert spec.tokens == tuple(4 * bs for bs in range(1, 9)) and spec.tokens_from == "engine:sglang:max_batch=8"
    with pytest.raises(UsageError, match="run.tokens"):
        parse_sweep('[run]\ntokens = "engine:nope"\n')
    assert spec.with_overrides(RunOverrides(tokens=[4])).tokens_from is None
