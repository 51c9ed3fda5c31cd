"""`commprof plan` as a user runs it: the table, the JSON, and one clear line for bad input (in-process: the
command line's own entry point, its exit status and both streams)."""

import contextlib
import io
import json
from types import SimpleNamespace

import pytest

from commprof.cli import main


def commprof(*args):
    """`commprof ARGS...`: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())


def test_plan_json_matches_issue_contract():
    out = commprof("plan", "--model", "kimi-k2.5", "--tp", "8", "--tokens", "4", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    ops = plan["ops"]
    assert len(ops) == 124 and plan["all_reduce"] == 123 and plan["all_gather"] == 1
    assert ops[25] == {
        "index": 25,
        "site": "layer.12.attn",
        "collective": "all_reduce",
        "shape": [4, 7168],
        "input_shape": [4, 7168],
        "dtype": "bfloat16",
        "bytes": 57344,
        "rmsnorm_after": True,
        "draft": False,
    }
    assert ops[-1]["collective"] == "all_gather" and ops[-1]["shape"] == [4, 163840]
    assert plan["total_bytes"] == 123 * 57344 + 4 * 163840 * 2


def test_plan_table_has_totals():
    out = commprof("plan", "--tp", "8", "--tokens", "4")
    assert out.returncode == 0
    assert "total all_reduce: 123 ops, 7053312 bytes" in out.stdout
    assert "total all_gather: 1 ops" in out.stdout


def test_plan_from_speculative_method():
    out = commprof("plan", "--spec", "eagle", "--num-steps", "3", "--json")
    assert json.loads(out.stdout)["tokens"] == 4


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--model", "nope"), "known presets"),
        (("--tokens", "0"), "tokens must be >= 1"),
        (("--tp", "0"), "tensor parallel degree"),
        (("--model", "/nonexistent/config.json"), "not found"),
    ],
)
def test_bad_input_is_one_line(args, needle):
    out = commprof("plan", *args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


CONFIGS = "tests/fixtures/model-configs"


@pytest.mark.parametrize(
    "model,reduces",
    [
        (f"{CONFIGS}/Nemotron-H-8B-Base-8K.json", 53),
        (f"{CONFIGS}/Falcon-40B.json --engine vllm==0.34", 61),  # no Falcon model in SGLang
        (f"{CONFIGS}/c4ai-command-r-v01.json", 81),  # the default engine, SGLang: o_proj and down_proj apart
        (f"{CONFIGS}/GLM-4.5-Air.json", 93),
        (f"{CONFIGS}/Mixtral-8x7B-v0.1.json", 65),
        ("kimi-k2.5", 123),
    ],
)
def test_family_all_reduces_at_tp8_t4(model, reduces):
    out = commprof("plan", "--model", *model.split(), "--tp", "8", "--tokens", "4", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["all_reduce"] == reduces


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--model", f"{CONFIGS}/Mixtral-8x7B-v0.1.json", "--tp", "6"), "TP 6 is impossible"),
        (("--model", "kimi-k2.5", "--tp", "3"), "TP 3 is impossible"),
        (("--model", "kimi-k2.5", "--layout", "hybrid:"), "is not a layout"),
        (("--spec", "mtp", "--num-steps", "3"), "num_nextn_predict_layers"),
    ],
)
def test_impossible_plans_are_one_line(args, needle):
    out = commprof("plan", *args)
    assert out.returncode == 2 and needle in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_unknown_architecture_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {"architectures": ["JambaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096, "vocab_size": 65536}
        )
    )
    out = commprof("plan", "--model", str(path))
    assert out.returncode == 2 and "JambaForCausalLM" in out.stderr and "--layout" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = commprof("plan", "--model", str(path), "--layout", "standard", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["all_reduce"] == 65


def test_billion_layer_config_exits_2_within_seconds(tmp_path):
    import time

    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 10**9,
                "hidden_size": 8192,
                "vocab_size": 128256,
            }
        )
    )
    started = time.monotonic()
    out = commprof("plan", "--model", str(path))
    assert (
        out.returncode == 2 and "'num_hidden_layers' = 1000000000 is beyond any model (allowed: 1..2000)" in out.stderr
    )
    assert time.monotonic() - started < 20  # the Python start-up; planning a billion layers took minutes


def test_spec_plan_totals_draft_apart():
    out = commprof("plan", "--spec", "eagle", "--num-steps", "3", "--draft-vocab", "32000")
    assert out.returncode == 0, out.stderr
    assert "  draft all_reduce: 9 ops" in out.stdout and "  verify (target) all_reduce: 123 ops" in out.stdout


def test_sweep_dry_run_refuses_the_launch_tp(monkeypatch, capsys):
    from commprof.allreduce_sweep import main as sweep_main

    launch = dict(RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", LOCAL_WORLD_SIZE="3", MASTER_ADDR="127.0.0.1")
    for name, value in {**launch, "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(name, value)
    assert sweep_main(["--dry-run", "--no-doctor"]) == 2
    err = capsys.readouterr().err
    assert "kimi-k2.5: TP 3 is impossible" in err and len(err.strip().splitlines()) == 1


def test_table_columns_stay_aligned_for_long_draft_sites():
    out = commprof("plan", "--model", "deepseek-v3", "--spec", "mtp", "--num-steps", "1", "--dp-attention")
    assert out.returncode == 0, out.stderr
    header, *rows = [
        line for line in out.stdout.splitlines()[1:] if line.split()[0].isdigit() or line.split()[0] == "#"
    ]
    column = header.index("collective")
    assert any(len(row.split()[1]) > 24 for row in rows)  # draft.0.layer.0.dp_scatter
    assert all(row[column - 1] == " " and row[column] != " " for row in rows)


def test_ngram_header_names_no_draft_steps():
    out = commprof("plan", "--spec", "ngram")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].endswith("--spec ngram") and "None" not in out.stdout
