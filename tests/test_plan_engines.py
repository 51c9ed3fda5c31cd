"""A family whose collectives differ by engine is planned per engine: Command-R reduces once per layer under
vLLM 0.33 / 0.34 (models/commandr.py) and twice under SGLang 0.5.23; Falcon cannot run with tensor parallelism in
SGLang 0.5.23 and is refused saying why; `plan --engine` and the sweep's `[run] engine` pick one, and a release
commprof has not read is refused naming the ones it has."""

from __future__ import annotations

import json

import pytest

from commprof.cli import main
from commprof.errors import UsageError
from commprof.planner.engines import parse_plan_engine
from commprof.planner.models import load_model
from commprof.sweep.planning.config import parse_sweep

COMMAND_R = "tests/fixtures/model-configs/c4ai-command-r-v01.json"  # 40 layers


@pytest.mark.parametrize(
    "engine,reduces", [("vllm==0.33", 41), ("vllm==0.33.1", 41), ("vllm==0.34", 41), ("sglang==0.5.23", 81)]
)
def test_command_r_all_reduces_per_engine(engine, reduces, capsys):
    assert main(["plan", "--model", COMMAND_R, "--engine", engine, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["all_reduce"] == reduces
    layer_sites = {op["site"].rsplit(".", 1)[-1] for op in plan["ops"] if op["site"].startswith("layer.")}
    assert layer_sites == ({"attn+mlp"} if reduces == 41 else {"attn", "mlp"})


CONFIGS = "tests/fixtures/model-configs"


@pytest.mark.parametrize(
    "model", ["Falcon-40B", "c4ai-command-r-v01", "GLM-4.5-Air", "Mixtral-8x7B-v0.1", "Nemotron-H-8B-Base-8K"]
)
def test_vllm_034_plans_as_033_its_model_files_unchanged_for_these_reductions(model, capsys):
    plans = []
    for engine in ("vllm==0.33", "vllm==0.34"):
        assert main(["plan", "--model", f"{CONFIGS}/{model}.json", "--engine", engine, "--json"]) == 0
        plans.append({k: v for k, v in json.loads(capsys.readouterr().out).items() if k != "model_source"})
    assert plans[0] == plans[1] and plans[0]["all_reduce"] > 1


def test_falcon_is_refused_for_sglang_with_its_reason(capsys):
    assert main(["plan", "--model", f"{CONFIGS}/Falcon-40B.json", "--engine", "sglang==0.5.23"]) == 2
    err = capsys.readouterr().err
    assert "FalconForCausalLM cannot be planned as sglang==0.5.23 issues it" in err
    assert "no Falcon model" in err and "base_model_tp_plan" in err and "--engine vllm==0.34" in err
    assert err.count("\n") == 1
    assert main(["plan", "--model", f"{CONFIGS}/Falcon-40B.json"]) == 2  # SGLang is the default engine
    capsys.readouterr()


def test_the_plan_names_the_engine_it_follows(capsys):
    assert main(["plan", "--model", COMMAND_R]) == 0
    assert "Cohere / Command-R, as sglang==0.5.23 issues it" in capsys.readouterr().out
    assert load_model(COMMAND_R, engine="vllm==0.33").family == "Cohere / Command-R, as vllm==0.33 issues it"
    # A family both engines issue alike does not name one.
    assert "issues it" not in load_model("llama-3.1-70b", engine="vllm==0.33").family


def test_a_release_without_model_files_read_is_refused_naming_the_known_ones(capsys):
    assert main(["plan", "--model", COMMAND_R, "--engine", "vllm==0.35"]) == 2
    assert "known: sglang==0.5.23, vllm==0.33, vllm==0.34" in capsys.readouterr().err
    with pytest.raises(UsageError, match="no model files read"):
        parse_plan_engine("trtllm==1.0")


def test_the_sweep_run_engine_plans_as_that_engine():
    text = f'name = "e"\n[run]\nmodel = "{COMMAND_R}"\ntp = 8\ntokens = [1]\nengine = "vllm==0.33"\n'
    spec = parse_sweep(text, "e.toml")
    assert spec.engine == "vllm==0.33" and spec.model_shape.layout == "parallel"
    with pytest.raises(UsageError, match="run.engine"):
        parse_sweep(text.replace("vllm==0.33", "vllm==0.99"), "e.toml")


# The fields commprof reads, shaped as gpt-oss-120b's config.json (an MXFP4 checkpoint, hidden 2880).
GPT_OSS = {
    "architectures": ["GptOssForCausalLM"],
    "num_hidden_layers": 36,
    "hidden_size": 2880,
    "vocab_size": 201088,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_local_experts": 128,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "mxfp4"},
}


@pytest.mark.parametrize(
    "engine,backend,width",
    [
        ("vllm==0.33", None, 3072),  # MARLIN, assumed: round up to 256
        ("vllm==0.33", "trtllm", 3072),
        ("vllm==0.33", "cutlass", 2944),  # round up to 128
        ("vllm==0.33", "triton", 2880),
        ("sglang==0.5.23", None, 2880),
    ],
)
def test_gpt_oss_moe_all_reduce_carries_the_mxfp4_backend_padding(engine, backend, width):
    from commprof.planner.models import shape_from_config
    from commprof.planner.plan import build_step_plan

    shape = shape_from_config(GPT_OSS, "gpt-oss", "cfg", engine=engine, mxfp4_backend=backend)
    plan = build_step_plan(shape, 8, 4)
    moe = [op for op in plan.ops if op.site_kind == "moe"]
    attn = [op for op in plan.ops if op.site_kind == "attn"]
    assert len(moe) == 36 and {op.shape for op in moe} == {(4, width)} and {op.shape for op in attn} == {(4, 2880)}
    assert ("assumed" in shape.family) == (engine.startswith("vllm") and backend is None)
    # An unquantized checkpoint is not padded.
    plain = shape_from_config({**GPT_OSS, "quantization_config": None}, "gpt-oss", "cfg", engine=engine)
    assert plain.moe_width is None
