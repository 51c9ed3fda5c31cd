"""A layout can carry extra small all-reduces per layer: MiniMax-M2's q/k variances (fp32, 1-D: 2T elements in vLLM,
padded to a multiple of 4 in SGLang) before every attention reduction are planned by its family (3 per layer, not
2), the same count is expressible with
`--layout standard+extra@attn:2:float32`, and an architecture no layout describes (Kimi-K3's latent MoE) is refused
saying so, not told to try `--layout standard`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.planner.architectures import parse_layout
from commprof.planner.models import shape_from_config
from commprof.planner.plan import build_step_plan

# The fields commprof reads of MiniMax-M2's config.json (62 layers: 3 x 62 + 1 = 187 all-reduces).
MINIMAX = json.loads((Path(__file__).parent / "fixtures" / "model-configs" / "MiniMax-M2.json").read_text())


@pytest.mark.parametrize(
    "engine,tokens,shape",
    [
        ("sglang==0.5.23", 4, (8,)),
        ("sglang==0.5.23", 3, (8,)),  # rms_sumsq_serial: B_padded = (B + B2 + 3) // 4 * 4
        ("sglang==0.5.23", 1, (4,)),
        ("vllm==0.33", 3, (6,)),  # _all_reduce_variance: var.flatten() of [T, 2]
        ("vllm==0.34", 1, (2,)),
    ],
)
def test_minimax_m2_plans_its_q_k_variance_all_reduce_per_attention_layer(engine, tokens, shape):
    plan = build_step_plan(shape_from_config(MINIMAX, "minimax", "cfg", engine=engine), 8, tokens)
    assert plan.count("all_reduce") == 187
    layer0 = [op for op in plan.ops if op.site.startswith("layer.0.")]
    assert [op.site for op in layer0] == ["layer.0.extra", "layer.0.attn", "layer.0.moe"]
    assert (layer0[0].shape, layer0[0].dtype, layer0[0].bytes) == (shape, "float32", 4 * shape[0])


def test_the_same_is_expressible_as_a_layout():
    config = {**MINIMAX, "architectures": ["SomethingNew"]}
    with pytest.raises(UsageError, match=r"\+extra@SITE:WIDTH"):
        shape_from_config(config, "new", "cfg")  # the refusal's advice names the grammar
    shape = shape_from_config(config, "new", "cfg", layout="standard+extra@attn:2:float32")
    assert build_step_plan(shape, 8, 4).count("all_reduce") == 187
    assert parse_layout("hybrid:M*+extra@mamba:1+extra@attn:2:float32") == (
        "hybrid",
        "M*",
        (("mamba", 1, None, 0), ("attn", 2, "float32", 0)),
    )


@pytest.mark.parametrize("bad", ["standard+extra@lm_head:2", "standard+extra@attn:0", "standard+extra@attn:2:int8"])
def test_an_extra_that_is_not_site_width_dtype_is_refused(bad):
    with pytest.raises(UsageError, match="is not SITE:WIDTH"):
        parse_layout(bad)


def test_kimi_k3_is_refused_as_not_expressible_by_one_layout():
    config = {**MINIMAX, "architectures": ["KimiK3ForConditionalGeneration"]}
    with pytest.raises(UsageError, match="cannot be planned: its latent MoE") as refused:
        shape_from_config(config, "k3", "cfg")
    assert "latent_moe_runner.py" in str(refused.value) and "standard+extra@moe" in str(refused.value)


def test_kimi_k3_override_plans_its_first_dense_layer_as_vllm_issues_it():
    # KimiLinearConfig: num_experts with first_k_dense_replace; layer 0 is a dense MLP (one reduction, no latent one)
    config = {**MINIMAX, "architectures": ["KimiK3ForConditionalGeneration"], "num_local_experts": None}
    config |= {"num_experts": 384, "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_hidden_layers": 4}
    shape = shape_from_config(config, "k3", "cfg", layout="standard+extra@moe:1536")
    sites = [op.site for op in build_step_plan(shape, 8, 4).ops if op.collective == "all_reduce"]
    assert sites[1:4] == ["layer.0.attn", "layer.0.mlp", "layer.1.attn"]
    assert len(sites) == 1 + 2 * 4 + 3  # the embedding, attention and MLP / MoE per layer, a latent one per MoE
