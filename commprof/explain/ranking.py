"""Which condition explains what the box measured: each condition's variants priced on the box, their free
magnitudes fitted, judged within the model's stated error, and ranked.

The rule (brief rule 2: a difference inside the model's error is no result): a condition the box's records
confirm and that explains the observation comes first; then the box as modelled, where it explains the
observation, since a condition that fits better by less than the model's error is no finding; then the other
conditions that explain it, best fit first (one condition before two, a fixed magnitude before a fitted one,
then CONDITIONS' order); then those the records rule out; then those that do not explain it, closest first. Two
conditions are offered together only where neither explains the observation alone. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from commprof.costmodel.box_prior import PUBLISHED_DEFAULTS_SIZES
from commprof.costmodel.model_error import SIZE_RANGE, prior_error
from commprof.costmodel.topology import Topology
from commprof.errors import UsageError
from commprof.evidence import ModelError
from commprof.explain.conditions import (
    AS_MODELLED,
    CONDITIONS,
    EXCLUSIVE,
    HOP_DETOUR_US,
    SOURCES,
    Condition,
    Variant,
    check_ranks,
    op_time,
    variants,
)
from commprof.explain.evidence import CONFIRMED, NOT_CHECKED, RULED_OUT, BoxRecords, Evidence, evidence_for, landmines
from commprof.explain.observations import Observation, merged
from commprof.units import format_bytes

SAME_PREDICTION = 0.005  # a condition whose predictions are all within 0.5 % of the model's adds nothing
TELL_APART_SIZES = tuple(1 << k for k in range(12, 27))  # 4 KiB to 64 MiB: where a measurement separates two


@dataclass(frozen=True)
class SizeFit:
    """One observation beside its prediction under an explanation."""

    label: str
    nbytes: int
    ranks: int
    observed_us: float
    predicted_us: float
    judged: bool  # inside the sizes the model's error was stated for (or none of them is)
    source: str

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_us - self.observed_us) / self.observed_us


@dataclass(frozen=True)
class Explanation:
    """One condition (or two together) at its best magnitude, against every observation."""

    conditions: tuple[Condition, ...]
    magnitude: str
    sizes: tuple[SizeFit, ...]
    error_pct: float  # median |predicted - observed| / observed over the judged sizes, %
    allowed_pct: float | None  # the model's stated error (None: unknown, nothing judged)
    evidence: Evidence
    basis: str
    fitted: int  # magnitudes fitted to the observation (a choice among several variants counts as one)
    variant: Variant = field(repr=False)
    hop_us: float = 0.0  # the fitted per-hop latency (acs-redirect, iommu-translation)
    late_us: float = 0.0  # the fitted delay per op (late-rank)

    @property
    def condition(self) -> str:
        return "+".join(self.conditions) or AS_MODELLED

    @property
    def judged_count(self) -> int:
        return sum(s.judged for s in self.sizes)

    @property
    def underdetermined(self) -> bool:
        """Its magnitudes were fitted to no fewer observations than there are: it matches them by construction."""
        return self.fitted >= self.judged_count

    @property
    def explains(self) -> bool | None:
        """Within the model's error; None where that cannot be judged: the error is unknown, or it comes within it
        only through magnitudes fitted to as many observations as there are."""
        if self.allowed_pct is None:
            return None
        within = self.error_pct <= self.allowed_pct
        return None if within and self.underdetermined else within

    def to_dict(self) -> dict:
        return {
            "condition": self.condition,
            "magnitude": self.magnitude,
            "bytes": [s.nbytes for s in self.sizes],
            "ranks": [s.ranks for s in self.sizes],
            "predicted_us": [round(s.predicted_us, 2) for s in self.sizes],
            "observed_us": [round(s.observed_us, 2) for s in self.sizes],
            "error_pct": round(self.error_pct, 1),
            "allowed_error_pct": self.allowed_pct,
            "explains": self.explains,
            "evidence": self.evidence.status,
            "confirmed_by": list(self.evidence.lines),
            "fix": self.evidence.fix,
            "basis": self.basis,
        }


@dataclass(frozen=True)
class Explained:
    """The ranked explanations of one set of observations on one box, and the verdict over them."""

    box: str
    error: ModelError
    error_sizes: tuple[int, int] | None
    explanations: tuple[Explanation, ...]
    same_as_modelled: tuple[tuple[Condition, str], ...]
    verdict: str
    explained: bool
    tell_apart: str
    landmines: tuple[str, ...]
    judged_note: str

    def to_dict(self) -> dict:
        return {
            "box": self.box,
            "verdict": self.verdict,
            "explained": self.explained,
            "model_error": self.error.to_dict(),
            "error_sizes": list(self.error_sizes) if self.error_sizes else None,
            "judged": self.judged_note,
            "explanations": [e.to_dict() for e in self.explanations],
            "tell_apart": self.tell_apart,
            "no_change_here": {c: why for c, why in self.same_as_modelled},
            "landmines": list(self.landmines),
        }


def stated_error(topology: Topology, ranks: int) -> tuple[ModelError, tuple[int, int] | None]:
    """The model's error on this box and the sizes it was measured over (None: not said, every size judged): a box
    read from its bundle has the box prior's (costmodel.box_prior); a preset the prior's on real nccl-tests logs
    (costmodel.model_error)."""
    if topology.prior_error is not None:
        sizes = (PUBLISHED_DEFAULTS_SIZES[0], PUBLISHED_DEFAULTS_SIZES[-1]) if topology.box is not None else None
        return topology.prior_error, sizes
    return prior_error(ranks), SIZE_RANGE


@dataclass
class _Forms:
    """Per observation: predicted = base + hop x per-hop latency + count x late delay."""

    base: np.ndarray
    hop: np.ndarray
    count: np.ndarray


def _forms(topology: Topology, variant: Variant, observations: list[Observation]) -> _Forms:
    base, hop, count = [], [], []
    for obs in observations:
        b = h = 0.0
        for collective, nbytes, n in obs.ops:
            t = op_time(topology, variant, collective, nbytes, obs.ranks, dict(obs.env))
            b += n * (max(t.base_us - topology.launch_overhead_us, 0.0) if obs.graph else t.base_us)
            h += n * t.per_hop_us
        base.append(b)
        hop.append(h)
        count.append(obs.count)
    return _Forms(np.array(base), np.array(hop), np.array(count, dtype=float))


def _fit(forms: _Forms, observed: np.ndarray, judged: np.ndarray, variant: Variant) -> tuple[float, float, float]:
    """(median |error| % over the judged sizes, per-hop latency, late delay) at the best magnitudes."""
    hops = [0.0]
    if variant.per_hop:
        low, high = HOP_DETOUR_US
        with np.errstate(divide="ignore", invalid="ignore"):
            exact = np.where(forms.hop > 0, (observed - forms.base) / forms.hop, low)
        hops = sorted({*np.linspace(low, high, 141), *np.clip(exact, low, high)})
    best = (math.inf, math.inf, 0.0, 0.0)
    for hop in hops:
        partial = forms.base + forms.hop * hop
        lates = np.array([0.0])
        if variant.late:
            most = float(np.max(observed / forms.count))
            exact = np.clip((observed - partial) / forms.count, 0.0, most)
            lates = np.unique(np.concatenate([exact, np.linspace(0.0, most, 101)]))
        predicted = partial[None, :] + lates[:, None] * forms.count[None, :]
        errors = np.abs(predicted - observed[None, :]) / observed[None, :] * 100.0
        medians = np.median(errors[:, judged], axis=1)
        means = errors[:, judged].mean(axis=1)
        i = int(np.lexsort((means, medians))[0])
        if (medians[i], means[i]) < best[:2]:
            best = (float(medians[i]), float(means[i]), float(hop), float(lates[i]))
    return best[0], best[2], best[3]


def _combined(parts: list[Evidence]) -> Evidence:
    statuses = {e.status for e in parts}
    status = RULED_OUT if RULED_OUT in statuses else CONFIRMED if statuses == {CONFIRMED} else NOT_CHECKED
    lines = tuple(line for e in parts for line in e.lines)
    return Evidence(status, lines, "; ".join(e.fix for e in parts if e.fix))


@dataclass(frozen=True)
class _Problem:
    """What every explanation of one set of observations is judged on."""

    topology: Topology
    observations: list[Observation]
    observed: np.ndarray  # the observed times, µs
    judged: np.ndarray  # which observations the verdict rests on (inside the error's sizes)
    error: ModelError  # the model's stated error
    sizes: tuple[int, int] | None  # the sizes that error was measured over
    evidence: dict[Condition, Evidence]  # what the box's records say of each condition
    chosen: frozenset[Condition]  # the conditions whose variant is picked among several (a fitted choice)
    env: dict[str, str]  # the NCCL settings the observations ran under
    ranks: int  # the most ranks observed


def _explanation(problem: _Problem, variant: Variant) -> Explanation:
    forms = _forms(problem.topology, variant, problem.observations)
    error, hop, late = _fit(forms, problem.observed, problem.judged, variant)
    predicted = forms.base + forms.hop * hop + forms.count * late
    words = [variant.magnitude] if variant.magnitude else []
    if variant.per_hop:
        words.append(f"{hop:.1f} us more per hop (fitted)")
    if variant.late:
        words.append(f"one rank {late:.1f} us late to each op (fitted)")
    sizes = tuple(
        SizeFit(o.label, o.nbytes, o.ranks, o.time_us, float(p), bool(j), o.source)
        for o, p, j in zip(problem.observations, predicted, problem.judged)
    )
    basis = "; ".join(SOURCES[c] for c in variant.conditions) or SOURCES[AS_MODELLED]
    evidence = [problem.evidence[c] for c in variant.conditions]
    return Explanation(
        variant.conditions,
        "; ".join(words),
        sizes,
        error,
        problem.error.pct,
        _combined(evidence) if evidence else Evidence(NOT_CHECKED, (), ""),
        basis,
        int(bool(variant.per_hop)) + int(variant.late) + sum(c in problem.chosen for c in variant.conditions),
        variant,
        hop,
        late,
    )


def _tier(e: Explanation) -> int:
    """0 confirmed and explains; 1 as modelled, explains; 2 explains; 3 explains, ruled out; 4 matches only with
    magnitudes fitted to it (or the error is unknown); 5 does not explain; 6 ruled out and does not explain."""
    if e.explains is None:
        return 6 if e.evidence.status == RULED_OUT else 4
    if not e.explains:
        return 6 if e.evidence.status == RULED_OUT else 5
    if not e.conditions:
        return 1
    return {CONFIRMED: 0, NOT_CHECKED: 2, RULED_OUT: 3}[e.evidence.status]


def _key(e: Explanation) -> tuple:
    order = min((CONDITIONS.index(c) for c in e.conditions), default=0)
    tier = _tier(e)
    return (tier, len(e.conditions) if tier < 4 else 0, round(e.error_pct, 1), e.fitted, order, e.condition)


def explain(topology: Topology, observations: list[Observation], records: BoxRecords | None = None) -> Explained:
    """Every condition's best explanation of the observations on this box, ranked (module docstring)."""
    records = records or BoxRecords()
    if not observations:
        raise UsageError(
            "nothing observed to explain: give --observed-op-us, --observed-step-ms, --nccl-tests or --run"
        )
    observations = merged(observations)
    for obs in observations:
        check_ranks(topology, obs.ranks, obs.source)
    ranks = max(o.ranks for o in observations)
    error, sizes = stated_error(topology, ranks)
    for other in {o.ranks for o in observations} - {ranks}:  # a verdict over several rank counts holds for each
        if topology.prior_error is None and (theirs := prior_error(other)).pct and error.pct:
            error = theirs if theirs.pct > error.pct else error
    inside = np.array([sizes is not None and sizes[0] <= o.nbytes <= sizes[1] for o in observations])
    env = dict(observations[0].env)
    by_condition, same = variants(topology, env, ranks)
    channels = _channels(topology, env, ranks)
    problem = _Problem(
        topology,
        observations,
        np.array([o.time_us for o in observations]),
        inside if inside.any() else np.ones(len(observations), dtype=bool),
        error,
        sizes,
        {c: evidence_for(c, records, channels) for c in CONDITIONS},
        frozenset(c for c, options in by_condition.items() if len(options) > 1),
        env,
        ranks,
    )
    best: dict[tuple[Condition, ...], Explanation] = {}
    for options in by_condition.values():
        for variant in options:
            candidate = _explanation(problem, variant)
            if variant.conditions not in best or _key(candidate) < _key(best[variant.conditions]):
                best[variant.conditions] = candidate
    modelled = np.array([s.predicted_us for s in best[()].sizes])
    for conditions, candidate in list(best.items()):  # the best it can do is what the model predicts already
        predicted = np.array([s.predicted_us for s in candidate.sizes])
        if conditions and np.all(np.abs(predicted - modelled) <= SAME_PREDICTION * modelled):
            del best[conditions]
            same[conditions[0]] = (
                f"at its best fit ({candidate.magnitude}) it predicts what the model does at each size"
            )
    singles = dict(best)
    for a, b in combinations([c for c in by_condition if (c,) in singles], 2):
        if {a, b} in EXCLUSIVE or singles[(a,)].explains is not False or singles[(b,)].explains is not False:
            continue
        together = min(
            (_explanation(problem, va.joined(vb)) for va in by_condition[a] for vb in by_condition[b]), key=_key
        )
        if together.explains:
            best[(a, b)] = together
    ranked = tuple(sorted(best.values(), key=_key))
    verdict, explained = _verdict(ranked, error)
    return Explained(
        f"{topology.name} ({topology.description})",
        error,
        sizes,
        ranked,
        tuple(sorted(same.items(), key=lambda item: CONDITIONS.index(item[0]))),
        verdict,
        explained,
        _tell_apart(problem, ranked),
        landmines(records),
        _judged_note(sizes, int(inside.sum()), len(observations)),
    )


def _channels(topology: Topology, env: dict, ranks: int) -> int:
    from commprof.costmodel.simulate import nccl_setting, params_for

    return params_for(topology, nccl_setting(topology, env, ranks), None, ranks)[0].channels


def _judged_note(sizes: tuple[int, int] | None, inside: int, total: int) -> str:
    if sizes is None:
        return "every size judged"
    span = f"{format_bytes(sizes[0])}-{format_bytes(sizes[1])}"
    if not inside:
        return f"the model's error was measured over {span}; no observation lies there, each is judged by it anyway"
    return f"judged over the {inside} of {total} observations at {span}, where the model's error was measured"


def _verdict(ranked: tuple[Explanation, ...], error: ModelError) -> tuple[str, bool]:
    top = ranked[0]
    within = f"median error {top.error_pct:.0f} % within the model's {error.band}"
    tier = _tier(top)
    if error.pct is None:
        return f"not judged: the model's error on this box is unknown ({error.basis}); ranked by fit", False
    if tier == 1:
        return f"as-modelled: the model explains the observation as the box stands ({within})", True
    if tier in (0, 2):
        how = f" ({top.magnitude})" if top.magnitude else ""
        confirmed = "; the box's records confirm it" if tier == 0 else ""
        return f"{top.condition} explains the observation{how}: {within}{confirmed}", True
    if tier == 3:
        why = top.evidence.lines[0] if top.evidence.lines else "its check rules it out"
        return (
            f"only conditions the box's records rule out explain it: {top.condition} would ({within}), but {why}",
            False,
        )
    fixed = next((e for e in ranked if _tier(e) >= 5), None)
    fitted = [e for e in ranked if _tier(e) == 4 and e.error_pct <= (error.pct or 0.0)][:3]
    words = f"nothing explains it within error ({error.band})"
    if fixed is not None:
        words += (
            f"; the closest with figures fixed in advance is {fixed.condition} ({fixed.error_pct:.0f} % median error)"
        )
    if fitted:
        n = fitted[0].judged_count
        words += (
            f"; {', '.join(f'{e.condition} ({e.magnitude})' for e in fitted)} match it only with a magnitude fitted to "
            f"{'this one observation' if n == 1 else f'these {n} observations'}"
        )
    return words, False


def _predict(topology: Topology, e: Explanation, nbytes: int, ranks: int, env: dict) -> float:
    t = op_time(topology, e.variant, "all_reduce", nbytes, ranks, env)
    return t.base_us + t.per_hop_us * e.hop_us + e.late_us


def _tell_apart(problem: _Problem, ranked: tuple[Explanation, ...]) -> str:
    """The all-reduce not yet observed whose predictions differ most between the first two explanations the records
    do not rule out (inside the sizes the model's error was measured over, where known), or why no time can."""
    topology, env, error, ranks = problem.topology, problem.env, problem.error, problem.ranks
    seen = {(o.nbytes, o.ranks) for o in problem.observations}
    candidates = [e for e in ranked if e.evidence.status != RULED_OUT][:2]
    if len(candidates) < 2 or _tier(ranked[0]) == 0:  # nothing to tell apart, or the records confirm the first
        return ""
    first, second = candidates
    low, high = problem.sizes or (TELL_APART_SIZES[0], TELL_APART_SIZES[-1])
    tried = []
    for r in sorted({ranks, max(2, ranks // 2)}):
        for nbytes in (n for n in TELL_APART_SIZES if low <= n <= high and (n, r) not in seen):
            a, b = _predict(topology, first, nbytes, r, env), _predict(topology, second, nbytes, r, env)
            tried.append((abs(math.log(a / b)), nbytes, r, a, b))
    checks = "; ".join(
        f"{e.condition}: {e.evidence.lines[0]}" for e in (first, second) if e.evidence.lines and e.conditions
    )
    records = f"; the box's records: {checks}" if checks else ""
    if not tried:
        return f"every size the model's error covers was observed{records}"
    on_the_box = [t for t in tried if t[2] == ranks]  # the box's own rank count, unless only fewer GPUs separate
    gap, nbytes, r, a, b = max(on_the_box) if on_the_box else max(tried)
    if error.pct is not None and math.exp(gap) - 1.0 <= error.pct / 100.0:
        gap, nbytes, r, a, b = max(tried)
    if error.pct is not None and math.exp(gap) - 1.0 <= error.pct / 100.0:
        return (
            f"{first.condition} and {second.condition} predict the same times within the model's {error.band} at "
            f"every size from {format_bytes(low)} to {format_bytes(high)}: only the box's records tell them "
            f"apart{records}"
        )
    return (
        f"to tell {first.condition} from {second.condition}: time an all-reduce of {format_bytes(nbytes)} on {r} "
        f"GPUs (nccl-tests: all_reduce_perf -b {nbytes} -e {nbytes} -g {r}): {first.condition} predicts "
        f"{a:.0f} us, {second.condition} {b:.0f} us{records}"
    )
