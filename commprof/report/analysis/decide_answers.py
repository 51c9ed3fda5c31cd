"""The Decision's per-T answers: what the answer runs at each T (the NCCL environment's point, the tuner's winner
there, or an implementation a live route takes T to) with its claim against the baseline; table 1's points, (b)'s
other implementations against (a) and (c)'s fused kinds against their unfused reference, each row with its claim.
One subject, one claim: table 1's row and the answer at T of the same point share it. Reads (a), the routes and the
engines. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from commprof.report.analysis.claims import ClaimBook
from commprof.report.analysis.decide_nccl import NcclStep
from commprof.report.analysis.frame import first_rows, model_errors
from commprof.report.analysis.interleaved import MEASURED_AGAIN
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import tuned_name
from commprof.report.decision.claim import Claim
from commprof.report.decision.formatting import finite_or_none
from commprof.report.decision.tables import AlternativeRow, ChoiceRow, ImplementationMissing
from commprof.report.decision.types import TUNER_CONF, AnswerAtT, FusedRow, Route

_COLUMNS = ("median_us", "p90_us", "kernel_model", "nccl", "settings", "label", "impl")


@dataclass(frozen=True)
class StepRows:
    """The ok step records of the headline mode, by (point, T): what step claims compare."""

    run: RunAnalysis
    rows: dict[tuple[str, int], dict[str, Any]]

    @classmethod
    def of(cls, run: RunAnalysis) -> StepRows:
        ok = run.ok_mode_steps
        keep = [c for c in _COLUMNS if c in ok]
        frame = (
            ok[["point_id", "tokens", *keep]].drop_duplicates(["point_id", "tokens"]).set_index(["point_id", "tokens"])
        )
        return cls(run, {(str(p), int(t)): row for (p, t), row in frame.to_dict("index").items()})

    def claim(self, book: ClaimBook, after: str | None, before: str | None, tokens: int) -> Claim | None:
        """`after` against `before` at T, the step's communication in the headline mode (None: not both ran)."""
        if after is None or before is None or after == before:
            return None
        a, b = self.rows.get((after, tokens)), self.rows.get((before, tokens))
        if a is None or b is None:
            return None
        errors = model_errors(a, b) if book.evidence.simulated else None
        return book.compare(
            f"T = {tokens}: {after} vs {before}",
            f"{after} ({a.get('settings')}) against {before}, {self.run.mode}-mode step communication at T = {tokens}",
            ((a["median_us"], a.get("p90_us")), (b["median_us"], b.get("p90_us"))),
            errors=errors,
        )


def answers_at_t(
    run: RunAnalysis, nccl: NcclStep, routes: list[Route], rows: StepRows, book: ClaimBook
) -> list[AnswerAtT]:
    """Per T of the headline: the point the answer's files run there and its claim against the baseline."""
    out = []
    for t in run.tokens:
        routed = next(
            (r for r in routes if r.collective == "all_reduce" and r.mode == run.mode and not r.kept and t in r.tokens),
            None,
        )
        nccl_point = _nccl_point(run, nccl, t)
        point = routed.point_id if routed is not None and routed.live else nccl_point
        claim = rows.claim(book, point, run.baseline, t)
        base, mine = rows.rows.get((str(run.baseline), t)), rows.rows.get((str(point), t))
        out.append(
            AnswerAtT(
                tokens=t,
                baseline_us=finite_or_none(base["median_us"]) if base else None,
                point_id=point,
                answer_us=finite_or_none(mine["median_us"]) if mine else None,
                route_point_id=routed.point_id if routed is not None else point,
                claim=claim.id if claim is not None else None,
                settings=_settings(run, point, mine),
            )
        )
    return out


def _nccl_point(run: RunAnalysis, nccl: NcclStep, tokens: int) -> str | None:
    """The point whose NCCL settings run at T: the tuner's winner there, recommend.env's point, else the baseline."""
    if nccl.answer.file == TUNER_CONF:
        return nccl.plan.winners.get(tokens, run.baseline)
    if nccl.answer.file is not None and nccl.point_id is not None:
        return nccl.point_id
    return run.baseline


def _settings(run: RunAnalysis, point: str | None, row: dict | None) -> str:
    if point is None or row is None:
        return "—"
    impl, settings = row.get("impl"), row.get("settings")
    return f"{point}: " + (str(settings) if impl in run.baseline_family else f"{impl} ({settings})")


def choice_rows(run: RunAnalysis, choices: pd.DataFrame, nccl: NcclStep, per_t: list[AnswerAtT], rows: StepRows,
                book: ClaimBook) -> list[ChoiceRow]:  # fmt: skip
    """Table 1: per T, the baseline, (a), the fastest setting and the fastest point, each once with its roles and
    its claim against the baseline."""
    answers = {a.tokens: a.route_point_id for a in per_t}
    out = []
    for r in choices.itertuples() if not choices.empty else []:
        t = int(r.tokens)
        claim = rows.claim(book, str(r.point_id), run.baseline, t)
        out.append(
            ChoiceRow(
                tokens=t,
                roles=list(r.roles),
                role_labels=[role_label(role, run, nccl, r.impl, answers.get(t) == r.point_id) for role in r.roles],
                point_id=str(r.point_id),
                label=str(r.label),
                impl=str(r.impl),
                settings=str(r.settings),
                median_us=finite_or_none(r.median_us),
                p90_us=None if run.simulated else finite_or_none(r.p90_us),  # a prediction has no spread
                cv=None if run.simulated else finite_or_none(r.cv),
                baseline_us=finite_or_none(r.baseline_us),
                saved_pct=finite_or_none(r.saved_pct),
                speedup=finite_or_none(r.speedup),
                other_impl=r.impl not in run.baseline_family,
                claim=claim.id if claim is not None else None,
            )
        )
    return out


def role_label(role: str, run: RunAnalysis, nccl: NcclStep, impl: str, answer: bool) -> str:
    """Table 1's words for a role, naming the answer it backs; another implementation is (b) only where the answer
    runs it at this T, a setting nccl_tuner.conf's only where that file holds the answer's rules."""
    name = tuned_name(run)
    if role == "recommended":
        return "(a) to export" if nccl.point_id != run.baseline else "(a) kept"
    if role == "fastest setting":
        return f"fastest {name} setting at this T" + (
            " (nccl_tuner.conf's rule)" if name == "NCCL" and nccl.answer.tuner.rules else ""
        )
    if role == "fastest" and impl not in run.baseline_family:
        return f"fastest at this T: (b) {impl}" if answer else f"fastest at this T: {impl}, not the answer here"
    if role == "fastest":
        return "fastest at this T"
    return role


def alternative_rows(run: RunAnalysis, alternatives: pd.DataFrame, routes: list[Route], rows: StepRows,
                     book: ClaimBook) -> list[AlternativeRow]:  # fmt: skip
    """(b): per T, the fastest other implementation against (a)'s point, and whether the routes give it T's size."""
    out = []
    for r in alternatives.itertuples() if not alternatives.empty else []:
        t, size = int(r.tokens), finite_or_none(r.bytes)
        claim = rows.claim(book, str(r.point_id), str(r.reference), t)
        route = next(
            (
                x
                for x in routes
                if (x.collective, x.mode) == ("all_reduce", run.mode)
                and size is not None
                and x.min_bytes <= size <= x.max_bytes
            ),
            None,
        )
        out.append(
            AlternativeRow(
                tokens=t,
                bytes=int(size) if size is not None else None,
                point_id=str(r.point_id),
                label=str(r.label),
                impl=str(r.impl),
                median_us=finite_or_none(r.median_us),
                reference=str(r.reference),
                reference_us=finite_or_none(r.reference_us),
                saved_pct=finite_or_none(r.saved_pct),
                routed=route is not None and not route.kept and route.impl == r.impl,
                claim=claim.id if claim is not None else None,
            )
        )
    return out


def fused_rows(run: RunAnalysis, missing: str, book: ClaimBook) -> list[FusedRow]:
    """(c): per T, the fastest fused kind against its unfused reference, each with its claim; where the reference
    never ran under (a)'s environment (`missing`: why), not compared. In a run that confirmed, a fused kind is
    judged on its measurement beside its reference's (the interleaved confirmation), and where it was not measured
    again there, a first-pass gain has no verdict."""
    fusion = run.fusion
    if fusion.empty:
        return []
    refs = first_rows(run.ok_mode_steps, ["point_id", "tokens"]).set_index(["point_id", "tokens"])
    out = []
    for r in fusion.itertuples():
        t = int(r.tokens)
        claim = None
        if not missing and isinstance(r.reference, str) and (r.reference, t) in refs.index:
            mine = run.ok_mode_steps
            mine = mine[(mine["point_id"] == r.point_id) & (mine["tokens"] == t)].iloc[0].to_dict()
            ref = refs.loc[(r.reference, t)].to_dict()
            errors = model_errors(mine, ref) if book.evidence.simulated else None
            subject = (
                f"{r.point_id} ({r.impl}) against its unfused reference {r.reference}, {run.mode}-mode step at T = {t}"
            )
            figures = ((r.median_us, r.p90_us), (r.reference_us, ref.get("p90_us")))
            figures, subject, unknown = _confirmed(run, book, str(r.point_id), t, figures, subject)
            claim = book.compare(
                f"T = {t}: {r.point_id} vs {r.reference}", subject, figures, errors=errors, unknown=unknown
            )
        reason = missing or ("" if claim is not None else f"no {r.reference or 'unfused reference'} at T = {t}")
        out.append(
            FusedRow(
                tokens=t,
                point_id=str(r.point_id),
                label=str(r.label),
                impl=str(r.impl),
                settings=str(r.settings),
                median_us=finite_or_none(r.median_us),
                reference=str(r.reference) if isinstance(r.reference, str) else None,
                reference_us=finite_or_none(r.reference_us),
                saved_pct=finite_or_none(r.saved_pct),
                speedup=finite_or_none(r.speedup),
                claim=claim.id if claim is not None else None,
                reason=reason,
            )
        )
    return out


def _confirmed(run: RunAnalysis, book: ClaimBook, point_id: str, tokens: int, figures: tuple, subject: str):
    """A fused kind's (figures, subject, why it is not judged) at T: the interleaved confirmation's figures where it
    was measured again beside its reference there; its first-pass figures, without a verdict, where a first-pass
    gain was not measured again in a run that confirms; else the first pass's, judged."""
    if run.interleaved is None:
        return figures, subject, ""
    beside, why = run.interleaved.beside(point_id, run.mode, tokens=tokens)
    if beside is not None:
        return beside, subject + MEASURED_AGAIN, ""
    if book.evidence.beats(figures[0][0], figures[0][1], figures[1][0]) is True:
        return (
            figures,
            subject,
            (
                f"not judged: {why}, so its first-pass figures, measured apart from its reference's, decide "
                "nothing in a run that confirms"
            ),
        )
    return figures, subject, ""


def missing_rows(run: RunAnalysis) -> list[ImplementationMissing]:
    frame = run.without_result
    return [
        ImplementationMissing(
            impl=str(r.impl),
            fused=bool(r.fused_rmsnorm),
            status=str(r.status),
            message=str(r.message) if isinstance(r.message, str) else None,
        )
        for r in (frame.itertuples() if not frame.empty else [])
    ]
