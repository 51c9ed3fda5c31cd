"""Staged search: ranking finished points from step records, and the stages built around the best."""

from __future__ import annotations

from pathlib import Path

import pytest

from commprof.records.point_ids import stage_of
from commprof.records.schema import step_record
from commprof.sweep import load_sweep, parse_sweep, rank_points
from commprof.sweep.planning.staging import refine

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"


def records(point, medians: dict[int, float], modes=("eager", "graph"), status="ok", graph_factor=0.5):
    """Step records of one point as the runner writes them (docs/results-schema.md), one per (T, mode)."""
    out = []
    for mode in modes:
        for tokens, median in medians.items():
            value = median * (graph_factor if mode == "graph" else 1.0)
            record_status = status if isinstance(status, str) else status.get((tokens, mode), "ok")
            timed = record_status in ("ok", "wrong", "replay_wrong")  # these ran to the end and were timed
            out.append(
                step_record(
                    source="measured",
                    run_id="r",
                    point_id=point.point_id,
                    point={
                        "label": point.label,
                        "impl": point.impl,
                        "env": dict(point.env),
                        "options": dict(point.options),
                    },
                    backend="nccl",
                    world_size=8,
                    status=record_status,
                    message=None if record_status == "ok" else "boom",
                    tokens=tokens,
                    mode=mode,
                    step_us={
                        "n": 20,
                        "min": value,
                        "median": value,
                        "mean": value,
                        "p90": value,
                        "p99": value,
                        "cv": 0.0,
                    }
                    if timed
                    else None,
                )
            )
    return out


SPEC = parse_sweep("""
[run]
tokens = [1, 4]

[axes]
impl = ["default", "flashinfer-pcie-ipc"]
NCCL_PROTO = ["default", "LL", "Simple"]

[[exclude]]
impl = "flashinfer-pcie-ipc"
NCCL_PROTO = "*"

[[stages]]
name = "channels"
top_k = 2
candidates = { impl = "default" }
[stages.axes]
channels = [2, 4]
NCCL_PROTO = ["default"]

[[stages]]
name = "confirm"
top_k = 2
iterations = 100
include_baseline = true
""")


def stage0_results(times: dict[str, tuple[float, float]], **overrides) -> list[dict]:
    out = []
    for point in SPEC.points:
        t1, t4 = times[point.point_id]
        out += records(point, {1: t1, 4: t4}, **overrides.get(point.point_id, {}))
    return out


# p000 defaults, p001 PROTO=LL, p002 PROTO=Simple, p003 flashinfer-pcie-ipc
TIMES = {"p000": (100.0, 200.0), "p001": (50.0, 100.0), "p002": (80.0, 160.0), "p003": (10.0, 20.0)}


def test_stage0_of_the_fixture():
    assert [p.label for p in SPEC.points] == ["defaults", "PROTO=LL", "PROTO=Simple", "flashinfer-pcie-ipc"]


def test_rank_by_graph_median_fastest_first():
    ranked = rank_points(stage0_results(TIMES), SPEC.tokens)
    assert [r.point.point_id for r in ranked] == ["p003", "p001", "p002", "p000"]
    assert ranked[0].mode == "graph" and ranked[0].median_us == {1: 5.0, 4: 10.0}
    assert ranked[1].score_us == pytest.approx((25.0 * 50.0) ** 0.5)


def test_sum_and_geomean_can_disagree():
    times = {"p000": (1.0, 400.0), "p001": (30.0, 30.0), "p002": (500.0, 500.0), "p003": (900.0, 900.0)}
    results = stage0_results(times)
    assert rank_points(results, SPEC.tokens, "geomean")[0].point.point_id == "p000"
    assert rank_points(results, SPEC.tokens, "sum")[0].point.point_id == "p001"


def test_eager_ranks_when_nothing_captured():
    results = stage0_results(TIMES, **{p: {"modes": ("eager",)} for p in TIMES})
    ranked = rank_points(results, SPEC.tokens)
    assert ranked[0].mode == "eager" and ranked[0].median_us == {1: 10.0, 4: 20.0}


@pytest.mark.parametrize("status", ["wrong", "capture_failed", "replay_wrong", "timeout", "crashed", "error"])
def test_a_point_that_is_not_ok_never_ranks(status):
    # p003 is the fastest and its graph records (which rank) are fine, but one eager record is bad.
    results = stage0_results(TIMES, p003={"status": {(4, "eager"): status}})
    assert [r.point.point_id for r in rank_points(results, SPEC.tokens)] == ["p001", "p002", "p000"]


def test_graph_unsupported_point_cannot_rank_once_others_captured():
    results = stage0_results(TIMES, p003={"status": {(1, "graph"): "unsupported", (4, "graph"): "unsupported"}})
    assert "p003" not in [r.point.point_id for r in rank_points(results, SPEC.tokens)]


def test_a_point_missing_a_T_does_not_rank():
    results = [r for r in stage0_results(TIMES) if not (r["point_id"] == "p003" and r["tokens"] == 4)]
    assert "p003" not in [r.point.point_id for r in rank_points(results, SPEC.tokens)]


def test_refine_crosses_the_best_candidates_with_the_stage_axes():
    points = refine(SPEC, 1, stage0_results(TIMES))
    # candidates are impl = default only: p001 (LL) then p002 (Simple); PROTO axis resets it to default.
    assert [(p.point_id, p.stage, p.env) for p in points] == [
        ("s1-p000", 1, {"NCCL_MIN_NCHANNELS": "2", "NCCL_MAX_NCHANNELS": "2"}),
        ("s1-p001", 1, {"NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4"}),
    ]
    assert points[0].label == "ch=2"


def test_refine_is_pure_and_deterministic():
    results = stage0_results(TIMES)
    snapshot = [dict(r) for r in results]
    first = refine(SPEC, 1, results)
    assert results == snapshot
    assert [p.to_dict() for p in refine(SPEC, 1, list(reversed(results)))] == [p.to_dict() for p in first]


def test_refine_skips_configurations_already_measured():
    spec = parse_sweep(
        "[axes]\nNCCL_PROTO = ['LL', 'Simple']\n[[stages]]\ntop_k = 3\n[stages.axes]\nNCCL_PROTO = ['default', 'LL']\n"
    )
    results = []
    for point, t in zip(spec.points, (100.0, 50.0, 80.0)):
        results += records(point, {1: t})
    new = refine(spec, 1, results)
    assert new == []  # every crossing of the 3 points with default / LL was already measured


def test_re_measuring_stage_repeats_the_best_with_the_baseline():
    stage0 = stage0_results(TIMES)
    stage1 = refine(SPEC, 1, stage0)
    results = list(stage0)
    for point, t in zip(stage1, (30.0, 40.0)):
        results += records(point, {1: t, 4: t})
    confirm = refine(SPEC, 2, results)
    assert [p.point_id for p in confirm] == ["s2-p000", "s2-p001", "s2-p002"]
    assert confirm[0].is_baseline and confirm[0].label == "defaults"
    assert [p.label for p in confirm[1:]] == ["flashinfer-pcie-ipc", "ch=2"]
    assert all(p.stage == 2 for p in confirm)
    assert SPEC.iterations_for(confirm[1]) == (100, SPEC.warmup)


def test_latest_measurement_of_a_configuration_is_the_one_that_ranks():
    stage0 = stage0_results(TIMES)
    stage1 = refine(SPEC, 1, stage0)
    results = list(stage0)
    for point in stage1:
        results += records(point, {1: 1000.0, 4: 1000.0})
    confirm = refine(SPEC, 2, results)
    remeasured = []
    for point in confirm:
        slow = 5000.0 if point.impl == "flashinfer-pcie-ipc" else 1.0
        remeasured += records(point, {1: slow, 4: slow})
    ranked = rank_points(results + remeasured, SPEC.tokens)
    assert ranked[0].point.point_id == "s2-p000"  # the re-measured baseline
    flashinfer = [r for r in ranked if r.point.impl == "flashinfer-pcie-ipc"]
    assert [r.point.point_id for r in flashinfer] == ["s2-p001"]  # stage-0 p003 is superseded


def test_refine_with_no_rankable_point_gives_no_points():
    results = stage0_results(TIMES, **{p: {"status": "crashed"} for p in TIMES})
    assert refine(SPEC, 1, results) == []


def test_refine_ignores_records_of_its_own_and_later_stages():
    stage0 = stage0_results(TIMES)
    ghost = SPEC.points[2]
    later = [dict(r, point_id="s1-p009") for r in records(ghost, {1: 0.1, 4: 0.1})]
    assert refine(SPEC, 1, stage0 + later) == refine(SPEC, 1, stage0)


def test_refine_rejects_a_stage_that_does_not_exist():
    with pytest.raises(ValueError, match="stage 3 does not exist"):
        refine(SPEC, 3, [])
    with pytest.raises(ValueError):
        refine(SPEC, 0, [])


def test_stage_of_point_ids():
    assert [stage_of(i) for i in ("p000", "p123", "s1-p000", "s12-p004")] == [0, 0, 1, 12]


def test_pcie8_verify_stages_on_synthetic_results():
    spec = load_sweep(SWEEPS / "pcie8-verify.toml")
    results = []
    for index, point in enumerate(spec.points):
        # Made-up numbers: faster with a higher index, and flashinfer-pcie-ipc fastest of all.
        base = 5000.0 - 100 * index - (3000 if point.impl == "flashinfer-pcie-ipc" else 0)
        results += records(point, {t: base * t**0.1 for t in spec.tokens})
    stage1 = refine(spec, 1, results)
    # 3 candidates x 5 channel counts x 2 thresholds x 2 thread counts, less each candidate itself (all "default").
    assert spec.stages[0].max_points() == 60 and len(stage1) == 60 - 3
    # The candidates filter keeps FlashInfer out: the 3 fastest NCCL points are the last 3 default ones.
    best_nccl = [p for p in spec.points if p.impl == "default"][-3:]
    stage1_bases = {
        tuple(sorted((k, v) for k, v in p.env.items() if k in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL")))
        for p in stage1
    }
    assert stage1_bases == {tuple(sorted(p.env.items())) for p in best_nccl}
    assert all(p.impl == "default" for p in stage1)
    assert {p.env.get("NCCL_MIN_NCHANNELS", "default") for p in stage1} == {"default", "2", "4", "8", "16"}
    for point in stage1:
        results += records(point, {t: 100.0 for t in spec.tokens})
    confirm = refine(spec, 2, results)
    assert len(confirm) == 5 and confirm[0].is_baseline
    assert all(p.stage == 2 for p in confirm)
