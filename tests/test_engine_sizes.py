"""`tokens = "engine:..."`: the T values vLLM 0.33 / 0.34 and SGLang 0.5.23 capture CUDA graphs for, by their
defaults, for the release the sweep names.

The expected lists are written out from the engines' source (vllm/config/vllm.py VllmConfig._set_cudagraph_sizes and,
in 0.34, _split_cudagraph_capture_sizes with config/compilation.py decode_cudagraph_capture_grid;
sglang/srt/arg_groups/cuda_graph_hook.py generate_decode_cuda_graph_batch_sizes), not from commprof's code.
"""

import pytest

from commprof.errors import UsageError
from commprof.planner.engine_sizes import (
    engine_tokens,
    sglang_decode_batch_sizes,
    vllm_capture_sizes,
    vllm_graphs,
    vllm_request_grid,
)
from commprof.sweep.planning.config import parse_sweep
from commprof.sweep.planning.spec import RunOverrides


def test_vllm_default_capture_sizes():
    # max_num_seqs 1024 (>= 70 GiB GPU), query length 1: max_graph_size = min(1024 * 1 * 2, 512) = 512; the
    # 8192 batched tokens lie beyond it and max_num_seqs is no uniform size below it.
    expected = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert vllm_capture_sizes() == expected
    assert engine_tokens("engine:vllm", 1, 8) == tuple(expected)
    # SM100: a ceiling of 1024.
    assert vllm_capture_sizes(sm100=True)[-1] == 1024
    assert engine_tokens("engine:vllm:sm=10.0", 1, 8) == tuple(expected + list(range(528, 1025, 16)))


# vLLM 0.34 decode_cudagraph_capture_grid's docstring: "every count up to 6, then a step of the largest power of two
# not above 0.65 * n^(2/3) (2 from 8, 4 from 16, 8 from 48, 16 from 128, 32 from 352): 64 sizes at 1024".
GRID_1024 = [*range(1, 7), *range(8, 16, 2), *range(16, 48, 4), *range(48, 128, 8), *range(128, 352, 16)]
GRID_1024 += [*range(352, 1024, 32), 1024]


def test_vllm_0_34_captures_decode_graphs_per_request_count_on_the_sm100_family():
    assert vllm_request_grid(1024) == GRID_1024 and len(GRID_1024) == 64
    assert vllm_graphs("0.34", sm100=True) == vllm_graphs("0.34", True, 1)
    graphs = vllm_graphs("0.34", sm100=True)
    assert graphs.decode == tuple(GRID_1024) and graphs.largest == 8192  # the prefill grid reaches 8192 tokens
    # 3 draft tokens: 4 tokens a request, every request count of the grid (4096 tokens at most, within 8192).
    assert vllm_graphs("0.34", True, 4).decode == tuple(4 * n for n in GRID_1024)
    # 9 tokens a request: at most 8192 // 9 = 910 requests; 928, the first count past it, is captured at 910.
    nine = vllm_graphs("0.34", True, 9).decode
    assert nine[-2:] == (9 * 896, 9 * 910) and 9 * 928 not in nine


def test_vllm_0_34_rounds_each_capture_size_up_to_whole_requests_off_sm100():
    # Query length 1 or 4 (the grid's 8-token stride divides by it): the same sizes as 0.33.
    for query in (1, 4):
        assert vllm_graphs("0.34", False, query) == vllm_graphs("0.33", False, query)
    # Query length 3: 0.33 dispatches only to sizes a multiple of 3; 0.34 rounds 8 up to 3 requests (9 tokens),
    # 16 to 6 (18) and 32 to 11 (33), each within the largest capture size, 512.
    v33, v34 = vllm_graphs("0.33", False, 3), vllm_graphs("0.34", False, 3)
    assert {9, 18, 33} <= set(v34.decode) and not {9, 18, 33} & set(v33.decode)
    assert set(v33.decode) <= set(v34.decode) and v34.decode[-1] == 504 and v34.largest == 512


def test_the_vllm_sizes_follow_the_release_the_sweep_names():
    run = '[run]\nmodel = "kimi-k2.5"\ntokens = "engine:vllm:sm=10.0"\n'
    assert parse_sweep(run).tokens == tuple(vllm_capture_sizes(sm100=True))  # none named: 0.33
    assert parse_sweep(run + 'engine = "vllm==0.34"\n').tokens == tuple(GRID_1024)
    assert parse_sweep(run + 'engine = "vllm==0.33.2"\n').tokens == tuple(vllm_capture_sizes(sm100=True))
    # Not the SM100 family (an RTX PRO 6000 is SM120): 0.34 as 0.33 at one token a request.
    blackwell_pro = '[run]\nmodel = "kimi-k2.5"\ntokens = "engine:vllm:sm=12.0"\nengine = "vllm==0.34"\n'
    assert parse_sweep(blackwell_pro).tokens == engine_tokens("engine:vllm", 1, 8)


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
    with pytest.raises(UsageError, match="sm is vLLM's"):
        engine_tokens("engine:sglang:sm=10.0", 1, 8)


def test_bad_engine_forms_are_refused():
    for bad in ("engine:trt", "engine:vllm:max_batch=0", "engine:vllm:bs=4", "vllm", "engine:vllm:sm=100"):
        with pytest.raises(UsageError, match="engine:sglang|max_batch"):
            engine_tokens(bad, 1, 8)
    with pytest.raises(UsageError, match="vLLM 0.35's capture sizes are not read"):
        engine_tokens("engine:vllm", 1, 8, "vllm==0.35")


def test_a_sweep_file_expands_engine_tokens_with_its_draft_tokens():
    text = '[run]\nmodel = "kimi-k2.5"\ntokens = "engine:sglang:max_batch=8"\nspec = "eagle"\nnum_steps = 3\n'
    spec = parse_sweep(text)
    assert spec.tokens == tuple(4 * bs for bs in range(1, 9)) and spec.tokens_from == "engine:sglang:max_batch=8"
    with pytest.raises(UsageError, match="run.tokens"):
        parse_sweep('[run]\ntokens = "engine:nope"\n')
    assert spec.with_overrides(RunOverrides(tokens=[4])).tokens_from is None
