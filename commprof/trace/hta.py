"""Holistic Trace Analysis's figures for the same traces, where the optional extra commprof[trace] is installed.

HTA (PyPI holistictraceanalysis) pulls in jupyterlab, so it is never part of the base install; commprof's own
analyses (commprof.trace.steps) need none of it. What it adds is an independent reading of the same files:
its comm/comp overlap per rank over the whole trace.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from commprof.errors import UsageError

EXTRA = "pip install 'commprof[trace]'"


def hta_overlap(paths: list[Path]) -> dict[int, float]:
    """Rank -> HTA's share of communication kernel time overlapped by computation kernels, in %."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        raise UsageError(f"--hta needs Holistic Trace Analysis, which is not installed: {EXTRA}") from None
    logging.getLogger("hta").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="commprof-hta-") as folder:
        # HTA reads a folder of traces, one file per rank.
        for index, path in enumerate(paths):
            suffix = ".json.gz" if path.name.endswith(".gz") else ".json"
            os.symlink(path.resolve(), Path(folder) / f"rank{index}{suffix}")
        frame = TraceAnalysis(trace_dir=folder).get_comm_comp_overlap(visualize=False)
    column = next(c for c in frame.columns if c != "rank")
    return {int(rank): float(value) for rank, value in zip(frame["rank"], frame[column])}
