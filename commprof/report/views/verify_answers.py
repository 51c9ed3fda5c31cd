"""The first screen's questions about the verify step: how much faster it gets (verify-step latency, compute +
communication, and tokens/s at the user's accept lengths, before -> after; communication alone second) and whether
speculative decoding pays (break-even accept length, tokens/s cells judged against the evidence: grey where not
told apart from plain decode). Pure: a RunAnalysis in, formatted strings and dicts for the template out."""

from __future__ import annotations

from typing import Any

import pandas as pd

from commprof.report.analysis.decision import Decision, Route
from commprof.report.analysis.formatting import (
    finite,
    fmt_bytes,
    fmt_ms_value,
    fmt_num,
    fmt_pct,
    range_pct,
    sentence,
    tokens_text,
    tps_column,
)
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import break_even_text, compute_text, draft_text, only_baseline, spec_label
from commprof.report.views.breakdown import tps_cells


def faster_answer(run: RunAnalysis, decision: Decision) -> dict[str, Any]:
    """Per verify T: verify-step latency (compute + communication) and tokens/s at the user's accept lengths,
    before (the baseline) -> after (what the answer applies), each gain as the decision judged it on that latency
    with its own error; "no change" when it keeps the baseline, "no answer" (why, and what would decide it) when
    the run may not give one. Communication alone comes second."""
    out: dict[str, Any] = {"rows": [], "verdict": "", "css": "big", "more": "", "note": "", "accepts": []}
    parts = run.breakdown
    if parts.empty or not decision.steps:
        return out
    missing = no_answer(run, decision)
    answer = decision.nccl_answer
    after = "recommended" if not missing and answer is not None and answer.sets else None
    by = parts.drop_duplicates(["setting", "tokens"]).set_index(["setting", "tokens"])
    spec = run.projection.set_index(["setting", "tokens"]) if not run.projection.empty else None
    accepts = list(run.options.accepts)
    out["accepts"] = [f"{a:g}" for a in accepts]
    for step in decision.steps:
        before = by.loc[("baseline", step.tokens)]
        now = by.loc[(after, step.tokens)] if after and (after, step.tokens) in by.index else before
        unchanged = "no answer" if missing else "no change"
        error = f" (±{step.error_pct:.0f} %)" if step.error_pct is not None else ""
        out["rows"].append(
            {
                "tokens": step.tokens,
                "before": fmt_ms_value(step.before_ms),
                "after": fmt_ms_value(step.after_ms) if after else unchanged,
                "change": (
                    "—" if not after else fmt_pct(step.gain_pct) + ("" if step.verdict == "beyond error" else error)
                ),
                "verdict": step.verdict,
                "noise": step.verdict != "beyond error",
                "comm": f"{fmt_ms_value(before['comm_ms'])} → {fmt_ms_value(now['comm_ms'])}"
                if after
                else fmt_ms_value(before["comm_ms"]),
                "tps": _tps_cells(spec, step.tokens, accepts, after, unchanged),
            }
        )
    out["verdict"], noise = _faster_verdict(run, decision, missing, bool(after))
    out["css"] = "big noise" if noise else "big"
    out["note"] = _faster_note(run, missing)
    routed = routed_bands(decision, run.mode)
    if routed and after:
        out["more"] = (
            "Another implementation (b) is faster still: "
            + ", ".join(
                f"{r.impl} at T = {tokens_text(r.tokens)} ({fmt_pct(r.margin_pct)} less time per all-reduce)"
                for r in routed
            )
            + "; it needs the engine to run it (see (b))."
        )
    return out


def _tps_cells(
    spec: pd.DataFrame | None, tokens: int, accepts: list[float], after: str | None, unchanged: str
) -> list[str]:
    """One verify T's tokens/s cells, one per accept length: baseline -> after, or the baseline's and why it stays."""
    cells = []
    for accept in accepts:
        column = tps_column(accept)
        was = (
            spec.loc[("baseline", tokens), column] if spec is not None and ("baseline", tokens) in spec.index else None
        )
        key = (after or "baseline", tokens)
        becomes = spec.loc[key, column] if spec is not None and key in spec.index else None
        if accept > tokens:
            cells.append("n/a (accept > T)")
        elif not finite(was):
            cells.append("—")
        elif after and finite(becomes):
            cells.append(f"{fmt_num(was, 0)} → {fmt_num(becomes, 0)}")
        else:
            cells.append(f"{fmt_num(was, 0)} ({unchanged})")
    return cells


def _faster_verdict(run: RunAnalysis, decision: Decision, missing: str, applied: bool) -> tuple[str, bool]:
    """The card's verdict on the verify step (the figure its table shows) and whether it is a "not told apart" one
    (shown as noise): the T whose gain is beyond its error, else what the gain is inside of, else what else moves."""
    if missing:
        return missing, True
    only = " (communication only)" if not run.options.compute.given else ""
    beyond = [s for s in decision.steps if s.verdict == "beyond error"]
    if applied and beyond:
        return f"{range_pct([s.gain_pct for s in beyond])} faster verify step with (a){only}", False
    routed = routed_bands(decision, run.mode)
    if applied:
        inside = [s for s in decision.steps if s.verdict == "inside error"]
        errors = [s.error_pct for s in inside if s.error_pct is not None]
        within = f" (its error: ±{max(errors):.0f} %)" if errors else ""
        told = (
            f"No faster verify step told apart: (a) predicts {range_pct([s.gain_pct for s in inside])} less verify "
            f"latency, inside the figure's error{within}"
            if inside
            else "No faster verify step told apart"
        )
        return told + (
            f". Per all-reduce, not the verify step: {routed_verdict(run, decision, routed)}" if routed else ""
        ), True
    if routed:
        return "No change to the verify step from (a). Per all-reduce, not the whole verify step: " + routed_verdict(
            run, decision, routed
        ), False
    alone = only_baseline(run)
    return (f"No change: {alone}" if alone else f"No change: nothing beat the baseline {run.evidence.beyond}"), True


def _faster_note(run: RunAnalysis, missing: str) -> str:
    """How the card's figures are made, and what "after" applies."""
    latency = (
        f"{compute_text(run)} + {run.mode}-mode communication"
        if run.options.compute.given
        else f"{run.mode}-mode communication only (compute not given: --compute-ms)"
    )
    return (
        f"Verify latency = {latency} ({run.evidence.label}); tokens/s = accept / ({draft_text(run)} + verify "
        "latency), "
        + (
            "with the baseline's settings: there is no answer to apply."
            if missing
            else "before → after; after: what (a) below applies."
        )
    )


def no_answer(run: RunAnalysis, decision: Decision | None) -> str:
    """Why the run gives no answer to apply, and what would decide one ("" when it gives one): the box contradicts
    the model, or the run is unfinished."""
    answer = decision.nccl_answer if decision is not None else None
    if decision is not None and decision.unconfirmed:
        return (
            f"{sentence(decision.unconfirmed)}: no answer, so nothing below is applied. What decides it: a "
            "sweep measured on the box (torchrun ... -m commprof.allreduce_sweep), or the checks the observation "
            "card lists, until the model explains the engine's step"
        )
    if answer is not None and answer.withheld:
        finish = run.completeness.how_to_finish() if run.completeness is not None else "finish the run"
        return f"No answer: {answer.withheld}. What decides it: {finish}"
    return ""


def routed_verdict(run: RunAnalysis, decision: Decision, routed: list[Route]) -> str:
    """The headline when NCCL keeps its settings but the decision routes some all-reduce sizes to another
    implementation beyond the evidence's uncertainty: which T and sizes, to what, how to switch it, NCCL's part."""
    verb = "is predicted to take" if run.evidence.simulated else "takes"
    bands = "; ".join(
        f"{r.impl} {verb} T = {tokens_text(r.tokens)} ({fmt_bytes(r.min_bytes)} – {fmt_bytes(r.max_bytes)} per "
        f"all-reduce) {run.evidence.beyond}: {fmt_pct(r.margin_pct)} less time per all-reduce"
        for r in routed
    )
    switches = "; ".join(
        f"{s.engine}: {' '.join(f'{k}={v}' for k, v in s.variables)}"
        + ("" if s.live else " (commented out in the files: measure first)")
        for s in decision.engine
        if s.impl in {r.impl for r in routed} and s.variables
    )
    how = f"switch it in the engine ({switches}; see (b))" if switches else "no engine setting runs it yet (see (b))"
    nccl = "NCCL keeps (a)'s settings" if decision.nccl_env else "NCCL settings stay at their defaults"
    return f"{bands}; {how}; {nccl}, and NCCL runs every other size"


def routed_bands(decision: Decision | None, mode: str) -> list[Route]:
    """The decision's all-reduce bands in `mode` that another implementation takes from NCCL, at some T."""
    if decision is None:
        return []
    return [r for r in decision.routes if r.collective == "all_reduce" and r.mode == mode and not r.kept and r.tokens]


def spec_answer(run: RunAnalysis, decision: Decision | None = None) -> dict[str, Any]:
    """Break-even accept length and tokens/s per verify T with the settings (a) exports (the baseline's where the
    run gives no answer); without compute times a communication-only bound, said first and greyed."""
    bound = not run.options.compute.given
    out: dict[str, Any] = {
        "bound": bound,
        "card_css": "card bound" if bound else "card",
        "table_css": "bound" if bound else "",
        "rows": [],
        "verdict": "",
        "verdict_css": "",
        "lead": "",
        "note": "",
        "caveat": "",
    }
    if bound:
        out["caveat"] = (
            "Communication only: compute time not given (--compute-ms, or compute_ms in the sweep "
            "file's [report]). These tokens/s leave the model's compute out: upper bounds, not "
            "throughput."
        )
    if run.projection.empty:
        out["note"] = (
            "Not answerable from this run: a T = 1 step (plain decode) and at least one verify T are both needed."
        )
        return out
    missing = no_answer(run, decision)
    judged = decision.speculation if decision is not None else None
    setting = judged.setting if judged is not None else "baseline"
    shown_setting = (
        "with the baseline's settings (the run gives no answer: see above)"
        if missing
        else "with (a), the settings to export"
        if setting == "recommended"
        else f"with the baseline's settings (kept: nothing beat them {run.evidence.beyond})"
        if decision is not None and decision.nccl_answer is not None and decision.nccl_answer.keeps_baseline
        else "with the baseline's settings"
    )
    chosen = run.projection[run.projection["setting"] == setting]
    withdrawn = "withdrawn" in chosen and bool(chosen["withdrawn"].fillna(False).any())
    for r in chosen.itertuples():
        out["rows"].append(
            {
                "tokens": int(r.tokens),
                "break_even": break_even_text(r.break_even_ratio, bool(r.within_uncertainty), int(r.tokens), withdrawn),
                "cells": tps_cells(run, r, "n/a"),
            }
        )
    plain = chosen["plain_tokens_per_s"]
    out["lead"] = (
        f"{sentence(shown_setting)}; plain decode {fmt_num(plain.iloc[0], 0) if not plain.empty else '—'} tok/s"
        + (" (communication only)" if bound else "")
    )
    if judged is not None and judged.verdict:
        out["verdict"] = ("At best: " if bound and not judged.noise else "") + judged.verdict
        out["verdict_css"] = "big" + (" bound" if bound else "") + (" noise" if judged.noise else "")
    out["note"] = sentence(draft_text(run)) + "." if bound else spec_label(run)
    return out
