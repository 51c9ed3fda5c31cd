"""Step plans against the counts and sizes engines really communicate (docs: engine-collectives)."""

import json
import time

import pytest

from commprof.cli import main
from commprof.errors import UsageError
from commprof.planner.models import PRESETS, load_model
from commprof.planner.plan import build_step_plan, graph_bucket, step_tokens, tokens_per_request

# (layers, hidden, vocab) from each model's published config.json.
SHAPES = {
    "kimi-k2.5": (61, 7168, 163840),
    "kimi-k2": (61, 7168, 163840),
    "deepseek-v3": (61, 7168, 129280),
    "llama-3.1-70b": (80, 8192, 128256),
    "llama-3.1-405b": (126, 16384, 128256),
    "qwen3-235b-a22b": (94, 4096, 151936),
}


def test_every_preset_is_covered():
    assert set(SHAPES) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("tp,tokens", [(8, 4), (2, 1), (4, 16)])
def test_plan_counts_and_sizes(name, tp, tokens):
    layers, hidden, vocab = SHAPES[name]
    model = load_model(name)
    assert (model.num_layers, model.hidden_size, model.vocab_size, model.dtype) == (layers, hidden, vocab, "bfloat16")
    plan = build_step_plan(model, tp, tokens)
    reduces = [op for op in plan.ops if op.collective == "all_reduce"]
    gathers = [op for op in plan.ops if op.collective == "all_gather"]
    assert len(reduces) == 2 * layers + 1 and len(gathers) == 1
    assert all(op.shape == (tokens, hidden) and op.bytes == tokens * hidden * 2 for op in reduces)
    assert [op.index for op in plan.ops] == list(range(len(plan.ops)))
    assert plan.ops[0].site == "embed" and plan.ops[-1].site == "logits"
    assert plan.ops[1].site == "layer.0.attn" and plan.ops[2].site_kind in ("mlp", "moe")
    gather = gathers[0]
    padded = -(-vocab // 64) * 64
    assert gather.input_shape == (tokens, -(-padded // tp)) and gather.shape == (tokens, gather.input_shape[1] * tp)
    assert plan.total_bytes == sum(op.bytes for op in plan.ops)


def test_field_report_verify_step():
    plan = build_step_plan(load_model("kimi-k2.5"), 8, 4)
    layer_reduces = [op for op in plan.ops if op.site.startswith("layer.")]
    assert len(layer_reduces) == 122 and plan.count("all_reduce") == 123
    assert layer_reduces[0].bytes == 57344  # [4, 7168] bf16
    assert all(op.rmsnorm_after for op in layer_reduces) and not plan.ops[0].rmsnorm_after


def test_dtype_override_changes_bytes():
    plan = build_step_plan(load_model("llama-3.1-70b"), 8, 2, dtype="float32")
    assert plan.ops[0].bytes == 2 * 8192 * 4 and plan.model.dtype == "float32"


def test_multimodal_wrapper_and_missing_fields(tmp_path):
    text = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 3, "hidden_size": 64, "vocab_size": 1000}
    wrapper = {"architectures": ["SomeVisionWrapper"], "text_config": text}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapper))
    model = load_model(str(path))
    assert (model.num_layers, model.hidden_size, model.vocab_size) == (3, 64, 1000)
    assert load_model(str(tmp_path)).num_layers == 3  # a model folder works too
    path.write_text(json.dumps({"num_hidden_layers": 3, "vocab_size": 10}))
    with pytest.raises(UsageError, match="hidden_size"):
        load_model(str(path))
    path.write_text("[1, 2]")
    with pytest.raises(UsageError, match="JSON object"):
        load_model(str(path))
    with pytest.raises(UsageError, match="known presets: kimi-k2.5"):
        load_model("gpt-7")


@pytest.mark.parametrize(
    "field, value",
    [("num_hidden_layers", 10**9), ("hidden_size", 10**9), ("vocab_size", 10**12)],
)
def test_a_config_beyond_any_model_is_refused_in_one_line_at_once(tmp_path, capsys, field, value):
    config = {"num_hidden_layers": 3, "hidden_size": 64, "vocab_size": 1000, field: value}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    started = time.monotonic()
    assert main(["plan", "--model", str(path), "--tp", "2", "--tokens", "4"]) == 2
    assert time.monotonic() - started < 5
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{path}: '{field}' = {value} is beyond any model (allowed: 1.." in line


@pytest.mark.parametrize("tp,tokens,phase", [(0, 4, "verify"), (8, 0, "verify"), (8, 4, "prefill")])
def test_bad_plan_inputs(tp, tokens, phase):
    with pytest.raises(UsageError):
        build_step_plan(load_model("kimi-k2.5"), tp, tokens, phase)


def test_speculative_token_rules():
    assert tokens_per_request("eagle", num_steps=3) == 4
    assert tokens_per_request("ngram") == 12 and tokens_per_request("ngram", draft_tokens=8) == 8
    assert step_tokens("verify", batch=3, per_request=4) == 12
    assert step_tokens("verify", batch=9, per_request=4, pad_to_graph_bucket=True) == 40  # bucket 10
    assert step_tokens("decode", batch=5) == 5
    assert [graph_bucket(b) for b in (1, 8, 9, 33, 65, 256, 300)] == [1, 8, 10, 40, 72, 256, 300]
    with pytest.raises(UsageError):
        step_tokens("decode", per_request=4)
    with pytest.raises(UsageError):
        tokens_per_request("eagle", num_steps=3, topk=4)
