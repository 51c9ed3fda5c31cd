"""The interleaved confirmation as the report reads it (interleaved.jsonl, sweep/planning/interleave.py): each
candidate's measurement B against the baseline's measurements on either side of it (A/B/A), and the noise floor
that consecutive measurements of the baseline span (the first pair is the A/A control), which every measured gain
must exceed (evidence.Evidence.noise_floor_pct). A measurement counts only where every T of it is ok; each is its
step median (and p90) summed over T, as the answer sums them. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commprof.evidence import measurement_total, spread_pct
from commprof.report.decision.formatting import fmt_ms


@dataclass(frozen=True)
class Confirmation:
    """One candidate measured between two measurements of the baseline."""

    point_id: str  # the candidate's configuration, as its records in results.jsonl name it
    order: int  # its place in the sequence
    total_us: float  # its step median summed over T
    p90_total_us: float  # its step p90 summed over T
    baseline_us: float | None  # the faster of the baseline's measurements just before and after it; None: one failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "point_id": self.point_id,
            "order": self.order,
            "total_us": self.total_us,
            "p90_total_us": self.p90_total_us,
            "baseline_us": self.baseline_us,
        }


@dataclass(frozen=True)
class Interleaved:
    """A run's interleaved confirmation in the headline mode: the baseline's measurements in order, each
    candidate's, and the noise floor (None: fewer than two baseline measurements, so nothing can be confirmed)."""

    mode: str
    baseline_id: str | None
    baseline_us: tuple[float | None, ...]  # each baseline measurement in sequence order (None: not every T ok)
    confirmations: tuple[Confirmation, ...]
    noise_floor_pct: float | None

    def of(self, point_id: str) -> Confirmation | None:
        """The candidate's confirmation (its latest), or None: it was not a candidate."""
        found = [c for c in self.confirmations if c.point_id == point_id]
        return found[-1] if found else None

    def sentence(self) -> str:
        """What the confirmation measured, in words."""
        if not self.baseline_us:
            return "the sweep's interleaved confirmation measured nothing: no point beat the baseline in its search"
        measured = [fmt_ms(v) for v in self.baseline_us if v is not None]
        floor = f"±{self.noise_floor_pct:.1f} %" if self.noise_floor_pct is not None else "unknown"
        return (
            f"the baseline {self.baseline_id} was measured {len(self.baseline_us)} times beside "
            f"{len(self.confirmations)} candidate(s) (A, A, then B, A each; {self.mode} mode, summed over T: "
            f"{', '.join(measured) or 'none ok'}): noise floor {floor}, the spread of consecutive measurements"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "baseline_point_id": self.baseline_id,
            "baseline_us": list(self.baseline_us),
            "noise_floor_pct": self.noise_floor_pct,
            "confirmations": [c.to_dict() for c in self.confirmations],
            "sentence": self.sentence(),
        }


def interleaved(records: list[dict[str, Any]], mode: str, tokens: set[int]) -> Interleaved:
    """The confirmation of interleaved.jsonl's `records` in `mode` over `tokens` (the run's T). The sequence starts
    with the baseline (A, A, ...): its point id tells each later measurement's role."""
    by_order: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("kind", "step") == "step":
            by_order.setdefault(int((record.get("point") or {}).get("interleaved", 0)), []).append(record)
    orders = sorted(by_order)
    if not orders:
        return Interleaved(mode, None, (), (), None)
    baseline_id = str(by_order[orders[0]][0].get("point_id"))
    measured = {order: measurement_total(by_order[order], mode, tokens) for order in orders}
    base_orders = [o for o in orders if str(by_order[o][0].get("point_id")) == baseline_id]
    base = [measured[o][0] if measured[o] else None for o in base_orders]
    spreads = [spread_pct([a, b]) for a, b in zip(base, base[1:]) if a is not None and b is not None]
    floor = max((s for s in spreads if s is not None), default=None)
    confirmations = []
    for order in orders:
        if order in base_orders or measured[order] is None or measured[order][1] is None:
            continue
        before = [o for o in base_orders if o < order]
        after = [o for o in base_orders if o > order]
        sides = [measured[before[-1]] if before else None, measured[after[0]] if after else None]
        beside = min(s[0] for s in sides) if all(s is not None for s in sides) else None
        total, p90 = measured[order]
        confirmations.append(Confirmation(str(by_order[order][0]["point_id"]), order, total, p90, beside))
    return Interleaved(mode, baseline_id, tuple(base), tuple(confirmations), floor)
