"""The Decision's verify steps and speculation: the breakdown of each verify step (communication, launch overhead,
compute) for the baseline, (a)'s point and the answer at each T; each verify latency's claim derived from the
communication claim at its T (the same comparison with the compute added to both sides: never judged again); and
the tokens/s projection, each cell's claim speculation against plain decode. Reads the per-T answers. Pure."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from commprof.report.analysis.claims import ClaimBook
from commprof.report.analysis.projection import ShownPoints, breakdown, projection
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.formatting import finite, finite_or_none, tokens_text, tps_column
from commprof.report.decision.tables import BreakdownRow, ProjectionRow, TpsCell
from commprof.report.decision.types import AnswerAtT, Speculation, VerifyStep

# The breakdown's and projection's settings as the page names them. "answer": what the answer's files run at each T.
SETTING_LABELS = {"baseline": "baseline", "recommended": "(a) to export", "answer": "the answer at this T"}


def step_parts(run: RunAnalysis, head: pd.DataFrame, per_t: list[AnswerAtT], exported: str | None) -> pd.DataFrame:
    """The breakdown of the baseline, (a)'s exported point and the answer at each T (its point and time)."""
    if head.empty:
        return pd.DataFrame()
    at = {a.tokens: a for a in per_t}
    head = head.assign(
        answer_point_id=[at[int(t)].point_id if int(t) in at else None for t in head["tokens"]],
        answer_us=[
            at[int(t)].answer_us if int(t) in at and at[int(t)].answer_us is not None else math.nan
            for t in head["tokens"]
        ],
    )
    shown = ShownPoints(run.baseline, exported, "answer")
    return breakdown(run.steps, head, shown, run.options.compute, mode=run.mode)


def verify_steps(run: RunAnalysis, parts: pd.DataFrame, per_t: list[AnswerAtT], book: ClaimBook) -> list[VerifyStep]:
    """Per verify T (every T where only T = 1 ran): the verify latency before and with the answer, its claim
    derived from the communication claim at T."""
    if parts.empty:
        return []
    every_t = sorted({int(t) for t in parts["tokens"]})  # one row per setting: each T once
    tokens = [t for t in every_t if t > 1] or every_t
    by = parts.drop_duplicates(["setting", "tokens"]).set_index(["setting", "tokens"])
    at = {a.tokens: a for a in per_t}
    out = []
    for t in tokens:
        if ("baseline", t) not in by.index:
            continue
        before = by.loc[("baseline", t)]
        now = by.loc[("answer", t)] if ("answer", t) in by.index else before
        source = book.get(at[t].claim) if t in at else None
        claim = None
        if source is not None and finite(now["verify_ms"]):
            claim = book.derive(
                f"verify T = {t}",
                f"the verify step at T = {t} (compute + {run.mode}-mode communication) with {now['point_id']} "
                f"against the baseline {run.baseline}",
                source,
                (float(before["verify_ms"]), float(now["verify_ms"])),
                "ms",
            )
        out.append(
            VerifyStep(
                tokens=t,
                point_id=str(now["point_id"]) if isinstance(now["point_id"], str) else None,
                before_ms=float(before["verify_ms"]),
                after_ms=float(now["verify_ms"]) if claim is not None else float(before["verify_ms"]),
                comm_before_ms=finite_or_none(before["comm_ms"]),
                comm_after_ms=finite_or_none(now["comm_ms"])
                if claim is not None
                else finite_or_none(before["comm_ms"]),
                applied=claim is not None,
                claim=claim.id if claim is not None else None,
                tps=[],
            )
        )
    return out


def breakdown_rows(
    run: RunAnalysis, parts: pd.DataFrame, per_t: list[AnswerAtT], book: ClaimBook
) -> list[BreakdownRow]:
    at = {a.tokens: a for a in per_t}
    rows = []
    for r in parts.itertuples() if not parts.empty else []:
        claim = None
        if r.setting != "baseline" and isinstance(r.point_id, str) and r.point_id != run.baseline:
            claim = book.get(f"T = {int(r.tokens)}: {r.point_id} vs {run.baseline}")
        rows.append(
            BreakdownRow(
                tokens=int(r.tokens),
                setting=r.setting,
                setting_label=setting_label(run, r.setting, r.point_id, at),
                point_id=r.point_id if isinstance(r.point_id, str) else None,
                comm_ms=finite_or_none(r.comm_ms),
                comm_p90_ms=finite_or_none(r.comm_p90_ms),
                overhead_ms=finite_or_none(r.overhead_ms),
                compute_ms=finite_or_none(r.compute_ms),
                verify_ms=finite_or_none(r.verify_ms),
                comm_share_pct=finite_or_none(r.comm_share_pct),
                claim=claim.id if claim is not None else None,
            )
        )
    return rows


def setting_label(run: RunAnalysis, setting: str, point_id: Any, at: dict[int, AnswerAtT], decode: Any = None) -> str:
    """A row's setting as the page names it; the answer's says when it keeps the baseline's point."""
    label = SETTING_LABELS.get(setting, setting)
    if setting == "answer" and point_id == run.baseline and decode in (None, point_id):
        return f"{label} (keeps the baseline)"
    return label


def projection_rows(run: RunAnalysis, parts: pd.DataFrame, book: ClaimBook) -> list[ProjectionRow]:
    """The tokens/s projection per setting and verify T, each cell's claim speculation against plain decode."""
    spec = projection(parts, run.options.draft_ms or 0.0, run.options.accepts) if not parts.empty else pd.DataFrame()
    rows = []
    for r in spec.itertuples() if not spec.empty else []:
        cells = [_cell(run, r, accept, book) for accept in run.options.accepts]
        decode_point = r.decode_point_id if isinstance(r.decode_point_id, str) else None
        rows.append(
            ProjectionRow(
                setting=r.setting,
                setting_label=setting_label(run, r.setting, r.point_id, {}, decode_point),
                tokens=int(r.tokens),
                point_id=r.point_id if isinstance(r.point_id, str) else None,
                decode_point_id=decode_point,
                decode_ms=float(r.decode_ms),
                plain_tokens_per_s=finite_or_none(r.plain_tokens_per_s),
                draft_ms=float(r.draft_ms),
                verify_ms=float(r.verify_ms),
                break_even=finite_or_none(r.break_even_ratio),
                withdrawn=bool(book.withdrawn) and run.simulated,
                cells=cells,
            )
        )
    return rows


def _cell(run: RunAnalysis, r: Any, accept: float, book: ClaimBook) -> TpsCell:
    """One accept length at one T: speculation's time per token against plain decode's, its claim."""
    tps = getattr(r, tps_column(accept))
    if not finite(tps):
        return TpsCell(accept=accept, tokens_per_s=None, verdict="within", claim=None)
    per_token = (r.draft_ms + r.verify_ms) / accept
    spread = (r.verify_p90_ms - r.verify_ms) / accept if finite(r.verify_p90_ms) else math.nan
    claim = book.compare(
        f"speculation {r.setting} T = {int(r.tokens)} accept {accept:g}",
        f"speculative decoding at T = {int(r.tokens)}, accept length {accept:g}, with the {r.setting}'s settings "
        "against plain decode: time per token",
        ((per_token, per_token + spread), (r.decode_ms, r.decode_ms + spread)),
        unit="ms per token",
    )
    verdict = (
        "pays" if claim is not None and claim.beyond else "loses" if claim is not None and claim.slower else "within"
    )
    return TpsCell(accept=accept, tokens_per_s=float(tps), verdict=verdict, claim=claim.id if claim else None)


def speculation(run: RunAnalysis, rows: list[ProjectionRow], applied: bool, book: ClaimBook) -> Speculation:
    """Whether speculative decoding pays with what the answer applies (else the baseline's settings): the accept
    lengths whose cells pay beyond error, at the T where it pays soonest, with the break-even the chart draws."""
    setting = "answer" if applied and any(r.setting == "answer" for r in rows) else "baseline"
    chosen = [r for r in rows if r.setting == setting]
    lead = f"plain decode {chosen[0].plain_tokens_per_s:.0f} tok/s" if chosen and chosen[0].plain_tokens_per_s else ""
    verdict, noise = _spec_verdict(run, chosen, book) if chosen else ("", False)
    return Speculation(setting=setting, verdict=verdict, noise=noise, lead=lead)


def _spec_verdict(run: RunAnalysis, chosen: list[ProjectionRow], book: ClaimBook) -> tuple[str, bool]:
    """The card's sentence, every word from its cells' claims, and whether nothing is told apart."""
    if any(r.withdrawn for r in chosen):
        return (
            "Not judged: withdrawn. Every tokens/s here is the model's prediction, and the model does not explain "
            "the engine's observed step (see above)"
        ), True
    paying = [(min(c.accept for c in r.cells if c.verdict == "pays"), r.tokens, r) for r in chosen if _pays(r)]
    if paying:
        accept, tokens, row = min(paying, key=lambda p: (p[0], p[1]))
        return f"Pays at accept length {accept:g} and above at T = {tokens} (break-even {row.break_even:.2f})", False
    cells = [c for r in chosen for c in r.cells if c.tokens_per_s is not None]
    at = tokens_text(r.tokens for r in chosen)
    if cells and all(c.verdict == "loses" for c in cells):
        return f"Never pays at T = {at}: plain decode is faster at every accept length given", False
    unknown = any((claim := book.get(c.claim)) is not None and claim.error_pct is None for c in cells)
    why = (
        "the model's expected error is unknown, so no tokens/s difference counts"
        if unknown
        else f"no accept length given is faster than plain decode by more than {run.evidence.uncertainty}"
    )
    return f"Not told apart at T = {at}: {why}", True


def _pays(row: ProjectionRow) -> bool:
    return any(c.verdict == "pays" for c in row.cells)
