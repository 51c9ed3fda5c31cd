"""The interleaved confirmation a sweep ends with: every point that could become an answer measured again beside
what it is judged against, A/B/A, after an A/A control, so a gain is judged against a reference measured minutes
(not an hour) apart and beyond the noise two measurements of the same reference show. Not an option: a baseline
caught in a load burst, or a box that drifted since, makes any later point look faster, and only a reference
measured beside it tells that from a gain. Pure.

What could become an answer, each judged as the report judges it on the sweep's own numbers (its first pass):
- (a) the NCCL environment: a point of the baseline's implementation that beats the baseline summed over T, at
  most MAX_CANDIDATES, measured at every T;
- (b) a route: per all-reduce size, the fastest other implementation whose per-op p90 is below the baseline's
  median there (the routing plan's rule) and which beats it by the measured rule, at most MAX_ROUTES, measured
  at the T whose step sends the sizes it wins;
- (c) a fused kind: per T, the fastest fused all-reduce + RMSNorm that beats its unfused reference (the one with
  the same settings, else the one that sets nothing), at most MAX_FUSED, measured at the T where it wins, beside
  that reference.
The sequence: per reference (the baseline first, then each unfused reference), that reference twice (the A/A
control), then each candidate followed by the reference again: A, A, B1, A, B2, A, ...; every measurement's
records name their reference (`point.against`), and the report (report/analysis/interleaved.py) reads each B
against the references on either side of it and the noise floor the consecutive references span.
"""

from __future__ import annotations

from dataclasses import dataclass

from commprof.evidence import MEASURED, Evidence, measurement_total, not_proposable, spread_pct
from commprof.impls.registry import BACKEND_IMPLS, builtin, unfused_reference
from commprof.records.op_sizes import per_size_medians
from commprof.sweep.planning.spec import SweepPoint, SweepSpec
from commprof.sweep.planning.staging import latest_measurements, point_from_record, rank_points, ranking_mode

# The answers a candidate could become.
ENVIRONMENT, ROUTE, FUSED_KIND = "environment", "route", "fused"
# At most this many candidates of each answer, the largest gain first: each costs two measurements (itself and its
# reference after it), and each unfused reference two more (its A/A control).
MAX_CANDIDATES = 3  # (a) NCCL environments
MAX_ROUTES = 2  # (b) route winners
MAX_FUSED = 2  # (c) fused kinds
A_A_CONTROL = 2


@dataclass(frozen=True)
class Candidate:
    """A point that could become an answer, what it is measured beside, and at which T."""

    point: SweepPoint
    answer: str  # ENVIRONMENT, ROUTE or FUSED_KIND
    against: SweepPoint  # A: the baseline, or a fused kind's unfused reference
    tokens: tuple[int, ...]  # where it is measured: every T for (a); where it wins for a route or fused kind


@dataclass(frozen=True)
class Measurement:
    """One entry of the confirmation's sequence: a point, the reference it is judged against, its T."""

    point: SweepPoint
    against: str  # the reference's point id (the reference's own measurements: its own)
    tokens: tuple[int, ...]

    def tag(self, number: int) -> dict[str, int | str]:
        """What its records' point says of it: its place in the sequence and its reference."""
        return {"interleaved": number, "against": self.against}


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
) -> list[Candidate]:
    """Every point that could become an answer, (a), then (b), then (c), each at most its MAX_*."""
    baseline = report_baseline(spec)
    environments = environment_candidates(spec, results, repeats, interconnect)
    routes = route_candidates(spec, results, repeats, interconnect)
    fused = fused_candidates(spec, results, repeats, interconnect)
    return [Candidate(p, ENVIRONMENT, baseline, tuple(spec.tokens)) for p in environments] + routes + fused


def environment_candidates(
    spec: SweepSpec, results: list[dict], repeats: list[dict] = (), interconnect: str = "pcie"
) -> list[SweepPoint]:
    """(a): the points that could become the NCCL environment, fastest first: every ranked point (staging.rank_points,
    summed over T as the report sums them) of the baseline's implementation other than the baseline, not a fused
    kind, that beats the baseline by the report's measured rule (evidence.Evidence.beats, with the baseline's drift
    band so far from its `repeats`) on the sweep's own numbers; at most MAX_CANDIDATES."""
    baseline = report_baseline(spec)
    ranked = rank_points(results, spec.tokens, "sum", interconnect)
    base = next((r for r in ranked if r.point.key() == baseline.key()), None)
    if base is None:
        return []
    family = BACKEND_IMPLS if baseline.impl in BACKEND_IMPLS else (baseline.impl,)
    fused = {r.get("point_id") for r in results if r.get("fused_rmsnorm")}
    rule = _rule(spec, results, repeats, base.mode)
    found = []
    for item in ranked:
        if len(found) >= MAX_CANDIDATES:
            break
        point = item.point
        if point.key() == baseline.key() or point.impl not in family or point.point_id in fused or item.p90_us is None:
            continue
        if rule.beats(item.score_us, sum(item.p90_us.values()), base.score_us) is True:
            found.append(point)
    return found


def route_candidates(
    spec: SweepSpec, results: list[dict], repeats: list[dict] = (), interconnect: str = "pcie"
) -> list[Candidate]:
    """(b): the route winners, largest gain first: at each all-reduce size of each T, the fastest other
    implementation (no variable set, not a fused kind) whose per-op p90 is below the baseline's median there (what
    takes a size in the routing plan), where it also beats the baseline by the measured rule; each measured again at
    the T where it wins; at most MAX_ROUTES."""
    baseline = report_baseline(spec)
    steps = _steps(results, interconnect)
    mode, latest = ranking_mode(steps), latest_measurements(steps)
    base_id = next((p for p, records in latest.items() if point_from_record(records[0]).key() == baseline.key()), None)
    if base_id is None:
        return []
    rule = _rule(spec, results, repeats, mode)
    base = _op_sizes(latest[base_id], mode, baseline=True)
    fastest: dict[tuple[int, tuple[str, int]], tuple[float, str, float, float]] = {}
    for point_id, records in latest.items():
        point = point_from_record(records[0])
        if point_id == base_id or point.env or point.impl in (*BACKEND_IMPLS, unfused_reference()) or _fused(records):
            continue
        for tokens, sizes in _op_sizes(records, mode, baseline=False).items():
            for key, (median, p90) in sizes.items():
                theirs = base.get(tokens, {}).get(key)
                if key[0] != "all_reduce" or theirs is None or not p90 < theirs[0]:
                    continue
                if (tokens, key) not in fastest or (median, point_id) < fastest[(tokens, key)][:2]:
                    fastest[(tokens, key)] = (median, point_id, p90, theirs[0])
    wins: dict[str, set[int]] = {}
    gains: dict[str, float] = {}
    for (tokens, _key), (median, point_id, p90, reference) in fastest.items():
        if rule.beats(median, p90, reference) is True:
            wins.setdefault(point_id, set()).add(tokens)
            gains[point_id] = max(gains.get(point_id, 0.0), 1.0 - median / reference)
    chosen = sorted(wins, key=lambda p: (-gains[p], p))[:MAX_ROUTES]
    return [Candidate(point_from_record(latest[p][0]), ROUTE, baseline, tuple(sorted(wins[p]))) for p in chosen]


def fused_candidates(
    spec: SweepSpec, results: list[dict], repeats: list[dict] = (), interconnect: str = "pcie"
) -> list[Candidate]:
    """(c): the fused kinds, largest gain first: at each T, the fastest fused all-reduce + RMSNorm where it beats its
    unfused reference (the one with its variables, else the one that sets none) by the measured rule; each measured
    again at the T where it wins, beside that reference; at most MAX_FUSED."""
    steps = _steps(results, interconnect)
    mode, latest = ranking_mode(steps), latest_measurements(steps)
    reference = unfused_reference()
    references = {p: records for p, records in latest.items() if point_from_record(records[0]).impl == reference}
    rule = _rule(spec, results, repeats, mode)
    fastest: dict[int, tuple[float, str, float | None]] = {}
    for point_id, records in latest.items():
        if point_id in references or not _fused(records):
            continue
        for tokens, (median, p90) in _step_times(records, mode).items():
            if tokens not in fastest or (median, point_id) < fastest[tokens][:2]:
                fastest[tokens] = (median, point_id, p90)
    wins: dict[str, set[int]] = {}
    gains: dict[str, float] = {}
    against: dict[str, str] = {}
    for tokens, (median, point_id, p90) in fastest.items():
        ref = _reference_of(point_from_record(latest[point_id][0]), references)
        theirs = _step_times(references[ref], mode).get(tokens) if ref is not None else None
        if theirs is not None and rule.beats(median, p90, theirs[0]) is True:
            wins.setdefault(point_id, set()).add(tokens)
            gains[point_id] = max(gains.get(point_id, 0.0), 1.0 - median / theirs[0])
            against[point_id] = ref
    chosen = sorted(wins, key=lambda p: (-gains[p], p))[:MAX_FUSED]
    return [
        Candidate(
            point_from_record(latest[p][0]),
            FUSED_KIND,
            point_from_record(references[against[p]][0]),
            tuple(sorted(wins[p])),
        )
        for p in chosen
    ]


def sequence(found: list[Candidate]) -> list[Measurement]:
    """What the confirmation measures, in order: per reference (in the order the candidates name them), A, A, then
    B, A for each of its candidates, the reference at every T its candidates are measured at; nothing without a
    candidate."""
    groups: dict[str, list[Candidate]] = {}
    for candidate in found:
        groups.setdefault(candidate.against.point_id, []).append(candidate)
    order: list[Measurement] = []
    for against, members in groups.items():
        tokens = tuple(sorted({t for c in members for t in c.tokens}))
        control = Measurement(members[0].against, against, tokens)
        order += [control] * A_A_CONTROL
        for candidate in members:
            order += [Measurement(candidate.point, against, candidate.tokens), control]
    return order


def measurements(found: list[Candidate]) -> int:
    """Point measurements the confirmation of `found` makes."""
    return len(sequence(found))


def bound(spec: SweepSpec) -> int:
    """The most measurements the confirmation of `spec` makes, each counted at every T (what the dry run
    estimates): beside the baseline, the A/A control and up to MAX_CANDIDATES environments and MAX_ROUTES routes;
    beside each unfused reference a fused kind could be judged against, its A/A control and its fused kinds, up to
    MAX_FUSED in all. Each counts only where the sweep has points that could be one (in stage 0, or a refining
    stage's)."""
    baseline, reference = report_baseline(spec), unfused_reference()
    family = BACKEND_IMPLS if baseline.impl in BACKEND_IMPLS else (baseline.impl,)
    refining = sum(stage.max_points() for stage in spec.stages if stage.kind == "refine" and stage.axes)
    settings = [p for p in spec.points if p.impl in family and p.key() != baseline.key() and not _fuses(p.impl)]
    environments = min(MAX_CANDIDATES, len(settings) + refining)
    others = [p for p in spec.points if p.impl not in (*BACKEND_IMPLS, reference) and p.key() != baseline.key()]
    refined = sum(_other_points(stage) for stage in spec.stages)
    routes = min(MAX_ROUTES, sum(1 for p in others if not p.env and _fuses(p.impl) is not True) + refined)
    measured = sum(1 for p in spec.points if p.impl == reference)  # no reference measured: no fused kind judged
    references = measured + refined if measured else 0
    fused = min(MAX_FUSED, sum(1 for p in others if _fuses(p.impl) is not False) + refined) if measured else 0
    beside_baseline = A_A_CONTROL + 2 * (environments + routes) if environments + routes else 0
    return beside_baseline + A_A_CONTROL * min(fused, references) + 2 * fused


def _other_points(stage) -> int:
    """Points of another implementation than the backend's a stage could add at most: its points, unless it adds
    none (a search, a re-measurement, or axes of variables crossed only with the backend's own points)."""
    if stage.kind != "refine" or not stage.axes:
        return 0
    sets_impl = any(setting.impl is not None for axis in stage.axes for setting in axis.settings)
    impls = dict(stage.candidates.conditions).get("impl") if stage.candidates is not None else None
    if not sets_impl and impls is not None and impls <= set(BACKEND_IMPLS):
        return 0
    return stage.max_points()


def _fuses(impl: str) -> bool | None:
    """Whether a built-in fuses RMSNorm; None for a plug-in (its class says, unread by a plan)."""
    cls = builtin(impl)
    return None if cls is None else cls.fuses_rmsnorm


def _rule(spec: SweepSpec, results: list[dict], repeats, mode: str) -> Evidence:
    """The report's measured rule with the baseline's drift band so far."""
    return Evidence(MEASURED, drift_pct=baseline_drift_pct(spec, results, list(repeats), mode))


def _steps(results: list[dict], interconnect: str) -> list[dict]:
    return [
        r
        for r in results
        if r.get("kind", "step") == "step" and r.get("point_id") and not_proposable(r, interconnect) is None
    ]


def _fused(records: list[dict]) -> bool:
    return any(r.get("fused_rmsnorm") for r in records)


def _ok(record: dict, mode: str) -> bool:
    return record.get("mode") == mode and record.get("status") == "ok"


def _step_times(records: list[dict], mode: str) -> dict[int, tuple[float, float | None]]:
    """T -> (step median, p90) of a point's ok records in `mode`."""
    out = {}
    for record in records:
        stats = record.get("step_us") or {}
        if _ok(record, mode) and (stats.get("median") or 0) > 0:
            out[int(record["tokens"])] = (float(stats["median"]), stats.get("p90"))
    return out


def _op_sizes(records: list[dict], mode: str, baseline: bool) -> dict[int, dict[tuple[str, int], tuple[float, float]]]:
    """T -> (collective, bytes) -> (per-op median, p90) of a point's ok records in `mode` (records.op_sizes)."""
    return {
        int(r["tokens"]): per_size_medians(r, fused=False, baseline=baseline, reference=False)
        for r in records
        if _ok(r, mode) and r.get("op_us")
    }


def _reference_of(point: SweepPoint, references: dict[str, list[dict]]) -> str | None:
    """The unfused reference a fused kind is judged against: the one with its variables, else the one with none."""
    by_env = {}
    for point_id, records in references.items():
        by_env.setdefault(tuple(sorted(point_from_record(records[0]).env.items())), point_id)
    return by_env.get(tuple(sorted(point.env.items()))) or by_env.get(())
