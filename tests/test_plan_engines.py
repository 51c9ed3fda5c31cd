"""A family whose collectives differ by engine is planned per engine: Command-R reduces once per layer under
vLLM 0.33 (models/commandr.py) and twice under SGLang 0.5.23; `plan --engine` and the sweep's `[run] engine` pick
one, and a release commprof has not read is refused naming the ones it has."""

from __future__ import annotations

import json

import pytest

from commprof.cli import main
from commprof.errors import UsageError
from commprof.planner.engines import parse_plan_engine
from commprof.planner.models import load_model
from commprof.sweep.planning.config import parse_sweep

COMMAND_R = "tests/fixtures/model-configs/c4ai-command-r-v01.json"  # 40 layers


@pytest.mark.parametrize("engine,reduces", [("vllm==0.33", 41), ("vllm==0.33.1", 41), ("sglang==0.5.23", 81)])
def test_command_r_all_reduces_per_engine(engine, reduces, capsys):
    assert main(["plan", "--model", COMMAND_R, "--engine", engine, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["all_reduce"] == reduces
    layer_sites = {op["site"].rsplit(".", 1)[-1] for op in plan["ops"] if op["site"].startswith("layer.")}
    assert layer_sites == ({"attn+mlp"} if reduces == 41 else {"attn", "mlp"})


def test_the_plan_names_the_engine_it_follows(capsys):
    assert main(["plan", "--model", COMMAND_R]) == 0
    assert "Cohere / Command-R, as sglang==0.5.23 issues it" in capsys.readouterr().out
    assert load_model(COMMAND_R, engine="vllm==0.33").family == "Cohere / Command-R, as vllm==0.33 issues it"
    # A family both engines issue alike does not name one.
    assert "issues it" not in load_model("llama-3.1-70b", engine="vllm==0.33").family


def test_a_release_without_model_files_read_is_refused_naming_the_known_ones(capsys):
    assert main(["plan", "--model", COMMAND_R, "--engine", "vllm==0.34"]) == 2
    assert "known: sglang==0.5.23, vllm==0.33" in capsys.readouterr().err
    with pytest.raises(UsageError, match="no model files read"):
        parse_plan_engine("trtllm==1.0")


def test_the_sweep_run_engine_plans_as_that_engine():
    text = f'name = "e"\n[run]\nmodel = "{COMMAND_R}"\ntp = 8\ntokens = [1]\nengine = "vllm==0.33"\n'
    spec = parse_sweep(text, "e.toml")
    assert spec.engine == "vllm==0.33" and spec.model_shape.layout == "parallel"
    with pytest.raises(UsageError, match="run.engine"):
        parse_sweep(text.replace("vllm==0.33", "vllm==0.99"), "e.toml")
