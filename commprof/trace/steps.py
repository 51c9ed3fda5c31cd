"""The repeating step in a trace's collectives, and what one step costs: per op, overlap and rank skew (pure).

Steps come from the profiler's "ProfilerStep#N" annotations when the trace has them (torch.profiler's
step()); otherwise from the shortest period that repeats the sequence of (kind, size), cut where the host
pauses longest between two ops (an engine schedules between steps).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from commprof.trace.collectives import NCCL_KERNEL_PREFIXES

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def signature(ops: pd.DataFrame) -> tuple:
    """What identifies a step: its ops' kinds and sizes, in order."""
    return tuple(zip(ops["kind"], ops["bytes_in"].fillna(-1).astype(int), ops["bytes_out"].fillna(-1).astype(int)))


def assign_steps(collectives: pd.DataFrame, events: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """`collectives` with a "step" column (rows outside any step dropped) and how the steps were found."""
    marks = events[events["name"].astype(str).str.match(_PROFILER_STEP)]
    if len(marks) and len(collectives):
        starts = marks["ts"].to_numpy()
        ends = starts + marks["dur"].to_numpy()
        numbers = marks["name"].str.extract(_PROFILER_STEP)[0].astype(int).to_numpy()
        issued = collectives["issued"].to_numpy()
        inside = (issued[:, None] >= starts[None, :]) & (issued[:, None] <= ends[None, :])
        has = inside.any(axis=1)
        out = collectives[has].copy()
        out["step"] = numbers[inside[has].argmax(axis=1)]
        if len(out):
            return out.reset_index(drop=True), f"{len(marks)} ProfilerStep annotations"
    period, phase = find_period(collectives)
    if period is None:
        out = collectives.copy()
        out["step"] = 0
        return out, "no repeating pattern: the whole trace as one step"
    out = collectives.iloc[phase:].copy()
    out["step"] = np.arange(len(out)) // period
    complete = out.groupby("step")["kind"].transform("size") == period
    return out[complete].reset_index(drop=True), f"a repeating pattern of {period} collectives"


def find_period(collectives: pd.DataFrame) -> tuple[int | None, int]:
    """Shortest period p with the sequence repeating at least twice, and the phase where steps start."""
    seq = signature(collectives)
    n = len(seq)
    for period in range(1, n // 2 + 1):
        if all(seq[i] == seq[i + period] for i in range(n - period)):
            break
    else:
        return None, 0
    gaps = np.diff(collectives["issued"].to_numpy(), prepend=-np.inf)
    # The phase whose step boundaries sit on the longest host pauses (the first op has no gap before it).
    scores = [np.median(gaps[phase + period :: period]) if n > phase + period else -np.inf for phase in range(period)]
    return period, int(np.argmax(scores))


def typical_step(stepped: pd.DataFrame) -> tuple[tuple, list[Any], list[Any]]:
    """The typical step's signature, the steps alike to it (the most common sequence of kinds) and the others.

    Engines move data-dependent sizes (an all-to-all of routed tokens), so steps are alike by their kinds;
    the signature returned is the most common one among them.
    """
    signatures = {step: signature(ops) for step, ops in stepped.groupby("step", sort=True)}
    if not signatures:
        return (), [], []
    kinds = {step: tuple(k for k, _, _ in sig) for step, sig in signatures.items()}
    common_kinds, _ = Counter(kinds.values()).most_common(1)[0]
    same = [s for s, k in kinds.items() if k == common_kinds]
    common, _ = Counter(signatures[s] for s in same).most_common(1)[0]
    return common, same, [s for s in signatures if s not in same]


def op_table(stepped: pd.DataFrame, steps: list[Any]) -> pd.DataFrame:
    """Per kind and size: ops per step and the median and p90 time of one op, over the given (alike) steps.

    An op position whose size changes from step to step is one row of its own, its size a range.
    """
    columns = ["kind", "bytes_in", "bytes_out", "bytes_max", "dtype", "per_step", "median_us", "p90_us"]
    ops = stepped[stepped["step"].isin(steps)].copy()
    if ops.empty:
        return pd.DataFrame(columns=columns)
    ops["position"] = ops.groupby("step").cumcount()
    by_position = ops.groupby("position").agg(
        kind=("kind", "first"),
        bytes_in=("bytes_in", "min"),
        bytes_out=("bytes_out", "min"),
        bytes_max=("bytes_out", "max"),
        dtype=("dtype", "first"),
    )
    varies = by_position["bytes_max"].ne(by_position["bytes_out"]) & by_position["bytes_max"].notna()
    by_position["group"] = [
        (row.kind, row.bytes_in, row.bytes_out, position if vary else -1)
        for position, row, vary in zip(by_position.index, by_position.itertuples(), varies)
    ]
    ops["group"] = ops["position"].map(by_position["group"])
    rows = []
    for group, members in ops.groupby("group", sort=False):
        first = by_position[by_position["group"] == group].iloc[0]
        durations = members["dur"].to_numpy(dtype=float)
        rows.append(
            {
                "kind": first["kind"],
                "bytes_in": first["bytes_in"],
                "bytes_out": first["bytes_out"],
                "bytes_max": first["bytes_max"] if group[3] >= 0 else first["bytes_out"],
                "dtype": first["dtype"],
                "per_step": int((by_position["group"] == group).sum()),
                "median_us": float(np.median(durations)),
                "p90_us": float(np.percentile(durations, 90)),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def step_times(stepped: pd.DataFrame, steps: list[Any]) -> pd.DataFrame:
    """Per step: collectives, time inside them (sum of op durations) and the span from first start to last end."""
    ops = stepped[stepped["step"].isin(steps)].assign(end=lambda d: d["ts"] + d["dur"])
    grouped = ops.groupby("step")
    return pd.DataFrame(
        {
            "collectives": grouped.size(),
            "comm_us": grouped["dur"].sum(),
            "span_us": grouped["end"].max() - grouped["ts"].min(),
        }
    ).reset_index()


def _union(intervals: np.ndarray) -> np.ndarray:
    """Merge [start, end] rows into disjoint, sorted intervals."""
    if not len(intervals):
        return intervals.reshape(0, 2)
    intervals = intervals[np.argsort(intervals[:, 0])]
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return np.array(merged)


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return total


def compute_overlap(comm: pd.DataFrame, events: pd.DataFrame) -> float | None:
    """Share of communication time (merged kernel intervals) during which a compute kernel also runs, in %.

    Compute: every GPU kernel that is not NCCL's (memory copies and sets are their own event categories).
    None when the trace has no GPU kernels (CPU ranks).
    """
    kernels = events[events["cat"] == "kernel"]
    if kernels.empty or comm.empty:
        return None
    names = kernels["name"].astype(str)
    compute = kernels[~names.str.startswith(NCCL_KERNEL_PREFIXES)]
    comm_iv = _union(np.column_stack([comm["ts"], comm["ts"] + comm["dur"]]).astype(float))
    comp_iv = _union(np.column_stack([compute["ts"], compute["ts"] + compute["dur"]]).astype(float))
    comm_total = float((comm_iv[:, 1] - comm_iv[:, 0]).sum())
    return 100.0 * _overlap(comm_iv, comp_iv) / comm_total if comm_total else None


def rank_skew(stepped_by_rank: dict[int, pd.DataFrame], steps: list[Any]) -> dict[str, Any] | None:
    """Per step, time spent waiting for the slowest rank to arrive versus time after all arrived (the wire).

    For each op: the last rank to start sets when data can move; a rank's wait is that start minus its own,
    its wire time its end minus that start. Summed over the step's ops, averaged over ranks, median over steps.
    Host clocks must agree (one machine, or synchronised clocks).
    """
    if len(stepped_by_rank) < 2:
        return None
    waits, wires, skews = [], [], []
    for step in steps:
        per_rank = [ops[ops["step"] == step] for ops in stepped_by_rank.values()]
        if len({len(ops) for ops in per_rank}) != 1 or not len(per_rank[0]):
            continue
        starts = np.array([ops["ts"].to_numpy() for ops in per_rank], dtype=float)  # [ranks, ops]
        ends = starts + np.array([ops["dur"].to_numpy() for ops in per_rank], dtype=float)
        last = starts.max(axis=0)
        waits.append(float((last - starts).sum(axis=1).mean()))
        wires.append(float(np.clip(ends - last, 0, None).sum(axis=1).mean()))
        skews.append(float((last - starts.min(axis=0)).max()))
    if not waits:
        return None
    return {
        "ranks": sorted(stepped_by_rank),
        "steps": len(waits),
        "wait_us": float(np.median(waits)),
        "wire_us": float(np.median(wires)),
        "max_op_start_skew_us": float(np.median(skews)),
    }


def gaps_per_position(stepped: pd.DataFrame, steps: list[Any]) -> list[float]:
    """Per op position of the typical step, the median gap before it (its start minus the previous op's end, µs;
    0 for the first): the compute between two collectives, as `[run] compute = "trace:..."` replays it."""
    ops = stepped[stepped["step"].isin(steps)].copy()
    if ops.empty:
        return []
    ops["position"] = ops.groupby("step").cumcount()
    ops["gap"] = (ops["ts"] - (ops["ts"] + ops["dur"]).groupby(ops["step"]).shift(1)).clip(lower=0).fillna(0.0)
    return [float(g) for g in ops.groupby("position")["gap"].median()]


def arrival_lags(stepped_by_rank: dict[int, pd.DataFrame], steps: list[Any]) -> list[list[float]] | None:
    """Per rank (in rank order) and op position, the median of how long after the first rank it started the op,
    µs: the late ranks `[run] skew = "trace:..."` replays. None without two ranks of alike steps."""
    if len(stepped_by_rank) < 2:
        return None
    lags = []
    for step in steps:
        per_rank = [ops[ops["step"] == step]["ts"].to_numpy(dtype=float) for _, ops in sorted(stepped_by_rank.items())]
        if len({len(starts) for starts in per_rank}) != 1 or not len(per_rank[0]):
            continue
        starts = np.array(per_rank)
        lags.append(starts - starts.min(axis=0))
    if not lags:
        return None
    return np.median(np.array(lags), axis=0).tolist()
