"""The first screen's questions about the verify step: how much faster it gets (verify-step latency, compute +
communication, and tokens/s at the user's accept lengths, before -> after; communication alone second) and whether
speculative decoding pays (the break-even accept length the chart draws, tokens/s cells coloured by their claims).
Pure: a Decision in, formatted strings and dicts for the template out; every verdict is a claim's."""

from __future__ import annotations

from typing import Any

from commprof.report.decision.formatting import (
    break_even_text,
    claim_words,
    fmt_bytes,
    fmt_ms_value,
    fmt_num,
    range_pct,
    sentence,
    tokens_text,
)
from commprof.report.decision.tables import ProjectionRow
from commprof.report.decision.types import RECOMMEND_ENV, Decision, Route

HEADING_WORDS = 25  # a card's heading, like the headline: the answer and its figure; qualifications go below


def faster_answer(decision: Decision) -> dict[str, Any]:
    """Per verify T: verify-step latency (compute + communication) and tokens/s at the user's accept lengths,
    before (the baseline) -> after (what the answer applies), each with its claim; "no change" where it keeps the
    baseline, "no answer" (why, and what would decide it) where the run may not give one."""
    out: dict[str, Any] = {
        "rows": [], "verdict": "", "below": "", "css": "big", "more": "", "note": "", "accepts": []
    }  # fmt: skip
    if not decision.steps:
        return out
    missing = no_answer(decision)
    out["accepts"] = [f"{a:g}" for a in decision.run.accepts]
    out["rows"] = _faster_rows(decision, missing)
    out["verdict"], out["below"], noise = _no_answer_verdict(decision) if missing else _faster_verdict(decision)
    out["css"] = "big noise" if noise else "big"
    out["note"] = _faster_note(decision, missing)
    still = [r for r in routed_bands(decision) if not r.live]  # a live one is what the steps run already
    if still and not missing and any(s.applied for s in decision.steps):
        out["more"] = (
            "Another implementation (b) is faster still: "
            + ", ".join(f"{r.impl} at T = {tokens_text(r.tokens)} ({_route_claim(decision, r)})" for r in still)
            + "; it needs the engine to run it (see (b))."
        )
    return out


def _faster_rows(decision: Decision, missing: str) -> list[dict[str, Any]]:
    rows = {(r.setting, r.tokens): r for r in decision.tables.projection}
    out = []
    for step in decision.steps:
        claim = decision.claim(step.claim)
        applied = step.applied and not missing
        unchanged = "no answer" if missing else "no change"
        out.append(
            {
                "tokens": step.tokens,
                "before": fmt_ms_value(step.before_ms),
                "after": fmt_ms_value(step.after_ms) if applied else unchanged,
                "change": "—" if not applied or claim is None else claim_words(claim),
                "verdict": claim.verdict if claim is not None else "",
                "noise": not (applied and claim is not None and claim.beyond),
                "comm": f"{fmt_ms_value(step.comm_before_ms)} → {fmt_ms_value(step.comm_after_ms)}"
                if applied
                else fmt_ms_value(step.comm_before_ms),
                "tps": _tps_cells(decision, rows, step.tokens, applied, unchanged),
            }
        )
    return out


def _route_claim(decision: Decision, route: Route) -> str:
    return claim_words(decision.claim(route.claim)) + " per all-reduce"


def _tps_cells(decision: Decision, rows: dict, tokens: int, applied: bool, unchanged: str) -> list[str]:
    """One verify T's tokens/s cells, one per accept length: baseline -> after, or the baseline's and why it stays."""
    was_row, now_row = rows.get(("baseline", tokens)), rows.get(("answer", tokens))
    cells = []
    for k, accept in enumerate(decision.run.accepts):
        was = was_row.cells[k].tokens_per_s if was_row is not None else None
        becomes = now_row.cells[k].tokens_per_s if now_row is not None else None
        if accept > tokens:
            cells.append("n/a (accept > T)")
        elif was is None:
            cells.append("—")
        elif applied and becomes is not None:
            cells.append(f"{fmt_num(was, 0)} → {fmt_num(becomes, 0)}")
        else:
            cells.append(f"{fmt_num(was, 0)} ({unchanged})")
    return cells


def _no_answer_verdict(decision: Decision) -> tuple[str, str, bool]:
    """The card's heading where the run may not give an answer: why, short; what decides it below."""
    why, decides = _no_answer_parts(decision)
    heading = f"{why}: no answer"
    if len(heading.split()) <= HEADING_WORDS:
        return heading, f"Nothing below is applied. What decides it: {decides}.", True
    return "No answer: nothing below is applied", f"{why}. What decides it: {decides}.", True


def _faster_verdict(decision: Decision) -> tuple[str, str, bool]:
    """The card's heading on the verify step (at most HEADING_WORDS words, like the headline), the qualifications
    shown below it, and whether nothing is told apart (shown as noise); every word from the steps' claims."""
    only = " (communication only)" if not decision.run.compute_given else ""
    claims = [c for s in decision.steps if s.applied and (c := decision.claim(s.claim)) is not None]
    beyond = [c for c in claims if c.beyond]
    applied = _applied_with(decision)
    if beyond and decision.run.simulated:
        return (
            f"Predicted {range_pct([c.gain_pct for c in beyond])} less verify latency with {applied}{only}: a "
            "candidate to measure",
            "Each T's claim is below: a candidate to measure on the box (confirm.toml), not yet an answer.",
            False,
        )
    if beyond:
        return f"{range_pct([c.gain_pct for c in beyond])} faster verify step with {applied}{only}", "", False
    return _unchanged_verdict(decision, claims)


def _unchanged_verdict(decision: Decision, claims: list) -> tuple[str, str, bool]:
    """The heading where no verify step is faster beyond its error: told apart or not, and what the routes give
    per all-reduce (below)."""
    routed = routed_bands(decision)
    per_op = f"Per all-reduce, not the verify step: {routed_verdict(decision, routed)}." if routed else ""
    if claims:
        errors = [c.error_pct for c in claims if c.error_pct is not None]
        within = f" (its error: ±{max(errors):.1f} %)" if errors else ""
        gains = range_pct([c.gain_pct for c in claims])
        told = f"(a) gives {gains} less verify latency, none of it more than its error{within}."
        return "No faster verify step told apart", " ".join(x for x in (told, per_op) if x), True
    if routed:
        return "No change to the verify step from (a)", per_op, False
    said = f"No change: {decision.nccl.why}"
    if len(said.split()) <= HEADING_WORDS:
        return said, "", True
    return "No change to the verify step", f"{sentence(decision.nccl.why)}.", True


def _applied_with(decision: Decision) -> str:
    """What the applied steps run, as the cards name it: (a) the NCCL answer, (b) a routed implementation whose
    engine switch the files set live, or both."""
    routed = {r.point_id for r in decision.routes if not r.kept and r.live}
    points = {s.point_id for s in decision.steps if s.applied}
    names = [name for name, there in (("(a)", bool(points - routed)), ("(b)", bool(points & routed))) if there]
    return " and ".join(names) or "(a)"


def _faster_note(decision: Decision, missing: str) -> str:
    """How the card's figures are made, and what "after" applies."""
    run = decision.run
    latency = (
        f"compute {run.compute} ({run.compute_source}) + {run.mode}-mode communication"
        if run.compute_given
        else f"{run.mode}-mode communication only (compute not given: --compute-ms)"
    )
    return (
        f"Verify latency = {latency} ({decision.environment.evidence.label}); tokens/s = accept / "
        f"({draft_text(decision)} + verify latency), "
        + (
            "with the baseline's settings: there is no answer to apply."
            if missing
            else "before → after; after: what the answer runs at each T (below)."
        )
    )


def draft_text(decision: Decision) -> str:
    ms = decision.run.draft_ms
    return f"draft time {ms:g} ms" if ms is not None else "draft time not given (taken as 0: an upper bound)"


def no_answer(decision: Decision) -> str:
    """Why the run gives no answer to apply, and what would decide one ("" when it gives one): the box contradicts
    the model, or the run is unfinished."""
    if not decision.unconfirmed and not decision.nccl.withheld:
        return ""
    why, decides = _no_answer_parts(decision)
    return f"{why}: no answer, so nothing below is applied. What decides it: {decides}"


def _no_answer_parts(decision: Decision) -> tuple[str, str]:
    if decision.unconfirmed:
        return sentence(decision.unconfirmed), (
            "a sweep measured on the box (torchrun ... -m commprof.allreduce_sweep), or the checks the observation "
            "card lists, until the model explains the engine's step"
        )
    return sentence(decision.nccl.withheld or ""), "finish the run (--resume), or --allow-partial"


def routed_verdict(decision: Decision, routed: list[Route]) -> str:
    """Where (a) keeps NCCL's settings but the routes give some all-reduce sizes to another implementation: which T
    and sizes, to what, by how much (its claim), how to switch it, NCCL's part."""
    verb = "is predicted to take" if decision.run.simulated else "takes"
    bands = "; ".join(
        f"{r.impl} {verb} T = {tokens_text(r.tokens)} ({fmt_bytes(r.min_bytes)} – {fmt_bytes(r.max_bytes)} per "
        f"all-reduce): {claim_words(decision.claim(r.claim))} per all-reduce"
        for r in routed
    )
    switches = "; ".join(
        f"{s.engine}: {' '.join(f'{k}={v}' for k, v in s.variables)}"
        + ("" if s.live else " (commented out in the files: measure first)")
        for s in decision.engines.settings
        if s.impl in {r.impl for r in routed} and s.variables
    )
    how = f"switch it in the engine ({switches}; see (b))" if switches else "no engine setting runs it yet (see (b))"
    nccl = (
        "NCCL keeps (a)'s settings" if decision.nccl.file == RECOMMEND_ENV else "NCCL settings stay at their defaults"
    )
    return f"{bands}; {how}; {nccl}, and NCCL runs every other size"


def routed_bands(decision: Decision) -> list[Route]:
    """The Decision's all-reduce bands in the headline mode that another implementation takes from NCCL."""
    mode = decision.run.mode
    return [r for r in decision.routes if r.collective == "all_reduce" and r.mode == mode and not r.kept and r.tokens]


def spec_answer(decision: Decision) -> dict[str, Any]:
    """Break-even accept length (the chart's) and tokens/s per verify T with the settings the answer applies (the
    baseline's where the run gives no answer); without compute times a communication-only bound, said first."""
    bound = not decision.run.compute_given
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
    if not decision.tables.projection:
        out["note"] = (
            "Not answerable from this run: a T = 1 step (plain decode) and at least one verify T are both needed."
        )
        return out
    judged = decision.speculation
    shown_setting = (
        "with the baseline's settings (the run gives no answer: see above)"
        if no_answer(decision)
        else "with what the answer runs at each T"
        if judged.setting == "answer"
        else "with the baseline's settings"
    )
    chosen = [r for r in decision.tables.projection if r.setting == judged.setting]
    for r in chosen:
        out["rows"].append({"tokens": r.tokens, "break_even": _break_even(r), "cells": tps_cells(decision, r, "n/a")})
    plain = chosen[0].plain_tokens_per_s if chosen else None
    out["lead"] = f"{sentence(shown_setting)}; plain decode {fmt_num(plain, 0)} tok/s" + (
        " (communication only)" if bound else ""
    )
    if judged.verdict:
        out["verdict"] = ("At best: " if bound and not judged.noise else "") + judged.verdict
        out["verdict_css"] = "big" + (" bound" if bound else "") + (" noise" if judged.noise else "")
    out["note"] = sentence(draft_text(decision)) + "." if bound else spec_label(decision)
    return out


def _break_even(row: ProjectionRow) -> str:
    if row.withdrawn:
        return "withdrawn (the model does not explain the engine's observed step)"
    return break_even_text(row.break_even, row.tokens)


def tps_cells(decision: Decision, row: ProjectionRow, missing: str) -> list[dict[str, Any]]:
    """One projection row's tokens/s per accept length, each with its claim's verdict against plain decode."""
    return [
        {"text": fmt_num(c.tokens_per_s, 0) if c.tokens_per_s is not None else missing, "verdict": c.verdict}
        for c in row.cells
    ]


def spec_label(decision: Decision) -> str:
    """How to read the projection: an estimate with compute, communication-only without it."""
    run = decision.run
    draft = draft_text(decision)
    if not run.compute_given:
        return (
            "ESTIMATE, communication only: compute time not given (--compute-ms), so tokens/s are upper "
            f"bounds and break-even lengths count collectives alone; {draft}."
        )
    return (
        f"Estimate: compute {run.compute} ({run.compute_source}) + {run.mode}-mode communication "
        f"({decision.environment.evidence.label}); {draft}."
    )
