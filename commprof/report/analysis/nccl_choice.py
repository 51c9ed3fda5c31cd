"""The chooser of the answer's NCCL environment (answer (a)): the ranking's candidate over every T judged against
the baseline by the evidence's rule, in its minimal form (a variable that does not earn its place is dropped).
A run that made the interleaved confirmation (report/analysis/interleaved.py) answers only with a point confirmed
there: its measurement beside the baseline's beats the baseline's by the rule, beyond the noise floor; its
first-pass numbers, measured minutes or hours from the baseline's, decide nothing. The Decision carries the result
(nccl_answer.NcclAnswer); no output reads this module. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from commprof.evidence import Evidence
from commprof.report.analysis.frame import ok_rows
from commprof.report.analysis.interleaved import Interleaved
from commprof.report.analysis.ranking import best_overall_point, point_totals


def minimal_export(
    steps: pd.DataFrame,
    mode: str,
    evidence: Evidence,
    fastest: pd.Series,
    baseline_total_us: float,
    totals: pd.DataFrame | None = None,
) -> tuple[pd.Series, list[str]]:
    """The point to export instead of `fastest` when a variable does not earn its place: of the measured points
    with the same implementation and a subset of its variables (an ablation), the one with the fewest variables
    that still beats the baseline and that `fastest` does not beat, both beyond the evidence's uncertainty.
    Returns (the point, the variables dropped); (fastest, []) when every variable counts or nothing was ablated.
    `totals`: the points to choose among, with their sums (default: every point of `steps`)."""
    env = fastest["env"]
    totals = point_totals(steps, mode, fastest["impl"]) if totals is None else totals
    subsets = totals[
        (totals["options"] == fastest["options"])
        & totals["env"].map(lambda e: len(e) < len(env) and all(env.get(k) == v for k, v in e.items()))
    ]
    keep = [
        evidence.beats(r.total_us, r.p90_total_us, baseline_total_us) is True
        and evidence.beats(fastest["total_us"], fastest["p90_total_us"], r.total_us) is False
        for r in subsets[["total_us", "p90_total_us"]].itertuples()  # itertuples reads every column it is given
    ]
    candidates = subsets[keep]
    if candidates.empty:
        return fastest, []
    chosen = candidates.assign(_count=candidates["env"].map(len)).sort_values(["_count", "total_us"]).iloc[0]
    return chosen.drop("_count"), sorted(set(env) - set(chosen["env"]))


@dataclass(frozen=True)
class NcclChoice:
    """What to set: the fastest point over every T if it beats the baseline beyond the evidence's uncertainty
    (as its minimal measured form, `exported`), else the baseline.

    `beyond_uncertainty` is None when the baseline has no ok record at some T the fastest point covers (no
    comparison, so nothing is recommended); `withheld` says why a result is not recommended anyway (an
    unfinished run).
    """

    fastest: pd.Series | None
    baseline: pd.Series | None
    baseline_total_us: float
    beyond_uncertainty: bool | None
    exported: pd.Series | None = None  # the fastest's minimal form (minimal_export); None: the fastest itself
    dropped: tuple[str, ...] = ()  # variables of the fastest that did not earn their place
    withheld: str | None = None
    # The interleaved confirmation's word on it, in one sentence; None: the run made no confirmation.
    confirmation: str | None = None

    @property
    def recommends(self) -> bool:
        """Whether anything other than the baseline is recommended."""
        return self.fastest is not None and self.beyond_uncertainty is True and self.withheld is None

    @property
    def chosen(self) -> pd.Series | None:
        if self.fastest is None:
            return None
        if not self.recommends:
            return self.baseline
        return self.exported if self.exported is not None else self.fastest

    @property
    def keeps_baseline(self) -> bool:
        return self.fastest is not None and not self.recommends

    @property
    def saved_pct(self) -> float:
        if self.fastest is None or not math.isfinite(self.baseline_total_us) or not self.baseline_total_us:
            return math.nan
        return 100.0 * (self.baseline_total_us - self.fastest["total_us"]) / self.baseline_total_us


def choose_environment(
    steps: pd.DataFrame,
    baseline: str,
    mode: str,
    evidence: Evidence,
    impl: str | Iterable[str] | None = None,
    withheld: str | None = None,
) -> NcclChoice:
    """The fastest point of `impl` over every T (best_overall_point), judged against the baseline by the
    evidence's rule, in its minimal measured form; `withheld`: why not to recommend even a result. A run with an
    interleaved confirmation is then decided by it (confirmed_choice)."""
    fastest = best_overall_point(steps, mode, impl)
    base_rows = ok_rows(steps, mode)
    base_rows = base_rows[base_rows["point_id"] == baseline].drop_duplicates("tokens")
    base = base_rows.iloc[0].copy() if not base_rows.empty else None
    if fastest is None:
        return NcclChoice(None, base, math.nan, None, withheld=withheld)
    covered = base_rows[base_rows["tokens"].isin(fastest["tokens_covered"])]
    total = float(covered["median_us"].sum()) if len(covered) == len(fastest["tokens_covered"]) else math.nan
    if base is not None:
        base["total_us"] = total
    verdict = evidence.beats(fastest["total_us"], fastest["p90_total_us"], total)
    exported, dropped = minimal_export(steps, mode, evidence, fastest, total) if verdict is True else (fastest, [])
    return NcclChoice(
        fastest,
        base,
        total,
        verdict,
        exported=exported if exported is not fastest else None,
        dropped=tuple(dropped),
        withheld=withheld,
    )


def confirmed_choice(
    first: NcclChoice,
    steps: pd.DataFrame,
    mode: str,
    evidence: Evidence,
    impl: str | Iterable[str] | None,
    interleaved: Interleaved,
) -> NcclChoice:
    """`first` (choose_environment on the first pass's numbers) decided again by the interleaved confirmation: the
    fastest point of `impl` it shows beating the baseline measured beside it (its B p90 summed over T below the
    faster neighbouring A, lowered by the noise floor: evidence.beats), in its minimal form among the confirmed
    winners; where none did, the first pass's fastest kept for display, not recommended."""
    totals = point_totals(steps, mode, impl)
    won = []
    for index, row in totals.iterrows():
        confirmation = interleaved.of(str(row["point_id"]))
        if confirmation is None or confirmation.baseline_us is None or interleaved.noise_floor_pct is None:
            continue
        if evidence.beats(confirmation.total_us, confirmation.p90_total_us, confirmation.baseline_us) is True:
            won.append(index)
            totals.loc[index, ["total_us", "p90_total_us"]] = [confirmation.total_us, confirmation.p90_total_us]
    winners = totals.loc[won]
    withheld = first.withheld
    if winners.empty:
        return _unconfirmed(first, interleaved)
    fastest = winners.sort_values(["total_us", "point_id"]).iloc[0]
    beside = interleaved.of(str(fastest["point_id"])).baseline_us
    base = first.baseline.copy() if first.baseline is not None else None
    if base is not None:
        base["total_us"] = beside
    exported, dropped = minimal_export(steps, mode, evidence, fastest, beside, winners)
    why = (
        f"confirmed: measured again between two measurements of the baseline, {fastest['point_id']} beat it by "
        f"more than its spread and the noise floor ({interleaved.sentence()})"
    )
    return NcclChoice(
        fastest,
        base,
        beside,
        True,
        exported=exported if exported is not fastest else None,
        dropped=tuple(dropped),
        withheld=withheld,
        confirmation=why,
    )


def _unconfirmed(first: NcclChoice, interleaved: Interleaved) -> NcclChoice:
    """Nothing confirmed: the first pass's fastest, shown with its numbers beside the baseline where it was
    measured there, never recommended; the first pass's own verdict where it found no gain to confirm."""
    if first.fastest is None or first.beyond_uncertainty is not True:
        return first
    fastest, base, total = first.fastest.copy(), first.baseline, first.baseline_total_us
    confirmation = interleaved.of(str(fastest["point_id"]))
    if confirmation is not None and confirmation.baseline_us is not None:
        fastest["total_us"], fastest["p90_total_us"] = confirmation.total_us, confirmation.p90_total_us
        total = confirmation.baseline_us
        if base is not None:
            base = base.copy()
            base["total_us"] = total
        why = (
            "measured again beside the baseline, it did not beat it by more than its spread and the noise floor "
            f"({interleaved.sentence()})"
        )
    else:
        why = f"it was not measured again beside the baseline, so it is not confirmed ({interleaved.sentence()})"
    verdict = None if first.beyond_uncertainty is None else False
    return NcclChoice(fastest, base, total, verdict, withheld=first.withheld, confirmation="not confirmed: " + why)
