"""The speculative cycle's draft collectives and the DP-attention layout (SGLang's rules, docs/step-plan.md)."""

from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.planner.models import load_model
from commprof.planner.plan import PlanOptions, build_step_plan

CONFIGS = Path(__file__).parent / "fixtures" / "model-configs"


def test_eagle_draft_steps_after_the_verify_forward():
    kimi = load_model("kimi-k2.5")
    plan = build_step_plan(kimi, 8, 8, options=PlanOptions("eagle", 3, draft_vocab=32000))  # batch 2, K = 3
    target = [op for op in plan.ops if not op.draft]
    draft = [op for op in plan.ops if op.draft]
    assert target == list(plan.ops[: len(target)])  # verify first, then the draft's steps
    assert len(target) == 124 and [op.site for op in target] == [op.site for op in build_step_plan(kimi, 8, 8).ops]
    # Per draft step: embedding, the EAGLE-3 layer's attention and MLP, the draft logits.
    assert [op.site for op in draft[:4]] == [
        "draft.0.embed",
        "draft.0.layer.0.attn",
        "draft.0.layer.0.mlp",
        "draft.0.logits",
    ]
    assert (
        len(draft) == 3 * 4 and plan.count("all_reduce", draft=True) == 9 and plan.count("all_gather", draft=True) == 3
    )
    # Step 0 extends over the verified tokens (T = 8); steps 1 and 2 decode one token per request (batch 2).
    assert [op.shape for op in draft if op.site_kind == "attn"] == [(8, 7168), (2, 7168), (2, 7168)]
    assert all(op.shape == (2, 32000) and op.input_shape == (2, 4000) for op in draft if op.site_kind == "logits")
    assert plan.summary()["draft_ops"] == 12 and plan.summary()["spec"] == "eagle"


def test_mtp_draft_is_the_models_own_moe_layer():
    glm = load_model(str(CONFIGS / "GLM-4.5-Air.json"))
    plan = build_step_plan(glm, 8, 4, options=PlanOptions("mtp", 1))
    draft = [op.site for op in plan.ops if op.draft]
    assert draft == ["draft.0.embed", "draft.0.layer.0.attn", "draft.0.layer.0.moe", "draft.0.logits"]
    assert plan.ops[-1].shape == (2, 151552)  # the target's vocabulary, one row per request


@pytest.mark.parametrize(
    "name,tokens,phase,options,needle",
    [
        ("kimi-k2.5", 4, "verify", PlanOptions("mtp", 3), "num_nextn_predict_layers"),
        ("kimi-k2.5", 6, "verify", PlanOptions("eagle", 3), "T = 6 is not a whole batch of 4-token requests"),
        ("kimi-k2.5", 4, "decode", PlanOptions("eagle", 3), "verify phase"),
    ],
)
def test_draft_that_cannot_be(name, tokens, phase, options, needle):
    with pytest.raises(UsageError, match=needle):
        build_step_plan(load_model(name), 8, tokens, phase, options=options)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"spec": "eagle"}, "--num-steps >= 1"),
        ({"spec": "eagle", "num_steps": 10**6}, "limit of 64 draft steps"),
        ({"spec": "mtp", "num_steps": 2, "draft_vocab": 32000}, "applies to --spec eagle"),
        ({"spec": "medusa"}, "unknown speculative method"),
    ],
)
def test_bad_spec_options(kwargs, needle):
    with pytest.raises(UsageError, match=needle):
        PlanOptions(**kwargs)


def test_ngram_has_no_draft_model():
    plan = build_step_plan(load_model("kimi-k2.5"), 8, 12, options=PlanOptions("ngram"))
    assert not any(op.draft for op in plan.ops)


def test_dp_attention_gathers_and_scatters_instead_of_all_reduces():
    deepseek = load_model("deepseek-v3")
    plan = build_step_plan(deepseek, 8, 4, options=PlanOptions(dp_attention=True))  # 4 tokens on each rank
    assert plan.count("all_reduce") == 0
    assert plan.count("all_gather") == 61 + 2 and plan.count("reduce_scatter") == 61
    gather, scatter = plan.ops[0], plan.ops[1]
    assert (gather.site, gather.input_shape, gather.shape) == ("layer.0.dp_gather", (4, 7168), (32, 7168))
    assert (scatter.site, scatter.input_shape, scatter.shape) == ("layer.0.dp_scatter", (32, 7168), (4, 7168))
    assert gather.bytes == scatter.bytes == 32 * 7168 * 2  # nccl-tests' size: the whole gathered buffer
    assert [op.site for op in plan.ops[-2:]] == ["logits.dp_gather", "logits"]
    assert plan.ops[-1].input_shape == (32, 129280 // 8)


def test_dp_attention_lifts_the_head_rule_but_not_the_vocabulary_rule():
    deepseek = load_model("deepseek-v3")
    with pytest.raises(UsageError, match="attention heads"):
        build_step_plan(deepseek, 6, 4)
    with pytest.raises(UsageError, match=r"\(129280\) does not divide by 6") as error:
        build_step_plan(deepseek, 6, 4, options=PlanOptions(dp_attention=True))
    assert "attention heads" not in str(error.value)


def test_dp_attention_with_mtp():
    plan = build_step_plan(load_model("deepseek-v3"), 8, 2, options=PlanOptions("mtp", 1, dp_attention=True))
    assert [op.site for op in plan.ops if op.draft] == [
        "draft.0.layer.0.dp_gather",
        "draft.0.layer.0.dp_scatter",
        "draft.0.logits.dp_gather",
        "draft.0.logits",
    ]
