"""A whole sweep predicted on a topology: stage 0's points, then each stage in order, refinement stages choosing
their points from the predictions so far and crossover stages searching on predicted times. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from commprof.costmodel.crossover_sim import simulate_crossover_stage
from commprof.costmodel.latency import CostParams
from commprof.costmodel.simulate import SimulatedRun, simulate_point
from commprof.costmodel.topology import Topology
from commprof.evidence import interconnect_of
from commprof.records.plan_file import points_line, stages_line
from commprof.records.schema import MODES
from commprof.sweep.planning.spec import SweepSpec
from commprof.sweep.planning.staging import planned_stages, refine


@dataclass(frozen=True)
class Simulation:
    """A sweep predicted: its records, and the plan lines (plan.jsonl) a sweep on the box writes as it plans."""

    records: list[dict]
    plan: list[dict]


def simulate_sweep(
    spec: SweepSpec,
    topology: Topology,
    calibration: CostParams | None,
    run_id: str,
    now: str | None = None,
    graphs: dict | None = None,
) -> list[dict]:
    """Records for every point and search of the sweep, stage by stage, as a sweep on the box would write them.
    `graphs`: the graph files the points name (commprof.costmodel.simulate.SimulatedRun)."""
    return simulate_run(spec, SimulatedRun(topology, calibration, run_id, now, graphs)).records


def simulate_run(spec: SweepSpec, run: SimulatedRun) -> Simulation:
    """simulate_sweep's records with the plan they were predicted from, for the box, calibration and prior error
    `run` names (commprof.costmodel.simulate.SimulatedRun)."""
    topology = run.topology
    per_point = len(spec.tokens) * len(MODES)
    plan = [stages_line(planned_stages(spec)), points_line(0, [p.point_id for p in spec.points], per_point)]
    records: list[dict] = []
    for point in spec.points:
        records.extend(simulate_point(spec, point, run))
    for stage in spec.stages:
        if stage.kind == "crossover":
            searched, lines = simulate_crossover_stage(spec, stage, run, records)
            records.extend(searched)
            plan.extend(lines)
            continue
        points = refine(spec, stage.index, records, interconnect_of(topology.gpu_path))
        plan.append(points_line(stage.index, [p.point_id for p in points], per_point))
        for point in points:
            records.extend(simulate_point(spec, point, run))
    return Simulation(records, plan)
