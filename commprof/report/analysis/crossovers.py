"""Crossover searches read back from their records: per implementation setting, collective and mode, the sizes
timed, where it beats its baseline, the band edges that places, and the evidence. Pure.

Measured: a size is a win when the setting's time (max over ranks of the min over rounds) is below the
baseline's, the search's own rule. Simulated: the search ran on predicted times, and an edge counts only where
the sizes on both sides of it are decided beyond the models' expected errors; otherwise the search is reported
"not resolved" (inside the models' errors) and places no edge. A search on CPU ranks (gloo) is a real measurement of
gloo-backed implementations, labelled so: it is not a GPU answer and never becomes an engine setting.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from commprof.evidence import LEVEL_OF_SOURCE, MEASURED, SIMULATED, error_band, sustained_runs
from commprof.impls.registry import resolve_impl_name
from commprof.units import format_bytes

NOT_RESOLVED = "not resolved: inside the models' errors"
CPU_RANKS = "CPU ranks: a measurement of gloo-backed implementations, not a GPU answer"


def crossovers(records: Iterable[dict]) -> list[dict[str, Any]]:
    """One entry per (source, setting, mode) searched, in point and mode order."""
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        if record.get("kind") == "crossover":
            key = (record.get("source"), record.get("point_id"), record.get("mode"))
            groups.setdefault(key, []).append(record)
    return [_one(rows) for _key, rows in sorted(groups.items(), key=lambda item: tuple(map(str, item[0])))]


def _one(rows: list[dict]) -> dict[str, Any]:
    first = rows[0]
    point, base = first.get("point") or {}, first.get("baseline") or {}
    backend = first.get("backend") or "nccl"
    level = LEVEL_OF_SOURCE.get(str(first.get("source")), MEASURED)
    times: dict[int, tuple[float, float]] = {}
    failed, skipped = [], None
    for record in sorted(rows, key=lambda r: (r.get("bytes") or 0, r.get("search_round") or 0)):
        nbytes = record.get("bytes")
        if nbytes is None:
            skipped = record.get("message") or record.get("status")
        elif record.get("status") == "ok" and record.get("impl_us") is not None:
            times[int(nbytes)] = (float(record["impl_us"]), float(record["baseline_us"]))
            failed = [f for f in failed if f["bytes"] != nbytes]
        else:
            failed.append({"bytes": int(nbytes), "status": record.get("status"), "message": record.get("message")})
    wins = {size: impl < baseline for size, (impl, baseline) in sorted(times.items())}
    runs = sustained_runs(wins)
    error = first.get("model_error") or {}
    edges = _edges(runs, sorted(times))
    resolved, undecided = True, []
    if level == SIMULATED:
        undecided = [size for size in _edge_sizes(runs, sorted(times)) if _decided(times[size], error) is None]
        resolved = not undecided
    step = first.get("step_bytes") or 1
    open_gaps = [
        (low, high)
        for (low, lw), (high, hw) in zip(wins.items(), list(wins.items())[1:])
        if lw != hw and high - low > step
    ]
    entry = {
        "collective": first.get("collective"),
        "mode": first.get("mode"),
        "impl": resolve_impl_name(str(point.get("impl")), backend),
        "options": point.get("options") or {},
        "point_id": first.get("point_id"),
        "label": point.get("label") or first.get("point_id"),
        "baseline": resolve_impl_name(str(base.get("impl") or "default"), backend),
        "baseline_env": {str(k): str(v) for k, v in (base.get("env") or {}).items()},
        "backend": backend,
        "level": level,
        "evidence": _evidence(level, backend, error),
        "sizes": [
            {"bytes": s, "impl_us": a, "baseline_us": b, "wins": a < b, "decided": _decided((a, b), error)}
            for s, (a, b) in sorted(times.items())
        ],
        "sizes_measured": len(times),
        "rounds": max((r.get("search_round") or 0 for r in rows), default=0),
        "step_bytes": step,
        "crossover_bytes": runs[0][0] if runs else None,
        "winning": [list(run) for run in runs],
        "edges": edges if resolved else [],
        "resolved": resolved,
        "converged": not open_gaps,
        "open_gaps": [list(gap) for gap in open_gaps],
        "failed": failed,
        "skipped": skipped,
    }
    entry["verdict"] = verdict(entry, undecided)
    return entry


def _edges(runs: list[tuple[int, int]], sizes: list[int]) -> list[int]:
    """Where the setting takes over (its first winning size, a loss measured below) and hands back (one byte past
    its last winning size, a loss measured above)."""
    edges = []
    for low, high in runs:
        if sizes and sizes[0] < low:
            edges.append(low)
        if sizes and sizes[-1] > high:
            edges.append(high + 1)
    return edges


def _edge_sizes(runs: list[tuple[int, int]], sizes: list[int]) -> list[int]:
    """The sizes each edge rests on: the two winning sizes on its side of the run and the loss beside them."""
    out = set()
    for low, high in runs:
        inside = [s for s in sizes if low <= s <= high]
        below = [s for s in sizes if s < low]
        above = [s for s in sizes if s > high]
        if below:
            out.update(inside[:2] + below[-1:])
        if above:
            out.update(inside[-2:] + above[:1])
    return sorted(out)


def _decided(times: tuple[float, float], error: dict) -> bool | None:
    """Simulated: True / False where the win / loss holds beyond both models' errors, None inside them (or
    unknown). Measured (no model error): the search's own comparison."""
    impl, base = times
    if not error:
        return impl < base
    impl_pct, base_pct = error.get("impl_pct"), error.get("baseline_pct")
    if impl_pct is None or base_pct is None:
        return None
    if impl * (1 + impl_pct / 100) < base * (1 - base_pct / 100):
        return True
    if impl * (1 - impl_pct / 100) > base * (1 + base_pct / 100):
        return False
    return None


def _evidence(level: str, backend: str, error: dict) -> str:
    if level == SIMULATED:
        pcts = [error.get("impl_pct"), error.get("baseline_pct")]
        shown = " / ".join(error_band(p) for p in pcts)
        return f"simulated (expected error {shown}, implementation / baseline)"
    if backend == "gloo":
        return f"measured on gloo ({CPU_RANKS})"
    return f"measured on {backend}"


def verdict(entry: dict[str, Any], undecided: list[int] = ()) -> str:
    """The search in one line: where the setting wins, what is not settled, and why."""
    if not entry["sizes"]:
        if entry["skipped"]:
            return f"not searched: {entry['skipped']}"
        return "no size timed" + (f": {entry['failed'][0]['message']}" if entry["failed"] else "")
    runs = ", ".join(f"{format_bytes(a)}–{format_bytes(b)}" for a, b in entry["winning"])
    text = f"beats {entry['baseline']} at {runs}" if runs else f"never beats {entry['baseline']} for 2 sizes in a row"
    if not entry["resolved"]:
        text += f"; {NOT_RESOLVED} at {', '.join(format_bytes(s) for s in undecided)}: no crossover"
    if not entry["converged"]:
        gaps = ", ".join(f"{format_bytes(a)}–{format_bytes(b)}" for a, b in entry["open_gaps"])
        why = "sizes failed" if entry["failed"] else "the rounds ran out"
        text += f"; boundaries wider than the {format_bytes(entry['step_bytes'])} step left at {gaps} ({why})"
    if entry["failed"]:
        text += f"; {len(entry['failed'])} size(s) failed ({entry['failed'][0]['status']})"
    return text


def routing_edges(found: list[dict[str, Any]], against_env: dict[str, str] | None = None) -> dict[tuple, list[dict]]:
    """The edges the routing plan may place, per (collective, mode, impl) and per (collective, mode, impl,
    options): each {"bytes", "words"}; a search not resolved (inside the models' errors), or one that ran against another
    NCCL environment than `against_env` (the one the answer sets; None: any), places none and leaves
    {"bytes": None, "words": why}."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for entry in found:
        searched_env = entry.get("baseline_env") or {}
        if against_env is not None and searched_env != against_env:
            shown = " ".join(f"{k}={v}" for k, v in sorted(searched_env.items())) or "NCCL's defaults"
            item = {"bytes": None, "words": f"its crossover search ran against {shown}, not the NCCL environment set"}
            for key in _keys(entry):
                out.setdefault(key, []).append(item)
            continue
        if not entry["resolved"]:
            item = {"bytes": None, "words": f"its crossover search is {NOT_RESOLVED}"}
            for key in _keys(entry):
                out.setdefault(key, []).append(item)
            continue
        where = "measured" if entry["level"] == MEASURED else "simulated"
        qualifier = f" ({entry['backend']})" if entry["level"] == MEASURED else f", {entry['evidence']}"
        for edge in entry["edges"]:
            item = {"bytes": edge, "words": f"crossover {where} at {edge} B{qualifier}"}
            for key in _keys(entry):
                out.setdefault(key, []).append(item)
    return out


def _keys(entry: dict[str, Any]) -> tuple[tuple, tuple]:
    options = json.dumps(entry["options"], sort_keys=True)
    return (
        (entry["collective"], entry["mode"], entry["impl"]),
        (entry["collective"], entry["mode"], entry["impl"], options),
    )
