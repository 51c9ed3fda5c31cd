"""Sweep files: the shipped ones load, expansion is stable and counted, dry-run output and estimates."""

from __future__ import annotations

from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.sweep import SweepPoint, default_sweep, format_points_table, load_sweep, parse_sweep
from commprof.sweep.planning.dryrun import (
    ASSUMED,
    StepCost,
    crossover_seconds,
    estimate_seconds,
    on_launch,
    runs_on_nccl,
)
from commprof.sweep.planning.spec import DEFAULT_ITERATIONS, DEFAULT_WARMUP, RunOverrides

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "sweeps"
FIXTURES = Path(__file__).parent / "fixtures" / "sweeps"
SHIPPED = sorted(SWEEPS.glob("*.toml"))


def test_the_three_required_sweeps_ship():
    assert {"cpu-smoke.toml", "pcie8-verify.toml", "nvlink8.toml"} <= {p.name for p in SHIPPED}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_sweep_loads_with_a_description_and_a_baseline(path):
    spec = load_sweep(path)
    assert spec.description, "a shipped file says what it covers and why"
    assert spec.points[0].point_id == "p000" and spec.points[0].is_baseline
    assert [p.point_id for p in spec.points] == [f"p{i:03d}" for i in range(len(spec.points))]
    assert len({p.key() for p in spec.points}) == len(spec.points)
    assert spec.sha256 and spec.content == path.read_text()


def test_pcie8_verify_expansion_and_fifteen_minute_budget():
    spec = load_sweep(SWEEPS / "pcie8-verify.toml")
    assert spec.tokens == (1, 4, 8, 16) and spec.model == "kimi-k2.5" and spec.phase == "verify"
    # ALGO (3) x PROTO (4) x P2P level (2), the baseline among them, plus 9 other implementation settings.
    assert len(spec.points) == 3 * 4 * 2 + 9
    assert {p.impl for p in spec.points} == {
        "default",
        "flashinfer-fused",
        "flashinfer-pcie-ipc",
        "symm-mem",
        "b12x",
        "b12x-fused",
        "nccl+rmsnorm",
    }
    axes = {name for p in spec.points for name in p.env}
    assert axes == {"NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL"}
    assert not any(p.env.get("NCCL_ALGO", "").lower() == "tree" for p in spec.points)
    assert [s.max_points() for s in spec.stages] == [3 * 5 * 2 * 2, 4 + 1, 0]  # a search is no point
    crossover = spec.stages[-1]
    assert crossover.kind == "crossover" and crossover.impls == ("flashinfer-pcie-ipc", "b12x")
    # ~3 s start-up per worker set (two per point of NCCL's own with its logs on: the timed set and NCCL's logging
    # worker; one per other implementation's point and per search round) and ~30 ms per step (eager + graph), 47
    # steps per T and mode: about 38 minutes, as the file's comment and the README say, not an hour; the
    # crossover search about a minute and a half of it.
    cost = on_launch(ASSUMED, "nccl", nccl_debug=True, profile=False)
    on_nccl = sum(1 for p in spec.points if runs_on_nccl(p.impl, "nccl"))
    minutes = estimate_seconds(spec, cost, len(spec.points), "nccl", on_nccl) / 60
    assert round(minutes) == 38, minutes
    assert "about 38 minutes for the field report's sweep: `--dry-run`'s estimate" in (ROOT / "README.md").read_text()
    assert "about 38 minutes at its assumed" in (SWEEPS / "pcie8-verify.toml").read_text().replace("\n# ", " ")
    assert 1 <= crossover_seconds(spec, crossover, ASSUMED, "nccl") / 60 <= 2


def test_cpu_smoke_is_small_and_has_points_gloo_cannot_run():
    spec = load_sweep(SWEEPS / "cpu-smoke.toml")
    assert spec.tokens == (1, 4) and spec.iterations <= 10
    assert any(p.impl == "nccl" for p in spec.points)
    assert any(p.impl.startswith("flashinfer") for p in spec.points)
    assert any(name.startswith("NCCL_") for p in spec.points for name in p.env)
    cost = StepCost(0.25, {1: 20.0, 4: 20.0})
    assert estimate_seconds(spec, cost, len(spec.points), "gloo") < 30


def test_nvlink8_excludes_nvls_with_ll_protocols():
    spec = load_sweep(SWEEPS / "nvlink8.toml")
    nvls = [p for p in spec.points if p.env.get("NCCL_ALGO") == "allreduce:nvls"]
    assert sorted(p.env.get("NCCL_PROTO", "default") for p in nvls) == ["Simple", "default"]
    assert spec.warnings == ()  # LL128 is no trap on NVLink


def test_every_key_fixture_expands_as_documented():
    spec = load_sweep(FIXTURES / "every-key.toml")
    assert (spec.model, spec.tp, spec.tokens, spec.phase, spec.dtype) == (
        "llama-3.1-70b",
        2,
        (1, 8),
        "decode",
        "float16",
    )
    assert (spec.iterations, spec.warmup, spec.point_timeout_s) == (7, 2, 12.5)
    # impl (2) x PROTO (2) x channels (2) x COMMPROF_KNOB (2) = 16 combinations. The exclusions leave symm-mem only
    # PROTO and channels at default: 8 + 2. None is the baseline (COMMPROF_KNOB is always set), so p000 is added,
    # then the explicit point: 12.
    assert len(spec.points) == 12
    symm = [p for p in spec.points if p.impl == "symm-mem"]
    assert len(symm) == 2 and all(set(p.env) == {"COMMPROF_KNOB"} for p in symm)
    assert all(p.options == {"variant": "one_shot"} for p in symm)
    mine = spec.points[-1]
    assert mine.impl == "tests.plugins:MyAllReduce" and mine.label == "my kernel"
    assert mine.env == {"NCCL_P2P_LEVEL": "SYS", "NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "8", "COMMPROF_EXTRA": "1"}
    assert mine.options == {"knob": 3}
    channel_points = [p for p in spec.points if "NCCL_MIN_NCHANNELS" in p.env]
    assert channel_points and all(p.env["NCCL_MAX_NCHANNELS"] == "4" for p in channel_points)
    assert "ch=4" in channel_points[0].label
    assert [(s.name, s.top_k, s.rank_by) for s in spec.stages] == [("threads", 2, "sum"), ("confirm", 1, "geomean")]
    assert spec.report == {
        "compute_ms": {1: 4.0, 8: 5.5},
        "draft_ms": 1.2,
        "accept_lengths": [1.5, 2.0],
        "baseline": "p000",
    }


def test_point_ids_are_stable_and_follow_the_file():
    text = (FIXTURES / "every-key.toml").read_text()
    first, second = parse_sweep(text), parse_sweep(text)
    assert [p.to_dict() for p in first.points] == [p.to_dict() for p in second.points]
    # An explicit point added at the end keeps every earlier id.
    extended = parse_sweep(text + '\n[[points]]\nNCCL_PROTO = "LL"\nlabel = "extra"\n')
    assert [p.to_dict() for p in extended.points[:-1]] == [p.to_dict() for p in first.points]
    assert extended.points[-1].point_id == f"p{len(first.points):03d}"


def test_baseline_is_p000_even_when_axes_do_not_contain_it():
    spec = parse_sweep('[axes]\nNCCL_PROTO = ["LL", "Simple"]\n')
    assert [p.point_id for p in spec.points] == ["p000", "p001", "p002"]
    assert spec.points[0].to_dict() == {
        "point_id": "p000",
        "label": "defaults",
        "impl": "default",
        "env": {},
        "options": {},
        "stage": 0,
    }
    assert [p.env for p in spec.points[1:]] == [{"NCCL_PROTO": "LL"}, {"NCCL_PROTO": "Simple"}]


def test_baseline_combination_of_the_axes_is_not_duplicated():
    spec = parse_sweep('[axes]\nimpl = ["default", "nccl"]\nNCCL_PROTO = ["default", "LL"]\n')
    assert len(spec.points) == 4
    assert [p.label for p in spec.points] == ["defaults", "PROTO=LL", "nccl", "nccl PROTO=LL"]


def test_repeated_explicit_point_is_listed_once_with_a_warning():
    spec = parse_sweep('[axes]\nNCCL_PROTO = ["LL"]\n[[points]]\nNCCL_PROTO = "LL"\n', "x.toml")
    assert len(spec.points) == 2
    assert any("points[0]" in w and "repeats p001" in w for w in spec.warnings)


def test_point_key_ignores_label_and_order():
    a = SweepPoint("p001", "one", "default", {"A": "1", "B": "2"}, {"x": 1, "y": 2})
    b = SweepPoint("p009", "two", "default", {"B": "2", "A": "1"}, {"y": 2, "x": 1}, stage=2)
    c = SweepPoint("p001", "one", "default", {"A": "1"}, {"x": 1, "y": 2})
    assert a.key() == b.key() != c.key()
    assert SweepPoint(**a.to_dict()) == a
    assert len({a, SweepPoint(**a.to_dict()), c}) == 2


def test_min_above_max_combinations_are_skipped_with_a_warning():
    spec = parse_sweep("[axes]\nNCCL_MIN_NCHANNELS = [2, 8]\nNCCL_MAX_NCHANNELS = [4, 16]\n")
    pairs = {(p.env["NCCL_MIN_NCHANNELS"], p.env["NCCL_MAX_NCHANNELS"]) for p in spec.points[1:]}
    assert pairs == {("2", "4"), ("2", "16"), ("8", "16")}
    assert any("1 combinations skipped" in w for w in spec.warnings)


def test_scalar_axis_value_fixes_a_variable_for_every_point():
    spec = parse_sweep('[axes]\nNCCL_P2P_LEVEL = "SYS"\nNCCL_PROTO = ["LL", "Simple"]\n')
    assert all(p.env["NCCL_P2P_LEVEL"] == "SYS" for p in spec.points[1:])
    assert len(spec.points) == 3


def test_values_are_normalised_for_the_environment():
    spec = parse_sweep(
        '[[points]]\nNCCL_P2P_DISABLE = true\nNCCL_P2P_LEVEL = "sys"\nNCCL_BUFFSIZE = 1048576\n'
        'NCCL_THREAD_THRESHOLDS = " 8  8 64 -1 8 64 "\nenv = { COMMPROF_FLAG = false, COMMPROF_RATIO = 0.5 }\n'
    )
    assert spec.points[1].env == {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_BUFFSIZE": "1048576",
        "NCCL_THREAD_THRESHOLDS": "8 8 64 -1 8 64",
        "COMMPROF_FLAG": "0",
        "COMMPROF_RATIO": "0.5",
    }
    assert spec.points[1].label == (
        "buff=1048576 P2P=SYS thresholds=8/8/64/-1/8/64 COMMPROF_FLAG=0 COMMPROF_RATIO=0.5 P2P_DISABLE=1"
    )


def test_defaults_when_the_file_says_little():
    spec = parse_sweep("", None)
    assert (spec.model, spec.tp, spec.tokens, spec.phase, spec.dtype) == ("kimi-k2.5", None, (1,), "verify", None)
    assert (spec.iterations, spec.warmup) == (DEFAULT_ITERATIONS, DEFAULT_WARMUP)
    assert len(spec.points) == 1 and spec.stages == () and spec.report == {}


def test_defaults_match_the_replay_harness():
    harness = pytest.importorskip("commprof.replay.harness")
    config = harness.ReplayConfig()
    assert (config.iterations, config.warmup) == (DEFAULT_ITERATIONS, DEFAULT_WARMUP)


def test_default_sweep_is_the_baseline_plus_named_implementations():
    spec = default_sweep()
    assert [p.point_id for p in spec.points] == ["p000"] and spec.tokens == (1, 4, 8) and spec.path is None
    spec = default_sweep(
        RunOverrides(model="deepseek-v3", tokens=(2, 4), tp=4, dtype="fp16", iterations=None),
        impls=("default", "flashinfer-pcie-ipc", "flashinfer-fused", "flashinfer-fused"),
    )
    # A name alone runs its defaults once (the fused kind picks one-shot or two-shot by size).
    assert [(p.impl, p.options) for p in spec.points] == [
        ("default", {}),
        ("flashinfer-pcie-ipc", {}),
        ("flashinfer-fused", {}),
    ]
    assert (spec.model, spec.tokens, spec.tp, spec.dtype, spec.iterations) == (
        "deepseek-v3",
        (2, 4),
        4,
        "float16",
        DEFAULT_ITERATIONS,
    )
    assert "flashinfer-fused" in spec.content and spec.sha256
    with pytest.raises(UsageError, match="command line: axes.impl"):
        default_sweep(impls=("default", "no-such-impl"))


def test_with_overrides_replaces_only_what_is_given():
    spec = load_sweep(SWEEPS / "pcie8-verify.toml")
    same = spec.with_overrides(RunOverrides())
    assert same == spec
    changed = spec.with_overrides(RunOverrides(tokens=(4,), iterations=3, tp=4, dtype="fp32", point_timeout_s=5))
    assert (changed.tokens, changed.iterations, changed.tp, changed.dtype, changed.point_timeout_s) == (
        (4,),
        3,
        4,
        "float32",
        5.0,
    )
    assert changed.points == spec.points and changed.warmup == spec.warmup
    with pytest.raises(UsageError):
        spec.with_overrides(RunOverrides(phase="prefill"))
    with pytest.raises(UsageError):
        spec.with_overrides(RunOverrides(tokens=(0,)))


def test_iterations_for_uses_a_re_measuring_stage():
    spec = load_sweep(FIXTURES / "every-key.toml")
    assert spec.iterations_for(spec.points[0]) == (7, 2)
    assert spec.iterations_for(SweepPoint("s1-p000", "x", "default", {}, {}, 1)) == (7, 2)
    assert spec.iterations_for(SweepPoint("s2-p000", "x", "default", {}, {}, 2)) == (30, 3)


def test_estimate_counts_points_steps_and_stages():
    spec = parse_sweep(
        '[run]\ntokens = [1, 4]\niterations = 8\nwarmup = 2\n[axes]\nNCCL_PROTO = ["LL"]\n'
        "[[stages]]\ntop_k = 1\niterations = 18\n"
    )
    # Per (T, mode) 1 checked + warm-up + timed + 1 + timed steps (step_counts.steps_per_mode): stage 0: 2 points x
    # (1 s + 20 steps x 2 T x 20 ms (both modes)); stage 1: 1 point x (1 s + 40 x 2 x 20 ms); the confirmation: up
    # to 4 measurements at stage 0's cost (the A/A control, then the one other setting between two more: stage 1
    # only re-measures, and nothing else could be a route or a fused kind).
    stage0, stage1 = 1.0 + 20 * 2 * 0.020, 1.0 + 40 * 2 * 0.020
    cost = StepCost(1.0, {1: 20.0, 4: 20.0})
    assert estimate_seconds(spec, cost, 2, "nccl") == pytest.approx(2 * stage0 + stage1 + 4 * stage0)
    # On gloo the NCCL_PROTO point is recorded unsupported: only the baseline and the stage's one point run.
    stage0, stage1 = 1.0 + 20 * 2 * 0.010, 1.0 + 40 * 2 * 0.010
    assert estimate_seconds(spec, StepCost(1.0, {1: 10.0, 4: 10.0}), 1, "gloo") == pytest.approx(
        stage0 + stage1 + 4 * stage0
    )


def test_dry_run_table_lists_every_point_the_count_and_an_estimate():
    spec = load_sweep(SWEEPS / "pcie8-verify.toml")
    text = format_points_table(spec)
    rows = [line for line in text.splitlines() if line.startswith("  p")]
    assert len(rows) == len(spec.points)
    assert "p000" in rows[0] and "defaults" in rows[0]
    assert "NCCL_ALGO=allreduce:tree NCCL_P2P_LEVEL=SYS NCCL_PROTO=Simple" in text
    assert "flashinfer-fused use_oneshot=true" in text
    assert '# stage 1 "channels"' in text and "up to 60 points" in text
    assert f"{len(spec.points)} points will run in stage 0, up to {spec.max_points()} in all" in text
    minutes = estimate_seconds(spec, ASSUMED, len(spec.points), "nccl") / 60  # one worker set a point: 31 min
    assert f"estimated {minutes:.1f} min" in text and 31 <= minutes < 32 and "assumed, not measured here" in text
    assert '# stage 3 "crossover": crossover search of flashinfer-pcie-ipc, b12x' in text
    assert "up to 3 crossover searches" in text


def test_dry_run_through_the_sweep_command(capsys, monkeypatch):
    """The listing of cpu-smoke.toml on this launch; the probe's estimate is stubbed (the real probe, a fork
    server's measurement: test_sweep_runner.py's dry run)."""
    from commprof.sweep.planning.dryrun import StepCost
    from commprof.sweep.running import probe
    from tests.sweeprun import one_rank

    sweep_module = pytest.importorskip("commprof.allreduce_sweep")
    monkeypatch.setattr(probe, "probe_step_cost", lambda *args: StepCost(0.5, {1: 19.4}, "measured (test)"))
    one_rank(monkeypatch)  # what main() sets for a launch without torchrun, put back after the test
    status = sweep_module.main(["--sweep", str(SWEEPS / "cpu-smoke.toml"), "--dry-run"])
    out = capsys.readouterr().out
    assert status == 0
    points = load_sweep(SWEEPS / "cpu-smoke.toml").points
    # A world of one gloo rank: the NCCL and CUDA points are shown up front and marked, the others will run.
    assert out.count("\n  p0") + out.count("\nx p0") == len(points)
    assert "this launch: gloo backend, 1 rank: 2 of 5 stage-0 points will run" in out
    assert "NCCL_ALGO and NCCL_PROTO have no effect on the gloo backend" not in out  # the impl's reason comes first
    assert "needs the NCCL backend" in out
    assert "measured (test)" in out


def test_the_documented_example_is_a_valid_sweep_file():
    doc = (ROOT / "docs" / "sweep-files.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    spec = parse_sweep(example, "docs/sweep-files.md")
    assert spec.points[0].is_baseline and spec.points[-1].label == "my one-shot kernel"
    assert not any(p.impl == "flashinfer-fused" and "NCCL_ALGO" in p.env for p in spec.points)
    assert spec.stages[0].candidates is not None
