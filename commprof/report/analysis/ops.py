"""Per-op numbers of eager step records: op sites with their kind, per-kind summaries, and per-size tables in
nccl-tests' terms."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from commprof.planner.plan import SITE_COLLECTIVES, SITE_KINDS

# The per-op statistics of op_us the report reads (op_sizes and the sites: the median; routing_candidates: the p90
# too): the others are checked as the records are read, then dropped (records/files.py).
OP_STATISTICS_READ = ("median", "p90")
# The draft model's sites are kinds of their own ("draft attn"), after the target's: draft and verify apart.
DRAFT = "draft "
KIND_ORDER = (*SITE_KINDS, *(DRAFT + kind for kind in SITE_KINDS))
_KIND_RANK = {kind: i for i, kind in enumerate(KIND_ORDER)}


def op_sites(op_us: dict[str, list] | None) -> pd.DataFrame:
    """A record's op_us (columnar, one entry per op) as rows with the site kind (embed, attn, mlp, moe, logits,
    ...; "draft attn" for the speculative draft model's ops) and whether the draft model issued it."""
    if not op_us or not op_us.get("sites"):
        return pd.DataFrame(columns=["site", "site_kind", "draft", "bytes", "median", "max"])
    count = len(op_us["sites"])
    table = pd.DataFrame(
        {key: values for key, values in op_us.items() if isinstance(values, list) and len(values) == count}
    )
    table["site"] = table.pop("sites").astype(str)
    names = table["site"].tolist()  # sites are strings (records.schema): plain str methods, no .str accessor
    if "draft" not in table:  # records written before ops were marked: the site says it
        table["draft"] = [name.startswith("draft.") for name in names]
    table["draft"] = table["draft"].astype(bool)
    table["site_kind"] = [
        DRAFT + name.rsplit(".", 1)[-1] if draft else name.rsplit(".", 1)[-1]
        for name, draft in zip(names, table["draft"].tolist())
    ]
    return table


def site_summary(sites: pd.DataFrame) -> pd.DataFrame:
    """Per site kind: op count, bytes, median and max (µs) of the ops' medians, and their sum (µs)."""
    if sites.empty:
        return pd.DataFrame(columns=["site_kind", "ops", "bytes", "median_us", "max_us", "total_us"])
    grouped = sites.groupby("site_kind")
    table = pd.DataFrame(
        {
            "ops": grouped.size(),
            "bytes": grouped["bytes"].max(),
            "median_us": grouped["median"].median(),
            "max_us": grouped["median"].max(),
            "total_us": grouped["median"].sum(),
        }
    ).reset_index()
    ranks = np.array([_KIND_RANK.get(kind, len(_KIND_RANK)) for kind in table["site_kind"].tolist()])
    return table.iloc[ranks.argsort(kind="quicksort")]  # what sort_values by these ranks does, without a Series


def draft_split(sites: pd.DataFrame) -> dict[str, float] | None:
    """Ops and summed per-op medians (µs) of the verify forward and of the draft model; None without draft ops."""
    if sites.empty or not sites["draft"].any():
        return None
    draft = sites["draft"]
    return {
        "verify_ops": int((~draft).sum()),
        "verify_us": float(sites.loc[~draft, "median"].sum()),
        "draft_ops": int(draft.sum()),
        "draft_us": float(sites.loc[draft, "median"].sum()),
    }


@dataclass(frozen=True)
class PointSites:
    """One record's ops by site: each op (op_sites), per site kind (site_summary), draft and verify apart
    (draft_split; None without draft ops), and each kind's op medians (µs, in op order; kinds in KIND_ORDER, any
    other after them by name)."""

    sites: pd.DataFrame
    summary: pd.DataFrame
    split: dict[str, float] | None
    values: dict[str, list[float]]


def point_sites(op_us: dict[str, list] | None) -> PointSites | None:
    """A record's op_us by site; None where it holds no op."""
    sites = op_sites(op_us)
    if sites.empty:
        return None
    by_kind: dict[str, list[float]] = {}
    for kind, median in zip(sites["site_kind"].tolist(), sites["median"].tolist()):
        by_kind.setdefault(kind, []).append(float(median))
    order = sorted(by_kind, key=lambda kind: (_KIND_RANK.get(kind, len(_KIND_RANK)), kind))
    return PointSites(sites, site_summary(sites), draft_split(sites), {kind: by_kind[kind] for kind in order})


def op_sizes(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (point, collective, size) of the records' ops (records with op_us): how many ops and the median of their
    medians, µs (a missing time counted, not taken), in (point, collective, size) order: nccl-tests' rows.

    The records of one step plan share their ops' collectives and sizes: their medians are taken in one array per
    plan (a sweep of 100,000 records has millions of ops), and a point's ops of one size in several records (a
    measurement repeated) together.
    """
    rows = steps[steps["op_us"].notna()]
    plans: dict[tuple[int, int], _Plan] = {}  # by the identity of the plan columns the records share (records.files)
    for point_id, op_us in zip(rows["point_id"], rows["op_us"]):
        sizes, named, medians = op_us.get("bytes") or [], op_us.get("collectives"), op_us.get("median") or []
        key = (id(sizes), id(named) if named is not None else id(op_us.get("sites")))
        if (plan := plans.get(key)) is None:
            plan = plans[key] = _Plan.of(op_us)
        if plan.groups and len(medians) == plan.count:
            plan.points.append(point_id)
            plan.medians.append(medians)
    found: dict[tuple[str, str, int], list[tuple[float, np.ndarray]]] = {}
    for plan in plans.values():
        medians = np.array(plan.medians, dtype=float)  # a missing time is NaN
        for (collective, size), columns in plan.groups.items():
            times = medians[:, columns]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # ops none of which was timed: NaN
                middle = np.nanmedian(times, axis=1)
            for point_id, time_us, row in zip(plan.points, middle.tolist(), times):
                found.setdefault((point_id, collective, size), []).append((time_us, row))
    table = [(*key, sum(len(row) for _, row in each), _median(each)) for key, each in sorted(found.items())]
    return pd.DataFrame(table, columns=["point_id", "collective", "bytes", "ops", "time_us"]).astype(
        {"point_id": str, "collective": str, "bytes": "int64", "ops": "int64", "time_us": float}
    )


def _median(each: list[tuple[float, np.ndarray]]) -> float:
    """The median of one size's op times: its record's, or that of every record of the point at that size."""
    if len(each) == 1:
        return each[0][0]
    times = np.concatenate([row for _, row in each])
    times = times[~np.isnan(times)]
    return float(np.median(times)) if times.size else math.nan


@dataclass
class _Plan:
    """One step plan's ops grouped by (collective, size), and the records of it: their point ids and medians."""

    count: int  # ops in the step
    groups: dict[tuple[str, int], list[int]]  # (collective, bytes) -> the ops' positions
    points: list[str] = field(default_factory=list)
    medians: list[list] = field(default_factory=list)

    @classmethod
    def of(cls, op_us: dict) -> _Plan:
        """A record's plan; no groups where its columns disagree on the number of ops."""
        sites, sizes, named = op_us.get("sites") or [], op_us.get("bytes") or [], op_us.get("collectives")
        names = named if isinstance(named, list) and len(named) == len(sites) else map(site_collective, sites)
        groups: dict[tuple[str, int], list[int]] = {}
        if sites and len(sizes) == len(sites):
            for position, (name, size) in enumerate(zip(names, sizes)):
                groups.setdefault((str(name), int(size)), []).append(position)
        return cls(len(sites), groups)


def site_collective(site: str) -> str:
    """The collective an op site issues (docs/step-plan.md), for records that do not name it."""
    return SITE_COLLECTIVES.get(site.rsplit(".", 1)[-1], "all_reduce")
