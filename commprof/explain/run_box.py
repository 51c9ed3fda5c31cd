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
from commprof.records.run_meta import RunMeta


@dataclass(frozen=True)
class RunBox:
    """A run's box as `commprof explain` reads it."""

    topology: Topology
    """The topology the run was simulated on."""
    records: BoxRecords
    """The doctor's verdicts on its bundle (none for a preset)."""


def run_box(meta: RunMeta) -> tuple[RunBox | None, str]:
    """(the run's box, "") or (None, why it cannot be read again here)."""
    topology = meta.topology
    if topology is None or not topology.simulated:
        return None, "the run was measured: no modelled box to explain against"
    box = topology.box
    try:
        if box is not None and box.origin:
            from commprof.doctor.bundle import read_bundle
            from commprof.doctor.runner import run_checks

            bundle, log = Path(box.origin), box.nccl_log
            checks = tuple(run_checks(read_bundle(bundle, "the run's bundle")))
            records = BoxRecords(checks, f"doctor on bundle {bundle}")
            return RunBox(load_bundle_topology(bundle, Path(log) if log else None), records), ""
        path = topology.path or ""
        name = path if path and Path(path).is_file() else topology.name or ""
        return RunBox(load_topology(name), BoxRecords()), ""
    except (UsageError, OSError) as exc:
        return None, f"the run's box ({topology.path or topology.name}) cannot be read here: {exc}"
