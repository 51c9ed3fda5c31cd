"""Compute between collectives and late ranks: the spec's forms, per-op resolution, and the replay on real gloo
ranks (step time grows by the compute, which the record carries apart; a late rank's lateness is waiting)."""

import json

import pytest

from commprof.errors import UsageError
from commprof.planner.models import ModelShape
from commprof.planner.plan import build_step_plan
from commprof.planner.spacing import ComputeSpec, SkewSpec, describe, gemm_shapes
from commprof.sweep.planning.spec import RunOverrides
from tests.distributed import run_ranks

TINY = ModelShape("tiny", 4, 64, 128, "bfloat16", "test", intermediate_size=256)


def _plan(tp=2, tokens=2):
    return build_step_plan(TINY, tp, tokens)


def test_compute_forms_parse_and_bad_ones_name_the_allowed_forms():
    assert ComputeSpec.parse("none") == ComputeSpec()
    assert ComputeSpec.parse("uniform:500") == ComputeSpec("uniform", us=500.0)
    assert ComputeSpec.parse("gemm").kind == "gemm"
    for bad in ("uniform:", "uniform:-3", "uniform:nan", "fast", 5, "trace:"):
        with pytest.raises(UsageError, match="uniform|none"):
            ComputeSpec.parse(bad)


def test_uniform_compute_fills_every_gap_between_two_collectives():
    plan = _plan()
    gaps = ComputeSpec.parse("uniform:40").gaps_us(plan)
    assert len(gaps) == len(plan.ops) and gaps[0] == 0.0 and set(gaps[1:]) == {40.0}
    assert ComputeSpec().gaps_us(plan) == [0.0] * len(plan.ops)


def test_trace_compute_reads_the_gaps_of_commprof_trace_json(tmp_path):
    plan = _plan()
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"gaps_us": [0.0] + [float(i) for i in range(1, len(plan.ops))]}))
    spec = ComputeSpec.parse(f"trace:{path}")
    assert spec.gaps_us(plan)[1:] == [float(i) for i in range(1, len(plan.ops))]
    assert ComputeSpec.from_dict(spec.to_dict()) == spec
    path.write_text(json.dumps({"gaps_us": [1.0, 2.0]}))
    with pytest.raises(UsageError, match="2 collectives, the replayed step 10"):
        ComputeSpec.parse(f"trace:{path}").gaps_us(plan)
    path.write_text("{}")
    with pytest.raises(UsageError, match="no gaps_us"):
        ComputeSpec.parse(f"trace:{path}")


def test_gemm_compute_runs_the_layers_mlp_gemms_at_the_ops_rows():
    plan = _plan(tp=2, tokens=3)
    shapes = gemm_shapes(plan, TINY.intermediate_size)
    assert shapes[0] is None  # nothing before the step's first collective
    layer = [s for op, s in zip(plan.ops, shapes) if op.site.startswith("layer.")]
    assert layer and all(s == ((3, 64), (64, 128)) for s in layer)  # [T, H] x [H, I/TP]


def test_skew_forms_and_the_late_ranks_lags():
    plan = _plan()
    skew = SkewSpec.parse({"rank": 1, "us": 1000})
    assert skew.lags_us(plan, 1) == [1000.0] * len(plan.ops) and set(skew.lags_us(plan, 0)) == {0.0}
    assert describe(ComputeSpec(), skew) == {"compute": "none", "skew": "rank 1 late by 1000 µs"}
    assert describe(ComputeSpec(), SkewSpec()) is None
    with pytest.raises(UsageError, match="not one of the launch's 2 ranks"):
        SkewSpec.parse({"rank": 2, "us": 5}).check_world(2)
    for bad in ({"rank": -1, "us": 5}, {"rank": 1, "us": 0}, {"rank": 1}, {"rank": 1, "us": 5, "x": 1}, "late"):
        with pytest.raises(UsageError):
            SkewSpec.parse(bad)


def test_waiting_is_the_spread_of_arrivals_summed_over_ops():
    from commprof.replay.spacers import wait_per_step

    # 2 ranks, 1 step, 3 ops: rank 1 arrives 1 ms, 2 ms and 0 ms after rank 0 (ns); then each step's reference.
    arrivals = [[[0, 10_000_000, 20_000_000, -5_000]], [[1_000_000, 12_000_000, 20_000_000, -5_000]]]
    assert wait_per_step(arrivals, offsets=False) == wait_per_step(arrivals, offsets=True) == [3000.0]


def test_a_constant_offset_between_the_ranks_clocks_adds_no_waiting():
    """Rank 1's timer runs 7 ms ahead of rank 0's: the same arrivals, read against each step's aligned reference
    (whose jitter of a few µs in one step moves no step), wait what they waited."""
    from commprof.replay.spacers import wait_per_step

    true = [
        [
            [0, 10_000_000, 20_000_000, -5_000],
            [30_000_000, 40_000_000, 50_000_000, 25_000_000],
            [60_000_000, 70_000_000, 80_000_000, 55_000_000],
        ],
        [
            [1_000_000, 12_000_000, 20_000_000, -5_000],
            [30_500_000, 40_000_000, 50_000_000, 25_000_000],
            [60_000_000, 70_000_000, 80_000_000, 55_000_000],
        ],
    ]
    offset = 7_000_000
    planted = [true[0], [[t + offset for t in step] for step in true[1]]]
    planted[1][1][-1] += 3_000  # the reference's own jitter in one step
    assert wait_per_step(true, offsets=True) == [3000.0, 500.0, 0.0]
    assert wait_per_step(planted, offsets=True) == [3000.0, 500.0, 0.0]
    assert wait_per_step(planted, offsets=False)[0] > 3 * offset / 1000.0  # unaligned: the offset per op


def _replay(rank, world_size, settings, iterations):
    import torch
    import torch.distributed as dist

    from commprof.impls.registry import load_impl
    from commprof.planner.spacing import ComputeSpec, SkewSpec
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode

    plan = build_step_plan(TINY, world_size, 2)
    impl = load_impl("gloo")()
    impl.setup(dist.group.WORLD, plan, torch.device("cpu"))
    out = []
    for compute, skew in settings:
        config = ReplayConfig(
            iterations=iterations,
            warmup=2,
            compute=ComputeSpec.parse(compute),
            skew=SkewSpec.parse(skew) if skew else SkewSpec(),
        )
        out.append(
            replay_mode(StepReplay(plan, impl, dist.group.WORLD, torch.device("cpu"), config), "eager").to_dict()
        )
    return out, len(plan.ops)


# Each setting measured three times, in turn with the bare step: a load burst on a shared 2-core box lands on one
# measurement, not on all three, so each setting's best measurement is compared. One launch holds both settings
# (the bare step, compute between collectives, a late rank), read by the two tests below.
ROUNDS = 3
COMPUTE = "uniform:500"
LATE = {"rank": 1, "us": 1000}


@pytest.fixture(scope="module")
def spaced():
    """Per setting ("bare", "compute", "late") its ROUNDS replays, and the step's op count."""
    settings = [("none", None), (COMPUTE, None), ("none", LATE)]
    results, ops = run_ranks(_replay, 2, (settings * ROUNDS, 30))[0]
    for result in results:
        assert result["status"] == "ok", result["message"]
    return {name: results[i :: len(settings)] for i, name in enumerate(("bare", "compute", "late"))} | {"ops": ops}


def _best(bare_runs):
    """The bare step's best (its least disturbed) and its spread there (median - min): "within noise"."""
    bare = min(bare_runs, key=lambda r: r["step_us"]["min"])
    return bare["step_us"]["min"], max(bare["step_us"]["median"] - bare["step_us"]["min"], 0.0)


@pytest.mark.processes
def test_compute_between_collectives_raises_the_step_by_its_length_and_is_told_apart(spaced):
    bare_runs, spaced_runs, ops = spaced["bare"], spaced["compute"], spaced["ops"]
    assert all(r["compute_us"] is None and r["wait_clock"] == "host_monotonic" for r in bare_runs)
    expected = 500 * (ops - 1)
    # Timed on its own, the compute is its length: never shorter, and its best step close to it.
    assert all(r["compute_us"]["min"] >= expected * 0.98 for r in spaced_runs)
    assert min(r["compute_us"]["min"] for r in spaced_runs) <= expected * 1.5
    best, noise = _best(bare_runs)
    # Best steps (and the compute's best measurement) are compared: on a shared box they are the ones the scheduler
    # left alone; the compute is the same in every round, timed on its own each time. Within noise, not above a
    # floor: gloo's threads receive a peer's data while this rank computes, so a gap can hide some communication.
    step = min(r["step_us"]["min"] for r in spaced_runs)
    # The step grows by the compute ...
    assert abs(step - best - expected) <= noise + 0.25 * expected, (step, best, noise)
    # ... and what the report calls communication (step - compute) is the no-compute step, within noise.
    communication = step - min(r["compute_us"]["min"] for r in spaced_runs)
    assert abs(communication - best) <= noise + 0.25 * expected, (communication, best, noise)


@pytest.mark.processes
def test_a_late_rank_is_waiting_on_the_others_not_wire_time(spaced):
    bare_runs, late_runs, ops = spaced["bare"], spaced["late"], spaced["ops"]
    assert all(r["wait_clock"] == "host_monotonic" and r["compute_us"] is None for r in late_runs)
    expected = 1000 * ops
    # Not much less than the lateness asked for in the middle round (one where the load held the waiting rank back
    # too waits less: it came late itself); the least disturbed close to it (a loaded box wakes the late rank late,
    # so medians run higher).
    waits = sorted(r["wait_us"]["min"] for r in late_runs)
    assert expected * 0.8 <= waits[len(waits) // 2] and waits[0] <= expected * 1.5, waits
    # Without the late rank, the waiting is a fraction of it (each setting's least disturbed round).
    assert min(r["wait_us"]["median"] for r in bare_runs) < 0.5 * min(r["wait_us"]["median"] for r in late_runs)
    # Step - wait: what is left is the collectives themselves, as without the late rank (best steps, and the
    # waiting's best measurement, as above: the lateness is the same in every round).
    best, noise = _best(bare_runs)
    calmest = min(late_runs, key=lambda r: r["step_us"]["min"])
    left = calmest["step_us"]["min"] - min(r["wait_us"]["min"] for r in late_runs)
    assert abs(left - best) <= noise + 0.25 * expected, (left, best, noise)


def test_the_report_tells_communication_from_compute_and_wire_from_waiting():
    from commprof.report.analysis.spacing import spacing_summary

    def record(tokens, step, compute, wait):
        return {
            "kind": "step",
            "point_id": "p000",
            "mode": "eager",
            "status": "ok",
            "tokens": tokens,
            "step_us": {"median": step},
            "compute_us": {"median": compute},
            "wait_us": {"median": wait},
            "wait_clock": "host_monotonic",
            "spacing": {"compute": "uniform:500", "skew": "none"},
        }

    summary = spacing_summary([record(1, 6000.0, 4500.0, 100.0), record(4, 7000.0, 4500.0, 300.0)], "p000", "eager")
    assert summary["communication_us"] == 13000.0 - 9000.0 and summary["wait_us"] == 400.0
    assert "communication = step − compute: 4.000 ms" in summary["sentence"]
    plain = record(1, 6000.0, 0.0, 0.0) | {"spacing": None}
    assert spacing_summary([plain], "p000", "eager") is None


@pytest.mark.processes
def test_a_sweep_carries_compute_and_waiting_into_its_records_and_report(gloo_sweep, tmp_path):
    """A real 2-rank gloo sweep with compute = "uniform:300" and rank 1 late by 200 µs (tests/shared_runs.py)."""
    from pathlib import Path

    from commprof.cli import main
    from commprof.records.files import read_records

    run = Path(gloo_sweep["run"])
    eager = [r for r in read_records(run / "results.jsonl") if r["mode"] == "eager" and r["status"] == "ok"]
    assert eager and all(r["kind"] != "step" or r["spacing"] for r in eager)
    for record in [r for r in eager if r["kind"] == "step"]:
        assert record["spacing"] == {"compute": "uniform:300", "skew": "rank 1 late by 200 µs"}
        plan = record["plan"]
        ops = plan["all_reduce"] + plan["all_gather"] + plan["reduce_scatter"]
        assert record["compute_us"]["min"] >= 300 * (ops - 1) * 0.98
        assert record["wait_clock"] == "host_monotonic" and record["wait_us"]["median"] > 0
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    spacing = json.loads((tmp_path / "report" / "summary.json").read_text())["runs"][0]["environment"]["spacing"]
    baseline = [r for r in eager if r["kind"] == "step" and r["point_id"] == "p000"]
    assert spacing["compute"] == "uniform:300" and spacing["communication_us"] == pytest.approx(
        sum(r["step_us"]["median"] - r["compute_us"]["median"] for r in baseline)
    )


def test_a_sweep_refuses_spacing_that_does_not_fit_its_step_before_anything_runs(tmp_path):
    from commprof.sweep.planning.config import parse_sweep
    from commprof.sweep.planning.dryrun import format_points_table

    traced = tmp_path / "trace.json"
    traced.write_text(json.dumps({"gaps_us": [0.0, 5.0]}))
    base = '[run]\nmodel = "kimi-k2.5"\ntokens = [4]\n'
    with pytest.raises(UsageError, match="the trace's step has 2 collectives"):
        parse_sweep(base + f'compute = "trace:{traced}"\n').check_plans(8)
    with pytest.raises(UsageError, match="rank 9 is not one of the launch's 8 ranks"):
        parse_sweep(base + "skew = { rank = 9, us = 10 }\n").check_plans(8)
    with pytest.raises(UsageError, match="run.compute"):
        parse_sweep(base + 'compute = "fast"\n')
    spec = parse_sweep(base + 'compute = "uniform:40"\nskew = { rank = 1, us = 20 }\nbaseline_every = "5min"\n')
    spec.check_plans(8)
    text = format_points_table(spec)
    assert "compute between collectives uniform:40" in text and "late ranks: rank 1 late by 20 µs" in text
    assert "baseline again every 5 min and at the end" in text
    assert spec.with_overrides(RunOverrides(compute="gemm")).compute.kind == "gemm"
    with pytest.raises(UsageError, match="--compute"):
        spec.with_overrides(RunOverrides(compute="uniform:0"))


def test_the_report_ranks_communication_when_compute_ran_between_the_collectives():
    from commprof.records.schema import step_record
    from commprof.report.analysis.frame import records_frame

    stats = {"n": 5, "min": 5000.0, "median": 6000.0, "mean": 6100.0, "p90": 6500.0, "p99": 7000.0, "cv": 0.1}
    common = dict(source="measured", run_id="r", point_id="p000", point={"point_id": "p000"}, status="ok", tokens=1)
    spaced = step_record(**common, mode="eager", step_us=stats, compute_us=stats | {"median": 4500.0})
    plain = step_record(**common, mode="graph", step_us=stats)
    frame = records_frame([spaced, plain]).set_index("mode")
    assert frame.loc["eager", "median_us"] == 1500.0 and frame.loc["eager", "p90_us"] == 2000.0
    assert frame.loc["eager", "compute_us"] == 4500.0 and frame.loc["eager", "step_n"] == 5
    assert frame.loc["graph", "median_us"] == 6000.0
