"""The routing plan on the first screen: per message size, which all-reduce runs (the Decision's routes, each with
its claim), each implementation's curve against the floor, and the crossover searches. Pure: a Decision in,
strings and SVG out."""

from __future__ import annotations

from typing import Any

from commprof.records.schema import FUSED
from commprof.report.decision.formatting import claim_words, fmt_pct, fmt_us
from commprof.report.decision.types import Decision, Route
from commprof.report.views.drawing import draw
from commprof.units import format_bytes

TITLES = {
    "all_reduce": "all-reduce",
    FUSED: "all-reduce + residual + RMSNorm (against the unfused reference)",
    "all_gather": "logits all-gather (the baseline's own)",
}


def routing_view(decision: Decision) -> dict[str, Any] | None:
    """The routes in the plan's mode, one table per collective, the all-reduce figure and the floor's source;
    None when the run has no per-op times to route from."""
    plan = decision.routing
    if plan is None:
        return None
    mode = plan.mode
    view: dict[str, Any] = {
        "mode": mode,
        "floor": plan.floor,
        "rule": plan.rule,
        "tables": [],
        "svg": "",
        "below_floor": plan.below_floor,
        "gaps": "; ".join(
            f"{TITLES.get(g['collective'], g['collective'])} at {format_bytes(g['bytes'])}: {g['why']}"
            for g in plan.gaps
            if g["mode"] == mode
        ),
    }
    for collective, title in TITLES.items():
        routes = [r for r in decision.routes if (r.collective, r.mode) == (collective, mode)]
        if routes:
            view["tables"].append({"title": title, "rows": [_row(decision, r) for r in routes]})
    view["crossovers"] = [_crossover_row(c) for c in plan.crossovers]
    curves = [c for c in plan.curves if (c["collective"], c["mode"]) == ("all_reduce", mode)]
    bands = [
        {"min_bytes": r.min_bytes, "max_bytes": r.max_bytes, "label": r.label, "impl": r.impl}
        for r in decision.routes
        if (r.collective, r.mode) == ("all_reduce", mode)
    ]
    if curves:
        view["svg"] = draw("figures.routing_svg", curves, bands)
    return view


def _row(decision: Decision, route: Route) -> dict[str, Any]:
    return {
        "sizes": f"{format_bytes(route.min_bytes)} – {format_bytes(route.max_bytes)}",
        "impl": route.impl,
        "label": route.label + (f"; {route.compared} against it" if route.kept and route.compared else ""),
        "routed": not route.kept,
        "time": fmt_us(route.time_us),
        "baseline": fmt_us(route.baseline_us),
        "floor": fmt_us(route.floor_us),
        "pct": fmt_pct(route.pct_of_floor),
        "at": format_bytes(route.at_bytes),
        "evidence": route.evidence,
        "verdict": claim_words(decision.claim(route.claim), f"no verdict: {route.reason}"),
        "boundary": route.boundary,
    }


def _crossover_row(found: dict) -> dict[str, Any]:
    """One crossover search: what it found, the band edges it placed and the evidence (sizes timed, rounds)."""
    sizes = found["sizes"]
    span = f"{format_bytes(sizes[0]['bytes'])} – {format_bytes(sizes[-1]['bytes'])}" if sizes else "—"
    return {
        "label": found["label"],
        "impl": found["impl"],
        "collective": TITLES.get(found["collective"], found["collective"]).split(" (")[0],
        "mode": found["mode"],
        "baseline": found["baseline"],
        "verdict": found["verdict"],
        "edges": ", ".join(f"{e} B" for e in found["edges"]) or "none",
        "sizes": f"{found['sizes_measured']} in {span}",
        "rounds": found["rounds"],
        "evidence": found["evidence"],
        "placed": bool(found["edges"]),
    }
