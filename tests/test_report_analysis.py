"""The report's analysis functions on DataFrames built here: best point, speed-ups, fusion, break-even, axes."""

import math

import pandas as pd
import pytest

from commprof.errors import UsageError
from commprof.evidence import Evidence, ModelError
from commprof.records.meta_sections import SweepReport
from commprof.records.schema import collective_record, step_record
from commprof.report import flags
from commprof.report.analysis import choices, costmodel_check, frame, heatmap, nccl_choice, ops, projection, ranking

MEASURED = Evidence("measured", backend="nccl")


def step(
    point_id,
    tokens,
    mode,
    median_us,
    env=None,
    impl="nccl",
    status="ok",
    fused=False,
    backend="nccl",
    source="measured",
    op_us=None,
    ranks=None,
    p90=None,
    iterations=10,
):
    """One step record, only the fields the analysis reads; p90 defaults to the median (no spread)."""
    return step_record(
        source=source,
        run_id="r",
        point_id=point_id,
        point={"label": point_id, "impl": impl, "env": env or {}, "options": {}},
        backend=backend,
        world_size=8,
        status=status,
        message=None if status == "ok" else "boom",
        model="Kimi-K2.5",
        phase="verify",
        tp=8,
        tokens=tokens,
        dtype="bfloat16",
        plan={"hidden_size": 7168, "num_layers": 61, "all_reduce": 123, "all_gather": 1},
        mode=mode,
        timing="cuda_events",
        fused_rmsnorm=fused,
        op_us=op_us,
        rank_step_median_us=ranks,
        iterations=iterations,
        step_us=None
        if status != "ok"
        else {
            "n": iterations,
            "min": median_us,
            "median": median_us,
            "mean": median_us,
            "p90": median_us if p90 is None else p90,
            "p99": median_us * 1.1,
            "cv": 0.02,
        },
    )


def steps_of(records):
    return frame.step_frame(frame.records_frame(records))


@pytest.fixture
def sweep():
    """p000 defaults, p001 Ring/LL (fastest at T=4 in graph), p002 Tree (fastest eager, graph capture fails),
    p003 Ring/Simple (fastest at T=1), fused kind p005 and its unfused reference p004."""
    rows = []
    for t, base, ring_ll, tree, simple in ((1, 6000, 5200, 4000, 5100), (4, 9000, 7000, 5000, 8000)):
        for mode, extra in (("graph", 0), ("eager", 1000)):
            rows += [
                step("p000", t, mode, base + extra),
                step("p001", t, mode, ring_ll + extra, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}),
                step("p003", t, mode, simple + extra, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}),
                step("p004", t, mode, base + 400 + extra, impl="nccl+rmsnorm", fused=True),
                step("p005", t, mode, 2000 + extra, impl="flashinfer_fused", fused=True),
            ]
            rows.append(
                step(
                    "p002",
                    t,
                    mode,
                    tree + extra,
                    {"NCCL_ALGO": "Tree"},
                    status="capture_failed" if mode == "graph" else "ok",
                )
            )
    return steps_of(rows)


def test_best_point_per_t_is_the_fastest_ok_unfused_graph_point(sweep):
    best = ranking.best_points(sweep, "graph").set_index("tokens")
    assert best.loc[1, "point_id"] == "p003"  # Tree is faster but failed capture; p005 is fused
    assert best.loc[4, "point_id"] == "p001"
    eager = ranking.best_points(sweep, "eager").set_index("tokens")
    assert eager.loc[4, "point_id"] == "p002"  # eagerly, Tree runs and wins


def test_headline_saved_percent_and_settings(sweep):
    head = ranking.headline(sweep, "p000", "graph", MEASURED).set_index("tokens")
    assert head.loc[4, "baseline_us"] == 9000 and head.loc[4, "best_us"] == 7000
    assert head.loc[4, "saved_pct"] == pytest.approx(100 * 2000 / 9000)
    assert head.loc[4, "speedup"] == pytest.approx(9000 / 7000)
    assert head.loc[4, "best_settings"] == "NCCL_ALGO=Ring NCCL_PROTO=LL"


def test_headline_mode_is_graph_when_any_graph_point_ran(sweep):
    assert ranking.headline_mode(sweep)[0] == "graph"
    gloo = steps_of(
        [
            step("p000", 1, "eager", 900, impl="gloo", backend="gloo"),
            step("p000", 1, "graph", 0, impl="gloo", backend="gloo", status="unsupported"),
        ]
    )
    mode, why = ranking.headline_mode(gloo)
    assert mode == "eager" and "gloo" in why


def test_speedups_compare_fused_kinds_with_the_unfused_reference(sweep):
    rated = ranking.speedups(sweep, "p000").set_index(["point_id", "tokens", "mode"])
    assert rated.loc[("p001", 4, "graph"), "speedup"] == pytest.approx(9000 / 7000)
    assert rated.loc[("p005", 4, "graph"), "reference"] == "p004"
    assert rated.loc[("p005", 4, "graph"), "speedup"] == pytest.approx(9400 / 2000)
    assert math.isnan(rated.loc[("p002", 4, "graph"), "speedup"])


def test_fusion_comparison(sweep):
    fusion = choices.fusion_comparison(sweep, "p000", "graph", MEASURED).set_index("tokens")
    assert list(fusion["point_id"]) == ["p005", "p005"]
    assert fusion.loc[1, "saved_pct"] == pytest.approx(100 * (6400 - 2000) / 6400)


def test_best_overall_point_needs_every_t(sweep):
    point = ranking.best_overall_point(sweep, "graph", impl="nccl")
    assert point["point_id"] == "p001"  # 5200 + 7000 < 5100 + 8000
    assert point["total_us"] == pytest.approx(12200)


def test_baseline_must_exist(sweep):
    assert ranking.baseline_id(sweep) == "p000"
    with pytest.raises(UsageError, match="p999"):
        ranking.baseline_id(sweep, "p999")


def test_failures_separate_failed_from_unsupported():
    rows = steps_of(
        [
            step("p000", 1, "graph", 1),
            step("p001", 1, "graph", 1, status="timeout"),
            step("p002", 1, "graph", 1, status="unsupported"),
        ]
    )
    bad = frame.failures(rows).set_index("point_id")
    assert bool(bad.loc["p001", "failed"]) and not bool(bad.loc["p002", "failed"])
    assert "p000" not in bad.index


def test_strongest_axes_and_heatmap():
    rows = []
    for algo, cost in (("Ring", 1000), ("Tree", 3000)):
        for proto, extra in (("LL", 0), ("Simple", 100)):
            for threads in ("256", "512"):
                rows.append(
                    step(
                        f"{algo}{proto}{threads}",
                        4,
                        "graph",
                        cost + extra + (1 if threads == "512" else 0),
                        {"NCCL_ALGO": algo, "NCCL_PROTO": proto, "NCCL_NTHREADS": threads},
                    )
                )
    steps = steps_of(rows)
    assert set(heatmap.varying_axes(steps)) == {"env.NCCL_ALGO", "env.NCCL_PROTO", "env.NCCL_NTHREADS"}
    assert heatmap.strongest_axes(steps, "graph") == ["env.NCCL_ALGO", "env.NCCL_PROTO"]
    pivot = heatmap.heatmap_pivot(steps, 4, "graph", "env.NCCL_ALGO", "env.NCCL_PROTO")
    assert pivot.loc["Tree", "Simple"] == 3100  # min over the thread axis
    assert pivot.loc["Ring", "LL"] == 1000


def test_status_matrix(sweep):
    matrix = frame.status_matrix(sweep)
    assert matrix.loc[("p002", "p002"), (4, "graph")] == "capture_failed"
    assert matrix.loc[("p002", "p002"), (4, "eager")] == "ok"


def test_break_even_and_tokens_per_second_match_the_field_report_arithmetic():
    # 30 ms verify (25 comm + 5 compute) against 12 ms plain decode: break-even at accept 2.5.
    assert projection.break_even_accept(0.0, 30.0, 12.0) == pytest.approx(2.5)
    assert projection.tokens_per_second(1.3, 0.0, 30.0) == pytest.approx(43.33, abs=0.01)
    assert projection.break_even_accept(1.0, 30.0, 12.0) == pytest.approx(31 / 12)


def test_breakdown_and_projection(sweep):
    head = ranking.headline(sweep, "p000", "graph", MEASURED)
    parts = projection.breakdown(sweep, head, projection.ShownPoints("p000"), flags.parse_compute_ms("1=4.0,4=5.0"))
    best4 = parts[(parts["setting"] == "best") & (parts["tokens"] == 4)].iloc[0]
    assert best4["comm_ms"] == pytest.approx(7.0) and best4["compute_ms"] == 5.0
    assert best4["overhead_ms"] == pytest.approx(1.0)  # eager - graph of p001
    assert best4["verify_ms"] == pytest.approx(12.0)
    assert best4["comm_share_pct"] == pytest.approx(100 * 7 / 12)
    proj = projection.projection(parts, 0.5, (1.3, 2.0, 8.0)).set_index(["setting", "tokens"])
    row = proj.loc[("best", 4)]
    decode = 4.0 + 5.1  # compute(1) + best comm at T = 1 (p003)
    assert row["decode_ms"] == pytest.approx(decode)
    assert row["break_even_accept"] == pytest.approx((0.5 + 12.0) / decode)
    assert row[projection.tps_column(2.0)] == pytest.approx(2000 / 12.5)
    assert math.isnan(row[projection.tps_column(8.0)])  # cannot accept more tokens than were verified


def test_projection_needs_a_decode_step(sweep):
    only_verify = sweep[sweep["tokens"] == 4]
    head = ranking.headline(only_verify, "p000", "graph", MEASURED)
    parts = projection.breakdown(only_verify, head, projection.ShownPoints("p000"), projection.ComputeTimes())
    assert projection.projection(parts, 0.0, (2.0,)).empty


def test_parse_compute_ms():
    assert flags.parse_compute_ms("5").for_tokens(8) == 5.0
    per_t = flags.parse_compute_ms("4=5.0, 8=5.2")
    assert per_t.for_tokens(8) == 5.2 and per_t.for_tokens(1) == 5.0 and per_t.for_tokens(16) == 5.2
    assert flags.parse_compute_ms({"4": 3}).for_tokens(4) == 3.0
    assert not flags.parse_compute_ms(None).given
    for bad in ("x", "4=", "a=1", "-1", "0=2"):
        with pytest.raises(UsageError):
            flags.parse_compute_ms(bad)


def test_parse_accept():
    assert flags.parse_accept("3,1.3,2") == (1.3, 2.0, 3.0)
    for bad in ("0.5", "x", ""):
        with pytest.raises(UsageError):
            flags.parse_accept(bad)


@pytest.mark.parametrize(
    "flag,sweep_name,value,problem",
    [
        ("accept", "accept_lengths", ["x"], "'x' is not a number"),
        ("draft_ms", "draft_ms", -1, "-1 must be a finite number >= 0"),
        ("compute_ms", "compute_ms", {"0": 2}, "T must be >= 1, got 0"),
    ],
)
def test_a_bad_report_option_is_named_where_it_was_given(flag, sweep_name, value, problem):
    """From the command line, its flag; from the run's sweep file (meta.json), that file's [report] key."""
    with pytest.raises(UsageError) as from_sweep:
        flags.report_options({}, SweepReport(**{sweep_name: value}))
    assert str(from_sweep.value) == f"the sweep file's [report] {sweep_name}: {problem}"
    text = ",".join(map(str, value)) if isinstance(value, list) else value
    text = ",".join(f"{k}={v}" for k, v in text.items()) if isinstance(text, dict) else text
    with pytest.raises(UsageError) as from_flag:
        flags.report_options({flag: str(text)}, SweepReport(**{sweep_name: value}))
    assert str(from_flag.value).startswith(f"--{flag.replace('_', '-')}: ")


def test_op_sizes():
    op_us = {
        "sites": ["embed", "layer.0.attn", "layer.0.mlp", "logits"],
        "bytes": [100, 100, 100, 4000],
        "median": [10.0, 12.0, 14.0, 50.0],
        "p99": [1, 1, 1, 1],
    }
    steps = steps_of([step("p000", 1, "eager", 100, op_us=op_us)])
    sizes = ops.op_sizes(steps).set_index(["collective", "bytes"])
    assert sizes.loc[("all_reduce", 100), "time_us"] == 12.0 and sizes.loc[("all_reduce", 100), "ops"] == 3
    assert sizes.loc[("all_gather", 4000), "time_us"] == 50.0
    summary = ops.site_summary(ops.op_sites(op_us)).set_index("site_kind")
    assert list(summary.index) == ["embed", "attn", "mlp", "logits"]


def test_rank_skew():
    steps = steps_of([step("p000", 1, "graph", 100, ranks=[100.0, 104.0, 98.0, 100.0])])
    assert steps["rank_skew_us"].iloc[0] == pytest.approx(6.0)
    assert steps["rank_skew_pct"].iloc[0] == pytest.approx(6.0)


def test_empty_frame_is_handled():
    assert frame.records_frame([]).empty
    assert isinstance(frame.step_frame(pd.DataFrame()), pd.DataFrame)


def test_beyond_noise_rule():
    assert MEASURED.beats(90.0, 95.0, 100.0) is True  # nine in ten steps faster than the baseline's typical one
    assert MEASURED.beats(90.0, 100.0, 100.0) is False
    assert MEASURED.beats(90.0, 120.0, 100.0) is False
    assert MEASURED.beats(90.0, math.nan, 100.0) is None and MEASURED.beats(80.0, 90.0, None) is None


def noisy_pair(best_p90):
    """Baseline p000 at 100 ms; p001 at 90 ms median with the given p90, at T = 1 and 4 (eager, gloo-like)."""
    rows = []
    for t in (1, 4):
        rows.append(step("p000", t, "eager", 100_000, p90=130_000))
        rows.append(step("p001", t, "eager", 90_000, {"OMP_NUM_THREADS": "2"}, p90=best_p90))
    return steps_of(rows)


def test_headline_and_recommendation_within_noise_keep_the_baseline():
    steps = noisy_pair(best_p90=120_000)  # 10 % faster median, but p90 above the baseline's median
    head = ranking.headline(steps, "p000", "eager", MEASURED)
    assert list(head["beyond_uncertainty"]) == [False, False]
    assert head["saved_pct"].iloc[0] == pytest.approx(10.0)  # the number stays, labelled as noise
    rec = nccl_choice.choose_environment(steps, "p000", "eager", MEASURED, impl="nccl")
    assert rec.fastest["point_id"] == "p001" and rec.beyond_uncertainty is False and rec.keeps_baseline
    assert rec.chosen["point_id"] == "p000" and rec.chosen["env"] == {}
    assert rec.baseline_total_us == pytest.approx(200_000) and rec.fastest["p90_total_us"] == pytest.approx(240_000)


def test_headline_and_recommendation_beyond_uncertainty_choose_the_fastest():
    steps = noisy_pair(best_p90=95_000)
    assert list(ranking.headline(steps, "p000", "eager", MEASURED)["beyond_uncertainty"]) == [True, True]
    rec = nccl_choice.choose_environment(steps, "p000", "eager", MEASURED, impl="nccl")
    assert rec.beyond_uncertainty is True and not rec.keeps_baseline and rec.chosen["point_id"] == "p001"


def test_a_remeasured_configuration_counts_with_its_latest_longest_measurement():
    """Stage 1 re-measures p000 and p001 with more iterations; p001's lucky first measurement must not win."""
    env = {"OMP_NUM_THREADS": "2"}
    rows = []
    for t in (1, 4):
        rows += [
            step("p000", t, "eager", 100_000, iterations=5),
            step("p001", t, "eager", 70_000, env, iterations=5),
            step("s1-p000", t, "eager", 98_000, iterations=10),
            step("s1-p001", t, "eager", 104_000, env, iterations=10),
            step("p002", t, "eager", 101_000, {"OMP_NUM_THREADS": "4"}, iterations=5),
        ]
    all_steps = steps_of(rows)
    latest = frame.latest_point_ids(all_steps)
    assert latest["p001"] == "s1-p001" and latest["p000"] == "s1-p000" and latest["p002"] == "p002"
    assert frame.superseded_by(latest) == {"p000": "s1-p000", "p001": "s1-p001"}
    assert ranking.baseline_id(all_steps) == "s1-p000"
    steps = frame.latest_measurements(all_steps)
    assert set(steps["point_id"]) == {"s1-p000", "s1-p001", "p002"}
    head = ranking.headline(steps, "s1-p000", "eager", MEASURED).set_index("tokens")
    assert head.loc[4, "best_point_id"] == "s1-p000" and head.loc[4, "baseline_us"] == 98_000
    rec = nccl_choice.choose_environment(steps, "s1-p000", "eager", MEASURED, impl="nccl")
    assert rec.fastest["point_id"] == "s1-p000" and rec.keeps_baseline


def test_the_longer_measurement_wins_within_a_stage():
    rows = [
        step("p000", 1, "eager", 100, iterations=5),
        step("p003", 1, "eager", 50, iterations=5),
        step("p007", 1, "eager", 80, iterations=20),
    ]
    rows[2]["point"]["label"] = "same configuration as p003, measured longer"
    rows[1]["point"]["env"] = rows[2]["point"]["env"] = {"NCCL_ALGO": "Ring"}
    assert frame.latest_point_ids(steps_of(rows))["p003"] == "p007"


def test_break_even_below_one_pays_at_any_accept_length(sweep):
    head = ranking.headline(sweep, "p000", "graph", MEASURED)
    parts = projection.breakdown(sweep, head, projection.ShownPoints("p000"), projection.ComputeTimes())
    parts.loc[(parts["tokens"] == 4), "verify_ms"] = 4.0  # verify T = 4 faster than decode T = 1
    row = projection.projection(parts, 0.0, (1.3,)).set_index(["setting", "tokens"]).loc[("best", 4)]
    assert row["break_even_ratio"] == pytest.approx(4.0 / 5.1)
    assert math.isnan(row["break_even_accept"]) and bool(row["pays_at_any_accept"])
    assert not projection.pays_at_any_accept(1.0) and projection.pays_at_any_accept(0.99)


def test_fusion_comparison_applies_the_noise_rule_both_ways(sweep):
    fusion = choices.fusion_comparison(sweep, "p000", "graph", MEASURED).set_index("tokens")
    assert fusion.loc[4, "beyond_uncertainty"] is True and fusion.loc[4, "slower_beyond_uncertainty"] is False
    close = sweep.copy()
    fused = close["point_id"] == "p005"
    close.loc[fused, "median_us"] = close.loc[fused, "median_us"] + 8_000  # T = 4: 10 ms against p004 9.4 ms
    close.loc[fused, "p90_us"] = close.loc[fused, "median_us"]
    fusion = choices.fusion_comparison(close, "p000", "graph", MEASURED).set_index("tokens")
    assert fusion.loc[4, "beyond_uncertainty"] is False and fusion.loc[4, "slower_beyond_uncertainty"] is True


def test_ties_go_to_the_baselines_implementation_then_the_preferred_point_then_the_confirmed_one():
    """A cost model predicts many points alike: the first screen must not pick an arbitrary one of them."""
    env3 = {"NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4", "NCCL_THREAD_THRESHOLDS": "0 0 0 0 0 0"}
    env2 = {**env3, "NCCL_MIN_NCHANNELS": "2", "NCCL_MAX_NCHANNELS": "2"}
    rows = [
        step("p000", 8, "graph", 3160.0),
        step("p001", 8, "graph", 3160.0, {"NCCL_P2P_LEVEL": "SYS"}),
        step("s1-p006", 8, "graph", 3160.0, env3),
        step("s2-p003", 8, "graph", 3160.0, env2),
        step("s2-p001", 8, "graph", 3160.0, impl="flashinfer-pcie-ipc"),
    ]
    steps = steps_of(rows)
    family = ranking.implementation_family("default")
    assert set(family) == {"default", "nccl", "gloo"}
    assert ranking.best_points(steps, "graph", family=family)["point_id"].iloc[0] == "s2-p003"  # confirmed first
    assert ranking.best_points(steps, "graph", prefer=["p000", "s1-p006"], family=family)["point_id"].iloc[0] == "p000"
    assert ranking.best_overall_point(steps, "graph", impl=family)["point_id"] == "s2-p003"
    stage_one = steps_of([rows[2], step("s1-p007", 8, "graph", 3160.0, {"NCCL_MIN_NCHANNELS": "4"})])
    assert (
        ranking.best_points(stage_one, "graph", family=family)["point_id"].iloc[0] == "s1-p007"
    )  # then fewest settings
    faster = steps_of(rows[:4] + [step("s2-p001", 8, "graph", 3000.0, impl="flashinfer-pcie-ipc")])
    assert ranking.best_points(faster, "graph", family=family)["point_id"].iloc[0] == "s2-p001"  # strictly faster


@pytest.fixture
def pcie_like():
    """p000 defaults; p001 NCCL channels (fastest NCCL over every T); p002 NCCL LL (fastest NCCL at T=8 only);
    p003 a PCIe IPC all-reduce (much faster at T=1, slower at T=8); p004 a fused kind that never ran."""
    rows = []
    for t, base, channels, ll, ipc in ((1, 2300, 2100, 2250, 900), (8, 3600, 3300, 3200, 3900)):
        rows += [
            step("p000", t, "graph", base, impl="default"),
            step("p001", t, "graph", channels, {"NCCL_MIN_NCHANNELS": "4"}, impl="default", p90=channels * 1.01),
            step("p002", t, "graph", ll, {"NCCL_PROTO": "LL"}, impl="default", p90=ll * 1.01),
            step("p003", t, "graph", ipc, impl="flashinfer-pcie-ipc", p90=ipc * 1.01),
            step("p004", t, "graph", 0, impl="flashinfer-fused", status="unsupported"),
        ]
    return steps_of(rows)


def test_choices_per_tokens_mark_the_role_of_every_point(pcie_like):
    family = ranking.implementation_family("default")
    rec = nccl_choice.choose_environment(pcie_like, "p000", "graph", MEASURED, impl=family)
    assert rec.chosen["point_id"] == "p001"  # 2100 + 3300 < 2250 + 3200
    table = choices.choices_per_tokens(pcie_like, "p000", "graph", MEASURED, "p001", family)
    roles = {(int(r.tokens), r.point_id): r.roles for r in table.itertuples()}
    assert roles == {
        (1, "p000"): ["baseline"],
        (1, "p001"): ["recommended", "fastest setting"],
        (1, "p003"): ["fastest"],
        (8, "p000"): ["baseline"],
        (8, "p001"): ["recommended"],
        (8, "p002"): ["fastest setting", "fastest"],
    }
    row = table[(table["tokens"] == 1) & (table["point_id"] == "p003")].iloc[0]
    assert row["saved_pct"] == pytest.approx(100 * (2300 - 900) / 2300) and row["beyond_uncertainty"] is True
    assert table.loc[table["point_id"] == "p000", "beyond_uncertainty"].isna().all()
    head = ranking.headline(pcie_like, "p000", "graph", MEASURED, "p001", family).set_index("tokens")
    assert head.loc[1, "best_point_id"] == "p003" and head.loc[8, "best_point_id"] == "p002"


def test_alternatives_are_judged_against_the_exported_settings(pcie_like):
    family = ranking.implementation_family("default")
    alt = choices.alternatives(pcie_like, "p001", "graph", MEASURED, family).set_index("tokens")
    assert list(alt["impl"]) == ["flashinfer-pcie-ipc"] * 2 and set(alt["reference"]) == {"p001"}
    assert alt.loc[1, "bytes"] == 1 * 7168 * 2 and alt.loc[8, "bytes"] == 8 * 7168 * 2
    assert alt.loc[1, "saved_pct"] == pytest.approx(100 * (2100 - 900) / 2100)
    assert alt.loc[1, "beyond_uncertainty"] is True and alt.loc[1, "slower_beyond_uncertainty"] is False
    assert alt.loc[8, "beyond_uncertainty"] is False and alt.loc[8, "slower_beyond_uncertainty"] is True
    missing = choices.implementations_without_result(pcie_like, "graph", family)
    assert missing.to_dict("records") == [
        {"impl": "flashinfer-fused", "fused_rmsnorm": True, "status": "unsupported", "message": "boom"}
    ]
    assert choices.alternatives(pcie_like[pcie_like["impl"] == "default"], "p001", "graph", MEASURED, family).empty


def test_breakdown_adds_the_recommended_setting(pcie_like):
    family = ranking.implementation_family("default")
    head = ranking.headline(pcie_like, "p000", "graph", MEASURED, "p001", family)
    shown = projection.ShownPoints("p000", "p001")
    parts = projection.breakdown(pcie_like, head, shown, projection.ComputeTimes(everywhere=5.0), mode="graph")
    by = parts.set_index(["setting", "tokens"])
    assert list(parts["setting"].unique()) == ["baseline", "recommended", "best"]
    assert by.loc[("recommended", 8), "comm_ms"] == pytest.approx(3.3) and by.loc[("best", 8), "point_id"] == "p002"
    assert by.loc[("recommended", 1), "verify_ms"] == pytest.approx(7.1)
    same = projection.breakdown(
        pcie_like, head, projection.ShownPoints("p000", "p000"), projection.ComputeTimes(), mode="graph"
    )
    assert "recommended" not in set(same["setting"])  # keeping the baseline adds no row


def test_model_comparison_pairs_the_same_configuration_t_and_mode():
    measured = steps_of(
        [
            step("p000", 4, "graph", 3300),
            step("p001", 4, "graph", 2200, {"NCCL_PROTO": "LL"}),
            step("p002", 4, "graph", 1000, {"NCCL_ALGO": "Tree"}, status="capture_failed"),
            step("p003", 4, "eager", 4000),
        ]
    )
    model = steps_of(
        [
            step("p000", 4, "graph", 3000, source="simulated"),
            step("s1-p009", 4, "graph", 2420, {"NCCL_PROTO": "LL"}, source="simulated"),
            step("p002", 4, "graph", 900, {"NCCL_ALGO": "Tree"}, source="simulated"),
            step("p004", 4, "graph", 900, {"NCCL_PROTO": "Simple"}, source="simulated"),
        ]
    )
    model["calibration"] = "nccl-prior"
    pairs = costmodel_check.step_comparison(measured, model).set_index("point_id_measured")
    assert set(pairs.index) == {"p000", "p001"}  # failed and one-sided points are not paired
    assert pairs.loc["p001", "point_id_simulated"] == "s1-p009" and pairs.loc["p001", "ratio"] == pytest.approx(1.1)
    assert pairs.loc["p000", "error_pct"] == pytest.approx(100 * (3000 / 3300 - 1))
    assert bool(pairs.loc["p001", "within_band"]) and bool(pairs.loc["p000", "within_band"])
    assert set(pairs["calibration"]) == {"nccl-prior"}
    summary = costmodel_check.comparison_summary(pairs.reset_index())
    assert summary["pairs"] == 2 and summary["within_band_pct"] == 100.0


def collective(source, size, ranks, time_us, in_place=False, calibration=None):
    return collective_record(
        source=source,
        run_id=source,
        point_id="p000",
        point={"label": "all_reduce_perf", "impl": "nccl", "env": {}, "options": {}},
        world_size=ranks,
        status="ok",
        calibration=calibration,
        collective="all_reduce",
        bytes=size,
        count=size // 2,
        dtype="bfloat16",
        in_place=in_place,
        time_us=time_us,
        algbw_gbps=1.0,
        busbw_gbps=1.0,
        wrong=0,
    )


def test_collective_model_comparison_pairs_size_and_rank_count():
    measured = frame.collective_frame(
        frame.records_frame(
            [
                collective("nccl-tests", 65536, 8, 40.0),
                collective("nccl-tests", 65536, 8, 44.0, in_place=True),
                collective("nccl-tests", 1 << 20, 8, 200.0),
                collective("nccl-tests", 65536, 4, 30.0),
            ]
        )
    )
    model = frame.collective_frame(
        frame.records_frame(
            [
                collective("simulated", 65536, 8, 50.0, calibration="fitted.toml"),
                collective("simulated", 1 << 20, 8, 180.0, calibration="fitted.toml"),
                collective("simulated", 8192, 8, 20.0, calibration="fitted.toml"),
            ]
        )
    )
    pairs = costmodel_check.collective_comparison(measured, model).set_index("bytes")
    assert list(pairs.index) == [65536, 1 << 20]  # 4 ranks and 8 KB are one-sided
    assert pairs.loc[65536, "measured_us"] == pytest.approx(42.0)  # in and out of place: their median
    assert pairs.loc[65536, "ratio"] == pytest.approx(50 / 42) and not bool(pairs.loc[65536, "within_band"])
    assert pairs.loc[1 << 20, "label"] == "all_reduce x8" and pairs.loc[1 << 20, "calibration"] == "fitted.toml"


def test_a_variable_that_does_not_earn_its_place_is_not_exported():
    measured = MEASURED
    rows = []
    for t in (1, 4):
        rows += [
            step("p000", t, "graph", 1000.0, p90=1010.0),
            step("p001", t, "graph", 800.0, env={"NCCL_PROTO": "LL"}, p90=805.0),
            step("p002", t, "graph", 795.0, env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}, p90=830.0),
        ]
    steps = steps_of(rows)
    rec = nccl_choice.choose_environment(steps, "p000", "graph", measured, impl=("default", "nccl", "gloo"))
    assert rec.fastest["point_id"] == "p002" and rec.recommends
    assert rec.chosen["point_id"] == "p001" and rec.dropped == ("NCCL_ALGO",)
    # Told apart beyond noise, the extra variable stays.
    steps.loc[steps["point_id"] == "p002", "p90_us"] = 796.0
    steps.loc[steps["point_id"] == "p002", "median_us"] = 700.0
    rec = nccl_choice.choose_environment(steps, "p000", "graph", measured, impl=("default", "nccl", "gloo"))
    assert rec.chosen["point_id"] == "p002" and rec.dropped == ()


def test_simulated_gains_count_only_beyond_the_expected_error():
    prior = Evidence("simulated", calibration="nccl-prior", model_error=ModelError(41.0, "real logs"))
    assert prior.beats(900.0, 900.0, 1000.0) is False  # 10 % predicted: inside ±41 %
    assert prior.beats(500.0, 500.0, 1000.0) is True
    unknown = Evidence("simulated", calibration="old.toml", model_error=ModelError(None, "no held-out error"))
    assert unknown.beats(100.0, 100.0, 1000.0) is False and "unknown" in unknown.rule
    assert prior.label == "simulated with nccl-prior (expected error ±41 %)"
    assert Evidence("measured", backend="gloo").label == "measured on gloo"


def test_break_even_never_above_t_and_the_cells_by_their_claims():
    """The break-even is the statistic the chart draws, (draft + verify) / decode; above T no accept length reaches
    it. Each tokens/s cell is a claim (speculation's time per token against plain decode's) under the one rule."""
    from commprof.evidence import Evidence, ModelError
    from commprof.report.analysis.claims import ClaimBook
    from commprof.report.decision.formatting import break_even_text

    assert projection.break_even_accept(0.0, 30.0, 5.0) == 6.0
    assert break_even_text(6.0, 4) == "6.00 (above T = 4: no accept length reaches it)"
    assert break_even_text(0.9, 4) == "0.90 (below every accept length)" and break_even_text(1.75, 4) == "1.75"
    book = ClaimBook(Evidence("simulated", model_error=ModelError(20.0, "held-out")))
    ratio = projection.break_even_accept(1.0, 6.0, 5.0)  # 1.4: where the line crosses plain decode
    for accept in (1.5, 2.0, 3.0):  # pays beyond the 20 % error only where the time per token is 20 % below decode's
        claim = book.compare(f"a{accept}", "spec", (((1.0 + 6.0) / accept, math.nan), (5.0, math.nan)), "ms per token")
        assert claim.beyond == (accept > ratio / 0.8)
    unknown = ClaimBook(Evidence("simulated", model_error=ModelError(None, "?")))
    assert unknown.compare("x", "spec", ((3.5, math.nan), (5.0, math.nan))).verdict == "not judged"
