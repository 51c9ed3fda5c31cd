"""The routing plan on the first screen: per message size, which all-reduce to run, each implementation's curve
against the floor, and the evidence behind every band. Pure: a RunAnalysis in, strings and SVG out."""

from __future__ import annotations

from typing import Any

from commprof.records.schema import FUSED
from commprof.report.analysis.formatting import fmt_pct, fmt_us
from commprof.report.analysis.routing_candidates import NO_FLOOR
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.views.drawing import draw
from commprof.units import format_bytes

TITLES = {
    "all_reduce": "all-reduce",
    FUSED: "all-reduce + residual + RMSNorm (against the unfused reference)",
    "all_gather": "logits all-gather (the baseline's own)",
}


def routing_view(run: RunAnalysis, plan: dict[str, Any]) -> dict[str, Any] | None:
    """The decision's routing plan (`plan`): its bands in the headline mode, one table per collective, the
    all-reduce figure and the floor's source; None when the run has no per-op times to route from."""
    if not plan or not plan.get("bands"):
        return None
    modes = {b["mode"] for b in plan["bands"]}
    mode = run.mode if run.mode in modes else sorted(modes)[0]
    figures = plan.get("floor")
    view: dict[str, Any] = {
        "mode": mode,
        "floor": (
            f"{figures['evidence']} figures ({figures['source']}) on {plan['ranks']} GPUs: one-shot, two-shot or ring, "
            "whichever is cheapest at each size"
            if figures
            else plan.get("missing_floor") or NO_FLOOR
        ),
        "rule": plan["rules"].get(plan["bands"][0]["evidence"]["level"], ""),  # one source per run: one level
        "tables": [],
        "svg": "",
        "below_floor": "; ".join(
            sorted(
                {
                    f"{c['label']} ({TITLES.get(c['collective'], c['collective'])}) at {format_bytes(c['bytes'])}"
                    for c in plan["curves"]
                    if c["below_floor"] and c["mode"] == mode
                }
            )
        ),
        "gaps": "; ".join(
            f"{TITLES.get(g['collective'], g['collective'])} at {format_bytes(g['bytes'])}: {g['why']}"
            for g in plan["gaps"]
            if g["mode"] == mode
        ),
    }
    for collective, title in TITLES.items():
        bands = [b for b in plan["bands"] if (b["collective"], b["mode"]) == (collective, mode)]
        if bands:
            view["tables"].append({"title": title, "rows": [_row(b) for b in bands]})
    view["crossovers"] = [_crossover_row(c) for c in run.crossovers]
    curves = [c for c in plan["curves"] if (c["collective"], c["mode"]) == ("all_reduce", mode)]
    bands = [b for b in plan["bands"] if (b["collective"], b["mode"]) == ("all_reduce", mode)]
    if curves:
        view["svg"] = draw("figures.routing_svg", curves, bands)
    return view


def _row(band: dict) -> dict[str, Any]:
    evidence = band["evidence"]
    return {
        "sizes": f"{format_bytes(band['min_bytes'])} – {format_bytes(band['max_bytes'])}",
        "impl": band["impl"],
        "label": band["label"],
        "routed": not band["baseline"],
        "time": fmt_us(band["time_us"]),
        "baseline": fmt_us(band["baseline_us"]),
        "floor": fmt_us(band["floor_us"]),
        "pct": fmt_pct(band["pct_of_floor"]),
        "at": format_bytes(band["at_bytes"]),
        "evidence": evidence["label"],
        "verdict": evidence["verdict"],
        "boundary": band["boundary"],
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
