"""The routing plan: per collective and mode, which implementation to run at each message size, as contiguous
bands covering every size of the plan, each with its time, the floor and the evidence behind it. Pure.

The candidates and the rule that lets one take a size from the baseline: routing_candidates.py. Elsewhere the
baseline keeps the size, and the band says why. For a graph-mode engine the eager bands route nothing, and a
setting timed only eagerly is listed among the graph-mode plan's gaps, labelled. Neighbouring sizes with the same choice form one band; a band
boundary between two measured sizes is a crossover where a crossover search placed one there
(report/analysis/crossovers.py), else their geometric mean, and the band says which.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from commprof.evidence import MEASURED, error_band
from commprof.floor.model import FloorFigures, collective_floor, pct_of_floor
from commprof.impls.registry import unfused_reference
from commprof.records.schema import FUSED
from commprof.report.analysis.routing_candidates import (
    EAGER_ONLY,
    NO_FLOOR,
    RULES,
    SIMULATED,
    Candidate,
    verdict,
)


@dataclass
class Band:
    collective: str
    mode: str
    min_bytes: int
    max_bytes: int
    impl: str
    options: dict[str, Any]
    point_id: str
    label: str
    at_bytes: int  # the measured size the band's time, floor and % of floor are quoted at (its largest)
    time_us: float
    baseline_us: float | None
    floor_us: float | None
    pct_of_floor: float | None
    evidence: dict[str, Any]
    boundary: str  # how the upper edge was placed
    baseline: bool = False  # the baseline kept these sizes: nothing beat it beyond the evidence's uncertainty
    sizes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "mode": self.mode,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "impl": self.impl,
            "options": self.options,
            "point_id": self.point_id,
            "label": self.label,
            "at_bytes": self.at_bytes,
            "time_us": self.time_us,
            "baseline_us": self.baseline_us,
            "floor_us": self.floor_us,
            "pct_of_floor": self.pct_of_floor,
            "evidence": self.evidence,
            "boundary": self.boundary,
            "baseline": self.baseline,
            "sizes": self.sizes,
        }


def routing_plan(
    found: list[Candidate],
    ranks: int,
    figures: FloorFigures | None,
    crossovers: dict | None = None,
    missing_floor: str = NO_FLOOR,
) -> dict[str, Any]:
    """The plan: contiguous bands per (collective, mode), every candidate's curve with its % of the floor, and
    the sizes where no baseline was measured. `crossovers` maps (collective, mode, impl) and (collective, mode,
    impl, options as JSON) to the edges crossover searches placed, each {"bytes", "words"}
    (crossovers.routing_edges), used to place band edges; `missing_floor` says why there are no figures."""
    crossovers = crossovers or {}
    groups: dict[tuple[str, str], list[Candidate]] = {}
    for candidate in found:
        groups.setdefault((candidate.collective, candidate.mode), []).append(candidate)
    bands, curves, gaps = [], [], []
    for (collective, mode), members in sorted(groups.items()):
        decisions = []
        for nbytes in sorted({c.nbytes for c in members}):
            here = [c for c in members if c.nbytes == nbytes]
            base = next((c for c in here if c.baseline), None)
            fl = collective_floor(collective, nbytes, ranks, figures) if figures is not None else None
            for c in here:
                curves.append(_curve_point(c, fl))
            if base is None:
                gaps.append(
                    {
                        "collective": collective,
                        "mode": mode,
                        "bytes": nbytes,
                        "why": f"no {unfused_reference()} reference ran at this size (add it to the sweep)"
                        if collective == FUSED
                        else "the baseline did not run at this size",
                    }
                )
                continue
            gaps += _eager_only(here, collective)
            judged = []
            for c in here:
                if c.baseline:
                    continue
                wins, words = verdict(c, base)
                judged.append((c, wins, words))
            winners = sorted((c for c, wins, _ in judged if wins), key=lambda c: c.median_us)
            chosen = winners[0] if winners else base
            decisions.append((nbytes, chosen, base, fl, judged))
        bands.extend(_bands(collective, mode, decisions, crossovers))
    floor_words = f"{figures.evidence}: {figures.source}" if figures is not None else missing_floor
    for band in bands:
        band.evidence["floor"] = floor_words
    return {
        "bands": [b.to_dict() for b in bands],
        "curves": curves,
        "gaps": gaps,
        "rules": dict(RULES),
        "ranks": ranks,
        "floor": figures.to_dict() if figures is not None else None,
        "missing_floor": missing_floor if figures is None else None,
    }


def _eager_only(here: list[Candidate], collective: str) -> list[dict[str, Any]]:
    """The settings at one size timed only eagerly, as gaps of the graph-mode plan that the engine runs."""
    return [
        {"collective": collective, "mode": "graph", "bytes": c.nbytes, "why": f"{c.label} ({c.impl}): {EAGER_ONLY}"}
        for c in here
        if c.not_routed == EAGER_ONLY and not c.baseline
    ]


def _bands(collective: str, mode: str, decisions: list, crossovers: dict) -> list[Band]:
    out: list[Band] = []
    for i, (nbytes, chosen, base, fl, judged) in enumerate(decisions):
        size = _size_entry(nbytes, chosen, base, fl, judged)
        same = out and (out[-1].impl, out[-1].options, out[-1].point_id) == (
            chosen.impl,
            chosen.options,
            chosen.point_id,
        )
        if same:
            band = out[-1]
            band.sizes.append(size)
            band.max_bytes = nbytes
        else:
            if out:
                previous = decisions[i - 1][0]
                sides = ((chosen.impl, chosen.options), (out[-1].impl, out[-1].options))
                edge, how = _edge(previous, nbytes, collective, mode, sides, crossovers)
                out[-1].max_bytes = edge - 1
                out[-1].boundary = how
            band = Band(
                collective=collective,
                mode=mode,
                min_bytes=nbytes if not out else out[-1].max_bytes + 1,
                max_bytes=nbytes,
                impl=chosen.impl,
                options=chosen.options,
                point_id=chosen.point_id,
                label=chosen.label,
                at_bytes=nbytes,
                time_us=chosen.median_us,
                baseline_us=base.median_us,
                floor_us=None,
                pct_of_floor=None,
                evidence={},
                boundary=largest_size(chosen),
                baseline=chosen.baseline,
                sizes=[size],
            )
            out.append(band)
        band.at_bytes = nbytes
        band.time_us = chosen.median_us
        band.baseline_us = base.median_us
        band.floor_us = fl.us if fl else None
        band.pct_of_floor = pct_of_floor(chosen.median_us, fl.us) if fl else None
        band.evidence = _evidence(chosen, base, band.sizes)
    return out


def _edge(below: int, above: int, collective: str, mode: str, sides, crossovers: dict) -> tuple[int, str]:
    """The first byte of the upper band: a crossover search's edge between the two sizes, of the setting above or
    below (its own options first), else their geometric mean."""
    why = "no crossover measured between them"
    for impl, options in sides:
        for key in ((collective, mode, impl, json.dumps(options, sort_keys=True)), (collective, mode, impl)):
            for item in crossovers.get(key, ()):
                if item["bytes"] is None:
                    why = f"{impl}: {item['words']}"
                elif below < item["bytes"] <= above:
                    return int(item["bytes"]), item["words"]
    edge = int(round(math.sqrt(below * above)))
    return max(edge, below + 1), f"geometric mean of {below} and {above} B ({why})"


def _evidence(chosen: Candidate, base: Candidate, sizes: list[dict]) -> dict[str, Any]:
    level = chosen.level
    evidence = {
        "level": level,
        "label": _label(chosen),
        "rule": RULES.get(level, ""),
        "verdict": band_verdict(sizes),
        "baseline_label": _label(base),
    }
    if level == SIMULATED:
        evidence["expected_error_pct"] = chosen.error_pct
        evidence["expected_error_basis"] = chosen.error_basis or "unknown"
    return evidence


KEPT = "baseline kept, no other implementation beat it: "
NOT_ROUTED = "baseline kept, this mode routes nothing: "
PREDICTED_FASTER = " (predicted faster)"


def kept_verdict(reasons: set[str]) -> str:
    """The baseline's verdict where nothing beat it: each reason once, the unjudged ones said once (noting when
    some were predicted faster)."""
    unjudged = {r.removesuffix(PREDICTED_FASTER) for r in reasons if r.endswith(PREDICTED_FASTER)}
    named = sorted(unjudged | {r for r in reasons if r not in unjudged and not r.endswith(PREDICTED_FASTER)})
    return KEPT + "; ".join(f"{r}, though predicted faster" if r in unjudged else r for r in named)


def _reasons(kept: str) -> set[str]:
    out = set()
    for r in kept.removeprefix(KEPT).split("; "):
        base = r.removesuffix(", though predicted faster")
        out.add(base + PREDICTED_FASTER if base != r else r)
    return out


def band_verdict(sizes: list[dict]) -> str:
    """A band's verdict said once: its sizes' reasons, each named once."""
    kept = [s["verdict"] for s in sizes if s["verdict"].startswith(KEPT)]
    unrouted = {r for s in sizes if s["verdict"].startswith(NOT_ROUTED) for r in _not_routed(s["verdict"])}
    other = sorted({s["verdict"] for s in sizes if not s["verdict"].startswith((KEPT, NOT_ROUTED))})
    reasons = {reason for words in kept for reason in _reasons(words)}
    said = [NOT_ROUTED + "; ".join(sorted(unrouted))] if unrouted else []
    return "; ".join(said + ([kept_verdict(reasons)] if reasons else []) + other)


def _not_routed(words: str) -> list[str]:
    return words.removeprefix(NOT_ROUTED).split("; ")


def largest_size(c: Candidate) -> str:
    """A band's upper edge at the plan's largest size, named by its evidence: measured, predicted (with its
    model's expected error and where that figure comes from) or imported."""
    if c.level == SIMULATED:
        basis = f": {c.error_basis}" if c.error_basis else ""
        return f"the largest size predicted (simulated, expected error {error_band(c.error_pct)}{basis}; not measured)"
    if c.level == MEASURED:
        return "the largest size measured"
    return f"the largest size in the {c.level} figures"


def _label(c: Candidate) -> str:
    if c.level == SIMULATED:
        return f"simulated (expected error {error_band(c.error_pct)})"
    return c.level


def _size_entry(nbytes: int, chosen: Candidate, base: Candidate, fl, judged: list) -> dict[str, Any]:
    why = (
        next((words for c, _wins, words in judged if c is chosen), "") if not chosen.baseline else _kept_reason(judged)
    )
    rivals = [c for c, _wins, _words in judged if not c.not_routed and c is not chosen]
    rival = min(rivals, key=lambda c: c.median_us) if chosen.baseline and rivals else None
    return {
        "bytes": nbytes,
        "impl": chosen.impl,
        "options": chosen.options,
        "time_us": chosen.median_us,
        "p90_us": chosen.p90_us,
        "error_pct": chosen.error_pct,
        "baseline_us": base.median_us,
        "baseline_p90_us": base.p90_us,
        "baseline_error_pct": base.error_pct,
        # kept: the fastest other setting judged here (what the baseline was compared with)
        "rival": _rival(rival) if rival is not None else None,
        "floor_us": fl.us if fl else None,
        "floor_algorithm": fl.algorithm if fl else None,
        "pct_of_floor": pct_of_floor(chosen.median_us, fl.us) if fl else None,
        "below_floor": bool(fl and chosen.median_us < fl.us),
        "verdict": why,
    }


def _rival(c: Candidate) -> dict[str, Any]:
    return {
        "impl": c.impl,
        "label": c.label,
        "point_id": c.point_id,
        "options": c.options,
        "time_us": c.median_us,
        "p90_us": c.p90_us,
        "error_pct": c.error_pct,
    }


def _kept_reason(judged: list) -> str:
    if not judged:
        return "baseline: no other implementation ran at this size"
    unrouted = sorted({c.not_routed for c, _wins, _words in judged if c.not_routed})
    if unrouted:
        return NOT_ROUTED + "; ".join(unrouted)
    return kept_verdict({words for _c, wins, words in judged if not wins})


def _curve_point(c: Candidate, fl) -> dict[str, Any]:
    return {
        "collective": c.collective,
        "mode": c.mode,
        "bytes": c.nbytes,
        "impl": c.impl,
        "options": c.options,
        "point_id": c.point_id,
        "label": c.label,
        "baseline": c.baseline,
        "time_us": c.median_us,
        "p90_us": c.p90_us,
        "floor_us": fl.us if fl else None,
        "pct_of_floor": pct_of_floor(c.median_us, fl.us) if fl else None,
        "below_floor": bool(fl and c.median_us < fl.us),  # faster than physics allows: the time or the floor is wrong
        "evidence": _label(c),
        "not_routed": c.not_routed,
    }
