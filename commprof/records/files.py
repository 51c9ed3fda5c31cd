"""Where records live: a run folder's results.jsonl (append-only JSON lines, one record per measured (point, T,
mode), fsynced as each point ends), its meta.json (written atomically), what its sweep planned (plan.jsonl,
fsynced as planned) and new run folders.

What a record holds: schema.py (docs/results-schema.md); the report, calibration and import tools read it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from commprof.errors import UsageError
from commprof.records.checks import OP_STATISTICS, PLAN_COLUMNS, UnreadableLine, decode_record
from commprof.records.folder import write_nofollow
from commprof.records.plan_file import PLAN_FILE, Plan, parse_plan
from commprof.terminal import one_line
from commprof.textfiles import CONFIG_BYTES, RESULTS_BYTES, read_blocks, read_bytes, read_text, utf8_text

RESULTS_FILE = "results.jsonl"
# The baseline measured again at intervals and at the end ([run] baseline_every): its drift over the run.
BASELINE_REPEATS_FILE = "baseline-repeats.jsonl"
# The interleaved confirmation a sweep ends with (sweep/planning/interleave.py): the baseline and each point that
# could become the answer, measured again A, A, B, A, ...; made empty with the run folder, so a run that has it
# states whether anything was confirmed, and one without it predates the confirmation.
INTERLEAVED_FILE = "interleaved.jsonl"
META_FILE = "meta.json"
META_BYTES = CONFIG_BYTES  # the most of a meta.json read_meta reads: every writer checks what it writes against it


def new_run_dir(parent: Path, label: str) -> Path:
    """runs/<UTC YYYYmmdd-HHMMSS>-<label>, with a numeric suffix if that second is taken; every character of
    `label` (a sweep's name, from a file) that a run id may not hold (point_ids.RUN_ID) becomes "-"."""
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")[:120] or "run"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(100):
            run_dir = parent / (f"{stamp}-{label}" + (f"-{attempt + 1}" if attempt else ""))
            try:
                run_dir.mkdir()
                return run_dir
            except FileExistsError:
                continue
    except OSError as exc:
        raise UsageError(f"cannot create a run folder under {parent}: {exc.strerror or exc}") from None
    raise UsageError(f"cannot create a run folder under {parent}: too many runs named {stamp}-{label}")


@contextlib.contextmanager
def whole_or_removed(run_dir: Path) -> Iterator[Path]:
    """A run folder this command just made, written in one go inside the block: anything raised there removes
    the folder whole (a full disk would leave a torn results.jsonl or no meta.json), an OSError as one
    UsageError."""
    try:
        yield run_dir
    except BaseException as exc:
        shutil.rmtree(run_dir, ignore_errors=True)  # never follows a link inside it
        if isinstance(exc, OSError):
            raise UsageError(
                f"cannot write {run_dir}: {exc.strerror or exc}; the unfinished folder was removed"
            ) from None
        raise


def ensure_writable_dir(directory: Path, what: str) -> None:
    """Create `directory` and prove a file can be written there, before any long work starts."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise UsageError(f"{what} {directory} is not writable ({exc.strerror or exc})") from None


def finite_json(value: Any) -> Any:
    """`value` with every NaN / Inf float replaced by null: strict JSON that any reader (and jq) accepts.

    A broken implementation producing NaN is a result to record (its check says how many), never a crash.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(item) for item in value]
    return value


def strict_json(value: Any, **options: Any) -> str:
    """json.dumps(finite_json(value), allow_nan=False, **options), walking `value` in Python only when the encoder
    met a NaN / Inf: a record of thousands of numbers is walked once, by the encoder, when all are finite."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:  # "Out of range float values are not JSON compliant"
        return json.dumps(finite_json(value), allow_nan=False, **options)


def append_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append records and fsync, so a controller killed right after loses nothing already written; a link at
    `path` is refused, never followed."""
    lines = "".join(strict_json(record, separators=(",", ":")) + "\n" for record in records)
    write_nofollow(path, lines.encode("utf-8"), append=True, sync=True)


def read_records(path: Path, op_statistics: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """All records of a results.jsonl, each line decoded once and every field of it checked in that decoding; a
    truncated last line (a killed writer) is skipped with a warning.

    Records of an older readable schema version are read as this version (schema.upgraded). A bad line elsewhere,
    a record of an unknown schema version, or one a reader cannot use (a field of the wrong type, an id that is
    no id, a negative or non-finite time: checks.record_problem) is a UsageError naming the file and line.
    `op_statistics`: keep only these of op_us's per-op statistics (checks.OP_STATISTICS), the others dropped once
    checked (a run of 100,000 records holds millions of each).
    """
    unknown = sorted(set(op_statistics or ()) - set(OP_STATISTICS))
    if unknown:
        raise TypeError(f"op_us has no statistic {', '.join(unknown)} (it has {', '.join(OP_STATISTICS)})")
    dropped = tuple(name for name in OP_STATISTICS if name not in op_statistics) if op_statistics else ()
    return list(_iter_records(Path(path), dropped))


def _iter_records(path: Path, dropped: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    with contextlib.closing(read_blocks(path, "results file", RESULTS_BYTES)) as blocks:
        plain = _plain_records(blocks, dropped)
    if plain is not None:
        yield from plain
        return
    kept: dict[tuple, list] = {}
    lines = utf8_text(read_bytes(path, "results file", RESULTS_BYTES), "results file", path).splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = decode_record(line)
        except UnreadableLine:
            if number == len(lines):
                warnings.warn(f"{path}:{number}: truncated last line skipped (the run was interrupted)", stacklevel=3)
                continue
            raise UsageError(f"{path}:{number}: not a JSON record") from None
        except ValueError as refused:
            raise UsageError(f"{path}:{number}: {refused}") from None
        yield _as_kept(record, kept, dropped)


def _plain_records(blocks: Iterable[bytes], dropped: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """Every record of a file as its writer makes it (ASCII, lines ended by "\n" alone, each a usable record),
    read a block at a time (the file is never held whole) without a copy per line; None for any other file, which is
    then read line by line with each line's number (the same lines: in ASCII without "\r", only "\n" ends a line)."""
    records: list[dict[str, Any]] = []
    shared: dict[tuple[str, bytes], Any] = {}  # the shared sections and plan columns, one per distinct text
    points: set[int] = set()  # the shared points already as readers get them (by identity: shared holds each)
    try:
        for line in _lines(blocks):
            records.append(_as_kept(decode_record(line, shared), None, dropped, points))
    except ValueError:  # not such a file, or a blank, bad or truncated line: read as above, which says it
        return None
    return records


class _NotPlain(ValueError):
    """A block holds a byte that is not ASCII, or a carriage return."""


def _lines(blocks: Iterable[bytes]) -> Iterator[bytes | memoryview]:
    """The lines of an ASCII file without "\r" read in blocks, each without its "\n" (a line within one block as a
    view of it; the line across two blocks joined); _NotPlain for any other file."""
    tail: list[bytes] = []  # the line the blocks so far end in
    for block in blocks:
        if not block.isascii() or b"\r" in block:
            raise _NotPlain
        first = block.find(b"\n")
        if first < 0:
            tail.append(block)
            continue
        yield b"".join([*tail, block[:first]])
        view, start = memoryview(block), first + 1
        while (stop := block.find(b"\n", start)) >= 0:
            yield view[start:stop]
            start = stop + 1
        tail = [block[start:]]
    if any(tail):
        yield b"".join(tail)


def _as_kept(
    record: dict[str, Any], kept: dict[tuple, list] | None, dropped: tuple[str, ...], points: set[int] | None = None
) -> dict[str, Any]:
    """The record as readers get it: its label printable, each op_us column of PLAN_COLUMNS the one list `kept`
    holds for those items (read-only, as every record is; None: decode_record shared them already), and op_us's
    statistics `dropped` left out. `points`: the ids of the shared points already made so (each is made so once)."""
    point = record["point"]
    if points is None or id(point) not in points:
        if isinstance(point.get("label"), str):  # printed on pages, plots and terminals: made so once
            point["label"] = one_line(point["label"])
        if points is not None:
            points.add(id(point))
    columns = record.get("op_us")
    if not columns:
        return record
    for name in PLAN_COLUMNS if kept is not None else ():
        if (items := columns.get(name)) is not None:
            columns[name] = kept.setdefault((name, tuple(items)), items)
    for name in dropped:
        columns.pop(name, None)
    return record


def duplicated_measurements(records: Iterable[dict[str, Any]]) -> dict[tuple, int]:
    """(point_id, tokens, mode) keys recorded more than once, with their counts: two writers on one run folder.

    A point has one record per (T, mode); more means its numbers were measured twice, perhaps at once.
    """
    counts: dict[tuple, int] = {}
    for record in records:
        if record.get("kind") == "step":
            key = (record.get("point_id"), record.get("tokens"), record.get("mode"))
            counts[key] = counts.get(key, 0) + 1
    return {key: count for key, count in counts.items() if count > 1}


def write_json(path: Path, data: dict[str, Any], limit: int | None = None) -> None:
    """Write a JSON file atomically (a crash leaves the old file or the new one, never half of one); `limit`: the
    most bytes its reader reads, refused (UsageError naming the largest section) before anything is written."""
    tmp = Path(f"{path}.tmp")
    text = strict_json(data, indent=2, sort_keys=True, default=str)
    if limit is not None and len(text.encode("utf-8")) + 1 > limit:
        largest = max(data, key=lambda key: len(json.dumps(data[key], default=str)))
        raise UsageError(
            f"{path}: {len(text.encode('utf-8')) + 1} bytes, more than the {limit} its readers read (its largest "
            f"section, {largest}, holds {len(json.dumps(data[largest], default=str))}); nothing was written"
        )
    try:
        write_nofollow(tmp, (text + "\n").encode("utf-8"))
        os.replace(tmp, path)  # replaces a link at `path` itself, never what it points to
    except OSError:
        if os.path.lexists(tmp) and not os.path.islink(tmp):  # a full disk leaves no 0-byte .tmp behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def append_plan(run_dir: Path, lines: list[dict[str, Any]]) -> None:
    """Append plan lines (records.plan_file) to the run's plan.jsonl and fsync; a link there is refused."""
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    write_nofollow(Path(run_dir) / PLAN_FILE, text.encode("utf-8"), append=True, sync=True)


def read_plan(run_dir: Path) -> Plan | None:
    """The run's plan (None: its folder was written before sweeps recorded one); UsageError naming a bad line."""
    path = Path(run_dir) / PLAN_FILE
    if not path.is_file():
        return None
    return parse_plan(read_text(path, "plan file", RESULTS_BYTES), path)


def read_run_files(run_dir: Path) -> tuple[list[dict[str, Any]], Plan | None, list[dict[str, Any]] | None]:
    """A run folder's files beside results.jsonl and meta.json, for the report and the answer a sweep prints last:
    the baseline's repeats ([] without), the plan (None: not recorded) and the interleaved confirmation (None: a
    run made before sweeps ended with one)."""
    repeats, interleaved = Path(run_dir) / BASELINE_REPEATS_FILE, Path(run_dir) / INTERLEAVED_FILE
    return (
        read_records(repeats) if repeats.exists() else [],
        read_plan(run_dir),
        read_records(interleaved) if interleaved.exists() else None,
    )
