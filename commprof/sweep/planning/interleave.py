"""The interleaved confirmation a sweep ends with: every point that could become the answer measured again beside
the baseline, A/B/A, after an A/A control, so a gain is judged against a baseline measured minutes (not an hour)
apart and beyond the noise two measurements of the same baseline show. Not an option: a baseline caught in a load
burst, or a box that drifted since, makes any later point look faster, and only a baseline measured beside it
tells that from a gain. Pure.

The sequence: the baseline twice (the A/A control), then each candidate followed by the baseline again:
A, A, B1, A, B2, A, ...; the report (report/analysis/interleaved.py) reads each B against the baselines on either
side of it and the noise floor the consecutive baselines span.
"""

from __future__ import annotations

from commprof.evidence import MEASURED, Evidence, measurement_total, spread_pct
from commprof.sweep.planning.spec import SweepPoint, SweepSpec
from commprof.sweep.planning.staging import rank_points

# At most this many candidates, the fastest first: each costs two measurements (itself and the baseline after it).
MAX_CANDIDATES = 3
# Measurements of a confirmation with `n` candidates: the A/A control and an A/B pair per candidate.
A_A_CONTROL = 2


def measurements(candidates: int) -> int:
    """Point measurements a confirmation of `candidates` candidates makes."""
    return A_A_CONTROL + 2 * candidates if candidates else 0


def report_baseline(spec: SweepSpec) -> SweepPoint:
    """The point the report judges against: `[report] baseline`, else the sweep's first (the defaults, p000)."""
    wanted = spec.report.get("baseline")
    return next((p for p in spec.points if p.point_id == wanted), spec.points[0])


def baseline_drift_pct(spec: SweepSpec, results: list[dict], repeats: list[dict], mode: str) -> float | None:
    """The baseline's drift band so far (evidence.spread_pct): its first measurement and its repeats
    (baseline-repeats.jsonl), each summed over T; None: measured once."""
    baseline, tokens = report_baseline(spec), set(spec.tokens)
    measurements = [[r for r in results if r.get("point_id") == baseline.point_id]]
    by_repeat: dict[int, list[dict]] = {}
    for record in repeats:
        by_repeat.setdefault(int((record.get("point") or {}).get("repeat", 0)), []).append(record)
    totals = [measurement_total(m, mode, tokens) for m in (*measurements, *by_repeat.values())]
    return spread_pct([t[0] for t in totals if t is not None])


def candidates(
    spec: SweepSpec, results: list[dict], repeats: list[dict] = (), interconnect: str = "pcie"
) -> list[SweepPoint]:
    """The points that could become the answer, fastest first: every ranked point (staging.rank_points, summed over
    T as the report sums them) other than the baseline that is not a fused kind (those are judged against their
    unfused reference) and beats the baseline by the report's measured rule (evidence.Evidence.beats, with the
    baseline's drift band so far from its `repeats`) on the sweep's own numbers; at most MAX_CANDIDATES."""
    baseline = report_baseline(spec)
    ranked = rank_points(results, spec.tokens, "sum", interconnect)
    base = next((r for r in ranked if r.point.key() == baseline.key()), None)
    if base is None:
        return []
    fused = {r.get("point_id") for r in results if r.get("fused_rmsnorm")}
    rule = Evidence(MEASURED, drift_pct=baseline_drift_pct(spec, results, list(repeats), base.mode))
    found = []
    for item in ranked:
        if len(found) >= MAX_CANDIDATES:
            break
        if item.point.key() == baseline.key() or item.point.point_id in fused or item.p90_us is None:
            continue
        if rule.beats(item.score_us, sum(item.p90_us.values()), base.score_us) is True:
            found.append(item.point)
    return found


def sequence(baseline: SweepPoint, found: list[SweepPoint]) -> list[SweepPoint]:
    """What the confirmation measures, in order: A, A, then B, A for each candidate; nothing without one."""
    if not found:
        return []
    order = [baseline] * A_A_CONTROL
    for point in found:
        order += [point, baseline]
    return order
