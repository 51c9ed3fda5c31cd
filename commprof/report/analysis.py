"""Analysis of a run's records as pure functions over pandas DataFrames (Holistic Trace Analysis style).

`records_frame` flattens records (one row each); everything else takes and returns DataFrames or plain values,
never touches files, and never guesses: a number that was not measured stays NaN and is labelled so.
Times in the frame are µs (as recorded); the report shows steps in ms and single collectives in µs.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from commprof.errors import UsageError
from commprof.planner.models import DTYPE_BYTES

BASELINE_POINT_ID = "p000"
# The unfused reference of fused all-reduce + residual + RMSNorm kinds: the same work, done separately.
UNFUSED_REFERENCE_IMPL = "nccl+rmsnorm"
# Built-in kinds that replace all-reduce + residual add + RMSNorm, and their reference: records of points that
# never ran (unsupported) do not say so themselves.
FUSED_IMPLS = ("flashinfer-fused", UNFUSED_REFERENCE_IMPL)
# Statuses that mean "the setting does not work here"; "unsupported" only means it does not apply.
FAILED_STATUSES = ("wrong", "capture_failed", "replay_wrong", "timeout", "crashed", "error")
SITE_KINDS = ("embed", "attn", "mlp", "logits")
ENV_PREFIX = "env."
DEFAULT_ENV_VALUE = "(default)"
# The field report's operating points: (accept length, verify T). See docs/report.md.
FIELD_REPORT_CASES = ((1.3, 8), (2.0, 4))
# torch.distributed's own all-reduce: "default" runs the backend's (NCCL or gloo), as "nccl" / "gloo" do there.
BACKEND_IMPLS = ("default", "nccl", "gloo")
# Who a row of table 1 is, in the order the page lists them: the baseline, the settings the recommendation
# exports (one point over every T), the fastest setting of the baseline's implementation at T (nccl_tuner.conf's
# rule there) and the fastest unfused point of any implementation at T.
CHOICE_ROLES = ("baseline", "recommended", "fastest setting", "fastest")
# A model prediction counts as close when within ±15 % of the measurement (issue 6's accuracy target).
MODEL_BAND = 0.15
COMPARISON_COLUMNS = [
    "label",
    "tokens",
    "mode",
    "measured_us",
    "model_us",
    "ratio",
    "error_pct",
    "within_band",
    "calibration",
]

_STAT_FIELDS = ("n", "min", "median", "mean", "p90", "p99", "cv")
# Stage points re-measure a configuration: "s2-p003" is stage 2 (commprof.sweep.staging.stage_of).
_STAGE_ID = re.compile(r"^s(\d+)-p\d+$")
NOISE_RULE = (
    "a point beats the baseline beyond noise when its p90 step time is below the baseline's median "
    "(nine in ten of its steps were faster than the baseline's typical step); over several T, the "
    "sums over T"
)


# ----------------------------------------------------------------------------------------------- the frame


def records_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per record: point fields, step_us statistics (µs), plan counts, skew; op_us kept as objects."""
    settings: dict[tuple, tuple[str, str]] = {}  # every (T, mode) record of a point shares its env
    rows = [_flatten(record, settings) for record in records]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    env_keys = sorted({key for row in rows for key in row["env"]})
    for key in env_keys:
        frame[ENV_PREFIX + key] = [row["env"].get(key) for row in rows]
    return frame


def _flatten(record: dict[str, Any], settings: dict[tuple, tuple[str, str]]) -> dict[str, Any]:
    point = record.get("point") or {}
    env = {str(k): str(v) for k, v in (point.get("env") or {}).items()}
    key = tuple(sorted(env.items()))
    if key not in settings:
        settings[key] = (env_text(env), json.dumps(key))
    text, env_key = settings[key]
    stats = record.get("step_us") or {}
    plan = record.get("plan") or {}
    check = record.get("check") or {}
    nccl = record.get("nccl") or {}
    ranks = record.get("rank_step_median_us") or None
    options = json.dumps(point.get("options") or {}, sort_keys=True)
    stage = point.get("stage")
    row: dict[str, Any] = {
        "run_id": record.get("run_id"),
        "source": record.get("source"),
        "kind": record.get("kind"),
        "point_id": record.get("point_id"),
        "label": point.get("label") or record.get("point_id"),
        "impl": point.get("impl"),
        "env": env,
        "settings": text,
        "options": options,
        # A configuration's identity (impl + env + options): stages re-measure the same one under a new id.
        "config": f"{point.get('impl')} {env_key} {options}",
        "stage": stage if isinstance(stage, int) else stage_of(str(record.get("point_id"))),
        "iterations": record.get("iterations"),
        "backend": record.get("backend"),
        "world_size": record.get("world_size"),
        "status": record.get("status"),
        "message": record.get("message"),
        "calibration": record.get("calibration"),
        "model": record.get("model"),
        "phase": record.get("phase"),
        "tp": record.get("tp"),
        "tokens": record.get("tokens"),
        "dtype": record.get("dtype"),
        "mode": record.get("mode"),
        "timing": record.get("timing"),
        "fused_rmsnorm": bool(record.get("fused_rmsnorm", False)),
        "hidden_size": plan.get("hidden_size"),
        "num_layers": plan.get("num_layers"),
        "all_reduce_count": plan.get("all_reduce"),
        "all_gather_count": plan.get("all_gather"),
        "total_bytes": plan.get("total_bytes"),
        "check_ok": check.get("ok") if check else None,
        "max_abs_err": check.get("max_abs_err") if check else None,
        "nccl_version": nccl.get("version"),
        "nccl_channels": nccl.get("channels"),
        "nccl": nccl or None,
        "op_us": record.get("op_us"),
        "rank_step_median_us": ranks,
        # kind = "collective"
        "collective": record.get("collective"),
        "bytes": record.get("bytes"),
        "count": record.get("count"),
        "time_us": record.get("time_us"),
        "algbw_gbps": record.get("algbw_gbps"),
        "busbw_gbps": record.get("busbw_gbps"),
        "wrong": record.get("wrong"),
        "graph": record.get("graph"),
        "in_place": record.get("in_place"),
    }
    for name in _STAT_FIELDS:
        value = stats.get(name)
        row["step_n" if name == "n" else f"{name}_us" if name != "cv" else "cv"] = (
            float(value) if value is not None else math.nan
        )
    if ranks:
        row["rank_skew_us"] = max(ranks) - min(ranks)
        middle = statistics.median(ranks)
        row["rank_skew_pct"] = 100.0 * row["rank_skew_us"] / middle if middle else math.nan
    else:
        row["rank_skew_us"] = row["rank_skew_pct"] = math.nan
    return row


def stage_of(point_id: str) -> int:
    """The sweep stage a point id belongs to: "p012" is stage 0, "s2-p003" stage 2."""
    match = _STAGE_ID.match(point_id)
    return int(match.group(1)) if match else 0


def env_text(env: dict[str, str]) -> str:
    """A point's settings as one line, "NCCL defaults" when it sets nothing."""
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "NCCL defaults"


def step_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Only the replayed-step records."""
    if frame.empty or "kind" not in frame:
        return frame.iloc[0:0]
    return frame[frame["kind"] == "step"]


def collective_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Only the single-collective records (nccl-tests imports, modelled single ops)."""
    if frame.empty or "kind" not in frame:
        return frame.iloc[0:0]
    return frame[frame["kind"] == "collective"]


def ok_rows(steps: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Rows whose numbers are a tuning result (status ok and a median), optionally of one mode."""
    mask = (steps["status"] == "ok") & steps["median_us"].notna()
    if mode is not None:
        mask &= steps["mode"] == mode
    return steps if mask.all() else steps[mask]


# ----------------------------------------------------------------------------------------- mode, baseline


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
    if steps.empty or wanted not in set(steps["point_id"]):
        known = ", ".join(sorted(set(steps["point_id"])))[:200] if not steps.empty else "none"
        raise UsageError(f"baseline point {wanted!r} is not in this run (points: {known})")
    return str((latest if latest is not None else latest_point_ids(steps))[wanted])


# ------------------------------------------------------------------------------- re-measured configurations


def latest_point_ids(steps: pd.DataFrame) -> pd.Series:
    """Point id -> the id holding its configuration's (impl + env + options) latest, longest measurement.

    Stages re-measure configurations ("s1-p001" repeats "p001" with more iterations); like the staged search
    (commprof.sweep.staging.rank_points), the report uses the latest stage's records, then the most iterations.
    """
    if steps.empty:
        return pd.Series(dtype=object)
    points = steps[["point_id", "config", "stage", "iterations", "step_n"]].drop_duplicates("point_id")
    points = points.assign(length=points["iterations"].astype(float).fillna(points["step_n"]).fillna(0.0))
    latest = (
        points.sort_values(["config", "stage", "length", "point_id"])
        .drop_duplicates("config", keep="last")
        .set_index("config")["point_id"]
    )
    return pd.Series(points["config"].map(latest).to_numpy(), index=points["point_id"].to_numpy())


def latest_measurements(steps: pd.DataFrame, latest: pd.Series | None = None) -> pd.DataFrame:
    """Only the records of each configuration's latest, longest measurement (the ones the analysis ranks)."""
    if steps.empty:
        return steps
    latest = latest if latest is not None else latest_point_ids(steps)
    if (latest.index == latest.to_numpy()).all():
        return steps  # no configuration was measured twice
    return steps[steps["point_id"].map(latest) == steps["point_id"]]


def superseded_by(latest: pd.Series) -> dict[str, str]:
    """Earlier measurements of re-measured configurations: old point id -> the id that replaces it.

    `latest`: latest_point_ids(steps).
    """
    return {str(old): str(new) for old, new in latest.items() if old != new}


# ------------------------------------------------------------------------------------------------ noise


def beyond_noise(p90_us: Any, baseline_median_us: Any) -> bool | None:
    """Whether a point beats the baseline beyond measurement noise (NOISE_RULE); None when either is unknown."""
    try:
        p90, median = float(p90_us), float(baseline_median_us)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(p90) and math.isfinite(median)):
        return None
    return p90 < median


# -------------------------------------------------------------------------------------- best, speed-ups


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
    keys = pd.DataFrame(
        {
            "source": candidates["source"].to_numpy(),
            "tokens": candidates["tokens"].to_numpy(),
            "time": candidates["median_us"].round(3).to_numpy(),
            "other": ~candidates["impl"].isin(list(family)).to_numpy() if family is not None else False,
            "preferred": candidates["point_id"].map(lambda p: ranks.get(p, len(ranks))).to_numpy(),
            "stage": -candidates["stage"].astype(float).to_numpy(),
            "settings": candidates["env"].map(len).to_numpy(),
            "point": candidates["point_id"].to_numpy(),
            "row": range(len(candidates)),
        }
    )
    order = keys.sort_values(["source", "tokens", "time", "other", "preferred", "stage", "settings", "point"])
    first = order.drop_duplicates(["source", "tokens"])["row"].to_numpy()
    return candidates.iloc[first].reset_index(drop=True)


def speedups(steps: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Every row with its reference time and speed-up (reference / own median), per (source, T, mode).

    Unfused rows compare against the baseline point; fused rows against the unfused reference
    ("nccl+rmsnorm") with the same settings, else the one with NCCL defaults.
    """
    out = steps.copy()
    keys = ["source", "tokens", "mode"]
    ok = ok_rows(steps)
    base = ok[ok["point_id"] == baseline][keys + ["median_us"]].rename(columns={"median_us": "reference_us"})
    base = base.drop_duplicates(keys)
    out = out.merge(base, on=keys, how="left")
    out["reference"] = baseline
    fused = out["fused_rmsnorm"].to_numpy()
    if fused.any():
        refs = ok_rows(latest_measurements(steps[steps["impl"] == UNFUSED_REFERENCE_IMPL]))
        by_settings = {(r.source, r.tokens, r.mode, r.settings): (r.median_us, r.point_id) for r in refs.itertuples()}
        by_default = {
            (r.source, r.tokens, r.mode): (r.median_us, r.point_id)
            for r in refs[refs["settings"] == env_text({})].itertuples()
        }
        ref_us, ref_id = [], []
        for r in out[fused].itertuples():
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
    steps: pd.DataFrame, baseline: str, mode: str, recommended: str | None = None, family: Iterable[str] | None = None
) -> pd.DataFrame:
    """Per (source, T): baseline vs best step time in `mode`, µs, % saved, and the best point's settings.

    `recommended`, `family`: how best_points breaks ties (the same as choices_per_tokens' "fastest")."""
    best = best_points(steps, mode, prefer=[p for p in (baseline, recommended) if p], family=family)
    base = ok_rows(steps, mode)
    base = base[base["point_id"] == baseline][["source", "tokens", "median_us", "p90_us", "p99_us", "cv"]]
    base = base.drop_duplicates(["source", "tokens"]).rename(
        columns={
            "median_us": "baseline_us",
            "p90_us": "baseline_p90_us",
            "p99_us": "baseline_p99_us",
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
        "p99_us",
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
            "p99_us": "best_p99_us",
            "cv": "best_cv",
        }
    )
    table = base.merge(table, on=["source", "tokens"], how="outer").sort_values(["source", "tokens"])
    table["saved_us"] = table["baseline_us"] - table["best_us"]
    table["saved_pct"] = 100.0 * table["saved_us"] / table["baseline_us"]
    table["speedup"] = table["baseline_us"] / table["best_us"]
    table["beyond_noise"] = pd.Series(
        [beyond_noise(p90, median) for p90, median in zip(table["best_p90_us"], table["baseline_us"])],
        index=table.index,
        dtype=object,
    )
    return table.reset_index(drop=True)


def fusion_comparison(steps: pd.DataFrame, baseline: str, mode: str, rated: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (source, T): the fastest ok fused point in `mode` against its unfused reference, with NOISE_RULE
    both ways: `beyond_noise` (fused beats the reference) and `slower_beyond_noise` (the reference beats it).

    `rated`: speedups(steps, baseline) of these same rows, when already computed.
    """
    rated = speedups(steps, baseline) if rated is None else rated
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
        ]
    ].reset_index(drop=True)
    refs = ok_rows(steps, mode).drop_duplicates(["point_id", "tokens"]).set_index(["point_id", "tokens"])["p90_us"]
    best["reference_p90_us"] = [refs.get((ref, t), math.nan) for ref, t in zip(best["reference"], best["tokens"])]
    best["beyond_noise"] = pd.Series(
        [beyond_noise(p90, ref) for p90, ref in zip(best["p90_us"], best["reference_us"])],
        index=best.index,
        dtype=object,
    )
    best["slower_beyond_noise"] = pd.Series(
        [beyond_noise(ref_p90, median) for ref_p90, median in zip(best["reference_p90_us"], best["median_us"])],
        index=best.index,
        dtype=object,
    )
    return best


def best_overall_point(steps: pd.DataFrame, mode: str, impl: str | Iterable[str] | None = None) -> pd.Series | None:
    """The unfused point (of `impl`, one name or several, if given) with the least total step time over every T,
    ok at all of them. Ties (a cost model predicts many settings alike) go to the latest stage (re-measured,
    confirmed), then to the point that sets the fewest variables."""
    rows = ok_rows(steps, mode)
    all_tokens = set(rows["tokens"])
    rows = rows[~rows["fused_rmsnorm"]]
    if impl is not None:
        rows = rows[rows["impl"].isin([impl] if isinstance(impl, str) else list(impl))]
    if rows.empty:
        return None
    grouped = rows.groupby("point_id")
    coverage = grouped["tokens"].nunique()
    totals = grouped["median_us"].sum()[coverage == len(all_tokens)]
    if totals.empty:
        return None
    info = rows.drop_duplicates("point_id").set_index("point_id").loc[totals.index]
    order = pd.DataFrame(
        {
            "total": totals.round(3).to_numpy(),
            "stage": -info["stage"].astype(float).to_numpy(),
            "settings": info["env"].map(len).to_numpy(),
            "point": totals.index,
        }
    )
    winner = order.sort_values(["total", "stage", "settings", "point"])["point"].iloc[0]
    first = rows[rows["point_id"] == winner].iloc[0].copy()
    first["total_us"] = float(totals[winner])
    first["p90_total_us"] = float(rows.loc[rows["point_id"] == winner, "p90_us"].sum(min_count=len(all_tokens)))
    first["tokens_covered"] = sorted(int(t) for t in all_tokens)
    return first


@dataclass(frozen=True)
class Recommendation:
    """What to set: the fastest point over every T if it beats the baseline beyond noise, else the baseline.

    `beyond_noise` is None when the baseline has no ok record at some T the fastest point covers (no comparison).
    """

    fastest: pd.Series | None
    baseline: pd.Series | None
    baseline_total_us: float
    beyond_noise: bool | None

    @property
    def chosen(self) -> pd.Series | None:
        if self.fastest is None or self.beyond_noise is not False:
            return self.fastest
        return self.baseline

    @property
    def keeps_baseline(self) -> bool:
        return self.fastest is not None and self.beyond_noise is False

    @property
    def saved_pct(self) -> float:
        if self.fastest is None or not math.isfinite(self.baseline_total_us) or not self.baseline_total_us:
            return math.nan
        return 100.0 * (self.baseline_total_us - self.fastest["total_us"]) / self.baseline_total_us


def recommendation(
    steps: pd.DataFrame, baseline: str, mode: str, impl: str | Iterable[str] | None = None
) -> Recommendation:
    """The fastest point of `impl` over every T (best_overall_point), judged against the baseline by NOISE_RULE."""
    fastest = best_overall_point(steps, mode, impl)
    base_rows = ok_rows(steps, mode)
    base_rows = base_rows[base_rows["point_id"] == baseline].drop_duplicates("tokens")
    base = base_rows.iloc[0].copy() if not base_rows.empty else None
    if fastest is None:
        return Recommendation(None, base, math.nan, None)
    covered = base_rows[base_rows["tokens"].isin(fastest["tokens_covered"])]
    total = float(covered["median_us"].sum()) if len(covered) == len(fastest["tokens_covered"]) else math.nan
    if base is not None:
        base["total_us"] = total
    return Recommendation(fastest, base, total, beyond_noise(fastest["p90_total_us"], total))


# ------------------------------------------------------------------ what to set: env, implementation, fusion


def implementation_family(impl: str) -> tuple[str, ...]:
    """The impl names that run the same all-reduce as `impl`: torch.distributed's own on the run's backend
    ("default", "nccl", "gloo" name the same thing there), else `impl` alone."""
    return BACKEND_IMPLS if impl in BACKEND_IMPLS else (str(impl),)


def all_reduce_bytes(rows: pd.DataFrame) -> pd.Series:
    """Bytes of one [T, hidden] all-reduce of each row's step (NaN where the plan does not say)."""
    element = rows["dtype"].map(DTYPE_BYTES).astype(float)
    return rows["tokens"].astype(float) * rows["hidden_size"].astype(float) * element


def choices_per_tokens(
    steps: pd.DataFrame, baseline: str, mode: str, recommended: str | None, family: Iterable[str]
) -> pd.DataFrame:
    """Per (source, T), the points behind every answer of the first screen, one row per point with every role it
    plays there (CHOICE_ROLES order): the baseline, the recommended settings (one point over every T), the
    fastest setting of the baseline's implementation `family` at T and the fastest unfused point at T; each
    with its speed-up over the baseline and NOISE_RULE's verdict."""
    ok = ok_rows(steps, mode)
    ok = ok[~ok["fused_rmsnorm"]]
    keys = ["source", "tokens"]
    picks = [ok[ok["point_id"] == baseline].drop_duplicates(keys).assign(role="baseline")]
    if recommended is not None:
        picks.append(ok[ok["point_id"] == recommended].drop_duplicates(keys).assign(role="recommended"))
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
    base = picks[0].set_index(keys)["median_us"]
    table["baseline_us"] = [base.get((s, t), math.nan) for s, t in zip(table["source"], table["tokens"])]
    table["saved_pct"] = 100.0 * (table["baseline_us"] - table["median_us"]) / table["baseline_us"]
    table["speedup"] = table["baseline_us"] / table["median_us"]
    table["beyond_noise"] = pd.Series(
        [
            None if p == baseline else beyond_noise(p90, b)
            for p, p90, b in zip(table["point_id"], table["p90_us"], table["baseline_us"])
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
        "p99_us",
        "cv",
        "baseline_us",
        "saved_pct",
        "speedup",
        "beyond_noise",
    ]
    return table[columns].reset_index(drop=True)


def alternatives(steps: pd.DataFrame, reference: str, mode: str, family: Iterable[str]) -> pd.DataFrame:
    """Per (source, T): the fastest ok unfused point of an implementation outside `family` against the
    `reference` point (the settings the recommendation exports) at that T, with NOISE_RULE both ways:
    `beyond_noise` (the alternative wins) and `slower_beyond_noise` (the reference wins)."""
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
        "beyond_noise",
        "slower_beyond_noise",
    ]
    if best.empty:
        return pd.DataFrame(columns=columns)
    best = best.assign(bytes=all_reduce_bytes(best))
    ref = ok[ok["point_id"] == reference].drop_duplicates(["source", "tokens"]).set_index(["source", "tokens"])
    where = list(zip(best["source"], best["tokens"]))
    best["reference"] = reference
    best["reference_us"] = [ref["median_us"].get(k, math.nan) for k in where]
    best["reference_p90_us"] = [ref["p90_us"].get(k, math.nan) for k in where]
    best["saved_pct"] = 100.0 * (best["reference_us"] - best["median_us"]) / best["reference_us"]
    best["beyond_noise"] = pd.Series(
        [beyond_noise(p90, r) for p90, r in zip(best["p90_us"], best["reference_us"])], index=best.index, dtype=object
    )
    best["slower_beyond_noise"] = pd.Series(
        [beyond_noise(r, m) for r, m in zip(best["reference_p90_us"], best["median_us"])],
        index=best.index,
        dtype=object,
    )
    return best[columns].reset_index(drop=True)


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
                "fused_rmsnorm": bool(group["fused_rmsnorm"].any()) or impl in FUSED_IMPLS,
                "status": status,
                "message": str(messages.iloc[0]) if not messages.empty else None,
            }
        )
    return pd.DataFrame(rows, columns=["impl", "fused_rmsnorm", "status", "message"])


# ------------------------------------------------------------------------------------ measured vs model


def model_comparison(measured: pd.DataFrame, modelled: pd.DataFrame) -> pd.DataFrame:
    """Step records of the same configuration (impl + env + options), T and mode in both frames: measured and
    modelled median step time (µs), ratio model / measured, error % and whether it is within MODEL_BAND."""
    keys = ["config", "tokens", "mode"]
    left = ok_rows(measured).drop_duplicates(keys)
    right = ok_rows(modelled).drop_duplicates(keys)
    if left.empty or right.empty:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    both = left[keys + ["point_id", "label", "impl", "settings", "median_us"]].merge(
        right[keys + ["point_id", "median_us", "calibration"]], on=keys, suffixes=("_measured", "_model")
    )
    both = both.rename(columns={"median_us_measured": "measured_us", "median_us_model": "model_us"})
    return _with_errors(both).sort_values(["mode", "tokens", "measured_us"], ignore_index=True)


def collective_model_comparison(measured: pd.DataFrame, modelled: pd.DataFrame) -> pd.DataFrame:
    """Single collectives of the same settings, kind, size and rank count in both frames (nccl-tests imports or
    measured ops vs model predictions): median time over the rows of each (in / out of place, repeats), µs."""
    keys = ["settings", "collective", "bytes", "world_size"]
    sides = []
    for frame in (measured, modelled):
        ok = frame[(frame["status"] == "ok") & frame["time_us"].notna()] if not frame.empty else frame
        if ok.empty:
            return pd.DataFrame(columns=COMPARISON_COLUMNS)
        grouped = ok.groupby(keys, sort=True)
        sides.append(
            pd.DataFrame(
                {
                    "median_us": grouped["time_us"].median(),
                    "point_id": grouped["point_id"].first(),
                    "calibration": grouped["calibration"].first(),
                }
            ).reset_index()
        )
    both = sides[0].drop(columns="calibration").merge(sides[1], on=keys, suffixes=("_measured", "_model"))
    both = both.rename(columns={"median_us_measured": "measured_us", "median_us_model": "model_us"})
    both["label"] = both["collective"] + " x" + both["world_size"].astype(int).astype(str)
    return _with_errors(both).sort_values(["collective", "world_size", "bytes"], ignore_index=True)


def _with_errors(both: pd.DataFrame) -> pd.DataFrame:
    both["ratio"] = both["model_us"] / both["measured_us"]
    both["error_pct"] = 100.0 * (both["ratio"] - 1.0)
    both["within_band"] = (both["ratio"] - 1.0).abs() <= MODEL_BAND
    return both


def comparison_summary(both: pd.DataFrame) -> dict[str, Any]:
    """How far the model is from the measurements: pairs, median |error| %, share within MODEL_BAND."""
    if both.empty:
        return {"pairs": 0, "median_abs_error_pct": math.nan, "within_band_pct": math.nan}
    return {
        "pairs": int(len(both)),
        "median_abs_error_pct": float(both["error_pct"].abs().median()),
        "within_band_pct": float(100.0 * both["within_band"].mean()),
    }


# -------------------------------------------------------------------------------------- failures, matrix


def failures(frame: pd.DataFrame) -> pd.DataFrame:
    """Every record that is not ok, with `failed` true unless it merely does not apply ("unsupported")."""
    bad = frame[frame["status"] != "ok"].copy()
    bad["failed"] = bad["status"].isin(FAILED_STATUSES)
    columns = ["source", "point_id", "label", "impl", "settings", "tokens", "mode", "status", "message", "failed"]
    return bad[[c for c in columns if c in bad]].reset_index(drop=True)


def status_matrix(steps: pd.DataFrame) -> pd.DataFrame:
    """Points × (T, mode) → status: the CUDA-graph compatibility matrix."""
    if steps.empty:
        return pd.DataFrame()
    table = steps.drop_duplicates(["point_id", "tokens", "mode"]).pivot(
        index=["point_id", "label"], columns=["tokens", "mode"], values="status"
    )
    return table.sort_index(axis=0).sort_index(axis=1)


# ------------------------------------------------------------------------------------------ the heatmap


def varying_axes(steps: pd.DataFrame) -> list[str]:
    """The sweep's axes: env columns and impl that take more than one value among unfused points."""
    unfused = steps[~steps["fused_rmsnorm"]]
    axes = []
    for column in ["impl"] + [c for c in steps.columns if c.startswith(ENV_PREFIX)]:
        if axis_values(unfused, column).nunique() > 1:
            axes.append(column)
    return axes


def axis_values(steps: pd.DataFrame, axis: str) -> pd.Series:
    """An axis column with "not set" spelled out (the point keeps NCCL's default)."""
    return steps[axis].astype(object).where(steps[axis].notna(), DEFAULT_ENV_VALUE).astype(str)


def axis_strength(steps: pd.DataFrame, mode: str, axes: list[str]) -> pd.Series:
    """Per axis: spread (max − min) of the per-value median step time, relative to the T's median, averaged over T."""
    rows = ok_rows(steps, mode)
    rows = rows[~rows["fused_rmsnorm"]]
    middle = rows.groupby("tokens")["median_us"].median()
    strength = {}
    for axis in axes:
        by_value = rows.groupby([rows["tokens"], axis_values(rows, axis)])["median_us"].median()
        per_tokens = by_value.groupby(level=0)
        spread = (per_tokens.max() - per_tokens.min()) / middle
        spread = spread[(per_tokens.size() > 1) & (middle > 0)]
        strength[axis] = float(spread.mean()) if not spread.empty else 0.0
    return pd.Series(strength, dtype=float).sort_values(ascending=False, kind="stable")


def strongest_axes(steps: pd.DataFrame, mode: str, count: int = 2) -> list[str]:
    """The `count` axes whose values move the step time most."""
    axes = varying_axes(steps)
    return list(axis_strength(steps, mode, axes).index[:count]) if axes else []


def heatmap_pivot(
    steps: pd.DataFrame, tokens: int, mode: str, rows_axis: str, columns_axis: str | None
) -> pd.DataFrame:
    """Best (min over the other axes) ok step time in µs per (rows_axis value, columns_axis value) at T."""
    at = steps[(steps["tokens"] == tokens) & ~steps["fused_rmsnorm"]]
    if at.empty:
        return pd.DataFrame()
    table = pd.DataFrame(
        {
            "row": axis_values(at, rows_axis),
            "column": axis_values(at, columns_axis) if columns_axis else "all",
            "median_us": at["median_us"].where((at["status"] == "ok") & (at["mode"] == mode)),
        }
    )
    return table.pivot_table(index="row", columns="column", values="median_us", aggfunc="min", dropna=False)


# ---------------------------------------------------------------------------------- per-op-site, skew


def op_sites(op_us: dict[str, list] | None) -> pd.DataFrame:
    """A record's op_us (columnar, one entry per op) as rows with the site kind (embed / attn / mlp / logits)."""
    if not op_us or not op_us.get("sites"):
        return pd.DataFrame(columns=["site", "site_kind", "bytes", "median", "p99"])
    count = len(op_us["sites"])
    table = pd.DataFrame(
        {key: values for key, values in op_us.items() if isinstance(values, list) and len(values) == count}
    )
    table["site"] = table.pop("sites").astype(str)
    table["site_kind"] = table["site"].str.rsplit(".", n=1).str[-1]
    return table


def site_summary(sites: pd.DataFrame) -> pd.DataFrame:
    """Per site kind: op count, bytes, median and p99 (µs) of the ops' medians, and their sum (µs)."""
    if sites.empty:
        return pd.DataFrame(columns=["site_kind", "ops", "bytes", "median_us", "p99_us", "total_us"])
    grouped = sites.groupby("site_kind")
    table = pd.DataFrame(
        {
            "ops": grouped.size(),
            "bytes": grouped["bytes"].max(),
            "median_us": grouped["median"].median(),
            "p99_us": grouped["median"].quantile(0.99),
            "total_us": grouped["median"].sum(),
        }
    ).reset_index()
    order = {kind: i for i, kind in enumerate(SITE_KINDS)}
    return table.sort_values("site_kind", key=lambda s: s.map(lambda k: order.get(k, len(order))))


def op_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Every op of every record that has op_us, one row each: point_id, tokens, collective, bytes, median (µs).

    Built with numpy in one pass (a sweep of thousands of records has hundreds of thousands of ops); point_id
    and collective are categoricals, which op_sizes groups several times faster than strings.
    """
    rows = steps[steps["op_us"].notna()]
    columns: dict[str, list] = {"point_id": [], "tokens": [], "collective": [], "bytes": [], "median": []}
    point_codes: dict[str, int] = {}
    collectives = ("all_gather", "all_reduce")
    collectives_of: dict[tuple, np.ndarray] = {}  # every record of a plan has the same sites
    for point_id, tokens, op_us in zip(rows["point_id"], rows["tokens"], rows["op_us"]):
        sites = tuple(op_us.get("sites") or ())
        count = len(sites)
        if not count or len(op_us.get("median") or []) != count or len(op_us.get("bytes") or []) != count:
            continue
        if sites not in collectives_of:
            collectives_of[sites] = np.array(
                [collectives.index(site_collective(site)) for site in sites], dtype=np.int8
            )
        columns["point_id"].append(np.full(count, point_codes.setdefault(point_id, len(point_codes)), dtype=np.int32))
        columns["tokens"].append(np.full(count, tokens))
        columns["collective"].append(collectives_of[sites])
        columns["bytes"].append(np.asarray(op_us["bytes"], dtype=np.int64))
        columns["median"].append(np.asarray(op_us["median"], dtype=float))
    if not columns["point_id"]:
        return pd.DataFrame({key: pd.Series(dtype=object) for key in columns})
    table = {key: np.concatenate(parts) for key, parts in columns.items()}
    table["point_id"] = pd.Categorical.from_codes(table["point_id"], categories=list(point_codes))
    table["collective"] = pd.Categorical.from_codes(table["collective"], categories=list(collectives))
    return pd.DataFrame(table)


def site_collective(site: str) -> str:
    """The collective an op site issues: the logits all-gather, an all-reduce everywhere else (docs/step-plan.md)."""
    return "all_gather" if site.rsplit(".", 1)[-1] == "logits" else "all_reduce"


def op_sizes(ops: pd.DataFrame) -> pd.DataFrame:
    """Per (point, collective, size): how many ops and the median of their medians, µs (nccl-tests' rows)."""
    grouped = ops.groupby(["point_id", "collective", "bytes"], sort=True, observed=True)["median"]
    table = pd.DataFrame({"ops": grouped.size(), "time_us": grouped.median()}).reset_index()
    return table.astype({"point_id": str, "collective": str}).sort_values(
        ["point_id", "collective", "bytes"], ignore_index=True
    )


# ------------------------------------------------------------------- breakdown, speculative projection


@dataclass(frozen=True)
class ComputeTimes:
    """Compute time of the target forward pass per T, ms, as the user gave it (`--compute-ms`)."""

    per_tokens: dict[int, float] = field(default_factory=dict)
    everywhere: float | None = None

    @property
    def given(self) -> bool:
        return self.everywhere is not None or bool(self.per_tokens)

    def for_tokens(self, tokens: int) -> float | None:
        """Exact T, else the single value, else the nearest T given (ties: the smaller T)."""
        if tokens in self.per_tokens:
            return self.per_tokens[tokens]
        if self.everywhere is not None:
            return self.everywhere
        if not self.per_tokens:
            return None
        nearest = min(self.per_tokens, key=lambda t: (abs(t - tokens), t))
        return self.per_tokens[nearest]

    def describe(self) -> str:
        if not self.given:
            return "not given"
        if self.everywhere is not None:
            return f"{self.everywhere:g} ms at every T"
        return ", ".join(f"T={t}: {ms:g} ms" for t, ms in sorted(self.per_tokens.items()))


def parse_compute_ms(value: Any) -> ComputeTimes:
    """ "5.0" (every T), "4=5.0,8=5.2" (per T), a number, or a {T: ms} mapping (from the sweep file)."""
    if value is None or value == "":
        return ComputeTimes()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ComputeTimes(everywhere=parse_ms(value, "compute"))
    if isinstance(value, dict):
        items = list(value.items())
    else:
        text = str(value).strip()
        if "=" not in text:
            return ComputeTimes(everywhere=parse_ms(text, "compute"))
        items = []
        for part in text.split(","):
            key, sep, ms = part.partition("=")
            if not sep:
                raise UsageError(f'--compute-ms: {part.strip()!r} is not T=ms (e.g. "4=5.0,8=5.2" or one number)')
            items.append((key, ms))
    per_tokens = {}
    for key, ms in items:
        try:
            tokens = int(str(key).strip())
        except ValueError:
            raise UsageError(f"--compute-ms: T {key!r} is not a whole number") from None
        if tokens < 1:
            raise UsageError(f"--compute-ms: T must be >= 1, got {tokens}")
        per_tokens[tokens] = parse_ms(ms, "compute")
    return ComputeTimes(per_tokens=per_tokens)


def parse_ms(value: Any, what: str) -> float:
    """A duration in ms from the command line or the sweep file; `what` names the option in the error."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise UsageError(f"--{what}-ms: {value!r} is not a number of milliseconds") from None
    if not math.isfinite(number) or number < 0:
        raise UsageError(f"--{what}-ms: {value!r} must be a finite number >= 0")
    return number


def parse_accept(value: Any) -> tuple[float, ...]:
    """Accept lengths (tokens kept per verify step, bonus token included): "1.3,2.0,3.0" or a list; each >= 1."""
    parts = value if isinstance(value, (list, tuple)) else str(value).split(",")
    lengths = []
    for part in parts:
        try:
            length = float(str(part).strip())
        except ValueError:
            raise UsageError(f"--accept: {part!r} is not a number") from None
        if not math.isfinite(length) or length < 1:
            raise UsageError(f"--accept: accept length {part!r} must be >= 1 (the bonus token always counts)")
        lengths.append(length)
    if not lengths:
        raise UsageError("--accept: give at least one accept length, e.g. 1.3,2.0,3.0")
    return tuple(sorted(set(lengths)))


def launch_overhead(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (source, point, T): eager − graph median, µs (NaN where either mode is missing or failed)."""
    ok = ok_rows(steps)
    keys = ["source", "point_id", "tokens"]
    eager = ok[ok["mode"] == "eager"].drop_duplicates(keys).set_index(keys)["median_us"]
    graph = ok[ok["mode"] == "graph"].drop_duplicates(keys).set_index(keys)["median_us"]
    both = pd.DataFrame({"eager_us": eager, "graph_us": graph})
    both["overhead_us"] = both["eager_us"] - both["graph_us"]
    return both.reset_index()


def breakdown(
    steps: pd.DataFrame,
    head: pd.DataFrame,
    baseline: str,
    compute: ComputeTimes,
    recommended: str | None = None,
    mode: str | None = None,
) -> pd.DataFrame:
    """Per (setting, T): communication, launch overhead and compute, ms, and comm's share. Settings: "baseline",
    "recommended" (the `recommended` point, when given and not the baseline) and "best" (the fastest per T).

    Communication is the step's collectives in `mode` (the headline's); launch overhead is eager − graph of the
    same point (shown, not added to what an engine running the captured graph pays); compute is what the user
    gave.
    """
    shown = {baseline, recommended, *head["best_point_id"].dropna()}
    overhead = launch_overhead(steps[steps["point_id"].isin(shown)]).set_index(["source", "point_id", "tokens"])
    overhead = overhead["overhead_us"]
    chosen: dict[tuple, float] = {}
    if recommended is not None and recommended != baseline:
        rows = ok_rows(steps, mode)
        rows = rows[rows["point_id"] == recommended].drop_duplicates(["source", "tokens"])
        chosen = dict(zip(zip(rows["source"], rows["tokens"]), rows["median_us"]))
    rows = []
    for r in head.itertuples():
        settings = [("baseline", baseline, r.baseline_us)]
        if recommended is not None and recommended != baseline:
            settings.append(("recommended", recommended, chosen.get((r.source, r.tokens), math.nan)))
        settings.append(("best", r.best_point_id, r.best_us))
        for setting, point_id, comm_us in settings:
            compute_ms = compute.for_tokens(int(r.tokens))
            over_us = overhead.get((r.source, point_id, r.tokens), math.nan) if isinstance(point_id, str) else math.nan
            comm_ms = comm_us / 1000.0 if pd.notna(comm_us) else math.nan
            total = comm_ms + (compute_ms or 0.0)
            rows.append(
                {
                    "source": r.source,
                    "tokens": int(r.tokens),
                    "setting": setting,
                    "point_id": point_id,
                    "comm_ms": comm_ms,
                    "overhead_ms": over_us / 1000.0 if pd.notna(over_us) else math.nan,
                    "compute_ms": compute_ms if compute_ms is not None else math.nan,
                    "verify_ms": total if pd.notna(comm_ms) else math.nan,
                    "comm_share_pct": 100.0 * comm_ms / total if compute_ms is not None and total else math.nan,
                }
            )
    return pd.DataFrame(rows)


def tps_column(accept: float) -> str:
    """The projection's column of tokens/s at one accept length, e.g. "tps_at_1_3"."""
    return "tps_at_" + f"{accept:g}".replace(".", "_")


def tokens_per_second(accept: float, draft_ms: float, verify_ms: float) -> float:
    """Speculative decoding: accept_length tokens per (draft + verify)."""
    total = draft_ms + verify_ms
    return 1000.0 * accept / total if total > 0 else math.nan


def break_even_accept(draft_ms: float, verify_ms: float, decode_ms: float) -> float:
    """The accept length above which speculation beats plain decode: (draft + verify) / decode(T = 1).

    A raw ratio: below 1 it is not an accept length (those are >= 1, the bonus token) but means speculation
    pays at any accept length.
    """
    return (draft_ms + verify_ms) / decode_ms if decode_ms > 0 else math.nan


def pays_at_any_accept(ratio: float) -> bool:
    """True when the break-even ratio is below 1: every accept length (>= 1) beats plain decode."""
    return math.isfinite(ratio) and ratio < 1.0


def projection(parts: pd.DataFrame, draft_ms: float, accepts: tuple[float, ...]) -> pd.DataFrame:
    """Per (source, setting, T): plain-decode and speculative tokens/s at each accept length, and break-even.

    break_even_ratio is (draft + verify) / decode as computed; break_even_accept is that ratio where it is an
    accept length (>= 1), NaN where pays_at_any_accept. T = 1 is plain decode; without it (or without a verify
    T) there is nothing to project: empty frame.
    An accept length above T is impossible (NaN). Without compute times the numbers cover communication only
    and are upper bounds, not throughput estimates.
    """
    rows = []
    for (source, setting), group in parts.groupby(["source", "setting"], sort=False):
        decode = group[(group["tokens"] == 1) & group["verify_ms"].notna()]
        if decode.empty:
            continue
        decode_ms = float(decode["verify_ms"].iloc[0])
        plain = 1000.0 / decode_ms if decode_ms > 0 else math.nan
        for r in group[(group["tokens"] > 1) & group["verify_ms"].notna()].itertuples():
            ratio = break_even_accept(draft_ms, r.verify_ms, decode_ms)
            row = {
                "source": source,
                "setting": setting,
                "tokens": r.tokens,
                "point_id": r.point_id,
                "decode_ms": decode_ms,
                "plain_tokens_per_s": plain,
                "draft_ms": draft_ms,
                "verify_ms": r.verify_ms,
                "break_even_ratio": ratio,
                "break_even_accept": ratio if math.isfinite(ratio) and ratio >= 1.0 else math.nan,
                "pays_at_any_accept": pays_at_any_accept(ratio),
            }
            for accept in accepts:
                row[tps_column(accept)] = (
                    tokens_per_second(accept, draft_ms, r.verify_ms) if accept <= r.tokens else math.nan
                )
            rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------- helpers


def distinct_tokens(steps: pd.DataFrame) -> list[int]:
    return sorted(int(t) for t in steps["tokens"].dropna().unique()) if not steps.empty else []


def status_counts(frame: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in frame["status"].value_counts().items()} if not frame.empty else {}
