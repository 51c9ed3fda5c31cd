"""The interleaved confirmation as the report reads it (interleaved.jsonl, sweep/planning/interleave.py): each
candidate's measurement B against its reference's measurements on either side of it (A/B/A: the baseline, or a
fused kind's unfused reference, as its records' `point.against` names it), and the noise floor that consecutive
measurements of a reference span (the first pair of each is its A/A control), which every measured gain must
exceed (evidence.Evidence.noise_floor_pct: the largest over the references). A measurement counts only where every
T of it is ok; each is its step median (and p90) summed over its T, as the answer sums them, and per T and per
op size for the answers judged there (a fused kind per T, a route per size). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from commprof.evidence import measurement_total, spread_pct
from commprof.impls.registry import fuses_rmsnorm, unfused_reference
from commprof.records.op_sizes import op_times_per_size
from commprof.report.decision.formatting import fmt_ms
from commprof.stats import median

Figures = tuple[float, float | None]  # (median, p90), µs
# A claim's subject where its figures are the confirmation's (the point measured beside its reference).
MEASURED_AGAIN = " (measured again beside it: the interleaved confirmation)"


@dataclass(frozen=True)
class Confirmation:
    """One candidate measured between two measurements of its reference."""

    point_id: str  # the candidate's configuration, as its records in results.jsonl name it
    order: int  # its place in the sequence
    total_us: float  # its step median summed over its T
    p90_total_us: float  # its step p90 summed over its T
    baseline_us: float | None  # the faster of the reference's measurements just before and after it, summed over
    # the same T; None: one failed
    against: str = ""  # the reference it was measured beside
    tokens: tuple[int, ...] = ()  # the T it was measured at
    steps: dict[int, Figures] = field(default_factory=dict, repr=False)  # T -> its step (median, p90)
    beside_steps: dict[int, Figures] = field(default_factory=dict, repr=False)  # T -> the faster neighbour's
    ops: dict[tuple[str, int], Figures] = field(default_factory=dict, repr=False)  # (collective, bytes) -> per op
    beside_ops: dict[tuple[str, int], Figures] = field(default_factory=dict, repr=False)

    def at_tokens(self, tokens: int) -> tuple[Figures, Figures] | None:
        """(its step, the faster neighbouring reference's) at T; None: not measured there, or a side failed."""
        if tokens in self.steps and tokens in self.beside_steps:
            return self.steps[tokens], self.beside_steps[tokens]
        return None

    def at_size(self, collective: str, nbytes: int) -> tuple[Figures, Figures] | None:
        """(its per-op time, the faster neighbouring reference's) at one size of `collective`; None: not there."""
        key = (collective, int(nbytes))
        if key in self.ops and key in self.beside_ops:
            return self.ops[key], self.beside_ops[key]
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "point_id": self.point_id,
            "order": self.order,
            "against": self.against,
            "tokens": list(self.tokens),
            "total_us": self.total_us,
            "p90_total_us": self.p90_total_us,
            "baseline_us": self.baseline_us,
        }


@dataclass(frozen=True)
class Reference:
    """One reference's measurements in sequence order (None: not every T ok) and the noise floor they span."""

    point_id: str
    measured_us: tuple[float | None, ...]
    noise_floor_pct: float | None  # None: fewer than two consecutive ok measurements
    candidates: int


@dataclass(frozen=True)
class Interleaved:
    """A run's interleaved confirmation in the headline mode: the baseline's measurements in order, each
    candidate's, every unfused reference's, and the noise floor (the largest of the references'; None: no reference
    was measured twice in a row, so nothing can be confirmed)."""

    mode: str
    baseline_id: str | None
    baseline_us: tuple[float | None, ...]  # each baseline measurement in sequence order (None: not every T ok)
    confirmations: tuple[Confirmation, ...]
    noise_floor_pct: float | None
    references: tuple[Reference, ...] = ()  # the fused kinds' unfused references measured beside them
    baseline_floor_pct: float | None = None  # the spread of the baseline's own consecutive measurements

    def of(self, point_id: str) -> Confirmation | None:
        """The candidate's confirmation (its latest), or None: it was not a candidate."""
        found = [c for c in self.confirmations if c.point_id == point_id]
        return found[-1] if found else None

    def floor_of(self, confirmation: Confirmation) -> float | None:
        """The noise floor of the reference `confirmation` was measured beside (None: it has none)."""
        if confirmation.against in ("", self.baseline_id):
            return self.baseline_floor_pct
        return next((r.noise_floor_pct for r in self.references if r.point_id == confirmation.against), None)

    def beside(
        self,
        point_id: str,
        mode: str,
        tokens: int | None = None,
        size: tuple[str, int] | None = None,
        against: str | None = None,
    ) -> tuple[tuple[Figures, Figures] | None, str]:
        """A candidate's figures and its reference's beside it (the faster neighbour) at one T or one op size, where
        the confirmation can judge them (it measured both there, and its reference has a noise floor); else None and
        why not, in words. `against`: judged against another candidate's own measurement there instead (the NCCL
        environment the answer sets, measured beside the same reference)."""
        found = self.of(point_id)
        where = f"at T = {tokens}" if tokens is not None else f"at {size[1]} B" if size is not None else ""
        if found is None:
            return None, f"{point_id} was not measured again beside its reference"
        if mode != self.mode:
            return None, f"{point_id} was not measured again beside its reference in {mode} mode"
        figures = found.at_tokens(tokens) if tokens is not None else found.at_size(*size) if size else None
        if figures is None:
            return None, f"{point_id} was not measured again beside its reference {where} (or a side failed there)"
        if self.floor_of(found) is None:
            return None, f"the interleaved confirmation has no noise floor for {found.against}"
        if against is not None:
            other = self.of(against)
            theirs = (other.steps.get(tokens) if tokens is not None else other.ops.get(size)) if other else None
            if theirs is None:
                return None, f"{against}, what it is judged against, was not measured again {where}"
            figures = (figures[0], theirs)
        return figures, ""

    def sentence(self) -> str:
        """What the confirmation measured, in words."""
        if not self.baseline_us and not self.references:
            return "the sweep's interleaved confirmation measured nothing: no point beat the baseline in its search"
        said = []
        if self.baseline_us:
            measured = [fmt_ms(v) for v in self.baseline_us if v is not None]
            beside = sum(1 for c in self.confirmations if c.against in ("", self.baseline_id))
            said.append(
                f"the baseline {self.baseline_id} was measured {len(self.baseline_us)} times beside {beside} "
                f"candidate(s) (A, A, then B, A each; {self.mode} mode, summed over T: "
                f"{', '.join(measured) or 'none ok'})"
            )
        for ref in self.references:
            measured = [fmt_ms(v) for v in ref.measured_us if v is not None]
            said.append(
                f"the unfused reference {ref.point_id} was measured {len(ref.measured_us)} times beside "
                f"{ref.candidates} fused kind(s) (summed over their T: {', '.join(measured) or 'none ok'})"
            )
        floor = f"±{self.noise_floor_pct:.1f} %" if self.noise_floor_pct is not None else "unknown"
        return (
            "; ".join(said)
            + f": noise floor {floor}, the "
            + ("largest " if self.references else "")
            + "spread of consecutive measurements"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "baseline_point_id": self.baseline_id,
            "baseline_us": list(self.baseline_us),
            "noise_floor_pct": self.noise_floor_pct,
            "confirmations": [c.to_dict() for c in self.confirmations],
            "references": [
                {"point_id": r.point_id, "measured_us": list(r.measured_us), "noise_floor_pct": r.noise_floor_pct}
                for r in self.references
            ],
            "sentence": self.sentence(),
        }


def interleaved(
    records: list[dict[str, Any]], mode: str, tokens: set[int], baseline_ids: set[str] | None = None
) -> Interleaved:
    """The confirmation of interleaved.jsonl's `records` in `mode` over `tokens` (the run's T); `baseline_ids`: the
    ids of the run's baseline configuration (None: the reference measured first is the baseline). Each measurement's
    reference is its records' `point.against`; records without one (a sweep before routes and fused kinds were
    confirmed) all stand beside the first measurement's point, the baseline."""
    by_order: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("kind", "step") == "step":
            by_order.setdefault(int((record.get("point") or {}).get("interleaved", 0)), []).append(record)
    orders = sorted(by_order)
    if not orders:
        return Interleaved(mode, None, (), (), None)
    first = str(by_order[orders[0]][0].get("point_id"))
    against = {o: str((by_order[o][0].get("point") or {}).get("against") or first) for o in orders}
    groups = list(dict.fromkeys(against.values()))
    if baseline_ids is None:
        baseline_id = groups[0]
    else:
        baseline_id = next((g for g in groups if g in baseline_ids), None)
    confirmations, references, floors = [], [], []
    base, base_floor = (), None
    for group in groups:
        members = [o for o in orders if against[o] == group]
        found, measured, floor = _group(by_order, members, group, mode, tokens)
        confirmations += found
        floors.append(floor)
        if group == baseline_id:
            base, base_floor = measured, floor
        else:
            references.append(Reference(group, measured, floor, len(found)))
    floor = max((f for f in floors if f is not None), default=None)
    confirmations.sort(key=lambda c: c.order)
    return Interleaved(mode, baseline_id, base, tuple(confirmations), floor, tuple(references), base_floor)


def _group(
    by_order: dict[int, list[dict]], orders: list[int], reference: str, mode: str, run_tokens: set[int]
) -> tuple[list[Confirmation], tuple[float | None, ...], float | None]:
    """One reference's candidates, its measurements summed over T and its noise floor."""
    ids = {o: str(by_order[o][0].get("point_id")) for o in orders}
    tokens = {o: _tokens(by_order[o], mode) or set(run_tokens) for o in orders}
    base_orders = [o for o in orders if ids[o] == reference]
    totals = {o: measurement_total(by_order[o], mode, tokens[o]) for o in orders}
    base = tuple(totals[o][0] if totals[o] else None for o in base_orders)
    spreads = [spread_pct([a, b]) for a, b in zip(base, base[1:]) if a is not None and b is not None]
    floor = max((s for s in spreads if s is not None), default=None)
    found = []
    for order in orders:
        if order in base_orders or totals[order] is None or totals[order][1] is None:
            continue
        before = [o for o in base_orders if o < order]
        after = [o for o in base_orders if o > order]
        sides = [by_order[before[-1]] if before else None, by_order[after[0]] if after else None]
        mine = tokens[order]
        sums = [measurement_total(_at(s, mine), mode, mine) if s is not None else None for s in sides]
        beside = min(s[0] for s in sums) if all(s is not None for s in sums) else None
        steps = _steps(by_order[order], mode)
        ops = _ops(by_order[order], mode, reference=False)
        side_steps = [_steps(s, mode) for s in sides if s is not None]
        side_ops = [_ops(s, mode, reference=True) for s in sides if s is not None]
        total, p90 = totals[order]
        found.append(
            Confirmation(
                ids[order],
                order,
                total,
                p90,
                beside,
                against=reference,
                tokens=tuple(sorted(mine)),
                steps=steps,
                beside_steps=_faster(side_steps) if len(side_steps) == 2 else {},
                ops=ops,
                beside_ops=_faster(side_ops) if len(side_ops) == 2 else {},
            )
        )
    return found, base, floor


def _tokens(records: list[dict], mode: str) -> set[int]:
    return {int(r["tokens"]) for r in records if r.get("mode") == mode and r.get("tokens") is not None}


def _at(records: list[dict], tokens: set[int]) -> list[dict]:
    return [r for r in records if r.get("tokens") in tokens]


def _steps(records: list[dict], mode: str) -> dict[int, Figures]:
    """T -> (step median, p90) of a measurement's ok records in `mode`."""
    out = {}
    for r in records:
        stats = r.get("step_us") or {}
        if r.get("mode") == mode and r.get("status") == "ok" and stats.get("median") is not None:
            out[int(r["tokens"])] = (float(stats["median"]), stats.get("p90"))
    return out


def _ops(records: list[dict], mode: str, reference: bool) -> dict[tuple[str, int], Figures]:
    """(collective as routed, bytes) -> (per-op median, p90) of a measurement's ok records in `mode`, as the routing
    plan reads them (records.op_sizes): a reference keeps every collective, a fused one's all-reduces are fused."""
    per_size: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in records:
        if r.get("mode") != mode or r.get("status") != "ok" or not r.get("op_us"):
            continue
        impl = str((r.get("point") or {}).get("impl") or "default")
        fused = fuses_rmsnorm(impl) or bool(r.get("fused_rmsnorm"))
        sizes = op_times_per_size(r, fused, baseline=reference, reference=impl == unfused_reference())
        for key, values in sizes.items():
            per_size.setdefault(key, []).extend(values)
    return {key: (median([v[0] for v in values]), median([v[1] for v in values])) for key, values in per_size.items()}


def _faster(sides: list[dict]) -> dict:
    """Per key both sides have, the side with the lower median."""
    first, second = sides
    return {k: min(first[k], second[k], key=lambda v: v[0]) for k in first if k in second}
