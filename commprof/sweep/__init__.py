"""Sweeps: which configurations to measure and the runner that measures them.

planning/: the sweep file into a SweepSpec, its points and stages, the staged and crossover searches, what a launch
refuses and the dry run, all pure; running/: the controllers, the worker processes, the ranks and the run folder.
command.py is the entry point.
"""

from commprof.sweep.planning.config import default_sweep, format_points_table, load_sweep, parse_sweep
from commprof.sweep.planning.spec import RunOverrides, StageSpec, SweepPoint, SweepSpec
from commprof.sweep.planning.staging import RankedPoint, rank_points

__all__ = [
    "RunOverrides",
    "SweepPoint",
    "SweepSpec",
    "StageSpec",
    "RankedPoint",
    "default_sweep",
    "format_points_table",
    "load_sweep",
    "parse_sweep",
    "rank_points",
]
