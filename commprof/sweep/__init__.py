"""Sweeps: which configurations to measure (sweep files, staged search) and the runner that measures them."""

from commprof.sweep.config import default_sweep, format_points_table, load_sweep, parse_sweep
from commprof.sweep.spec import StageSpec, SweepPoint, SweepSpec
from commprof.sweep.staging import RankedPoint, rank_points

__all__ = [
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
