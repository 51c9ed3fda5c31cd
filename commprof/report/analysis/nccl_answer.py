"""The answer's NCCL environment (answer (a)) and its verify step per T, judged once by the evidence's one rule on
the figure a user reads: the environment on the communication summed over every T, each verify step on its own
latency with that latency's error. The Decision carries both; views and files only render them. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from commprof.evidence import Verdict
from commprof.impls.registry import unfused_reference
from commprof.report.analysis.formatting import fmt_ms, fmt_pct, tokens_text
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import keep_text, recommend_notes, verdict_sentence


@dataclass(frozen=True)
class NcclAnswer:
    """(a): one environment of the baseline's implementation over every T, against the baseline."""

    verdict: Verdict  # beyond error: `point_id`'s environment is the answer; otherwise the baseline's is kept
    reason: str  # the rule with this run's numbers, in words
    baseline_id: str | None
    point: dict[str, Any] | None  # the point whose environment the answer sets: point_id, label, impl, settings, env
    fastest: dict[str, Any] | None  # the fastest over every T (what was judged): point_id, label, settings
    baseline_total_us: float | None  # the baseline's time summed over the T the fastest covers
    saved_pct: float | None  # the fastest's time saved over every T against the baseline
    point_saved_pct: float | None  # the exported point's, the figure its file quotes
    keeps_baseline: bool  # something was judged and the baseline's environment stays
    dropped: tuple[str, ...]  # the fastest's variables that did not earn their place
    withheld: str | None  # why a result is not acted on (an unfinished run)
    keep: str  # what keeping the baseline means, in words
    notes: tuple[str, ...]  # recommend.env's comment lines

    @property
    def point_id(self) -> str | None:
        """The point whose environment (a) exports: the judged point, else the baseline (kept, or nothing passed)."""
        return str(self.point["point_id"]) if self.point is not None else self.baseline_id

    @property
    def sets(self) -> bool:
        """Whether the answer sets an environment other than the baseline's."""
        return self.verdict == "beyond error" and self.withheld is None


def _point(row: pd.Series | None) -> dict[str, Any] | None:
    if row is None:
        return None
    keys = ("point_id", "label", "impl", "settings", "env", "total_us", "p90_total_us", "tokens_covered")
    out = {k: row.get(k) for k in keys if k in row.index}
    out["env"] = dict(out.get("env") or {})
    if "tokens_covered" in out:
        out["tokens_covered"] = [int(t) for t in out["tokens_covered"]]
    return {k: (float(v) if k.endswith("_us") and v is not None else v) for k, v in out.items()}


def nccl_answer(run: RunAnalysis, withdrawn: str = "") -> NcclAnswer:
    """(a) as the ranking's candidate (the fastest over every T, its minimal form) was judged; `withdrawn`: why an
    observation withdrew the prediction ("" : it stands), which its notes then say."""
    rec = run.nccl_choice
    fastest = rec.fastest if rec is not None else None
    if fastest is None:
        verdict: Verdict = "no answer"
    elif rec.beyond_uncertainty is None:
        verdict = "not judged"
    else:
        verdict = "beyond error" if rec.beyond_uncertainty else "inside error"
    point = _point(run.recommended)
    base = rec.baseline_total_us if rec is not None else math.nan
    total = point["total_us"] if point is not None else None
    point_saved = 100.0 * (base - float(total)) / base if total is not None and base and math.isfinite(base) else None
    return NcclAnswer(
        verdict=verdict,
        reason=verdict_sentence(run),
        baseline_id=run.baseline,
        point=point,
        fastest=_point(fastest),
        baseline_total_us=base if math.isfinite(base) else None,
        saved_pct=rec.saved_pct if rec is not None and math.isfinite(rec.saved_pct) else None,
        point_saved_pct=point_saved if point_saved is not None and math.isfinite(point_saved) else None,
        keeps_baseline=bool(rec is not None and rec.keeps_baseline),
        dropped=tuple(rec.dropped) if rec is not None else (),
        withheld=rec.withheld if rec is not None else None,
        keep=keep_text(run),
        notes=tuple(recommend_notes(run, bool(withdrawn))),
    )


@dataclass(frozen=True)
class StepAnswer:
    """One verify T: the step latency before (the baseline) and with the answer's environment, the error of that
    figure and the rule's verdict on it."""

    tokens: int
    point_id: str | None  # the answer's point at T (the baseline's where it keeps it)
    before_ms: float
    after_ms: float  # the baseline's where the answer keeps it
    gain_pct: float
    error_pct: float | None  # the larger of the two sides' errors, % of the figure (None: measured)
    verdict: Verdict
    reason: str


def step_answers(run: RunAnalysis, answer: NcclAnswer, withdrawn: str) -> tuple[StepAnswer, ...]:
    """Per verify T (every T where only T = 1 ran): the verify latency (compute + communication) with the
    answer's environment against the baseline's, judged on that latency with its own error; `withdrawn`: why an
    observation withdrew every predicted claim ("" where none did)."""
    parts = run.breakdown
    if parts.empty:
        return ()
    tokens = sorted(int(t) for t in parts["tokens"].unique() if t > 1) or sorted(int(t) for t in parts["tokens"])
    by = parts.drop_duplicates(["setting", "tokens"]).set_index(["setting", "tokens"])
    after = "recommended" if answer.sets else "baseline"
    out = []
    for t in tokens:
        if ("baseline", t) not in by.index:
            continue
        before = by.loc[("baseline", t)]
        now = by.loc[(after, t)] if (after, t) in by.index else before
        gain = 100.0 * (before["verify_ms"] - now["verify_ms"]) / before["verify_ms"]
        out.append(_judged(run, t, (before, now), gain, answer, withdrawn))
    return tuple(out)


def _judged(run: RunAnalysis, t: int, sides: tuple, gain: float, answer: NcclAnswer, withdrawn: str) -> StepAnswer:
    before, now = sides
    evidence = run.evidence
    compute = before["verify_ms"] - before["comm_ms"]
    errors = (
        evidence.figure_error_pct(now["comm_ms"], now["verify_ms"]),
        evidence.figure_error_pct(before["comm_ms"], before["verify_ms"]),
    )
    shown = [e for e in errors if e is not None]
    error = max(shown) if shown else None
    if not answer.sets:
        verdict: Verdict = "not judged" if answer.withheld else answer.verdict
        reason = answer.withheld or f"{answer.keep}: nothing changes at T = {t}"
    else:
        p90 = now["comm_p90_ms"] + compute if pd.notna(now["comm_p90_ms"]) else math.nan
        verdict = evidence.judge((now["verify_ms"], p90), before["verify_ms"], errors)
        band = f" (its error ±{error:.0f} %)" if error is not None else ""
        reason = (
            f"verify latency {fmt_ms(before['verify_ms'] * 1000)} -> {fmt_ms(now['verify_ms'] * 1000)}, "
            f"{fmt_pct(gain)} less{band}: {verdict}"
        )
    if withdrawn and evidence.simulated:  # every predicted figure is withdrawn, whatever the rule said of it
        verdict, reason = "not judged", f"withdrawn, {withdrawn}: predicted {fmt_pct(gain)} less"
    return StepAnswer(
        tokens=t,
        point_id=str(now["point_id"]) if isinstance(now["point_id"], str) else None,
        before_ms=float(before["verify_ms"]),
        after_ms=float(now["verify_ms"]),
        gain_pct=round(gain, 1) if math.isfinite(gain) else math.nan,
        error_pct=round(error, 1) if error is not None else None,
        verdict=verdict,
        reason=reason,
    )


def reference_missing(run: RunAnalysis, env: dict[str, str]) -> str:
    """Why the fused kinds cannot be judged against their unfused reference under the NCCL environment the answer
    sets (the reference ran only under other settings), and what decides it; "" where it ran under it."""
    if not env or run.steps.empty:
        return ""
    reference = unfused_reference()
    rows = run.steps[(run.steps["impl"] == reference) & (run.steps["status"] == "ok")]
    if rows.empty or any(dict(e or {}) == env for e in rows["env"]):
        return ""
    settings = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    return (
        f"{reference}, the unfused reference, never ran under {settings}, the NCCL environment the "
        f"answer sets; a sweep point of {reference} with {settings} decides it"
    )


@dataclass(frozen=True)
class SpeculationAnswer:
    """Whether speculative decoding pays, as the projection of the settings the answer applies says it."""

    setting: str  # the projection rows it reads: "recommended" (the answer's environment) or "baseline"
    verdict: str  # the card's one sentence ("" where there is nothing to project)
    noise: bool  # not told apart (unknown error) or withdrawn


def speculation_answer(spec: pd.DataFrame, applied: bool) -> SpeculationAnswer:
    """The break-even verdict over the verify T of the settings the answer applies (`applied`: its environment,
    else the baseline's); withdrawn rows (an observation the model does not explain) say nothing pays."""
    if spec.empty:
        return SpeculationAnswer("baseline", "", False)
    setting = "recommended" if applied and (spec["setting"] == "recommended").any() else "baseline"
    chosen = spec[spec["setting"] == setting]
    if "withdrawn" in chosen and chosen["withdrawn"].fillna(False).astype(bool).any():
        return SpeculationAnswer(
            setting,
            "Not judged: withdrawn. Every break-even here is the model's prediction, and the model does not explain "
            "the engine's observed step (see above)",
            True,
        )
    decided = chosen[~chosen["within_uncertainty"].astype(bool)]
    reachable = decided[~decided["never_pays"].astype(bool)]
    if not reachable.empty and reachable["break_even_ratio"].notna().any():
        anywhere = reachable[reachable["pays_at_any_accept"].astype(bool)]
        if not anywhere.empty:
            return SpeculationAnswer(
                setting, "Pays at any accept length at T = " + tokens_text(anywhere["tokens"]), False
            )
        lowest = reachable.loc[reachable["break_even_ratio"].idxmin()]
        verdict = f"Pays above accept length {lowest['break_even_ratio']:.2f} at T = {int(lowest['tokens'])}"
        return SpeculationAnswer(setting, verdict, False)
    if not decided.empty:
        verdict = f"Never pays at T = {tokens_text(decided['tokens'])}: no accept length reaches break-even"
        return SpeculationAnswer(setting, verdict, False)
    return SpeculationAnswer(
        setting,
        "Not told apart: the model's expected error is unknown, so no tokens/s difference counts at "
        f"T = {tokens_text(chosen['tokens'])}"
        if not chosen.empty
        else "",
        not chosen.empty,
    )
