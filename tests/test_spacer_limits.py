"""Spacers within bounds: the GEMM spacer sized from an MoE layer's experts and counted in the memory check, a
trace file read within a size limit, compute or lateness longer than a point's time limit refused at planning,
and a dry run whose probe crashed giving no estimate; each refusal one line, through the sweep command."""

import json
import time

import pytest
import torch

from commprof.allreduce_sweep import main as sweep_main
from commprof.errors import UsageError
from commprof.planner.models import DTYPE_BYTES, load_model
from commprof.planner.plan import build_step_plan
from commprof.planner.spacing import ComputeSpec, SkewSpec, gemm_bytes, gemm_shapes
from commprof.sweep.planning.dryrun import ASSUMED, probe_cost, size_lines
from tests.attack_replay import replay_bounded


@pytest.fixture
def moe_model(tmp_path):
    """A Mixtral-like config: every layer MoE, 2 of 4 experts per token, each 256 wide."""
    path = tmp_path / "moe" / "config.json"
    path.parent.mkdir()
    config = {
        "architectures": ["MixtralForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "vocab_size": 128,
        "intermediate_size": 256,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "torch_dtype": "bfloat16",
    }
    path.write_text(json.dumps(config))
    return path


def _sweep(tmp_path, run: str, model: str = "kimi-k2.5", name: str = "s") -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'name = "{name}"\n[run]\nmodel = "{model}"\ntokens = [4]\n{run}\n')
    return str(path)


def _two_ranks(monkeypatch):
    for key, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")  # never reached: every case is refused before a process group


def _one_refusal(capsys, argv: list[str]) -> str:
    started = time.monotonic()
    assert sweep_main(argv) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("commprof: error:") and "Traceback" not in err, err
    return lines[0]


def test_an_moe_layer_is_sized_by_the_experts_a_token_visits(moe_model):
    model = load_model(str(moe_model))
    assert model.moe_mlp_width == 2 * 256
    plan = build_step_plan(model, 2, 4)
    inner = {op.site_kind: shapes[1][1] for op, shapes in zip(plan.ops, gemm_shapes(plan, 256)) if shapes}
    assert inner == {"attn": 256 // 2, "moe": 2 * 256 // 2}
    kimi = load_model("kimi-k2.5")
    assert kimi.moe_mlp_width == 8 * 2048 + 1 * 2048  # 8 routed experts per token and one shared, 2048 wide each


def test_the_memory_check_counts_what_the_gemm_spacer_allocates(moe_model):
    from commprof.replay.spacers import Spacer

    model = load_model(str(moe_model))
    plan = build_step_plan(model, 2, 4)
    spacer = Spacer(plan, ComputeSpec.parse("gemm"), SkewSpec(), 0, torch.device("cpu"), model.intermediate_size)
    allocated = sum(t.numel() * t.element_size() for gemms in spacer.gemms if gemms for t in gemms)
    assert allocated == gemm_bytes(plan, model.intermediate_size, DTYPE_BYTES[model.dtype]) > 0


def test_a_gemm_spacer_that_does_not_fit_is_one_line(monkeypatch, capsys, tmp_path):
    """Kimi-K2.5 at T = 4 on two gloo ranks: per layer weights of ~30 GiB a rank, refused before any process."""
    from commprof.sweep.running import memory

    _two_ranks(monkeypatch)
    monkeypatch.setattr(memory, "rank_memory", lambda backend, ranks: (8 << 30, "each rank has (test)"))
    line = _one_refusal(capsys, ["--sweep", _sweep(tmp_path, 'compute = "gemm"'), "--dry-run"])
    assert 'compute = "gemm": its GEMMs at T = 4 need' in line and "30.04 GiB per rank" in line


def test_a_trace_that_is_not_a_regular_file_is_one_line(monkeypatch, capsys, tmp_path):
    _two_ranks(monkeypatch)
    line = _one_refusal(capsys, ["--sweep", _sweep(tmp_path, 'compute = "trace:/dev/zero"'), "--dry-run"])
    assert line.endswith("compute trace file /dev/zero: not a regular file")


def test_a_trace_over_the_size_limit_is_refused_before_it_is_read(monkeypatch, tmp_path):
    from commprof import textfiles

    big = tmp_path / "big.json"
    big.write_text('{"gaps_us": [' + "0," * 600 + "0]}")
    monkeypatch.setattr(textfiles, "CONFIG_BYTES", 1000)
    monkeypatch.setattr("commprof.planner.spacing.CONFIG_BYTES", 1000)
    with pytest.raises(UsageError, match="more than the 1000"):
        ComputeSpec.parse(f"trace:{big}")


@pytest.mark.parametrize(
    "run, says",
    [
        ('compute = "uniform:1e12"', "compute uniform:1e+12 and skew none add"),
        ("skew = { rank = 1, us = 1e12 }", "skew rank 1 late by 1e+12 µs add"),
        ('compute = "uniform:2000000"\npoint_timeout_s = 60', "more than its point_timeout_s of 60 s"),
    ],
)
def test_spacing_longer_than_the_point_time_limit_is_refused_at_planning(monkeypatch, capsys, tmp_path, run, says):
    _two_ranks(monkeypatch)
    line = _one_refusal(capsys, ["--sweep", _sweep(tmp_path, run, model="llama-3.1-70b"), "--dry-run"])
    assert says in line and "every point would time out" in line


def test_a_dry_run_whose_probe_crashed_says_so_and_gives_no_estimate():
    from commprof.sweep.planning.config import parse_sweep

    spec = parse_sweep('name = "p"\n[run]\nmodel = "llama-3.1-70b"\ntokens = [4]\n', "p.toml")
    records = [
        {"kind": "step", "tokens": 4, "mode": m, "status": "crashed", "message": "worker killed by SIGKILL\nmore"}
        for m in ("eager", "graph")
    ]
    cost = probe_cost(records, 3, 1)
    (line,) = size_lines(spec, cost, 1, "gloo")
    assert "no estimate: the probe of the baseline on this launch ended crashed (worker killed by SIGKILL" in line
    assert "; estimated" not in line and "per point" not in line
    assert "estimated" in size_lines(spec, ASSUMED, 1, "gloo")[0]


@pytest.mark.parametrize("compute", ["trace:/dev/zero", "gemm"])
def test_through_the_sweep_module_each_spacer_refusal_ends_fast_and_small(tmp_path, compute):
    """`python -m commprof.allreduce_sweep` as rank 0 of the 2-rank launch a user types, run here (runpy), its CPU
    time and how far it raised the peak resident memory bounded; this box's own memory decides the GEMM case
    (Kimi-K2.5 at T = 4 needs ~30 GiB a rank). Refused before any process group: the rank needs no peer.
    (torchrun's own ending of a refused launch: test_attack_replay_round4_processes.py.)"""
    sweep = _sweep(tmp_path, f'compute = "{compute}"')
    (tmp_path / "cwd").mkdir()
    argv = ["commprof.allreduce_sweep", "--sweep", sweep, "--out", str(tmp_path / "runs"), "--dry-run"]
    ran = replay_bounded(argv, tmp_path / "cwd", 30, {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_PORT": "1"})
    lines = [line for line in ran.err.splitlines() if line.strip()]
    assert ran.status == 2 and len(lines) == 1 and lines[0].startswith("commprof: error:"), ran.err[-2000:]
    assert not (tmp_path / "runs").exists()
