"""A run's records as one pandas DataFrame, and the row selections every analysis starts from.

`records_frame` flattens records (one row each); the rest take and return DataFrames, never touch files and never
guess: a number that was not measured stays NaN. Times in the frame are µs, as recorded.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from typing import Any

import pandas as pd

from commprof.records.point_ids import stage_of
from commprof.records.schema import FAILED_STATUSES, CollectiveRecord, Stats, StepRecord
from commprof.report.decision.formatting import ENV_PREFIX, STEP_INTEGERS, env_text, whole_counts
from commprof.stats import tail

# step_us's statistics as frame columns (p99 and max become the one tail column), in the record type's order.
_STEP_COLUMNS = tuple(
    (name, "step_n" if name == "n" else "cv" if name == "cv" else f"{name}_us")
    for name in (*(n for n in Stats.__annotations__ if n not in ("p99", "max")), "tail")
)


def records_frame(records: Iterable[StepRecord | CollectiveRecord]) -> pd.DataFrame:
    """One row per record: point fields, step_us statistics (µs), plan counts, skew; op_us kept as objects."""
    settings: dict[tuple, tuple[str, str]] = {}  # every (T, mode) record of a point shares its env
    rows = [_flatten(record, settings) for record in records]
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows, columns=list(rows[0]))  # every row has _flatten's keys in its order: no union to find
    envs = pd.DataFrame([row["env"] for row in rows], dtype=object)  # every point's variables, in C
    for key in sorted(envs.columns):
        frame[ENV_PREFIX + key] = envs[key].where(envs[key].notna(), None).to_numpy()
    # Text as objects, every column of a kind in one block (copy gathers them): pandas' str dtype keeps a block per
    # column, which each of the analysis's dozens of row selections took apart one by one.
    return frame.astype(
        {name: object for name, kind in frame.dtypes.items() if isinstance(kind, pd.StringDtype)}
    ).copy()


def _flatten(record: StepRecord | CollectiveRecord, settings: dict[tuple, tuple[str, str]]) -> dict[str, Any]:
    point = record.get("point") or {}
    env = {str(k): str(v) for k, v in (point.get("env") or {}).items()}
    key = tuple(sorted(env.items()))
    backend = record.get("backend")
    if (key, backend) not in settings:
        settings[(key, backend)] = (env_text(env, backend), json.dumps(key))
    text, env_key = settings[(key, backend)]
    stats = record.get("step_us") or {}
    plan = record.get("plan") or {}
    check = record.get("check") or {}
    nccl = record.get("nccl") or {}
    ranks = record.get("rank_step_median_us") or None
    options = json.dumps(point["options"], sort_keys=True) if point.get("options") else "{}"
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
        "architecture": plan.get("architecture"),  # what the engines' own defaults key on (engine_dispatch)
        "dp_attention": plan.get("dp_attention"),
        "spec": plan.get("spec"),
        "num_steps": plan.get("num_steps"),
        "all_reduce_count": plan.get("all_reduce"),
        "all_gather_count": plan.get("all_gather"),
        "total_bytes": plan.get("total_bytes"),
        "check_ok": check.get("ok") if check else None,
        "max_abs_err": check.get("max_abs_err") if check else None,
        "nccl_version": nccl.get("version"),
        "nccl_channels": nccl.get("channels"),
        "nccl": nccl or None,
        "kernel_model": record.get("kernel_model"),  # simulated non-NCCL points: basis, source, expected error
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
    # Replayed with compute between the collectives: every time the report ranks is communication = step - the
    # compute timed on its own (its median), so verdicts and projections never count the compute twice.
    compute = (record.get("compute_us") or {}).get("median") or 0.0
    row["compute_us"] = float(compute) if compute else math.nan
    word, tail_value = tail(stats) if stats else (None, None)
    for name, column in _STEP_COLUMNS:
        value = tail_value if name == "tail" else stats.get(name)
        if value is not None and compute and name not in ("n", "cv"):
            value = max(float(value) - float(compute), 0.0)
        row[column] = float(value) if value is not None else math.nan
    row["tail_stat"] = word  # which statistic tail_us is: "p99", or "max of n" below 100 samples (stats.tail)
    if ranks:
        row["rank_skew_us"] = max(ranks) - min(ranks)
        middle = statistics.median(ranks)
        row["rank_skew_pct"] = 100.0 * row["rank_skew_us"] / middle if middle else math.nan
    else:
        row["rank_skew_us"] = row["rank_skew_pct"] = math.nan
    return row


def step_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Only the replayed-step records, their counts as integers."""
    if frame.empty or "kind" not in frame:
        return frame.iloc[0:0]
    steps = frame[frame["kind"] == "step"]
    whole = {
        column: steps[column].astype("int64")
        for column in STEP_INTEGERS
        if column in steps
        and steps[column].dtype.kind == "f"
        and steps[column].notna().all()
        and (steps[column] % 1 == 0).all()
    }
    return steps.assign(**whole) if whole else steps


def collective_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Only the single-collective records (nccl-tests imports, modelled single ops)."""
    if frame.empty or "kind" not in frame:
        return frame.iloc[0:0]
    return frame[frame["kind"] == "collective"]


def ok_rows(steps: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Rows whose numbers are a tuning result (status ok and a median), optionally of one mode."""
    mask = ok_mask(steps, mode)
    return steps if mask.all() else steps[mask]


def ok_mask(steps: pd.DataFrame, mode: str | None = None) -> pd.Series:
    """Which rows ok_rows keeps."""
    mask = (steps["status"] == "ok") & steps["median_us"].notna()
    return mask & (steps["mode"] == mode) if mode is not None else mask


def model_errors(row: dict, reference: dict | None) -> tuple[float | None, float | None] | None:
    """(the row's, the reference's) expected errors when different models predicted them (a simulated kernel
    against NCCL), else None: the evidence's own error then judges both."""
    if reference is None or not (
        isinstance(row.get("kernel_model"), dict) or isinstance(reference.get("kernel_model"), dict)
    ):
        return None
    return _model_error(row), _model_error(reference)


def _model_error(row: dict) -> float | None:
    kernel, nccl = row.get("kernel_model"), row.get("nccl")
    source = kernel if isinstance(kernel, dict) else nccl if isinstance(nccl, dict) else {}
    pct = source.get("expected_error_pct")
    return float(pct) if isinstance(pct, (int, float)) and not isinstance(pct, bool) else None


def latest_point_ids(steps: pd.DataFrame) -> pd.Series:
    """Point id -> the id holding its configuration's (impl + env + options) latest, longest measurement.

    Stages re-measure configurations ("s1-p001" repeats "p001" with more iterations); like the staged search
    (commprof.sweep.planning.staging.rank_points), the report uses the latest stage's records, then the most iterations.
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


def failures(frame: pd.DataFrame) -> pd.DataFrame:
    """Every record that is not ok, with `failed` true unless it merely does not apply ("unsupported")."""
    bad = frame[frame["status"] != "ok"].copy()
    bad["failed"] = bad["status"].isin(FAILED_STATUSES)
    columns = ["source", "point_id", "label", "impl", "settings", "tokens", "mode", "status", "message", "failed"]
    return whole_counts(bad[[c for c in columns if c in bad]].reset_index(drop=True))


def status_matrix(steps: pd.DataFrame) -> pd.DataFrame:
    """Points × (T, mode) → status: the CUDA-graph compatibility matrix."""
    if steps.empty:
        return pd.DataFrame()
    table = steps.drop_duplicates(["point_id", "tokens", "mode"]).pivot(
        index=["point_id", "label"], columns=["tokens", "mode"], values="status"
    )
    return table.sort_index(axis=0).sort_index(axis=1)


def distinct_tokens(steps: pd.DataFrame) -> list[int]:
    return sorted(int(t) for t in steps["tokens"].dropna().unique()) if not steps.empty else []


def status_counts(frame: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in frame["status"].value_counts().items()} if not frame.empty else {}
