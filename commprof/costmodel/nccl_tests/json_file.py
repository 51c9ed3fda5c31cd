"""Parse the -J output file of nccl-tests (JSON_FILE_VERSION 3, src/util.cu's JSON writer)."""

from __future__ import annotations

import json
import math

from commprof.costmodel.nccl_tests.log import (
    DTYPES,
    PROGRAM,
    ParsedLog,
    RefusedRow,
    Row,
    Run,
    header_problem,
    latency,
    optional_float,
    size,
)
from commprof.errors import UsageError


def parse_json(text: str, path: str = "<json>") -> ParsedLog:
    """The -J output file (JSON_FILE_VERSION 3): config, devices, results with out_of_place / in_place."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or not results:
        raise UsageError(f"{path}: no nccl-tests results in this JSON file")
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    args = data.get("args") if isinstance(data.get("args"), list) else []
    program = next((m.group(1) for a in args if isinstance(a, str) and (m := PROGRAM.search(a))), None)
    devices = [d.get("device_info", "") for d in config.get("devices", []) if isinstance(d, dict)]
    hosts = [str(d["hostname"]) for d in config.get("devices", []) if isinstance(d, dict) and d.get("hostname")]
    nthread, ngpus = config.get("nthreads"), config.get("ngpus")
    warnings: list[str] = []
    run = Run(
        line=1,
        collective=program or "all_reduce",
        ranks=None,
        nthread=nthread,
        ngpus=ngpus,
        graph=bool(config.get("graph", 0)),
        iterations=config.get("iterations"),
        warmup=config.get("warmup_iters"),
        devices=devices,
        hosts=hosts,
    )
    if program is None:
        warnings.append(f"{path}: the *_perf binary is not in 'args'; assumed all_reduce")
    # "devices" holds one entry per process (util.cu parses only the first rank line of each process's block).
    if header_problem(run) is None and (devices or ngpus):
        run.ranks = max(1, len(devices)) * (nthread or 1) * (ngpus or 1)
    bandwidth = data.get("average_bus_bandwidth")
    if isinstance(bandwidth, dict):
        run.avg_busbw_gbps = _json_float(bandwidth.get("bandwidth"))
    bounds = data.get("out_of_bounds")
    if isinstance(bounds, dict) and isinstance(bounds.get("count"), int):
        run.out_of_bounds = bounds["count"]
    for index, item in enumerate(results):
        try:
            row = Row(
                line=index + 1,
                bytes=size(item["size"]),
                count=size(item["count"], "count"),
                dtype=DTYPES.get(item.get("type", ""), item.get("type", "")),
                redop=item.get("redop", "none"),
                root=int(str(item.get("root", -1)).strip()),
            )
            for place in ("out_of_place", "in_place"):
                values = item.get(place)
                if not isinstance(values, dict):
                    continue
                raw_time = values.get("time", values.get("cpu_time"))
                # nccl-tests writes a time it has not got as the string "nan": no value, unlike a NaN number
                if raw_time is None or isinstance(raw_time, bool) or _written_nan(raw_time):
                    raise ValueError(f"{place} time missing")
                time_us = latency(raw_time)
                wrong = _json_float(values.get("nwrong"))
                entry = {
                    "time_us": time_us,
                    "algbw_gbps": _json_float(values.get("alg_bw")),
                    "busbw_gbps": _json_float(values.get("bus_bw")),
                    "wrong": int(wrong) if wrong is not None else None,
                }
                per_iter = item.get(f"{place}_per_iter")
                if isinstance(per_iter, dict):
                    entry["per_iteration"] = {
                        key: _json_float(per_iter.get(key)) for key in ("min_us", "max_us", "p99_us")
                    }
                    entry["per_iteration"]["cv_pct"] = _json_float(per_iter.get("cv_pct"))
                row.places[place] = entry
            if not row.places:
                raise ValueError("neither out_of_place nor in_place values")
            run.rows.append(row)
        except RefusedRow as exc:  # an edited or corrupt log: none of its numbers can be trusted
            raise UsageError(f"{path}: results[{index}]: {exc}, which no measurement gives") from None
        except (KeyError, TypeError, ValueError) as exc:
            warnings.append(f"{path}: results[{index}] unreadable ({exc})")
    if not run.rows:
        raise UsageError(f"{path}: no readable nccl-tests results in this JSON file")
    if problem := header_problem(run):
        raise UsageError(f"{path}: config: {problem}, which no nccl-tests run has")
    return ParsedLog(path=path, runs=[run], warnings=warnings)


def _json_float(value) -> float | None:
    """nccl-tests writes doubles with %lf, and NaN as the string "nan"."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return optional_float(value)
    value = float(value)
    return value if math.isfinite(value) else None


def _written_nan(value) -> bool:
    """nccl-tests' own spelling of a missing value: the string "nan" (a NaN number is an edited file)."""
    return isinstance(value, str) and value.strip().lower() in ("nan", "-nan")
