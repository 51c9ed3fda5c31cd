"""The routing plan: per size and mode, the implementation that beats the baseline beyond the evidence's
uncertainty, as contiguous bands with the floor; on simulated records, on fabricated measured ones, and on a
real gloo run's records."""

from pathlib import Path

import pytest

from commprof.costmodel.sweep_simulation import simulate_sweep
from commprof.costmodel.topology import load_topology
from commprof.floor.model import FloorFigures, floor
from commprof.records.files import read_records
from commprof.records.run_meta import read_meta
from commprof.records.schema import FUSED, step_record
from commprof.report.analysis.routing import routing_plan
from commprof.report.analysis.routing_candidates import Candidate, candidates, floor_of, verdict
from commprof.sweep.planning.config import load_sweep

FIG = FloorFigures(56.0, 24.0, 0.36, 2.0, "published", "test figures")


def record(
    point_id, impl, tokens, mode, us, p90=None, source="measured", options=None, fused=False, kernel=None, nccl=None
):
    """A one-layer step at T tokens of hidden 1024 (2 KiB per token): embed, attn, mlp, logits; `nccl`: the NCCL
    model's expected error of a simulated record."""
    nbytes = tokens * 2048
    sites = ["embed", "layer.0.attn", "layer.0.mlp", "logits"]
    per_op = [us, us, us, 10 * us]
    nccl_model = {"expected_error_pct": nccl, "error_basis": "the prior's error"} if nccl is not None else None
    return step_record(
        source=source,
        run_id="r",
        point_id=point_id,
        point={"point_id": point_id, "label": point_id, "impl": impl, "env": {}, "options": options or {}},
        backend="nccl",
        world_size=8,
        status="ok",
        tokens=tokens,
        mode=mode,
        fused_rmsnorm=fused,
        op_us={
            "sites": sites,
            "bytes": [nbytes, nbytes, nbytes, 8 * nbytes],
            "median": per_op,
            "p90": [v * (p90 / us if p90 else 1.0) for v in per_op],
        },
        kernel_model=kernel,
        nccl=nccl_model,
    )


def bands_of(plan, collective="all_reduce", mode="graph"):
    return [b for b in plan["bands"] if (b["collective"], b["mode"]) == (collective, mode)]


def test_measured_a_kernel_takes_the_sizes_where_its_p90_beats_the_baselines_median():
    records = []
    for tokens, nccl, kernel, kernel_p90 in ((7, 20.0, 6.0, 7.0), (28, 25.0, 12.0, 26.0), (112, 40.0, 60.0, 70.0)):
        records += [
            record("p000", "default", tokens, "graph", nccl),
            record("p001", "b12x", tokens, "graph", kernel, kernel_p90),
        ]
    plan = routing_plan(candidates(records, "p000"), 8, FIG)
    bands = bands_of(plan)
    assert [(b["impl"], b["min_bytes"], b["max_bytes"]) for b in bands] == [
        ("b12x", 14336, 28671),  # 7 x 2 KiB .. the geometric mean of 14 KiB and 56 KiB
        ("nccl", 28672, 229376),  # at 56 KiB b12x's p90 (26 µs) is not below NCCL's median: within noise
    ]
    first = bands[0]
    assert first["evidence"]["level"] == "measured" and first["evidence"]["verdict"] == "beyond noise"
    assert first["floor_us"] == pytest.approx(floor(14336, 8, FIG).us)
    assert first["pct_of_floor"] == pytest.approx(100 * 6.0 / first["floor_us"])
    assert "within noise" in bands[1]["sizes"][0]["verdict"]
    assert "geometric mean" in first["boundary"]
    # contiguous and covering every size
    assert all(a["max_bytes"] + 1 == b["min_bytes"] for a, b in zip(bands, bands[1:]))


def test_a_measured_crossover_places_the_band_edge():
    records = []
    for tokens, kernel in ((7, 6.0), (112, 60.0)):
        records += [record("p000", "default", tokens, "graph", 20.0), record("p001", "b12x", tokens, "graph", kernel)]
    edge = {"bytes": 65536, "words": "crossover measured at 65536 B (nccl)"}
    plan = routing_plan(candidates(records, "p000"), 8, FIG, crossovers={("all_reduce", "graph", "b12x"): [edge]})
    first, second = bands_of(plan)
    assert first["max_bytes"] == 65535 and second["min_bytes"] == 65536 and "crossover measured" in first["boundary"]


def test_simulated_wins_count_only_beyond_both_models_errors():
    kernel = {"expected_error_pct": 50.0, "error_basis": "published", "max_bytes": None}
    unknown = {"expected_error_pct": None, "error_basis": "", "max_bytes": None}

    def records(nccl_error):
        simulated = dict(source="simulated", nccl=nccl_error)
        return [
            record("p000", "default", 7, "graph", 20.0, **simulated),
            record("p001", "flashinfer-pcie-ipc", 7, "graph", 6.0, kernel=kernel, **simulated),  # 9 < 11.8: wins
            record("p002", "symm-mem", 7, "graph", 3.0, kernel=unknown, **simulated),  # faster, error unknown
            record("p000", "default", 56, "graph", 30.0, **simulated),
            record("p001", "flashinfer-pcie-ipc", 56, "graph", 15.0, kernel=kernel, **simulated),  # 22.5 > 17.7
        ]

    plan = routing_plan(candidates(records(41.0), "p000"), 8, FIG)
    first, second = bands_of(plan)
    assert first["impl"] == "flashinfer-pcie-ipc" and first["evidence"]["verdict"] == "beyond model error"
    assert first["evidence"]["expected_error_pct"] == 50.0
    assert second["impl"] == "nccl"
    assert "within model error" in second["sizes"][0]["verdict"]
    assert any(
        c["impl"] == "symm-mem" and c["evidence"] == "simulated (expected error unknown)" for c in plan["curves"]
    )
    # without the NCCL model's error nothing is judged, however large the predicted gap
    plan = routing_plan(candidates(records(None), "p000"), 8, FIG)
    assert [b["impl"] for b in bands_of(plan)] == ["nccl"]
    assert "not judged" in bands_of(plan)[0]["sizes"][0]["verdict"]


def test_verdict_rules_one_by_one():
    base = Candidate("all_reduce", "graph", 1, "nccl", {}, "p0", "b", 20.0, 22.0, "measured", baseline=True)
    fast = Candidate("all_reduce", "graph", 1, "x", {}, "p1", "x", 10.0, 19.9, "measured")
    assert verdict(fast, base) == (True, "beyond noise")
    assert verdict(Candidate(**{**fast.__dict__, "p90_us": 20.0}), base) == (False, "within noise")
    imported = Candidate(**{**fast.__dict__, "level": "imported"})
    assert verdict(imported, base)[0] is False


def test_fused_kinds_are_set_against_the_unfused_reference_and_say_when_it_is_missing():
    records = [
        record("p000", "default", 7, "graph", 20.0),
        record("p001", "b12x-fused", 7, "graph", 8.0, fused=True),
    ]
    plan = routing_plan(candidates(records, "p000"), 8, FIG)
    assert bands_of(plan, FUSED) == []
    assert any(g["collective"] == FUSED and "nccl+rmsnorm" in g["why"] for g in plan["gaps"])
    records.append(record("p002", "nccl+rmsnorm", 7, "graph", 24.0, fused=True))
    (band,) = bands_of(routing_plan(candidates(records, "p000"), 8, FIG), FUSED)
    assert band["impl"] == "b12x-fused" and band["evidence"]["verdict"] == "beyond noise"


def test_the_logits_gather_is_the_baselines_own_and_has_its_own_floor():
    records = [record("p000", "default", 7, "graph", 20.0), record("p001", "b12x", 7, "graph", 6.0)]
    plan = routing_plan(candidates(records, "p000"), 8, FIG)
    (gather,) = bands_of(plan, "all_gather")
    # the cheaper of one round from every peer at the all-to-all figure and 7 ring hops at the pair figure
    one_shot, ring = 2.36 + 7 / 8 * 8 * 14336 / 24000, 2.0 + 7 * 0.36 + 7 / 8 * 8 * 14336 / 56000
    assert gather["impl"] == "nccl" and gather["floor_us"] == pytest.approx(min(one_shot, ring))


def test_the_simulated_pcie8_verify_run_routes_a_pcie_kernel_at_14_kib(tmp_path):
    spec = load_sweep("sweeps/pcie8-verify.toml")
    topology = load_topology("pcie-gen5-switch-p2p")
    records = simulate_sweep(spec, topology, None, "sim")
    plan = routing_plan(candidates(records, "p000"), 8, topology.floor)
    bands = bands_of(plan)
    assert bands[0]["min_bytes"] == 14336 and bands[-1]["max_bytes"] == 229376
    assert all(a["max_bytes"] + 1 == b["min_bytes"] for a, b in zip(bands, bands[1:]))
    assert all(b["floor_us"] > 0 for b in bands)
    assert bands[0]["impl"] == "flashinfer-pcie-ipc" and bands[0]["evidence"]["level"] == "simulated"


@pytest.mark.processes
def test_a_real_gloo_sweep_routes_every_size_to_gloo_with_no_floor(smoke_sweep):
    """The GPU smoke's 2-rank gloo launch (kimi-k2.5's verify step at T = 4, tests/shared_runs.py): every size
    its all-reduces take is one band, gloo's, measured, with no floor (gloo has no peer copies to measure)."""
    assert smoke_sweep["code"] == 0, smoke_sweep["output"][-2000:]
    run = Path(smoke_sweep["run"])
    records = read_records(run / "results.jsonl")
    plan = routing_plan(candidates(records, "p000"), 2, floor_of(read_meta(run)))
    sizes = {c.nbytes for c in candidates(records, "p000") if (c.collective, c.mode) == ("all_reduce", "eager")}
    bands = bands_of(plan, mode="eager")
    assert [(b["min_bytes"], b["max_bytes"]) for b in bands] == [(min(sizes), max(sizes))]
    assert bands[0]["impl"] == "gloo" and bands[0]["floor_us"] is None and bands[0]["evidence"]["level"] == "measured"
    assert bands_of(plan, mode="graph") == []  # graph mode does not run on CPU ranks
