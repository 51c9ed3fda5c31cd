"""What a bundle's nvml.json holds, as one typed structure: NVML's topology answer (the shape meta.json keeps,
records.meta_topology.MetaTopology) and each GPU's health readings (commprof.doctor.nvml_health). Every field the
checks compute with has its type and a physical range, so a hand-edited bundle is refused in one line naming the
field, never a TypeError inside a check or a 309-digit wattage on the page. Pure."""

from __future__ import annotations

from typing import Any, TypedDict

from commprof.records.meta_topology import MetaTopology
from commprof.records.validate import bounded, problem_of

MiB = bounded(float, ge=0, le=float(1 << 40))
Watts = bounded(float, ge=0, le=1e5)
Celsius = bounded(float, ge=-300, le=1e4)
MHz = bounded(float, ge=0, le=1e6)


class GpuHealth(TypedDict, total=False):
    """One GPU's health readings, matched to its GPU by bus id."""

    bus_id: str | None
    fb_total_mib: MiB | None
    bar1_total_mib: MiB | None
    replays: bounded(int, ge=0, le=1 << 62) | None
    power_limit_w: Watts | None
    power_default_w: Watts | None
    temperature_c: Celsius | None
    temp_margin_c: Celsius | None
    persistence: bool | None
    event_reasons: list[str]
    sm_clock_mhz: MHz | None
    sm_clock_max_mhz: MHz | None
    utilization_pct: bounded(float, ge=0, le=100) | None
    pstate: str | None
    unanswered: Any


class NvmlFile(TypedDict, total=False):
    topology: MetaTopology | None
    health: list[GpuHealth] | None


def nvml_problem(nvml: dict[str, Any]) -> str | None:
    """Why nvml.json's answers cannot be computed with, naming the field, or None."""
    return problem_of(nvml, NvmlFile)
