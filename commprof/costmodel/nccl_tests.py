"""Parse nccl-tests (*_perf) output as people post it: tables in prose or markdown, several runs per file, -I, -J.

Pure: text in, rows and warnings out. The column layout is read from each table's header line, so the
older 12-column tables, the -I per-iteration columns (i_min i_max i_p99 i_cv%) and the -S timestamp column
all parse with one code path. Format source: NVIDIA/nccl-tests src/util.cu (writeResultHeader,
writeBenchmarkLineBody, writePerIterReport, writeResultFooter, jsonOutputInit), nccl-tests 2.19.6.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from commprof.errors import UsageError
from commprof.records import point_ids
from commprof.records.schema import CollectiveRecord, collective_record

# nccl-tests type names -> commprof dtype names (others kept as nccl-tests spells them).
_DTYPES = {
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "f8e4m3": "float8_e4m3",
    "f8e5m2": "float8_e5m2",
}

_RUN_LINE = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\b(.*)")
_RANK_LINE = re.compile(r"#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+\S+\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)")
_PROGRAM = re.compile(r"\b([a-z_]+)_perf(?:_mpi)?\b")
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z_0-9]+\s+\S+")
_TIMESTAMP = re.compile(r"\s+\d{4}-\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}\s*$")
# Output lines prefixed by `mpirun --tag-output` ("[1,0]<stdout>:") or quoted in markdown ("> ").
_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<stdout>:|>\s?)")
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")


@dataclass
class Row:
    """One size of one run: out-of-place and in-place measurements (either may be absent)."""

    line: int
    bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    places: dict[str, dict] = field(default_factory=dict)  # "out_of_place" / "in_place" -> values


@dataclass
class Run:
    """One invocation of a *_perf binary: its header facts and its table."""

    line: int
    collective: str | None
    ranks: int | None
    nthread: int | None = None
    ngpus: int | None = None
    graph: bool = False
    iterations: int | None = None
    warmup: int | None = None
    devices: list[str] = field(default_factory=list)
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None
    rows: list[Row] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "line": self.line,
            "collective": self.collective,
            "ranks": self.ranks,
            "nthread": self.nthread,
            "ngpus": self.ngpus,
            "graph": self.graph,
            "iterations": self.iterations,
            "warmup": self.warmup,
            "devices": self.devices,
            "avg_busbw_gbps": self.avg_busbw_gbps,
            "out_of_bounds": self.out_of_bounds,
            "rows": len(self.rows),
        }


@dataclass
class ParsedLog:
    path: str
    runs: list[Run]
    warnings: list[str]


def _number(token: str) -> float | None:
    """A float column; "N/A" (and -nan) become None."""
    if token.upper() in ("N/A", "NAN", "-NAN"):
        return None
    return float(token)


def _header_columns(line: str) -> list[str] | None:
    """Column names of a table header ("#  size  count  type  redop  root  time  algbw ..."), else None."""
    tokens = line.lstrip("#").split()
    if len(tokens) < 6 or tokens[:2] != ["size", "count"]:
        return None
    return tokens


def _layout(columns: list[str]) -> tuple[int, list[tuple[str, list[str]]]]:
    """Number of leading fields and the [(place, per-place columns)] that follow them."""
    lead = 0
    while lead < len(columns) and columns[lead] in ("size", "count", "type", "redop", "root"):
        lead += 1
    rest = [c for c in columns[lead:] if c != "timestamp"]
    group = ["time"]
    for name in rest[1:]:
        if name in ("time", "cputime"):
            break
        group.append(name)
    places = ["out_of_place", "in_place"][: max(1, len(rest) // len(group))]
    return lead, [(place, group) for place in places]


def _parse_row(text: str, number: int, columns: list[str]) -> Row:
    """One table row under `columns`; ValueError says what does not fit."""
    text = _TIMESTAMP.sub("", text)
    tokens = text.split()
    lead, places = _layout(columns)
    expected = lead + sum(len(group) for _, group in places)
    if len(tokens) != expected:
        raise ValueError(f"{len(tokens)} fields where the header has {expected}")
    head = dict(zip(columns[:lead], tokens[:lead]))
    row = Row(
        line=number,
        bytes=int(head["size"]),
        count=int(head["count"]),
        dtype=_DTYPES.get(head.get("type", ""), head.get("type", "")),
        redop=head.get("redop", "none"),
        root=int(head.get("root", -1)),
    )
    position = lead
    for place, group in places:
        values = dict(zip(group, tokens[position : position + len(group)]))
        position += len(group)
        time_us = _number(values["time"])
        if time_us is None:
            raise ValueError("time is N/A")
        if "error" in values:
            # Old nccl-tests printed the largest error, not a count: 0 means none wrong, else the count is unknown.
            error = _number(values["error"])
            wrong = 0 if error == 0 else None
        else:
            count = _number(values.get("#wrong", "N/A"))
            wrong = None if count is None else int(count)
        entry = {
            "time_us": time_us,
            "algbw_gbps": _number(values.get("algbw", "N/A")),
            "busbw_gbps": _number(values.get("busbw", "N/A")),
            "wrong": wrong,
        }
        per_iter = {name: _number(values[name]) for name in _PER_ITER if name in values}
        if per_iter:
            entry["per_iteration"] = {
                "min_us": per_iter.get("i_min"),
                "max_us": per_iter.get("i_max"),
                "p99_us": per_iter.get("i_p99"),
                "cv_pct": per_iter.get("i_cv%"),
            }
        row.places[place] = entry
    return row


def impossible_number(row: Row) -> str | None:
    """What in a parsed row no measurement can produce (a negative or non-finite time or bandwidth), or None.

    Such a row is a corrupt or edited log: it is refused, never imported as a number to rank.
    """
    for place, entry in row.places.items():
        values = {name: entry.get(name) for name in ("time_us", "algbw_gbps", "busbw_gbps")}
        values.update({f"per-iteration {k}": v for k, v in (entry.get("per_iteration") or {}).items()})
        for name, value in values.items():
            if value is not None and not (math.isfinite(value) and value >= 0):
                return f"{place} {name} {value:g} is not a measurement (negative or not finite)"
    return None


def parse_text(text: str, path: str = "<text>") -> ParsedLog:
    """All runs of a text log. A file without any nccl-tests table is a UsageError naming it."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"results"' in stripped:
        return parse_json(text, path)
    runs: list[Run] = []
    warnings: list[str] = []
    program: str | None = None  # last *_perf named in the text (command line or "Collective test starting")
    run: Run | None = None
    columns: list[str] | None = None
    in_table = False

    def current_run(number: int) -> Run:
        nonlocal run
        if run is None:
            run = Run(line=number, collective=program, ranks=None)
            runs.append(run)
        return run

    for number, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw).rstrip()
        body = line.strip()
        program_match = _PROGRAM.search(body)
        if program_match and not _ROW_START.match(body):
            program = program_match.group(1)
        if match := _RUN_LINE.match(body):
            run = Run(
                line=number, collective=program, ranks=None, nthread=int(match.group(1)), ngpus=int(match.group(2))
            )
            runs.append(run)
            rest = match.group(3)
            if m := re.search(r"graph:\s*(\d+)", rest):
                run.graph = int(m.group(1)) > 0
            if m := re.search(r"warmup iters:\s*(\d+)", rest):
                run.warmup = int(m.group(1))
            if m := re.search(r"(?<!warmup )iters:\s*(\d+)", rest):
                run.iterations = int(m.group(1))
            columns, in_table = None, False
            continue
        if match := _RANK_LINE.match(body):
            current_run(number).devices.append(match.group(1).strip())
            continue
        if (cols := _header_columns(body)) is not None:
            columns, in_table = cols, True
            current_run(number)
            if run.rows:  # a second table under one run header: a new run of the same binary
                run = Run(
                    line=number,
                    collective=run.collective,
                    ranks=run.ranks,
                    nthread=run.nthread,
                    ngpus=run.ngpus,
                    graph=run.graph,
                    iterations=run.iterations,
                    warmup=run.warmup,
                    devices=list(run.devices),
                )
                runs.append(run)
            continue
        if body.startswith("#"):
            if run is not None and (m := re.match(r"#\s*Avg bus bandwidth\s*:\s*(\S+)", body)):
                value = _number(m.group(1))
                run.avg_busbw_gbps = value
                in_table = False
            elif run is not None and (m := re.match(r"#\s*Out of bounds values\s*:\s*(\d+)", body)):
                run.out_of_bounds = int(m.group(1))
            continue
        if in_table and columns is not None:
            if not body or body.startswith("```"):
                in_table = False
                continue
            try:
                row = _parse_row(body, number, columns)
            except ValueError as exc:
                warnings.append(f"{path}:{number}: unreadable table line ({exc}): {body[:80]}")
                continue
            problem = impossible_number(row)
            if problem:
                raise UsageError(f"{path}:{number}: {problem}")
            run.rows.append(row)
            continue
        if _ROW_START.match(body) and len(body.split()) >= 9:
            warnings.append(f"{path}:{number}: looks like a result row but no table header precedes it: {body[:80]}")

    runs = [r for r in runs if r.rows]
    if not runs:
        raise UsageError(f"{path}: no nccl-tests result table found")
    for r in runs:
        # "Using devices" lists every rank (MPI gathers them to the root); nThread x nGpus is per process.
        if r.devices:
            r.ranks = len(r.devices)
        elif r.ngpus:
            r.ranks = (r.nthread or 1) * r.ngpus
        if r.ranks is None:
            warnings.append(
                f"{path}:{r.line}: GPU count not stated (no '# nThread ... nGpus' or 'Using devices' "
                "lines); ranks left unknown"
            )
        if r.collective is None:
            warnings.append(f"{path}:{r.line}: the *_perf binary is not named in the file; assumed all_reduce")
            r.collective = "all_reduce"
    return ParsedLog(path=path, runs=runs, warnings=warnings)


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
    program = next((m.group(1) for a in args if isinstance(a, str) and (m := _PROGRAM.search(a))), None)
    devices = [d.get("device_info", "") for d in config.get("devices", []) if isinstance(d, dict)]
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
    )
    if program is None:
        warnings.append(f"{path}: the *_perf binary is not in 'args'; assumed all_reduce")
    # "devices" holds one entry per process (util.cu parses only the first rank line of each process's block).
    if devices or ngpus:
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
                bytes=int(item["size"]),
                count=int(item["count"]),
                dtype=_DTYPES.get(item.get("type", ""), item.get("type", "")),
                redop=item.get("redop", "none"),
                root=int(str(item.get("root", -1)).strip()),
            )
            for place in ("out_of_place", "in_place"):
                values = item.get(place)
                if not isinstance(values, dict):
                    continue
                time_us = _json_float(values.get("time", values.get("cpu_time")))
                if time_us is None:
                    raise ValueError(f"{place} time missing")
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
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            warnings.append(f"{path}: results[{index}] unreadable ({exc})")
            continue
        problem = impossible_number(row)
        if problem:
            raise UsageError(f"{path}: results[{index}]: {problem}")
        run.rows.append(row)
    if not run.rows:
        raise UsageError(f"{path}: no readable nccl-tests results in this JSON file")
    return ParsedLog(path=path, runs=[run], warnings=warnings)


def _json_float(value) -> float | None:
    """nccl-tests writes doubles with %lf, and NaN as the string "nan"."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return _number(value)
    return float(value)


def run_records(parsed: ParsedLog, run_id: str, first_point: int, now: str) -> list[CollectiveRecord]:
    """Results-schema records (kind "collective", source "nccl-tests") for every row of every run.

    Each run of the log is one point ("p000", "p001", ... from first_point); one record per row and place.
    """
    records = []
    name = parsed.path.rsplit("/", 1)[-1]
    for offset, run in enumerate(parsed.runs):
        point_id = point_ids.point_id(first_point + offset)
        label = f"{name}:{run.line} {run.collective} x{run.ranks or '?'}" + (" graph" if run.graph else "")
        point = {"label": label, "impl": "nccl", "env": {}, "options": {}}
        for row in run.rows:
            for place, values in row.places.items():
                wrong = values["wrong"]
                extras = {"per_iteration": values["per_iteration"]} if "per_iteration" in values else {}
                records.append(
                    collective_record(
                        source="nccl-tests",
                        run_id=run_id,
                        point_id=point_id,
                        point=point,
                        world_size=run.ranks,
                        status="wrong" if wrong else "ok",
                        message=f"nccl-tests reported {wrong} wrong elements" if wrong else None,
                        time=now,
                        collective=run.collective,
                        bytes=row.bytes,
                        count=row.count,
                        dtype=row.dtype,
                        redop=row.redop,
                        root=row.root,
                        in_place=place == "in_place",
                        graph=run.graph,
                        time_us=values["time_us"],
                        algbw_gbps=values["algbw_gbps"],
                        busbw_gbps=values["busbw_gbps"],
                        wrong=wrong,
                        file=parsed.path,
                        line=row.line,
                        **extras,
                    )
                )
    return records
