"""A whole sweep predicted on a topology: stage 0's points, then each stage in order, refinement stages choosing
their points from the predictions so far and crossover stages searching on predicted times. Pure."""

from __future__ import annotations

from commprof.costmodel.crossover_sim import simulate_crossover_stage
from commprof.costmodel.latency import CostParams
from commprof.costmodel.simulate import simulate_point
from commprof.costmodel.topology import Topology
from commprof.sweep.spec import SweepSpec
from commprof.sweep.staging import refine


def simulate_sweep(
    spec: SweepSpec,
    topology: Topology,
    calibration: CostParams | None,
    run_id: str,
    now: str | None = None,
    graphs: dict | None = None,
) -> list[dict]:
    """Records for every point and search of the sweep, stage by stage, as a sweep on the box would write them.
    `graphs`: the graph files the points name (commprof.costmodel.simulate.simulate_point)."""
    records: list[dict] = []
    for point in spec.points:
        records.extend(simulate_point(spec, point, topology, calibration, run_id, now, graphs))
    for stage in spec.stages:
        if stage.kind == "crossover":
            records.extend(simulate_crossover_stage(spec, stage, topology, calibration, run_id, records, now))
            continue
        for point in refine(spec, stage.index, records):
            records.extend(simulate_point(spec, point, topology, calibration, run_id, now, graphs))
    return records
