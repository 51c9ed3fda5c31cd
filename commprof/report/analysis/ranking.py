"""Who is fastest, judged by the run's evidence (commprof.evidence: beyond noise when measured, beyond the model's
expected error when simulated): the baseline, the best point per T, speed-ups, the candidates over every T. It
recommends nothing: report/analysis/nccl_choice.py judges the candidate for the Decision.

Pure functions over frame.step_frame rows (DataFrames in, DataFrames or plain values out).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from commprof.errors import UsageError
from commprof.evidence import Evidence
from commprof.impls.registry import BACKEND_IMPLS, unfused_reference
from commprof.records.point_ids import BASELINE_POINT_ID
from commprof.report.analysis.frame import (
    error_columns,
    first_rows,
    latest_measurements,
    latest_point_ids,
    model_errors,
    ok_rows,
)

# The unfused reference of fused all-reduce + residual + RMSNorm kinds: the same work, done separately.
UNFUSED_REFERENCE_IMPL = unfused_reference()


def headline_mode(steps: pd.DataFrame) -> tuple[str, str]:
    """("graph", why) when any point ran as a CUDA graph (engines run the verify step that way), else eager."""
    if not steps.empty and not ok_rows(steps, "graph").empty:
        return "graph", "graph mode: the verify step captured once as a CUDA graph and replayed, as engines run it"
    backends = sorted({b for b in steps.get("backend", pd.Series(dtype=object)).dropna()}) if not steps.empty else []
    why = (
        "eager mode: no point ran as a CUDA graph"
        + (" (gloo has no CUDA graphs)" if backends == ["gloo"] else "")
        + "; eager step times include launch overhead an engine's graph would not pay"
    )
    return "eager", why


def baseline_id(steps: pd.DataFrame, requested: str | None = None, latest: pd.Series | None = None) -> str:
    """The baseline point: `requested`, else "p000", as its configuration's latest measurement (`latest`:
    latest_point_ids(steps), if already computed); UsageError when the run has no such point."""
    wanted = requested or BASELINE_POINT_ID
    if steps.empty or not steps["point_id"].eq(wanted).any():
        known = ", ".join(sorted(set(steps["point_id"])))[:200] if not steps.empty else "none"
        raise UsageError(f"baseline point {wanted!r} is not in this run (points: {known})")
    return str((latest if latest is not None else latest_point_ids(steps))[wanted])


def best_points(
    steps: pd.DataFrame, mode: str, prefer: Iterable[str] = (), family: Iterable[str] | None = None
) -> pd.DataFrame:
    """Per (source, T): the fastest ok unfused point in `mode` (fused kinds do more work; see fusion_comparison).

    Ties (a cost model predicts many points alike) go to an implementation of `family` (another implementation
    must be faster to count), then to the `prefer` point ids in order (e.g. the baseline, then the recommended
    point), then to the latest stage (confirmed), then to the point that sets the fewest variables.
    """
    candidates = ok_rows(steps, mode)
    candidates = candidates[~candidates["fused_rmsnorm"]]
    if candidates.empty:
        return candidates
    ranks = {point_id: k for k, point_id in enumerate(prefer)}
    points = candidates["point_id"].tolist()
    where = list(zip(candidates["source"].tolist(), candidates["tokens"].tolist()))
    keys = list(
        zip(
            where,
            candidates["median_us"].round(3).tolist(),
            (~candidates["impl"].isin(list(family))).tolist() if family is not None else [False] * len(points),
            [ranks.get(p, len(ranks)) for p in points],
            (-candidates["stage"].astype(float)).tolist(),
            [len(env) for env in candidates["env"].tolist()],
            points,
        )
    )
    # The first row of each (source, T) in that order (a stable sort, as a frame's sort_values by several columns):
    # none of these keys is missing in an ok row, and plain tuples sort a small run's rows at a fraction of the cost.
    first: dict[tuple, int] = {}
    for row in sorted(range(len(keys)), key=keys.__getitem__):
        first.setdefault(where[row], row)
    return candidates.iloc[list(first.values())].reset_index(drop=True)


def speedups(steps: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Every row with its reference time and speed-up (reference / own median), per (source, T, mode).

    Unfused rows compare against the baseline point; fused rows against the unfused reference
    ("nccl+rmsnorm") with the same settings, else the one that sets nothing (the backend's defaults).
    """
    keys = ["source", "tokens", "mode"]
    ok = ok_rows(steps)
    base = ok.loc[ok["point_id"] == baseline, keys + ["median_us"]].rename(columns={"median_us": "reference_us"})
    base = base.drop_duplicates(keys)
    out = steps.merge(base, on=keys, how="left")
    out["reference"] = baseline
    fused = out["fused_rmsnorm"].to_numpy()
    if fused.any():
        columns = [*keys, "settings", "median_us", "point_id"]  # itertuples reads every column it is given
        refs = ok_rows(latest_measurements(steps[steps["impl"] == UNFUSED_REFERENCE_IMPL]))
        by_settings = {
            (r.source, r.tokens, r.mode, r.settings): (r.median_us, r.point_id) for r in refs[columns].itertuples()
        }
        by_default = {
            (r.source, r.tokens, r.mode): (r.median_us, r.point_id)
            for r in refs.loc[refs["env"].map(len) == 0, columns].itertuples()
        }
        ref_us, ref_id = [], []
        for r in out.loc[fused, [*keys, "settings"]].itertuples():
            found = (
                by_settings.get((r.source, r.tokens, r.mode, r.settings))
                or by_default.get((r.source, r.tokens, r.mode))
                or (math.nan, None)
            )
            ref_us.append(found[0])
            ref_id.append(found[1])
        out.loc[fused, "reference_us"] = ref_us
        out.loc[fused, "reference"] = ref_id
    out["speedup"] = out["reference_us"] / out["median_us"]
    out["saved_pct"] = 100.0 * (out["reference_us"] - out["median_us"]) / out["reference_us"]
    return out


def headline(
    steps: pd.DataFrame,
    baseline: str,
    mode: str,
    evidence: Evidence,
    recommended: str | None = None,
    family: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Per (source, T): baseline vs best step time in `mode`, µs, % saved, the best point's settings and whether
    it beats the baseline beyond the evidence's uncertainty.

    `recommended`, `family`: how best_points breaks ties (the same as choices_per_tokens' "fastest")."""
    best = best_points(steps, mode, prefer=[p for p in (baseline, recommended) if p], family=family)
    base = ok_rows(steps, mode)
    base = first_rows(base[base["point_id"] == baseline], ["source", "tokens"])
    base_rows = error_columns(base.set_index(["source", "tokens"])).to_dict("index")
    errors = {
        key: model_errors(row, base_rows.get(key))
        for key, row in zip(zip(best["source"], best["tokens"]), error_columns(best).to_dict("records"))
    }
    base = base[["source", "tokens", "median_us", "p90_us", "tail_us", "tail_stat", "cv"]].rename(
        columns={
            "median_us": "baseline_us",
            "p90_us": "baseline_p90_us",
            "tail_us": "baseline_tail_us",
            "tail_stat": "baseline_tail_stat",
            "cv": "baseline_cv",
        }
    )
    columns = [
        "source",
        "tokens",
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
    ]
    table = best[columns].rename(
        columns={
            "point_id": "best_point_id",
            "label": "best_label",
            "impl": "best_impl",
            "settings": "best_settings",
            "env": "best_env",
            "median_us": "best_us",
            "p90_us": "best_p90_us",
            "tail_us": "best_tail_us",
            "tail_stat": "best_tail_stat",
            "cv": "best_cv",
        }
    )
    table = base.merge(table, on=["source", "tokens"], how="outer").sort_values(["source", "tokens"])
    table["saved_us"] = table["baseline_us"] - table["best_us"]
    table["saved_pct"] = 100.0 * table["saved_us"] / table["baseline_us"]
    table["speedup"] = table["baseline_us"] / table["best_us"]
    table["beyond_uncertainty"] = pd.Series(
        [
            evidence.beats(median, p90, base, errors.get(key))
            for median, p90, base, key in zip(
                table["best_us"], table["best_p90_us"], table["baseline_us"], zip(table["source"], table["tokens"])
            )
        ],
        index=table.index,
        dtype=object,
    )
    return table.reset_index(drop=True)


def point_totals(steps: pd.DataFrame, mode: str, impl: str | Iterable[str] | None = None) -> pd.DataFrame:
    """Per unfused point (of `impl`, one name or several, if given) ok at every T of the run in `mode`: its first
    row with `total_us` and `p90_total_us` (sums over T) and `tokens_covered`, one row per point."""
    rows = ok_rows(steps, mode)
    all_tokens = set(rows["tokens"])
    rows = rows[~rows["fused_rmsnorm"]]
    if impl is not None:
        rows = rows[rows["impl"].isin([impl] if isinstance(impl, str) else list(impl))]
    if rows.empty:
        return rows.assign(total_us=pd.Series(dtype=float), p90_total_us=pd.Series(dtype=float))
    grouped = rows.groupby("point_id")
    covered = grouped["tokens"].nunique() == len(all_tokens)
    firsts = rows.drop_duplicates("point_id").set_index("point_id").loc[covered[covered].index]
    firsts["total_us"] = grouped["median_us"].sum()
    firsts["p90_total_us"] = grouped["p90_us"].sum(min_count=len(all_tokens))
    firsts["tokens_covered"] = [sorted(int(t) for t in all_tokens)] * len(firsts)
    return firsts.reset_index()


def best_overall_point(steps: pd.DataFrame, mode: str, impl: str | Iterable[str] | None = None) -> pd.Series | None:
    """The unfused point (of `impl`, one name or several, if given) with the least total step time over every T,
    ok at all of them. Ties (a cost model predicts many settings alike) go to the latest stage (re-measured,
    confirmed), then to the point that sets the fewest variables."""
    totals = point_totals(steps, mode, impl)
    if totals.empty:
        return None
    order = totals.assign(
        _total=totals["total_us"].round(3), _later=-totals["stage"].astype(float), _count=totals["env"].map(len)
    ).sort_values(["_total", "_later", "_count", "point_id"])
    return order.iloc[0].drop(["_total", "_later", "_count"])


def implementation_family(impl: str) -> tuple[str, ...]:
    """The impl names that run the same all-reduce as `impl`: torch.distributed's own on the run's backend
    ("default", "nccl", "gloo" name the same thing there), else `impl` alone."""
    return BACKEND_IMPLS if impl in BACKEND_IMPLS else (str(impl),)


def tuner_winners(
    steps: pd.DataFrame, baseline: str, mode: str, evidence: Evidence, prefer: Iterable[str], family: Iterable[str]
) -> pd.DataFrame:
    """Per T, the fastest ok record of the baseline's implementation `family` (NCCL) in `mode`, with whether it
    beats the baseline beyond the evidence's uncertainty (`beyond_uncertainty`) and, where not, why it gets no rule
    (`note`).

    `prefer`: the point ids ties go to, in order (best_points), as for table 1's "fastest setting" rows."""
    rows = ok_rows(steps, mode)
    base = rows[rows["point_id"] == baseline].drop_duplicates("tokens").set_index("tokens")["median_us"]
    winners = best_points(rows[rows["impl"].isin(list(family))], mode, prefer).sort_values("tokens")
    winners["beyond_uncertainty"] = pd.Series(
        [
            evidence.beats(median, p90, base.get(t))
            for median, p90, t in zip(winners["median_us"], winners["p90_us"], winners["tokens"])
        ],
        index=winners.index,
        dtype=object,
    )
    winners["note"] = [
        "the baseline was fastest"
        if pid == baseline
        else f"not faster than the baseline by more than {evidence.uncertainty}"
        if verdict is False
        else "not compared: the baseline has no result at this T"
        if verdict is None
        else None
        for pid, verdict in zip(winners["point_id"], winners["beyond_uncertainty"])
    ]
    return winners
