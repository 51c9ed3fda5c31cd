"""Step plans per model family, from published config values, against what SGLang and vLLM issue.

The expected counts restate each engine's rule (docs/step-plan.md) for the model's published facts; the
configs are trimmed copies in tests/fixtures/model-configs (SOURCES.md there).
"""

import json
from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.planner.models import load_model, shape_from_config
from commprof.planner.plan import build_step_plan

CONFIGS = Path(__file__).parent / "fixtures" / "model-configs"


def model(name: str, layout: str | None = None):
    # Falcon has no SGLang model (its refusal: test_plan_engines): planned as vLLM issues it.
    return load_model(str(CONFIGS / f"{name}.json"), layout, "vllm==0.34" if name.startswith("Falcon") else None)


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


# (config, layers, layout, all-reduces at TP 8 that the engine rule gives, why)
FAMILIES = [
    ("Nemotron-H-8B-Base-8K", 52, "hybrid", 52 + 1, "one mixer per layer, one all-reduce each, + embedding"),
    ("Falcon-40B", 60, "parallel", 60 + 1, "new_decoder_architecture: attention + MLP reduced once per layer"),
    ("c4ai-command-r-v01", 40, "standard", 2 * 40 + 1, "parallel residual, but o_proj and down_proj both reduce"),
    ("gpt-neox-20b", 44, "standard", 2 * 44 + 1, "use_parallel_residual, but dense and dense_4h_to_h both reduce"),
    ("GLM-4.5-Air", 46, "standard", 2 * 46 + 1, "shared expert summed before the MoE's one all-reduce"),
    ("Mixtral-8x7B-v0.1", 32, "standard", 2 * 32 + 1, "attention, then the experts' one all-reduce"),
]


@pytest.mark.parametrize("name,layers,layout,reduces,why", FAMILIES)
def test_family_counts_at_tp8_t4(name, layers, layout, reduces, why):
    shape = model(name)
    assert (shape.num_layers, shape.layout) == (layers, layout)
    plan = build_step_plan(shape, 8, 4)
    assert plan.count("all_reduce") == reduces, why
    assert plan.count("all_gather") == 1 and plan.ops[-1].site == "logits"
    assert plan.ops[0].site == "embed"
    assert all(op.shape == (4, shape.hidden_size) for op in plan.ops if op.collective == "all_reduce")


def test_kimi_k25_preset_gives_123():
    assert build_step_plan(load_model("kimi-k2.5"), 8, 4).count("all_reduce") == 2 * 61 + 1


def test_hybrid_sites_follow_the_pattern():
    shape = model("Nemotron-H-8B-Base-8K")
    pattern = config("Nemotron-H-8B-Base-8K")["hybrid_override_pattern"]
    plan = build_step_plan(shape, 8, 4)
    kinds = {"M": "mamba", "*": "attn", "-": "mlp", "E": "moe"}
    assert [op.site for op in plan.ops[1:-1]] == [f"layer.{i}.{kinds[c]}" for i, c in enumerate(pattern)]
    assert sum(op.site_kind == "attn" for op in plan.ops) == pattern.count("*") == 4


def test_hybrid_from_layers_block_type():
    raw = config("Nemotron-H-8B-Base-8K")
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    raw["layers_block_type"] = [names[c] for c in raw.pop("hybrid_override_pattern")]
    assert shape_from_config(raw, "n", "test").layers == model("Nemotron-H-8B-Base-8K").layers


def test_falcon_layout_follows_its_flags():
    assert model("Falcon-7B").layout == "parallel"  # parallel_attn without the new decoder architecture
    sequential = {**config("Falcon-7B"), "parallel_attn": False}
    shape = shape_from_config(sequential, "falcon", "test", engine="vllm==0.34")
    assert shape.layout == "standard" and not shape.rmsnorm_after  # LayerNorm follows, nothing to fuse
    assert build_step_plan(model("Falcon-40B"), 8, 4).ops[1].site == "layer.0.attn+mlp"


def test_dense_first_layers_and_moe_sites():
    sites = [op.site_kind for op in build_step_plan(model("GLM-4.5-Air"), 8, 1).ops]
    assert sites[1:5] == ["attn", "mlp", "attn", "moe"]  # first_k_dense_replace = 1
    assert sites.count("moe") == 45
    deepseek = [op.site_kind for op in build_step_plan(load_model("deepseek-v3"), 8, 1).ops]
    assert deepseek.count("mlp") == 3 and deepseek.count("moe") == 58


def test_rmsnorm_after_only_where_rmsnorm_follows():
    assert all(op.rmsnorm_after for op in build_step_plan(model("Mixtral-8x7B-v0.1"), 8, 4).ops[1:-1])
    assert not any(op.rmsnorm_after for op in build_step_plan(model("c4ai-command-r-v01"), 8, 4).ops)


# --- TP validity ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,tp,needle",
    [
        (lambda: model("Mixtral-8x7B-v0.1"), 6, "32 attention heads do not divide by 6"),
        (lambda: load_model("kimi-k2.5"), 3, "64 attention heads do not divide by 3"),
        (lambda: model("Falcon-7B"), 8, "71 attention heads do not divide by 8"),
        (lambda: model("Nemotron-H-8B-Base-8K"), 16, "8 Mamba groups neither divide by 16"),
        (lambda: model("Mixtral-8x7B-v0.1"), 6, "(32000) does not divide by 6"),
    ],
)
def test_impossible_tp_is_refused(shape, tp, needle):
    with pytest.raises(UsageError, match=f"TP {tp} is impossible") as error:
        build_step_plan(shape(), tp, 4)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_kv_heads_fewer_than_tp_are_replicated():
    # Qwen3-235B-A22B: 4 KV heads at TP 8, each held by two ranks, as the engines do.
    assert build_step_plan(load_model("qwen3-235b-a22b"), 8, 4).count("all_reduce") == 2 * 94 + 1
    uneven = shape_from_config(
        {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 768, "vocab_size": 1024}
        | {"num_attention_heads": 12, "num_key_value_heads": 3},
        "uneven",
        "test",
    )
    with pytest.raises(UsageError, match=r"3 KV heads cannot be replicated evenly over 4 ranks"):
        build_step_plan(uneven, 4, 1)


def test_vocab_is_padded_to_64_then_split():
    plan = build_step_plan(model("gpt-neox-20b"), 8, 2)  # 50432 = 788 x 64
    assert plan.ops[-1].input_shape == (2, 50432 // 8) and plan.ops[-1].shape == (2, 50432)
    plan = build_step_plan(load_model("deepseek-v3"), 8, 2)  # 129280 = 2020 x 64
    assert plan.ops[-1].shape == (2, 129280)


# --- unknown architectures, overrides, size limits ------------------------------------------------------


def unknown(tmp_path, **extra) -> str:
    path = tmp_path / "config.json"
    raw = {"architectures": ["JambaForCausalLM"], "num_hidden_layers": 4, "hidden_size": 256, "vocab_size": 1024}
    path.write_text(json.dumps(raw | extra))
    return str(path)


def test_unknown_architecture_names_families_and_override(tmp_path):
    with pytest.raises(UsageError) as error:
        load_model(unknown(tmp_path))
    text = str(error.value)
    assert "'JambaForCausalLM'" in text and "hybrid: Nemotron-H" in text and "--layout standard|parallel" in text


def test_layout_override(tmp_path):
    path = unknown(tmp_path)
    assert build_step_plan(load_model(path, "hybrid:M*M-"), 8, 1).count("all_reduce") == 4 + 1
    assert build_step_plan(load_model(path, "parallel"), 8, 1).count("all_reduce") == 4 + 1
    assert build_step_plan(load_model(path, "standard"), 8, 1).count("all_reduce") == 2 * 4 + 1
    for bad, needle in (
        ("hybrid:MMX*", "'X', not a mixer"),
        ("hybrid:M*", "2 layers, the config 4"),
        ("tree", "is not a layout"),
    ):
        with pytest.raises(UsageError, match=needle):
            load_model(path, bad)


@pytest.mark.parametrize(
    "field,value,limit",
    [("num_hidden_layers", 10**9, "2000"), ("hidden_size", 10**7, "131072"), ("vocab_size", 10**8, "16777216")],
)
def test_absurd_sizes_are_refused_before_planning(tmp_path, field, value, limit):
    raw = config("Mixtral-8x7B-v0.1") | {field: value}
    with pytest.raises(UsageError, match=rf"'{field}' = {value} is beyond any model \(allowed: 1\.\.{limit}\)"):
        shape_from_config(raw, "absurd", "test")


def test_configs_that_are_not_small_json_files(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    digits = tmp_path / "digits.json"
    digits.write_text('{"num_hidden_layers": ' + "9" * 5000 + "}")
    for path in (deep, digits, Path("/dev/zero")):
        with pytest.raises(UsageError, match="not usable JSON|not a regular file"):
            load_model(str(path))


def test_nemotron_h_without_n_groups_has_the_config_class_default_of_8():
    """transformers' NemotronHConfig fills in mamba_n_groups=8 when config.json omits it; vLLM then refuses TP 16."""
    raw = {k: v for k, v in config("Nemotron-H-8B-Base-8K").items() if k not in ("n_groups", "mamba_n_groups")}
    shape = shape_from_config(raw, "no-groups", "test")
    assert shape.mamba_groups == 8
    with pytest.raises(UsageError, match="8 Mamba groups neither divide by 16"):
        build_step_plan(shape, 16, 4)
    build_step_plan(shape, 8, 4)


@pytest.mark.parametrize("name", ["c4ai-command-r-v01", "Mixtral-8x7B-v0.1"])
def test_dp_attention_is_refused_where_sglang_has_no_such_path(name):
    from commprof.planner.speculative import PlanOptions

    with pytest.raises(UsageError, match="no DP attention for .* SGLang 0.5.23 models/"):
        build_step_plan(model(name), 8, 4, options=PlanOptions(dp_attention=True))
    build_step_plan(model(name), 8, 4)  # without it, planned as before
