"""NCCL Inspector dumps: NCCL's own record of every collective, and before/after comparisons (pure).

NCCL's profiler plugin "Inspector" (plugins/profiler/inspector, NCCL >= 2.28; NCCL_PROFILER_PLUGIN=
libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1) writes, per process, `<dump dir>/<host>-pid<pid>.log`:
one JSON object per line and per completed collective (format v4.0):

  {"header":{"id":"0x…","comm_name":"…","rank":0,"n_ranks":8,"nnodes":1},          comm_name from 2.30
   "metadata":{"inspector_output_format_version":"v4.0",…,"hostname":"…","pid":…},
   "coll_perf":{"coll":"AllReduce","coll_sn":12,"coll_msg_size_bytes":57344,"coll_exec_time_us":21,
                "coll_timing_source":"kernel_gpu","coll_algobw_gbs":…,"coll_busbw_gbs":…}}

The JSON records carry no algorithm, protocol or CUDA-graph flag. With NCCL_INSPECTOR_PROM_DUMP=1 it
writes Prometheus text instead (`nccl_inspector_metrics_<GPU UUID>.prom`): per communicator, collective,
size bucket and algo_proto ("Ring_LL"), the mean time and the geometric-mean bus bandwidth. Both are read.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd

from commprof.terminal import one_line
from commprof.units import MAX_TIME_US, bounded_bytes

COLUMNS = [
    "source",
    "rank",
    "nranks",
    "coll",
    "bytes",
    "bytes_upper",
    "algo",
    "proto",
    "time_us",
    "busbw_gbs",
    "timing",
]
_PROM = re.compile(r"^(nccl_bus_bandwidth_gbs|nccl_collective_exec_time_microseconds)\{(.*)\}\s+(\S+)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_BUCKET = re.compile(r"^([0-9]{1,15})-([0-9]{1,15})(B|KB|MB|GB|TB)$")
MAX_BUSBW_GBS = 1e5  # beyond any link NCCL drives (NVLink 5: 1.8 TB/s per GPU)
_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def parse_json_lines(text: str) -> tuple[list[dict[str, Any]], int]:
    """Collective records of one `.log` dump, and how many lines could not be read (a dump cut mid-line)."""
    rows, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            perf, header = record["coll_perf"], record.get("header") or {}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            bad += 1 if '"p2p_perf"' not in line else 0
            continue
        if not _usable(perf, header):  # a field of another type, or a size, rank or time no run could have
            bad += 1
            continue
        rows.append(
            {
                "source": "json",
                "rank": header.get("rank"),
                "nranks": header.get("n_ranks"),
                "coll": one_line(perf["coll"]),
                "bytes": perf.get("coll_msg_size_bytes"),
                "bytes_upper": perf.get("coll_msg_size_bytes"),
                "algo": None,
                "proto": None,
                "time_us": _number(perf.get("coll_exec_time_us")),
                "busbw_gbs": _number(perf.get("coll_busbw_gbs")),
                "timing": perf.get("coll_timing_source"),
            }
        )
    return rows, bad


def parse_prom(text: str) -> list[dict[str, Any]]:
    """Collective buckets of one `.prom` dump: time and bus bandwidth per (GPU, comm, collective, size, algo_proto)."""
    buckets: dict[tuple, dict[str, Any]] = {}
    for line in text.splitlines():
        m = _PROM.match(line.strip())
        if not m:
            continue
        metric, body, value = m.groups()
        labels = dict(_LABEL.findall(body))
        lower, upper = _bucket_bounds(labels.get("message_size", ""))
        algo, _, proto = labels.get("algo_proto", "unknown").rpartition("_")
        key = tuple(sorted((k, v) for k, v in labels.items()))
        row = buckets.setdefault(
            key,
            {
                "source": "prom",
                "rank": labels.get("gpu"),
                "nranks": int(labels["nranks"]) if labels.get("nranks", "").isdigit() else None,
                "coll": labels.get("collective"),
                "bytes": lower,
                "bytes_upper": upper,
                "algo": algo.upper() or None,
                "proto": proto.upper() or None,
                "time_us": None,
                "busbw_gbs": None,
                "timing": "mean of the dump interval",
            },
        )
        number, field = _number(value), "time_us" if metric.endswith("microseconds") else "busbw_gbs"
        high = MAX_TIME_US if field == "time_us" else MAX_BUSBW_GBS
        row[field] = number if number is not None and 0 <= number <= high else None
    return list(buckets.values())


def _usable(perf: Any, header: Any) -> bool:
    """A JSON-lines record whose every field a row takes is of the type and range the Inspector writes."""
    if not isinstance(perf, dict) or not isinstance(header, dict) or not isinstance(perf.get("coll"), str):
        return False
    counts = (header.get("rank"), header.get("n_ranks"), perf.get("coll_msg_size_bytes"))
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 48) for v in counts):
        return False
    if not all(v is None or isinstance(v, str) for v in (perf.get("coll_timing_source"),)):
        return False
    raw = (perf.get("coll_exec_time_us"), perf.get("coll_busbw_gbs"))
    if any(isinstance(v, float) and not np.isfinite(v) for v in raw):
        return False
    time_us, busbw = map(_number, raw)
    return (time_us is None or 0 <= time_us <= MAX_TIME_US) and (busbw is None or 0 <= busbw <= MAX_BUSBW_GBS)


def _number(value: Any) -> float | None:
    """A finite number, or None (NCCL writes NaN as the string "nan"; an infinite time is no time)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if np.isfinite(number) else None


def _bucket_bounds(label: str) -> tuple[int | None, int | None]:
    """ "4-5GB" -> (4 GiB, 5 GiB): NCCL's Prometheus size buckets are whole units of 1024."""
    m = _BUCKET.match(label)
    if not m:
        return None, None
    unit = _UNITS[m.group(3)]
    return bounded_bytes(m.group(1), unit), bounded_bytes(m.group(2), unit)


def records_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


def per_size(records: pd.DataFrame) -> pd.DataFrame:
    """Per collective and size: ops, median / p10 / p90 time, median bus bandwidth, the algo/proto seen."""
    columns = [
        "coll",
        "bytes",
        "bytes_upper",
        "ops",
        "time_us",
        "p10_us",
        "p90_us",
        "busbw_gbs",
        "algo_proto",
        "timing",
    ]
    if records.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (coll, nbytes, upper), group in records.groupby(["coll", "bytes", "bytes_upper"], dropna=False, sort=True):
        times = group["time_us"].dropna().to_numpy(dtype=float)
        pairs = sorted({f"{a}/{p}" for a, p in zip(group["algo"], group["proto"]) if a and p})
        rows.append(
            {
                "coll": coll,
                "bytes": nbytes,
                "bytes_upper": upper,
                "ops": len(group),
                "time_us": float(np.median(times)) if len(times) else None,
                "p10_us": float(np.percentile(times, 10)) if len(times) else None,
                "p90_us": float(np.percentile(times, 90)) if len(times) else None,
                "busbw_gbs": float(group["busbw_gbs"].median()) if group["busbw_gbs"].notna().any() else None,
                "algo_proto": ", ".join(pairs) or None,
                "timing": ", ".join(sorted({str(t) for t in group["timing"].dropna()})) or None,
            }
        )
    return pd.DataFrame(rows, columns=columns)


def compare(before: pd.DataFrame, after: pd.DataFrame) -> list[dict[str, Any]]:
    """Per collective and size in both dumps: time before and after, the change, and what NCCL ran in each.

    A change counts as clear only when the two runs' p10-p90 ranges (of at least 3 records each) do not
    overlap; Prometheus buckets carry means only, so their changes are never called clear.
    """
    merged = before.merge(after, on=["coll", "bytes", "bytes_upper"], how="outer", suffixes=("_before", "_after"))
    out = []
    for row in merged.to_dict("records"):
        t0, t1 = row.get("time_us_before"), row.get("time_us_after")
        both = t0 is not None and t1 is not None and not pd.isna(t0) and not pd.isna(t1)
        change = 100.0 * (t1 - t0) / t0 if both and t0 else None
        clear = both and _apart(row)
        if not both:
            verdict = "only in one run"
        elif (
            row.get("p10_us_before") is None
            or pd.isna(row.get("p10_us_before"))
            or min(row.get("ops_before") or 0, row.get("ops_after") or 0) < 3
        ):
            verdict = "too few records to judge (Prometheus dumps keep means only)"
        else:
            verdict = "beyond the spread of both runs" if clear else "within the spread of the runs"
        out.append(
            {
                "coll": row["coll"],
                "bytes": _int(row["bytes"]),
                "bytes_upper": _int(row["bytes_upper"]),
                "time_us_before": None if not both and pd.isna(t0) else t0,
                "time_us_after": None if not both and pd.isna(t1) else t1,
                "change_pct": change,
                "clear": bool(clear),
                "verdict": verdict,
                "algo_proto_before": _text(row.get("algo_proto_before")),
                "algo_proto_after": _text(row.get("algo_proto_after")),
                "ops_before": _int(row.get("ops_before")),
                "ops_after": _int(row.get("ops_after")),
            }
        )
    return out


def _apart(row: dict[str, Any]) -> bool:
    lows = (row.get("p10_us_before"), row.get("p10_us_after"))
    highs = (row.get("p90_us_before"), row.get("p90_us_after"))
    if any(v is None or pd.isna(v) for v in (*lows, *highs)):
        return False
    if (row.get("ops_before") or 0) < 3 or (row.get("ops_after") or 0) < 3:
        return False
    return highs[1] < lows[0] or highs[0] < lows[1]


def _int(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _text(value: Any) -> str | None:
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def summarize_dumps(records: pd.DataFrame, unreadable: int, before: pd.DataFrame | None = None) -> dict[str, Any]:
    """What `commprof trace` says about Inspector dumps: per size, and with `before`, the change per size."""
    sizes = per_size(records)
    result: dict[str, Any] = {
        "records": len(records),
        "unreadable_lines": unreadable,
        "formats": sorted(records["source"].unique().tolist()) if len(records) else [],
        "per_size": _plain(sizes),
    }
    if not (len(records) and records["algo"].notna().any()):
        result["note"] = (
            "Inspector's JSON records carry no algorithm or protocol; NCCL_INSPECTOR_PROM_DUMP=1 writes them "
            "(per size bucket), and NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING logs them per op (commprof nccl-log)"
        )
    if before is not None:
        result["before_after"] = compare(per_size(before), sizes)
    return result


def _plain(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows: NaN becomes None, numpy numbers plain numbers."""
    return [
        {
            k: (None if isinstance(v, float) and np.isnan(v) else v.item() if hasattr(v, "item") else v)
            for k, v in row.items()
        }
        for row in frame.to_dict("records")
    ]
