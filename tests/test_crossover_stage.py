"""The crossover stage: its sweep-file table, what it searches from the records before it, its records, the
analysis that reads them back and places routing edges, and its simulation. Pure (fabricated records)."""

import pytest

from commprof.costmodel.sweep_simulation import simulate_sweep
from commprof.costmodel.topology import load_topology
from commprof.errors import UsageError
from commprof.records.checks import record_problem
from commprof.records.schema import FUSED, step_record
from commprof.report.analysis.crossovers import NOT_RESOLVED, crossovers, routing_edges
from commprof.report.analysis.routing import routing_plan
from commprof.report.analysis.routing_candidates import candidates
from commprof.report.analysis.routing_settings import routing_settings
from commprof.sweep.planning import crossover as cx
from commprof.sweep.planning.config import load_sweep, parse_sweep
from commprof.sweep.planning.crossover_stage import (
    GRAPH_NEEDS_GPUS,
    RecordOrigin,
    finished,
    measured,
    searches,
    size_record,
)
from commprof.sweep.planning.spec import CrossoverStage
from tests.test_routing import FIG, record

HEAD = '[run]\nmodel = "kimi-k2.5"\ntokens = [1]\n[[points]]\nimpl = "b12x"\n'


def stage_of(body: str) -> CrossoverStage:
    return parse_sweep(HEAD + '[[stages]]\nkind = "crossover"\n' + body).stages[0]


def test_a_crossover_stage_with_no_settings_searches_every_other_implementation_at_the_documented_defaults():
    stage = stage_of("")
    assert stage.kind == "crossover" and stage.impls == () and stage.modes == ("graph", "eager")
    assert (stage.min_bytes, stage.max_bytes, stage.step_bytes) == (1024, 1 << 20, 1024)
    assert stage.max_points() == 0  # no points: the budget is unchanged
    stage = stage_of('impls = ["b12x"]\nmodes = ["eager"]\nmin_bytes = 4096\nmax_bytes = 65536\nrounds = 3\n')
    assert stage.impls == ("b12x",) and stage.modes == ("eager",) and stage.rounds == 3


@pytest.mark.parametrize(
    "body, needle",
    [
        ('kind = "sideways"', "stages[0].kind: 'sideways' is not a stage kind (allowed: refine, crossover)"),
        ('modes = ["graph", "fast"]', "stages[0].modes[1]: 'fast' is not a mode"),
        ('impls = ["default"]', "stages[0].impls[0]: the baseline is what every search is timed against"),
        ('impls = ["no-such"]', "stages[0].impls[0]: unknown implementation 'no-such'"),
        ("min_bytes = 8192\nmax_bytes = 4096", "stages[0].min_bytes: 8192 is above max_bytes 4096"),
        ("step_bytes = 0", "stages[0].step_bytes: 0 is below 1"),
        ("top_k = 3", "stages[0].top_k: unknown key"),
    ],
)
def test_bad_crossover_settings_are_one_line_each(body, needle):
    text = HEAD + "[[stages]]\n" + ("" if body.startswith("kind") else 'kind = "crossover"\n') + body + "\n"
    with pytest.raises(UsageError) as raised:
        parse_sweep(text, source="s.toml")
    assert needle in str(raised.value) and str(raised.value).count("s.toml:") == 1


def steps(point_id, impl, status="ok", env=None, options=None, modes=("eager", "graph"), fused=False):
    point = {"point_id": point_id, "label": point_id, "impl": impl, "env": env or {}, "options": options or {}}
    return [
        step_record(
            source="measured",
            run_id="r",
            point_id=point_id,
            point=point,
            status=status if isinstance(status, str) else status[mode],
            tokens=1,
            mode=mode,
            fused_rmsnorm=fused,
        )
        for mode in modes
    ]


def test_searches_take_every_other_implementation_that_ran_ok_with_the_right_baseline_and_modes():
    results = (
        steps("p000", "default")
        + steps("p001", "default", env={"NCCL_ALGO": "ring"})  # NCCL's variables: not an implementation
        + steps("p002", "b12x")
        + steps("p003", "symm-mem", status="crashed")  # failed: never searched
        + steps("p004", "b12x-fused")
        + steps("p005", "nccl+rmsnorm")  # the reference: what fused kinds are timed against
        + steps("p006", "flashinfer-pcie-ipc", status={"eager": "ok", "graph": "capture_failed"})
    )
    found = searches(CrossoverStage(3, "x", ""), results, "nccl")
    assert [(s.point.impl, s.point.point_id) for s in found] == [
        ("b12x", "s3-p000"),
        ("b12x-fused", "s3-p001"),
        ("flashinfer-pcie-ipc", "s3-p002"),
    ]
    plain, fused, ipc = found
    assert plain.baseline.point_id == "p000" and plain.collective == "all_reduce" and plain.modes == ("graph", "eager")
    assert fused.baseline.impl == "nccl+rmsnorm" and fused.baseline.point_id == "p005" and fused.collective == FUSED
    assert ipc.modes == ("eager",) and "capture_failed" in ipc.skipped["graph"]
    on_gloo = searches(CrossoverStage(3, "x", "", impls=("b12x", "symm-mem")), results, "gloo")
    assert [s.point.impl for s in on_gloo] == ["b12x", "symm-mem"]  # named: searched even after a failure
    assert on_gloo[0].modes == ("eager",) and on_gloo[0].skipped["graph"] == GRAPH_NEEDS_GPUS.format(backend="gloo")


def search_records(times, source="measured", backend="nccl", error=None, impl="b12x", mode="graph"):
    stage = CrossoverStage(3, "x", "", step_bytes=1024)
    (search,) = searches(stage, steps("p000", "default") + steps("p001", impl), backend)
    origin = RecordOrigin(source, "r", backend, 8, "bfloat16")
    out = []
    for nbytes, (mine, base) in times.items():
        entry = {"bytes": nbytes, "status": "ok", "impl_us": mine, "baseline_us": base}
        out.append(size_record(search, stage, mode, {**entry, "search_round": 1, "model_error": error}, origin))
    return search, out


def kernel_times(top: int) -> dict:
    """A one-shot kernel that beats the baseline up to `top` bytes, measured at powers of two and bisected."""
    sizes = sorted({*cx.powers(), *range(top - 4096, top + 4097, 1024)})
    return {s: (5.0 if s <= top else 40.0, 20.0) for s in sizes}


def test_measured_search_records_read_back_into_edges_that_place_the_routing_band():
    search, records = search_records(kernel_times(98304))
    assert all(record_problem(r) is None for r in records)
    assert measured(records, search, "graph")[98304] == (5.0, 20.0)  # what a resumed run does not time again
    (found,) = crossovers(records)
    assert found["winning"] == [[1024, 98304]] and found["edges"] == [98305] and found["resolved"]
    assert (
        found["converged"]
        and found["evidence"] == "measured on nccl"
        and "beats nccl at 1 KiB–96 KiB" in found["verdict"]
    )
    steps_at = []
    for tokens, kernel in ((7, 6.0), (112, 60.0)):  # 14 KiB and 224 KiB per all-reduce
        steps_at += [record("p000", "default", tokens, "graph", 20.0), record("p001", "b12x", tokens, "graph", kernel)]
    plan = routing_plan(candidates(steps_at, "p000"), 8, FIG, routing_edges([found]))
    first, second = [b for b in plan["bands"] if (b["collective"], b["mode"]) == ("all_reduce", "graph")]
    assert first["impl"] == "b12x" and first["max_bytes"] == 98304 and second["min_bytes"] == 98305
    assert first["boundary"] == "crossover measured at 98305 B (nccl)"
    _settings, notes = routing_settings(plan["bands"], 7168, 2)
    assert not any("run the crossover search" in n for n in notes)


def test_on_gloo_a_crossover_is_labelled_cpu_ranks_and_no_band_becomes_an_engine_setting():
    _search, records = search_records(
        kernel_times(8192), backend="gloo", impl="tests.plugins.one_shot:OneShotGloo", mode="eager"
    )
    (found,) = crossovers(records)
    assert found["backend"] == "gloo" and "not a GPU answer" in found["evidence"]
    bands = [
        {"collective": "all_reduce", "mode": "eager", "min_bytes": 1, "max_bytes": 9, "impl": "b12x", "baseline": False}
    ]
    settings, notes = routing_settings(bands, 7168, 2, backend="gloo")
    assert settings == [] and "no engine setting" in notes[0]


def test_a_simulated_crossover_inside_model_error_is_not_resolved_and_places_no_edge():
    close = {s: (18.0 if s <= 65536 else 22.0, 20.0) for s in cx.powers()}  # ±10 % apart: inside ±41 %
    error = {"impl_pct": 50.0, "baseline_pct": 41.0, "basis": "published"}
    _search, records = search_records(close, source="simulated", error=error)
    (found,) = crossovers(records)
    assert not found["resolved"] and found["edges"] == [] and NOT_RESOLVED in found["verdict"]
    assert found["evidence"].startswith("simulated (expected error ±50 % / ±41 %")
    edges = routing_edges([found])
    assert edges[("all_reduce", "graph", "b12x")] == [
        {"bytes": None, "words": f"its crossover search is {NOT_RESOLVED}"}
    ]
    far = {s: (2.0 if s <= 65536 else 200.0, 20.0) for s in cx.powers()}
    _search, records = search_records(far, source="simulated", error=error)
    (found,) = crossovers(records)
    assert found["resolved"] and found["edges"] == [65537]
    assert routing_edges([found])[("all_reduce", "graph", "b12x")][0]["words"].startswith(
        "crossover simulated at 65537 B"
    )


def test_simulating_pcie8_verify_predicts_its_crossover_stage_and_still_routes_14_kib_to_a_pcie_kernel():
    spec = load_sweep("sweeps/pcie8-verify.toml")
    records = simulate_sweep(spec, load_topology("pcie-gen5-switch-p2p"), None, "sim")
    searched = [r for r in records if r["kind"] == "crossover"]
    assert {r["point"]["impl"] for r in searched} == {"flashinfer-pcie-ipc", "b12x"}
    assert {r["mode"] for r in searched} == {"graph"} and all(r["source"] == "simulated" for r in searched)
    assert all(record_problem(r) is None for r in searched)
    timed = [r for r in searched if r["bytes"]]
    assert all(r["model_error"]["impl_pct"] is not None and r["calibration"] == "nccl-prior" for r in timed)
    assert {14336, 57344, 1 << 20} <= {r["bytes"] for r in timed}  # the plan's sizes and the powers of two
    found = crossovers(records)
    assert all(f["resolved"] or NOT_RESOLVED in f["verdict"] for f in found)
    plan = routing_plan(
        candidates(records, "p000"), 8, load_topology("pcie-gen5-switch-p2p").floor, routing_edges(found)
    )
    graph = [b for b in plan["bands"] if (b["collective"], b["mode"]) == ("all_reduce", "graph")]
    assert graph[0]["min_bytes"] <= 14336 and graph[0]["impl"] != "nccl" and graph[-1]["max_bytes"] >= 229376


def test_a_search_is_finished_when_its_records_replay_it_to_the_end():
    """How the report tells an interrupted crossover stage (a resume continues it) from a finished one."""
    stage = CrossoverStage(3, "x", "", max_bytes=1 << 17, step_bytes=1024)
    (search,) = searches(stage, steps("p000", "default") + steps("p001", "b12x"), "nccl")
    where = RecordOrigin("measured", "r", "nccl", 8, "bfloat16")
    rounds = []

    def times(sizes):
        return {s: (5.0 if s <= 40_000 else 40.0, 20.0) for s in sizes}

    def measure(impl, sizes):
        rounds.append(sizes)
        return times(sizes)

    cx.search("b12x", "graph", measure, [14336], cx.SearchBounds.of(stage))
    records = [
        size_record(
            search,
            stage,
            "graph",
            {"bytes": s, "status": "ok", "impl_us": a, "baseline_us": b, "search_round": n},
            where,
        )
        for n, sizes in enumerate(rounds, start=1)
        for s, (a, b) in times(sizes).items()
    ]
    assert len(rounds) > 3 and finished(records, search, "graph", stage, [14336])
    last = set(rounds[-1])
    assert not finished([r for r in records if r["bytes"] not in last], search, "graph", stage, [14336])
    refused = size_record(search, stage, "graph", {"status": "unsupported", "message": "gate"}, where)
    assert finished([refused], search, "graph", stage, [14336])  # never ran in this mode, and says why
