"""What the engines' dispatch reads of a run's box (report/analysis/run_shape.box_of): NVLink multicast from what
the run's topology says (none without NVLink, a preset's NVLS channels, unknown where nothing says it) and the nodes
the run had. In process, from meta.json alone."""

from types import SimpleNamespace

import pandas as pd
import pytest

from commprof.records.run_meta import parse_meta
from commprof.report.analysis.run_shape import box_of


def _run(meta: dict) -> SimpleNamespace:
    """The parts of a RunAnalysis box_of reads: meta.json read as the reader reads it, the ranks, no steps."""
    return SimpleNamespace(meta=parse_meta(meta), ranks=8, steps=pd.DataFrame())


def _pair(a: int, b: int, nvlink: bool) -> dict:
    return {"gpus": [a, b], "nvlink": nvlink, "p2p": {"read": "ok", "write": "ok"}}


HGX = {"gpu_path": "NVL", "links": {"nvlink": {"channels": 16, "channel_bw_gbps": 24.0, "nvls_channels": 16}}}
BRIDGED = {"gpu_path": "NVL", "links": {"nvlink": {"channels": 2, "channel_bw_gbps": 20.0, "nvls_channels": 0}}}


@pytest.mark.parametrize(
    "topology, multicast",
    [
        (HGX, True),  # the preset's NVLS channels: NCCL builds them only where multicast works
        (BRIDGED, False),
        ({"gpu_path": "PXB", "p2p_supported": True}, False),  # no NVLink, no NVLink multicast
        ({"pairs": [_pair(0, 1, False)]}, False),  # a probed PCIe box
        ({"pairs": [_pair(0, 1, True)]}, None),  # a probed NVLink box: NVML's pairs do not say
        ({}, None),  # nothing known of the box (a CPU run)
    ],
)
def test_multicast_is_what_the_runs_topology_says(topology, multicast):
    assert box_of(_run({"topology": topology})).multicast is multicast


def test_the_nodes_are_the_runs():
    assert box_of(_run({"topology": HGX, "nnodes": 2})).nodes == 2
    assert box_of(_run({"topology": HGX})).nodes == 1
