"""Did the engine run what the answer chose? Each op group of a trace (kernel_groups) set against the
implementation a run's answer (its report's summary.json) routes that kind and size to. Pure.

The answer routes by size (summary.json's Decision "routes": one band per collective, mode and size range; graph
mode first, as engines replay graphs) and otherwise by its NCCL point; a kind or size it says nothing about stays the
baseline's. The file is read as data: a trace checks an answer without the report's analysis.
"""

from __future__ import annotations

from typing import Any

from commprof.errors import UsageError
from commprof.records.schema import GRAPH_FIRST
from commprof.trace.kernels import runs_as
from commprof.units import format_bytes


def answer_run(summary: Any, path: str) -> dict[str, Any]:
    """The measured run of a summary.json (the first run when none is measured); UsageError when it is none."""
    runs = summary.get("runs") if isinstance(summary, dict) else None
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        raise UsageError(f"--answer {path}: not a commprof report's summary.json (no runs)")
    if not all(isinstance(r.get("run"), dict) for r in runs):
        raise UsageError(f"--answer {path}: an older summary.json layout (render the report again with this commprof)")
    return next((r for r in runs if r["run"].get("source") == "measured"), runs[0])


def routed_to(run: dict[str, Any], kind: str, nbytes: int | None) -> tuple[str, str]:
    """(implementation, what in the answer says so) for one op of `kind` and `nbytes` bytes."""
    bands = [b for b in run.get("routes") or [] if isinstance(b, dict)]
    if nbytes is not None:
        for mode in GRAPH_FIRST:
            here = [
                b
                for b in bands
                if b.get("mode") == mode
                and str(b.get("collective", "")).split("+")[0] == kind.split("+")[0]
                and int(b.get("min_bytes", 0)) <= nbytes <= int(b.get("max_bytes", -1))
            ]
            chosen = next((b for b in here if not b.get("kept")), here[0] if here else None)
            if chosen is not None:
                span = f"{format_bytes(int(chosen['min_bytes']))}–{format_bytes(int(chosen['max_bytes']))}"
                return str(chosen.get("impl")), f"the answer routes {span} ({mode} mode) to {chosen.get('impl')}"
        own = [b for b in bands if str(b.get("collective", "")).split("+")[0] == kind.split("+")[0]]
        if own:
            low = min(int(b.get("min_bytes", 0)) for b in own)
            high = max(int(b.get("max_bytes", 0)) for b in own)
            return "", f"not covered by the answer: its bands cover {format_bytes(low)}–{format_bytes(high)}"
    point = _point_of(run)
    if point and kind.startswith("all_reduce"):
        return str(point.get("impl")), f"the answer recommends {point.get('label')}"
    return "nccl", "the answer changes nothing here (the baseline, NCCL)"


def _nccl_of(run: dict[str, Any]) -> dict[str, Any]:
    return run["nccl"] if isinstance(run.get("nccl"), dict) else {}


def _point_of(run: dict[str, Any]) -> dict[str, Any] | None:
    """The point the answer's NCCL environment is (None where it keeps the baseline's)."""
    nccl = _nccl_of(run)
    point = nccl.get("point")
    return point if isinstance(point, dict) and not nccl.get("keeps_baseline") else None


def _env_of(run: dict[str, Any]) -> str:
    """The NCCL variables the answer's recommend.env holds, "K=V K=V", or "" when none."""
    env = _nccl_of(run).get("env")
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) if isinstance(env, dict) else ""


def check_answer(
    groups: list[dict[str, Any]], run: dict[str, Any], world_size: int | None = None
) -> list[dict[str, Any]]:
    """Per op group: what ran, what the answer routes there, and whether they agree, with a sentence; `status` is
    "match", "MISMATCH", "not covered" or "not comparable" (the trace's world size is not the answer's TP)."""
    tp = run["run"].get("tp") if isinstance(run.get("run"), dict) else None
    if world_size and isinstance(tp, int) and world_size != tp:
        sentence = f"the trace's world size {world_size} is not the answer's TP {tp}: not compared (another run)"
        return [
            {
                "answer": None,
                "expected": None,
                "ran": None,
                "match": None,
                "status": "not comparable",
                "sentence": sentence,
            }
        ]
    out = []
    env = _env_of(run)
    for group in groups:
        impl, why = routed_to(run, group["kind"], group["bytes"])
        expected = runs_as().get(impl, impl) if impl else None
        ran = max(group["implementations"], key=group["implementations"].get)
        count, total = group["implementations"].get(expected, 0) if expected else 0, group["count"]
        size = format_bytes(group["bytes"]) if group["bytes"] is not None else "unknown size"
        what = f"{group['kind'].replace('_', '-')}s of {size}"
        if expected is None:
            sentence, match, status = f"{total} {what} ran {ran}; {why}", None, "not covered"
        elif count == total:
            sentence, match, status = f"{total} of {total} {what} ran {expected}; {why}", True, "match"
            if expected == "nccl" and env:
                sentence += f"; a trace cannot show whether {env} was set (check the engine's environment)"
        else:
            sentence = (
                f"{group['implementations'][ran]} of {total} {what} ran {ran}; {why}: its switch did not take "
                "effect (check the engine's flag and its log)"
            )
            match, status = False, "MISMATCH"
        out.append(
            {
                **group,
                "answer": impl or None,
                "expected": expected,
                "ran": ran,
                "match": match,
                "status": status,
                "sentence": sentence,
            }
        )
    return out
