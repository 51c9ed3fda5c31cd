"""No topology preset predicts anything faster than its own floor: every NCCL algorithm and protocol the cost
model offers, every kernel model, at sizes from 256 B to 256 MiB, and every candidate of a simulated sweep."""

import pytest

from commprof.costmodel.latency import BASE_LATENCY_US, PROTOS, Op, estimate
from commprof.costmodel.sweep_simulation import simulate_sweep
from commprof.costmodel.topology import load_topology, preset_names
from commprof.floor.model import ALGORITHMS, collective_floor
from commprof.report.analysis.routing import routing_plan
from commprof.report.analysis.routing_candidates import candidates
from commprof.sweep.planning.config import load_sweep
from commprof.sweep.planning.spec import RunOverrides

SIZES = tuple(256 * 4**k for k in range(11))  # 256 B .. 256 MiB
FLOORED = [name for name in preset_names() if load_topology(name).floor is not None]


def test_the_pcie_presets_carry_a_floor():
    assert {"pcie-gen5-switch-p2p", "pcie-gen4", "pcie-4gpu"} <= set(FLOORED)


@pytest.mark.parametrize("name", FLOORED)
def test_nccl_predictions_are_never_below_the_floor(name):
    topology = load_topology(name)
    ranks, below = topology.gpus, []
    for link in topology.links:
        params = topology.prior(link)
        for collective in ("all_reduce", "all_gather"):
            for nbytes in SIZES:
                fl = collective_floor(collective, nbytes, ranks, topology.floor)
                for algo in BASE_LATENCY_US:  # every algorithm the model knows
                    for proto in PROTOS:
                        choice = estimate(params, Op(collective, nbytes, ranks), algo, proto)
                        # graph mode: the simulator's eager time less the launch a CUDA graph removes
                        if choice is not None and choice.time_us - topology.launch_overhead_us < fl.us:
                            below.append((link, collective, nbytes, algo, proto, choice.time_us, fl.us))
    assert below == []


@pytest.mark.parametrize("name", FLOORED)
def test_kernel_models_are_never_below_the_floor(name):
    topology = load_topology(name)
    below = []
    for model in topology.impls.values():
        for algorithm in (None, *ALGORITHMS):
            for nbytes in SIZES:
                if model.covers(nbytes):
                    us = model.graph_us(nbytes, topology.gpus, algorithm, topology.floor)
                    if model.basis == "published" and model.timed == "eager":
                        us -= topology.launch_overhead_us  # the simulator's graph mode removes the launch
                    floor_us = collective_floor("all_reduce", nbytes, topology.gpus, topology.floor).us
                    if us < floor_us:
                        below.append((model.impl, algorithm, nbytes, us, floor_us))
    assert below == []


@pytest.mark.parametrize("name", FLOORED)
def test_no_simulated_candidate_of_the_pcie8_sweep_is_below_the_floor(name):
    topology = load_topology(name)
    spec = load_sweep("sweeps/pcie8-verify.toml").with_overrides(RunOverrides(tp=topology.gpus))
    records = simulate_sweep(spec, topology, None, "sim")
    plan = routing_plan(candidates(records, spec.points[0].point_id), topology.gpus, topology.floor)
    assert plan["curves"] and all(c["floor_us"] for c in plan["curves"])
    assert [c for c in plan["curves"] if c["below_floor"]] == []
