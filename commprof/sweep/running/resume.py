"""Resuming a run: which points finished, and repairing what an interrupted writer left."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from commprof.records.files import read_records
from commprof.records.folder import write_nofollow


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
    """Before a resume: drop a torn last line and the records of points that did not finish writing."""
    if not path.exists():
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = read_records(path)
    done = completed_point_ids(records, expected_per_point)
    keep = [r for r in records if r.get("point_id") in done or r.get("kind") != "step"]
    text = path.read_text()
    if len(keep) != len(records) or (text and not text.endswith("\n")):
        tmp = path.with_suffix(".repair")
        write_nofollow(tmp, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in keep).encode())
        os.replace(tmp, path)
    return keep
