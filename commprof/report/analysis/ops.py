"""Per-op numbers of eager step records: op sites with their kind, per-kind summaries, and per-size tables in
nccl-tests' terms."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np
import pandas as pd

from commprof.planner.plan import COLLECTIVES, SITE_COLLECTIVES, SITE_KINDS

# The per-op statistics of op_us the report reads (op_table: the median; routing_candidates: the p90 too): it reads
# the others past, and check_records checks them (records/files.py).
OP_STATISTICS_READ = ("median", "p90")
# The draft model's sites are kinds of their own ("draft attn"), after the target's: draft and verify apart.
DRAFT = "draft "
KIND_ORDER = (*SITE_KINDS, *(DRAFT + kind for kind in SITE_KINDS))


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
    if "draft" not in table:  # records written before ops were marked: the site says it
        table["draft"] = table["site"].str.startswith("draft.")
    table["draft"] = table["draft"].astype(bool)
    kinds = table["site"].str.rsplit(".", n=1).str[-1]
    table["site_kind"] = np.where(table["draft"], DRAFT + kinds, kinds)
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
    order = {kind: i for i, kind in enumerate(KIND_ORDER)}
    return table.sort_values("site_kind", key=lambda s: s.map(lambda k: order.get(k, len(order))))


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
    (draft_split; None without draft ops)."""

    sites: pd.DataFrame
    summary: pd.DataFrame
    split: dict[str, float] | None


def point_sites(op_us: dict[str, list] | None) -> PointSites | None:
    """A record's op_us by site; None where it holds no op."""
    sites = op_sites(op_us)
    return None if sites.empty else PointSites(sites, site_summary(sites), draft_split(sites))


def op_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Every op of every record that has op_us, one row each: point_id, tokens, collective, bytes, median (µs).

    Built with numpy from all records' columns at once (a sweep of 100,000 records has millions of ops); point_id
    and collective are categoricals, which op_sizes groups several times faster than strings.
    """
    rows = steps[steps["op_us"].notna()]
    point_codes, tokens_of, counts, kinds, sizes_of, medians = [], [], [], [], [], []
    codes: dict[str, int] = {}
    collectives_of: dict[tuple, np.ndarray] = {}  # every record of a plan has the same sites
    # Records read from a file share one list per distinct plan column (records.files): each made a tuple or an
    # array once, by the list's identity while `rows` holds it.
    sites_of: dict[int, tuple] = {}
    bytes_of: dict[int, np.ndarray] = {}
    for point_id, tokens, op_us in zip(rows["point_id"], rows["tokens"], rows["op_us"]):
        listed = op_us.get("sites") or ()
        if (sites := sites_of.get(id(listed))) is None:
            sites = sites_of[id(listed)] = tuple(listed)
        count = len(sites)
        if not count or len(op_us.get("median") or []) != count or len(op_us.get("bytes") or []) != count:
            continue
        if sites not in collectives_of:
            named = op_us.get("collectives")
            names = named if isinstance(named, list) and len(named) == count else [site_collective(s) for s in sites]
            collectives_of[sites] = np.array([COLLECTIVES.index(name) for name in names], dtype=np.int8)
        if (sizes := bytes_of.get(id(op_us["bytes"]))) is None:
            sizes = bytes_of[id(op_us["bytes"])] = np.asarray(op_us["bytes"], dtype=np.int64)
        point_codes.append(codes.setdefault(point_id, len(codes)))
        tokens_of.append(tokens)
        counts.append(count)
        kinds.append(collectives_of[sites])
        sizes_of.append(sizes)
        medians.append(op_us["median"])
    if not counts:
        columns = ("point_id", "tokens", "collective", "bytes", "median")
        return pd.DataFrame({key: pd.Series(dtype=object) for key in columns})
    return pd.DataFrame(
        {
            "point_id": pd.Categorical.from_codes(
                np.repeat(np.asarray(point_codes, dtype=np.int32), counts), categories=list(codes)
            ),
            "tokens": np.repeat(np.asarray(tokens_of), counts),
            "collective": pd.Categorical.from_codes(np.concatenate(kinds), categories=list(COLLECTIVES)),
            "bytes": np.concatenate(sizes_of),
            "median": np.array(list(chain.from_iterable(medians)), dtype=float),  # a missing time is NaN
        }
    )


def site_collective(site: str) -> str:
    """The collective an op site issues (docs/step-plan.md), for records that do not name it."""
    return SITE_COLLECTIVES.get(site.rsplit(".", 1)[-1], "all_reduce")


def op_sizes(ops: pd.DataFrame) -> pd.DataFrame:
    """Per (point, collective, size): how many ops and the median of their medians, µs (nccl-tests' rows)."""
    grouped = ops.groupby(["point_id", "collective", "bytes"], sort=True, observed=True)["median"]
    table = pd.DataFrame({"ops": grouped.size(), "time_us": grouped.median()}).reset_index()
    return table.astype({"point_id": str, "collective": str}).sort_values(
        ["point_id", "collective", "bytes"], ignore_index=True
    )
