"""Kineto trace files (.json / .json.gz, one per rank) -> one DataFrame of complete events per trace.

The only module here that touches files. A trace's rank, backend and world size come from its
"distributedInfo" (torch >= 1.13 writes it); traces without it are numbered in the order given.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from commprof.errors import UsageError
from commprof.terminal import one_line
from commprof.textfiles import LOG_BYTES, parse_json, read_bounded, read_bytes
from commprof.units import MAX_TIME_US

COLUMNS = ["name", "cat", "pid", "tid", "ts", "dur", "args"]
MAX_TS_US = 1e18  # Kineto's ts: µs since the epoch (about 1.8e15 today) or since the profiler started
# What the analyses read: GPU kernels, their launches, annotations (steps, nccl:*, gloo:*) and c10d CPU ops.
CATEGORIES = ("kernel", "cuda_runtime", "user_annotation")


# CPU ops kept besides c10d's: an engine's own collective ops ("vllm::all_reduce", "sglang::..."), whose recorded
# shapes size the kernels they launch.
_COLLECTIVE_OPS = re.compile(r"reduce|gather|scatter|all_?to_?all", re.IGNORECASE)


def _wanted(event: Any) -> bool:
    if not isinstance(event, dict) or event.get("ph") != "X" or "ts" not in event or "dur" not in event:
        return False
    category = event.get("cat")
    if category in CATEGORIES:
        return True
    name = str(event.get("name", ""))
    return category == "cpu_op" and (name.startswith("c10d::") or bool(_COLLECTIVE_OPS.search(name)))


@dataclass
class Trace:
    """One rank's trace: the complete ("X") events the analyses read, times in µs, and what the trace says of its run."""

    path: str
    rank: int
    events: pd.DataFrame = field(repr=False)
    backend: str | None = None
    world_size: int | None = None
    nccl_version: str | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "rank": self.rank,
            "backend": self.backend,
            "world_size": self.world_size,
            "nccl_version": self.nccl_version,
            "events": len(self.events),
        }


def trace_from_dict(data: dict[str, Any], path: str, default_rank: int) -> Trace:
    """A parsed trace document as a Trace (pure)."""
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise UsageError(f"{path}: not a Kineto trace (no traceEvents list)")
    frame = pd.DataFrame([e for e in events if _wanted(e)], columns=COLUMNS)
    frame["ts"] = pd.to_numeric(frame["ts"], errors="coerce")
    frame["dur"] = pd.to_numeric(frame["dur"], errors="coerce")
    frame["args"] = frame["args"].map(_plain_args)
    frame = frame[frame["name"].map(lambda n: isinstance(n, str)) & frame["tid"].map(_plain) & frame["pid"].map(_plain)]
    frame = frame.dropna(subset=["ts", "dur"]).sort_values("ts", kind="stable", ignore_index=True)
    sane = (frame["ts"].abs() <= MAX_TS_US) & (frame["dur"] >= 0) & (frame["dur"] <= MAX_TIME_US)
    bad = frame[~(np.isfinite(frame["ts"]) & np.isfinite(frame["dur"]) & sane)]
    if not bad.empty:
        event = bad.iloc[0]
        raise UsageError(
            f"{path}: event {one_line(event['name'])!r} at ts {event['ts']} has a duration of {event['dur']} µs "
            f"({len(bad)} such events): not a time a trace can hold"
        )
    info = data.get("distributedInfo")
    if not isinstance(info, dict):
        info = {}
    rank, world_size = info.get("rank"), info.get("world_size")
    return Trace(
        path=path,
        rank=rank if _count(rank) else default_rank,
        events=frame,
        backend=_text(info.get("backend")),
        world_size=world_size if _count(world_size) and world_size >= 1 else None,
        nccl_version=_text(info.get("nccl_version")),
    )


def _plain(value: Any, depth: int = 0) -> bool:
    """A value as Kineto writes one in an event's args or ids: a string, a number, or a list of them (shapes)."""
    if isinstance(value, (str, int, float)) or value is None:
        return True
    return isinstance(value, list) and depth < 3 and all(_plain(v, depth + 1) for v in value)


def _plain_args(args: Any) -> dict[str, Any]:
    """An event's args, keeping only plain values: an object where a number or a name belongs is left out."""
    if not isinstance(args, dict):
        return {}
    return {k: v for k, v in args.items() if isinstance(k, str) and _plain(v)}


def _count(value: Any) -> bool:
    """A rank or a world size as a trace may hold one: an integer in 0..2^20."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1 << 20


def _text(value: Any) -> str | None:
    return one_line(value)[:200] if isinstance(value, str) else None


def load_trace(path: str | Path, default_rank: int = 0) -> Trace:
    """Read one trace file; UsageError (one line) when it is missing or not a Kineto trace."""
    path = Path(path)
    raw = read_bytes(path, "trace", LOG_BYTES)
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unzipped:
                raw = read_bounded(unzipped, LOG_BYTES)  # a small file may unzip to gigabytes
        except (OSError, EOFError, zlib.error) as exc:
            raise UsageError(f"trace {path}: not gzipped JSON ({exc})") from None
        if len(raw) > LOG_BYTES:
            raise UsageError(f"trace {path}: unzips to more than the {LOG_BYTES} bytes a trace may have")
    data = parse_json(raw.decode("utf-8", errors="replace"), f"trace {path}")
    return trace_from_dict(data, str(path), default_rank)


def load_traces(paths: list[str | Path]) -> list[Trace]:
    """Every trace, ordered by rank; two traces of one rank are refused (they would be compared as peers)."""
    traces = sorted((load_trace(p, i) for i, p in enumerate(paths)), key=lambda t: t.rank)
    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):
        duplicated = sorted({r for r in ranks if ranks.count(r) > 1})
        raise UsageError(f"several traces of rank {duplicated[0]}: give one trace per rank of one run")
    sizes = sorted({t.world_size for t in traces if t.world_size})
    if len(sizes) > 1:
        by_size = "; ".join(
            f"world size {n}: rank(s) {', '.join(str(t.rank) for t in traces if t.world_size == n)}" for n in sizes
        )
        raise UsageError(f"traces of different runs ({by_size}): give one trace per rank of one run")
    return traces
