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

import numpy as np
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
# Each record section's fields the frame takes as they are: section (None: the record itself) -> (field, column).
_TAKEN: dict[str | None, tuple[tuple[str, str], ...]] = {
    None: tuple(
        (name, name)
        for name in (
            *("run_id", "source", "kind", "point_id", "iterations", "backend", "world_size", "status", "message"),
            *("calibration", "model", "phase", "tp", "tokens", "dtype", "mode", "timing", "kernel_model"),
            *("collective", "bytes", "count", "time_us", "algbw_gbps", "busbw_gbps", "wrong", "graph", "in_place"),
        )
    ),
    "point": (("impl", "impl"),),
    "plan": (
        *((name, name) for name in ("hidden_size", "num_layers", "architecture", "dp_attention", "spec")),
        *(("num_steps", "num_steps"), ("all_reduce", "all_reduce_count"), ("all_gather", "all_gather_count")),
        ("total_bytes", "total_bytes"),
    ),
    "nccl": (("version", "nccl_version"), ("channels", "nccl_channels")),
}
# The frame's columns in order (results.csv's, the env.* columns after them): those above, and those made here.
_ORDER = (
    *("run_id", "source", "kind", "point_id", "label", "impl", "env", "settings", "options", "config", "stage"),
    *("iterations", "backend", "world_size", "status", "message", "calibration", "model", "phase", "tp", "tokens"),
    *("dtype", "mode", "timing", "fused_rmsnorm", "hidden_size", "num_layers", "architecture", "dp_attention"),
    *("spec", "num_steps", "all_reduce_count", "all_gather_count", "total_bytes", "check_ok", "max_abs_err"),
    *("nccl_version", "nccl_channels", "nccl", "kernel_model", "op_us", "rank_step_median_us", "collective"),
    *("bytes", "count", "time_us", "algbw_gbps", "busbw_gbps", "wrong", "graph", "in_place", "compute_us"),
    *(column for _, column in _STEP_COLUMNS),
    *("tail_stat", "rank_skew_us", "rank_skew_pct"),
)


def records_frame(records: Iterable[StepRecord | CollectiveRecord]) -> pd.DataFrame:
    """One row per record: point fields, step_us statistics (µs), plan counts, skew; op_us kept as objects.

    Built a column at a time (one pass over the records per column, no row dictionaries): a large run's frame is
    made in a fraction of the time rows took."""
    records = records if isinstance(records, list) else list(records)
    if not records:
        return pd.DataFrame()
    sections = {name: [record.get(name) or {} for record in records] for name in ("point", "plan", "nccl")}
    columns: dict[str, Any] = {}
    for section, taken in _TAKEN.items():
        fields = [field for field, _ in taken]
        rows = [tuple(map(row.get, fields)) for row in (records if section is None else sections[section])]
        columns.update(zip((column for _, column in taken), map(list, zip(*rows))))
    columns.update(_point_columns(records, sections["point"]))
    columns["fused_rmsnorm"] = [bool(record.get("fused_rmsnorm", False)) for record in records]
    checks = [record.get("check") for record in records]
    columns["check_ok"] = [check.get("ok") if check else None for check in checks]
    columns["max_abs_err"] = [check.get("max_abs_err") if check else None for check in checks]
    columns["nccl"] = [nccl or None for nccl in sections["nccl"]]
    columns["op_us"] = [record.get("op_us") for record in records]
    columns.update(_step_columns(records))
    frame = pd.DataFrame({name: columns[name] for name in _ORDER})
    envs = columns["env"]
    for key in sorted({key for env in envs for key in env}):
        frame[ENV_PREFIX + key] = [env.get(key) for env in envs]
    # Text as objects, every column of a kind in one block (copy gathers them): pandas' str dtype keeps a block per
    # column, which each of the analysis's dozens of row selections took apart one by one.
    return frame.astype(
        {name: object for name, kind in frame.dtypes.items() if isinstance(kind, pd.StringDtype)}
    ).copy()


def _point_columns(records: list[dict], points: list[dict]) -> dict[str, list]:
    """The columns of each record's point: its label (the point id where it has none), env, settings, options,
    config (a configuration's identity: impl + env + options; stages re-measure one under a new id) and stage; made
    once per point a file's records share (records.files)."""
    made: dict[tuple, tuple] = {}
    rows = []
    for record, point in zip(records, points):
        key = (id(point), record.get("point_id"), record.get("backend"))
        if (row := made.get(key)) is None:
            row = made[key] = _point_row(point, *key[1:])
        rows.append(row)
    names = ("label", "env", "settings", "options", "config", "stage")
    return dict(zip(names, map(list, zip(*rows))))


def _point_row(point: dict, point_id: Any, backend: Any) -> tuple:
    env = {str(k): str(v) for k, v in (point.get("env") or {}).items()}
    options = json.dumps(point["options"], sort_keys=True) if point.get("options") else "{}"
    stage = point.get("stage")
    return (
        point.get("label") or point_id,
        env,
        env_text(env, backend),
        options,
        f"{point.get('impl')} {json.dumps(tuple(sorted(env.items())))} {options}",
        stage if isinstance(stage, int) else stage_of(str(point_id)),
    )


def _step_columns(records: list[dict]) -> dict[str, Any]:
    """step_us's statistics, net of the step's compute, its tail and its word, and the ranks' skew.

    Replayed with compute between the collectives: every time the report ranks is communication = step - the
    compute timed on its own (its median), so verdicts and projections never count the compute twice."""
    names = [name for name, _ in _STEP_COLUMNS[:-1]]  # the tail aside
    rows = []  # a record at a time: a large run's records are read once each, not once per column
    for record in records:
        stats = record.get("step_us") or {}
        ranks = record.get("rank_step_median_us") or None
        rows.append(
            (
                *map(stats.get, names),
                *(tail(stats) if stats else (None, None)),
                (record.get("compute_us") or {}).get("median") or 0.0,
                ranks,
                *_skew(ranks),
            )
        )
    *found, words, tails, compute, ranks, skew_us, skew_pct = map(list, zip(*rows))
    compute = np.array(compute, dtype=float)
    columns: dict[str, Any] = {"compute_us": np.where(compute != 0, compute, math.nan)}
    for (name, column), values in zip(_STEP_COLUMNS, [*found, tails]):
        values = np.array(values, dtype=float)  # a missing statistic is NaN
        if name not in ("n", "cv"):
            values = np.where(compute != 0, np.maximum(values - compute, 0.0), values)
        columns[column] = values
    columns["tail_stat"] = words  # "p99", or "max of n" below 100 samples (stats.tail)
    columns.update(rank_step_median_us=ranks, rank_skew_us=skew_us, rank_skew_pct=skew_pct)
    return columns


def _skew(ranks: list[float] | None) -> tuple[float, float]:
    """The spread of the ranks' median step times, µs and % of their median (NaN without them)."""
    if not ranks:
        return math.nan, math.nan
    spread = max(ranks) - min(ranks)
    middle = statistics.median(ranks)
    return spread, 100.0 * spread / middle if middle else math.nan


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
    # copy gathers the integer columns into one block: each of the analysis's row selections copies a block at a time
    return steps.assign(**whole).copy() if whole else steps


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


def error_columns(rows: pd.DataFrame) -> pd.DataFrame:
    """Only the columns model_errors reads: the rows' dicts to give it (a dict of every column per row is dear)."""
    return rows[[column for column in ("kernel_model", "nccl") if column in rows]]


def first_rows(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """rows.drop_duplicates(keys), reading only the key columns (drop_duplicates reads every column of a frame)."""
    return rows[~rows[keys].duplicated()]


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
