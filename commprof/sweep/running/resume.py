"""Resuming a run: which points finished, and repairing what an interrupted writer left."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from commprof.records.files import read_records
from commprof.records.folder import write_nofollow
from commprof.textfiles import RESULTS_BYTES, read_bytes


def completed_point_ids(records: list[dict[str, Any]], expected_per_point: int) -> set[str]:
    """Points whose every (T, mode) record is on disk and none timed out: a resumed run skips them. A timeout is
    measured again: a stopped torchrun agent or a suspended box times out a point that says nothing of its setting."""
    counts: dict[str, set] = {}
    timed_out = set()
    for record in records:
        if record.get("kind") == "step":
            counts.setdefault(record["point_id"], set()).add((record["tokens"], record["mode"]))
            if record.get("status") == "timeout":
                timed_out.add(record["point_id"])
    return {pid for pid, keys in counts.items() if len(keys) >= expected_per_point and pid not in timed_out}


def repair_results(path: Path, expected_per_point: int) -> list[dict[str, Any]]:
    """Before a resume: drop a torn last line and the records of points that did not finish writing. The lines
    kept are kept byte for byte (a field this version does not declare stays for the version that wrote it)."""
    if not path.exists():
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = read_records(path)
    done = completed_point_ids(records, expected_per_point)
    keep = [r for r in records if r.get("point_id") in done or r.get("kind") != "step"]
    data = read_bytes(path, "results file", RESULTS_BYTES)
    if len(keep) != len(records) or (data and not data.endswith(b"\n")):
        *lines, last = data.split(b"\n")
        kept = b"".join(line + b"\n" for line in [*lines, *_whole(last)] if line.strip() and _kept(line, done))
        tmp = path.with_suffix(".repair")
        write_nofollow(tmp, kept, sync=True)
        os.replace(tmp, path)
    return keep


def _whole(last: bytes) -> list[bytes]:
    """The last line when read_records read it as a record (whole, only its newline missing); else none."""
    try:
        return [last] if isinstance(json.loads(last), dict) else []
    except (ValueError, RecursionError):
        return []


def _kept(line: bytes, done: set[str]) -> bool:
    record = json.loads(line)  # read_records has read every line but a torn last one
    return record.get("point_id") in done or record.get("kind") != "step"
