"""The routing plan: per collective and mode, which implementation to run at each message size, as contiguous
bands covering every size of the plan, each with its time, the floor and the evidence behind it. Pure.

Candidates are read per size from the records' per-op times (`op_us`): the baseline point (NCCL, or the
unfused reference for fused kinds) and every other implementation setting. At a size, an implementation is
routed only where it beats the baseline by more than the evidence's uncertainty:
- measured: its p90 is below the baseline's median (nine in ten of its ops were faster than the baseline's
  typical op), the report's noise rule per size;
- simulated: its predicted time raised by its model's expected error is still below the baseline's lowered by
  the baseline model's expected error; an unknown error on either side decides nothing.
Elsewhere the baseline keeps the size, and the band says why. Neighbouring sizes with the same choice form one
band; a band boundary between two measured sizes is a crossover where one was measured, else their geometric
mean, and the band says which.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from commprof.floor.model import FloorFigures, collective_floor, pct_of_floor
from commprof.impls.registry import fuses_rmsnorm, resolve_impl_name, unfused_reference

MEASURED, SIMULATED, IMPORTED = "measured", "simulated", "imported"
LEVEL_OF_SOURCE = {"measured": MEASURED, "simulated": SIMULATED, "nccl-tests": IMPORTED}
FUSED = "all_reduce+rmsnorm"  # the routing's name for all-reduce + residual add + RMSNorm, against the reference

WIN_BEYOND = {MEASURED: "beyond noise", SIMULATED: "beyond model error"}
WITHIN = {MEASURED: "within noise", SIMULATED: "within model error"}
NO_FLOOR = "no floor figures: run `commprof floor --out floor.json` on the box (or simulate on a preset with [floor])"
UNJUDGED = "not judged: the model's expected error is unknown"
RULES = {
    MEASURED: "an implementation takes a size when its p90 per-op time is below the baseline's median there",
    SIMULATED: (
        "an implementation takes a size when its predicted time raised by its model's expected error is still "
        "below the baseline's predicted time lowered by the baseline model's; an unknown error decides nothing"
    ),
}


@dataclass(frozen=True)
class Candidate:
    """One implementation setting at one size and mode, with how far its time can be trusted."""

    collective: str  # "all_reduce", "all_gather", or FUSED
    mode: str
    nbytes: int
    impl: str
    options: dict[str, Any]
    point_id: str
    label: str
    median_us: float
    p90_us: float
    level: str  # MEASURED / SIMULATED / IMPORTED
    error_pct: float | None = None  # simulated: the model's expected error (None: unknown)
    error_basis: str = ""
    baseline: bool = False

    def key(self) -> tuple[str, str]:
        return self.impl, json.dumps(self.options, sort_keys=True)


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


def candidates(records: Iterable[dict], baseline_point: str) -> list[Candidate]:
    """Every (collective, mode, size, implementation setting) with ok per-op times, the latest measurement of each
    setting, the baseline point's and the unfused reference's marked as baselines. A simulated time carries its
    model's expected error: the record's kernel model where it covers the size, else its NCCL model's."""
    reference = unfused_reference()
    latest: dict[tuple, dict] = {}
    baseline_config = None
    for record in records:
        if record.get("kind", "step") != "step" or record.get("status") != "ok" or not record.get("op_us"):
            continue
        point = record.get("point") or {}
        config = (
            point.get("impl"),
            json.dumps(point.get("env") or {}, sort_keys=True),
            json.dumps(point.get("options") or {}, sort_keys=True),
        )
        if record.get("point_id") == baseline_point:
            baseline_config = config
        key = (config, record.get("tokens"), record.get("mode"))
        if key not in latest or _stage(record) >= _stage(latest[key]):
            latest[key] = record
    found: dict[tuple, Candidate] = {}
    for (config, _tokens, mode), record in latest.items():
        point = record.get("point") or {}
        impl, env, options = point.get("impl") or "default", point.get("env") or {}, point.get("options") or {}
        is_baseline = config == baseline_config
        if env and not is_baseline:
            continue  # NCCL under other settings is the NCCL recommendation's business, not a route
        fused = fuses_rmsnorm(impl) or bool(record.get("fused_rmsnorm"))
        level = LEVEL_OF_SOURCE.get(record.get("source"), MEASURED)
        ops = record["op_us"]
        per_size: dict[tuple[str, int], list[tuple[float, float]]] = {}
        sites = ops.get("sites", ())
        # Each op's collective as the record names it (records before that: the logits site is the all-gather).
        kinds = ops.get("collectives") or [
            "all_gather" if str(s).rsplit(".", 1)[-1] == "logits" else "all_reduce" for s in sites
        ]
        for site, collective, nbytes, median, p90 in zip(
            sites, kinds, ops.get("bytes", ()), ops.get("median", ()), ops.get("p90", ops.get("median", ()))
        ):
            if collective != "all_reduce" and not is_baseline:
                continue  # every implementation runs the other collectives with torch.distributed: the baseline's
            if collective == "all_reduce" and fused and str(site) != "embed":  # the embedding has no RMSNorm after
                collective = FUSED
            elif collective == "all_reduce" and impl == reference:
                continue  # the reference's plain all-reduce is the baseline's own

            per_size.setdefault((collective, int(nbytes)), []).append((float(median), float(p90)))
        kernel = record.get("kernel_model") or {}
        nccl_model = record.get("nccl") or {}
        for (collective, nbytes), values in per_size.items():
            medians = sorted(v[0] for v in values)
            p90s = sorted(v[1] for v in values)
            error, basis = None, ""
            if level == SIMULATED:
                covered = (
                    kernel
                    and collective != "all_gather"
                    and (kernel.get("max_bytes") is None or nbytes <= kernel["max_bytes"])
                )
                if covered:
                    error, basis = kernel.get("expected_error_pct"), kernel.get("error_basis", "")
                else:
                    error = nccl_model.get("expected_error_pct")
                    basis = nccl_model.get("error_basis") or "unknown: the record states no NCCL model error"
            marked = is_baseline or (collective == FUSED and impl == reference)
            candidate = Candidate(
                collective=collective,
                mode=str(mode),
                nbytes=nbytes,
                impl=resolve_impl_name(impl, record.get("backend") or "nccl"),
                options=dict(options),
                point_id=str(record.get("point_id")),
                label=str(point.get("label") or record.get("point_id")),
                median_us=medians[len(medians) // 2],
                p90_us=p90s[len(p90s) // 2],
                level=level,
                error_pct=error,
                error_basis=basis,
                baseline=marked,
            )
            found[(collective, str(mode), nbytes, candidate.key(), marked)] = candidate
    return sorted(found.values(), key=lambda c: (c.collective, c.mode, c.nbytes, not c.baseline, c.impl))


def verdict(candidate: Candidate, baseline: Candidate) -> tuple[bool, str]:
    """Whether `candidate` takes the size from `baseline` beyond the evidence's uncertainty, and the words why."""
    if candidate.level == MEASURED:
        wins = candidate.p90_us < baseline.median_us
        return wins, WIN_BEYOND[MEASURED] if wins else WITHIN[MEASURED]
    if candidate.level != SIMULATED:
        return False, f"not judged: {candidate.level} times are not compared per size"
    if candidate.error_pct is None or baseline.error_pct is None:
        faster = candidate.median_us < baseline.median_us
        return False, UNJUDGED + (" (predicted faster)" if faster else "")
    high = candidate.median_us * (1 + candidate.error_pct / 100.0)
    low = baseline.median_us * (1 - baseline.error_pct / 100.0)
    wins = high < low
    return wins, WIN_BEYOND[SIMULATED] if wins else WITHIN[SIMULATED]


def routing_plan(
    found: list[Candidate],
    ranks: int,
    figures: FloorFigures | None,
    crossovers: dict | None = None,
    missing_floor: str = NO_FLOOR,
) -> dict[str, Any]:
    """The plan: contiguous bands per (collective, mode), every candidate's curve with its % of the floor, and
    the sizes where no baseline was measured. `crossovers` maps (collective, mode, impl) to measured crossover
    bytes (the crossover search), used to place band edges; `missing_floor` says why there are no figures."""
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
                edge, how = _edge(previous, nbytes, collective, mode, out[-1].impl, chosen.impl, crossovers)
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
                boundary="the largest size measured",
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


def _edge(below: int, above: int, collective: str, mode: str, low_impl: str, high_impl: str, crossovers: dict):
    for impl in (high_impl, low_impl):
        measured = crossovers.get((collective, mode, impl))
        if measured is not None and below < measured <= above:
            return int(measured), f"crossover measured at {int(measured)} B"
    edge = int(round(math.sqrt(below * above)))
    return max(edge, below + 1), f"geometric mean of {below} and {above} B (no crossover measured between them)"


def _evidence(chosen: Candidate, base: Candidate, sizes: list[dict]) -> dict[str, Any]:
    level = chosen.level
    verdicts = sorted({s["verdict"] for s in sizes})
    evidence = {
        "level": level,
        "label": _label(chosen),
        "rule": RULES.get(level, ""),
        "verdict": "; ".join(verdicts),
        "baseline_label": _label(base),
    }
    if level == SIMULATED:
        evidence["expected_error_pct"] = chosen.error_pct
        evidence["expected_error_basis"] = chosen.error_basis or "unknown"
    return evidence


def _label(c: Candidate) -> str:
    if c.level == SIMULATED:
        error = f"±{c.error_pct:g} %" if c.error_pct is not None else "unknown"
        return f"simulated (expected error {error})"
    return c.level


def _size_entry(nbytes: int, chosen: Candidate, base: Candidate, fl, judged: list) -> dict[str, Any]:
    why = (
        next((words for c, _wins, words in judged if c is chosen), "") if not chosen.baseline else _kept_reason(judged)
    )
    return {
        "bytes": nbytes,
        "impl": chosen.impl,
        "options": chosen.options,
        "time_us": chosen.median_us,
        "baseline_us": base.median_us,
        "floor_us": fl.us if fl else None,
        "floor_algorithm": fl.algorithm if fl else None,
        "pct_of_floor": pct_of_floor(chosen.median_us, fl.us) if fl else None,
        "below_floor": bool(fl and chosen.median_us < fl.us),
        "verdict": why,
    }


def _kept_reason(judged: list) -> str:
    if not judged:
        return "baseline: no other implementation ran at this size"
    reasons = sorted({words for _c, wins, words in judged if not wins})
    return "baseline kept: every other implementation is " + " or ".join(reasons)


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
    }


def _stage(record: dict) -> tuple:
    point = record.get("point") or {}
    stage = point.get("stage")
    return (stage if isinstance(stage, int) else 0, record.get("iterations") or 0)


def missing_floor(meta: dict) -> str:
    """Why a run has no floor and how to get one, as its meta.json says (commprof.floor.record), else in general."""
    entry = meta.get("floor") if isinstance(meta.get("floor"), dict) else {}
    if not entry.get("why"):
        return NO_FLOOR
    return f"floor not measured: {entry['why']}" + (f"; {entry['how']}" if entry.get("how") else "")


def floor_of(meta: dict) -> FloorFigures | None:
    """The floor figures a run carries: measured by `commprof floor` (meta "floor": its floor.json or just the
    figures), else its topology preset's."""
    measured = meta.get("floor") if isinstance(meta.get("floor"), dict) else {}
    for table in (measured.get("figures", measured), (meta.get("topology") or {}).get("floor")):
        if isinstance(table, dict):
            try:
                return FloorFigures(**{k: table[k] for k in FloorFigures.__dataclass_fields__})
            except (KeyError, TypeError, ValueError):
                continue
    return None
