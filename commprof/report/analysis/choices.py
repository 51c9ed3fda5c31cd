"""The points behind each answer of the first screen: table 1's choices per T, other all-reduce implementations
against the exported settings, and fused kinds against their unfused reference, each judged by the run's
evidence (commprof.evidence: beyond noise when measured, beyond the model's error when simulated)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from commprof.evidence import Evidence
from commprof.impls.registry import fuses_rmsnorm
from commprof.planner.models import DTYPE_BYTES
from commprof.report.analysis.frame import error_columns, first_rows, model_errors, ok_rows
from commprof.report.analysis.ranking import UNFUSED_REFERENCE_IMPL, best_points, speedups

# Who a row of table 1 is, in the order the page lists them: the baseline, the settings the recommendation
# exports (one point over every T), the fastest setting of the baseline's implementation at T (nccl_tuner.conf's
# rule there) and the fastest unfused point of any implementation at T.
CHOICE_ROLES = ("baseline", "recommended", "fastest setting", "fastest")


def all_reduce_bytes(rows: pd.DataFrame) -> pd.Series:
    """Bytes of one [T, hidden] all-reduce of each row's step (NaN where the plan does not say)."""
    element = rows["dtype"].map(DTYPE_BYTES).astype(float)
    return rows["tokens"].astype(float) * rows["hidden_size"].astype(float) * element


def choices_per_tokens(
    steps: pd.DataFrame, baseline: str, mode: str, evidence: Evidence, recommended: str | None, family: Iterable[str]
) -> pd.DataFrame:
    """Per (source, T), the points behind every answer of the first screen, one row per point with every role it
    plays there (CHOICE_ROLES order): the baseline, the recommended settings (one point over every T), the
    fastest setting of the baseline's implementation `family` at T and the fastest unfused point at T; each
    with its speed-up over the baseline and the evidence's verdict."""
    ok = ok_rows(steps, mode)
    ok = ok[~ok["fused_rmsnorm"]]
    keys = ["source", "tokens"]
    picks = [first_rows(ok[ok["point_id"] == baseline], keys).assign(role="baseline")]
    if recommended is not None:
        picks.append(first_rows(ok[ok["point_id"] == recommended], keys).assign(role="recommended"))
    prefer = [p for p in (baseline, recommended) if p]
    picks.append(best_points(ok[ok["impl"].isin(list(family))], mode, prefer).assign(role="fastest setting"))
    picks.append(best_points(ok, mode, prefer, family).assign(role="fastest"))
    table = pd.concat(picks, ignore_index=True)
    if table.empty:
        return table.assign(roles=pd.Series(dtype=object))
    order = {role: i for i, role in enumerate(CHOICE_ROLES)}
    table["rank"] = table["role"].map(order)
    roles = table.groupby(keys + ["point_id"])["role"].agg(lambda r: sorted(r, key=order.get))
    table = table.sort_values(keys + ["rank"]).drop_duplicates(keys + ["point_id"])
    table["roles"] = [roles[(s, t, p)] for s, t, p in zip(table["source"], table["tokens"], table["point_id"])]
    base_rows = picks[0].set_index(keys)
    base = base_rows["median_us"]
    where = list(zip(table["source"], table["tokens"]))
    table["baseline_us"] = [base.get(k, math.nan) for k in where]
    table["saved_pct"] = 100.0 * (table["baseline_us"] - table["median_us"]) / table["baseline_us"]
    table["speedup"] = table["baseline_us"] / table["median_us"]
    base_dicts = error_columns(base_rows).to_dict("index")
    errors = [
        model_errors(row, base_dicts.get(k))
        for row, k in zip(error_columns(table).to_dict("records"), where, strict=True)
    ]
    table["beyond_uncertainty"] = pd.Series(
        [
            None if p == baseline else evidence.beats(m, p90, b, e)
            for p, m, p90, b, e in zip(
                table["point_id"], table["median_us"], table["p90_us"], table["baseline_us"], errors, strict=True
            )
        ],
        index=table.index,
        dtype=object,
    )
    columns = [
        "source",
        "tokens",
        "roles",
        "point_id",
        "label",
        "impl",
        "settings",
        "env",
        "median_us",
        "p90_us",
        "tail_us",
        "tail_stat",
        "cv",
        "baseline_us",
        "saved_pct",
        "speedup",
        "beyond_uncertainty",
    ]
    return table[columns].reset_index(drop=True)


def alternatives(
    steps: pd.DataFrame, reference: str, mode: str, evidence: Evidence, family: Iterable[str]
) -> pd.DataFrame:
    """Per (source, T): the fastest ok unfused point of an implementation outside `family` against the
    `reference` point (the settings the recommendation exports) at that T, with the evidence's verdict both ways:
    `beyond_uncertainty` (the alternative wins) and `slower_beyond_uncertainty` (the reference wins)."""
    ok = ok_rows(steps, mode)
    ok = ok[~ok["fused_rmsnorm"]]
    best = best_points(ok[~ok["impl"].isin(list(family))], mode)
    columns = [
        "source",
        "tokens",
        "point_id",
        "label",
        "impl",
        "options",
        "median_us",
        "p90_us",
        "bytes",
        "reference",
        "reference_us",
        "reference_p90_us",
        "saved_pct",
        "beyond_uncertainty",
        "slower_beyond_uncertainty",
    ]
    if best.empty:
        return pd.DataFrame(columns=columns)
    best = best.assign(bytes=all_reduce_bytes(best))
    ref = first_rows(ok[ok["point_id"] == reference], ["source", "tokens"]).set_index(["source", "tokens"])
    where = list(zip(best["source"], best["tokens"]))
    best["reference"] = reference
    best["reference_us"] = [ref["median_us"].get(k, math.nan) for k in where]
    best["reference_p90_us"] = [ref["p90_us"].get(k, math.nan) for k in where]
    best["saved_pct"] = 100.0 * (best["reference_us"] - best["median_us"]) / best["reference_us"]
    reference_row = error_columns(ref).to_dict("index")
    best["model_errors"] = [
        model_errors(row, reference_row.get(k))
        for row, k in zip(error_columns(best).to_dict("records"), where, strict=True)
    ]
    best["beyond_uncertainty"], best["slower_beyond_uncertainty"] = both_ways(evidence, best)
    return best[columns].reset_index(drop=True)


def both_ways(evidence: Evidence, rows: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per row, whether the point beats its reference and whether the reference beats it, each beyond the
    evidence's uncertainty (columns median_us, p90_us, reference_us, reference_p90_us)."""
    errors = rows["model_errors"] if "model_errors" in rows else [None] * len(rows)
    wins = [
        evidence.beats(m, p90, r, e)
        for m, p90, r, e in zip(rows["median_us"], rows["p90_us"], rows["reference_us"], errors)
    ]
    loses = [
        evidence.beats(r, r90, m, e[::-1] if e else None)
        for r, r90, m, e in zip(rows["reference_us"], rows["reference_p90_us"], rows["median_us"], errors)
    ]
    return pd.Series(wins, index=rows.index, dtype=object), pd.Series(loses, index=rows.index, dtype=object)


def implementations_without_result(steps: pd.DataFrame, mode: str, family: Iterable[str]) -> pd.DataFrame:
    """Implementations outside `family` with no ok record in `mode`: their commonest status and its first
    message (why a user sees no number for them)."""
    other = steps[~steps["impl"].isin(list(family))]
    if other.empty:
        return pd.DataFrame(columns=["impl", "fused_rmsnorm", "status", "message"])
    ran = set(ok_rows(other, mode)["impl"])
    rows = []
    for impl, group in other[~other["impl"].isin(ran)].groupby("impl", sort=True):
        status = group["status"].value_counts().index[0]
        messages = group.loc[group["status"] == status, "message"].dropna()
        rows.append(
            {
                "impl": impl,
                # Records of points that never ran (unsupported) do not say so themselves: the registry does.
                "fused_rmsnorm": bool(group["fused_rmsnorm"].any()) or fuses_rmsnorm(impl),
                "status": status,
                "message": str(messages.iloc[0]) if not messages.empty else None,
            }
        )
    return pd.DataFrame(rows, columns=["impl", "fused_rmsnorm", "status", "message"])


def fusion_comparison(
    steps: pd.DataFrame, baseline: str, mode: str, evidence: Evidence, rated: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per (source, T): the fastest ok fused point in `mode` against its unfused reference, with the evidence's
    verdict both ways: `beyond_uncertainty` (fused beats the reference) and `slower_beyond_uncertainty` (the
    reference beats it).

    `rated`: speedups(steps, baseline) of these same rows, when already computed.
    """
    rated = speedups(steps, baseline) if rated is None else rated
    if "kernel_model" not in rated:
        rated = rated.assign(kernel_model=None, nccl=None)
    fused = rated[
        rated["fused_rmsnorm"]
        & (rated["status"] == "ok")
        & (rated["mode"] == mode)
        & (rated["impl"] != UNFUSED_REFERENCE_IMPL)
        & rated["median_us"].notna()
    ]
    if fused.empty:
        return fused
    best = fused.sort_values(["source", "tokens", "median_us"]).groupby(["source", "tokens"]).head(1)
    best = best[
        [
            "source",
            "tokens",
            "point_id",
            "label",
            "impl",
            "settings",
            "median_us",
            "p90_us",
            "reference",
            "reference_us",
            "speedup",
            "saved_pct",
            "kernel_model",
            "nccl",
        ]
    ].reset_index(drop=True)
    refs = first_rows(ok_rows(steps, mode), ["point_id", "tokens"]).set_index(["point_id", "tokens"])
    where = list(zip(best["reference"], best["tokens"]))
    best["reference_p90_us"] = [refs["p90_us"].get(k, math.nan) for k in where]
    ref_rows = error_columns(refs[refs.index.isin(where)]).to_dict("index")
    best["model_errors"] = [
        model_errors(row, ref_rows.get(k)) for row, k in zip(error_columns(best).to_dict("records"), where)
    ]
    best["beyond_uncertainty"], best["slower_beyond_uncertainty"] = both_ways(evidence, best)
    return best.drop(columns=["kernel_model", "nccl", "model_errors"])
