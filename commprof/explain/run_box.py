"""The box a simulated run was predicted on, read again from what its meta.json names (a preset, a topology file, or
a doctor bundle with its NCCL log) with the doctor's verdicts on that bundle, so that the report can explain an
observation the run's model does not. The edge: reads those files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from commprof.costmodel.box_prior import load_bundle_topology
from commprof.costmodel.topology import Topology, load_topology
from commprof.errors import UsageError
from commprof.explain.evidence import BoxRecords
from commprof.records.run_meta import meta_view


@dataclass(frozen=True)
class RunBox:
    """A run's box as `commprof explain` reads it."""

    topology: Topology
    """The topology the run was simulated on."""
    records: BoxRecords
    """The doctor's verdicts on its bundle (none for a preset)."""


def run_box(meta: dict) -> tuple[RunBox | None, str]:
    """(the run's box, "") or (None, why it cannot be read again here)."""
    topology = meta_view(meta).topology or {}
    if not topology.get("simulated"):
        return None, "the run was measured: no modelled box to explain against"
    box = topology.get("box")
    try:
        if isinstance(box, dict) and box.get("origin"):
            from commprof.doctor.bundle import read_bundle
            from commprof.doctor.runner import run_checks

            bundle, log = Path(str(box["origin"])), box.get("nccl_log")
            checks = tuple(run_checks(read_bundle(bundle, "the run's bundle")))
            records = BoxRecords(checks, f"doctor on bundle {bundle}")
            return RunBox(load_bundle_topology(bundle, Path(str(log)) if log else None), records), ""
        path = str(topology.get("path") or "")
        name = path if path and Path(path).is_file() else str(topology.get("name") or "")
        return RunBox(load_topology(name), BoxRecords()), ""
    except (UsageError, OSError) as exc:
        return None, f"the run's box ({topology.get('path') or topology.get('name')}) cannot be read here: {exc}"
