"""The run's one answer: decide() builds the Decision (report/decision/types.py) from the analysed run, once, in
named steps, each reading only what the steps before it decided: the environment (and whether an observation
withdraws every prediction), answer (a) (the NCCL environment and its file), the routing per size, the engine
settings, the per-T answers and table 1, the fused kinds, the verify steps and speculation, a simulation's
measurement plan, the headline, then the page's tables. Every verdict is a claim made by claims.ClaimBook under
the one rule. The page, the terminal, summary.json and every exported file render the Decision alone. Pure."""

from __future__ import annotations

from dataclasses import replace

import msgspec

from commprof.report.analysis import page_tables as pt
from commprof.report.analysis.answer_frames import answer_frames
from commprof.report.analysis.box_view import nccl_choices
from commprof.report.analysis.claims import ClaimBook
from commprof.report.analysis.decide_answers import (
    StepRows,
    alternative_rows,
    answers_at_t,
    choice_rows,
    fused_rows,
    missing_rows,
)
from commprof.report.analysis.decide_engines import asked_engines, engine_step, fused_hints, live_routes
from commprof.report.analysis.decide_environment import environment_step, run_facts, unconfirmed, with_nccl_shown
from commprof.report.analysis.decide_nccl import NcclStep, nccl_step
from commprof.report.analysis.decide_plan import headline, measurement_plan
from commprof.report.analysis.decide_routing import reference_missing, routing_step
from commprof.report.analysis.decide_steps import (
    breakdown_rows,
    projection_rows,
    speculation,
    step_parts,
    verify_steps,
)
from commprof.report.analysis.observed import observed_decision
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.tables import Tables
from commprof.report.decision.types import (
    AnswerAtT,
    Decision,
    Engines,
    Environment,
    Headline,
    NcclAnswer,
    Speculation,
    Tuner,
)


def decide(run: RunAnalysis) -> Decision:
    """The run's one answer, from its analysis."""
    withdrawn = unconfirmed(run)
    book = ClaimBook(run.evidence, withdrawn)
    environment = environment_step(run, withdrawn)
    if run.steps.empty or run.baseline is None:
        return _nothing_ran(run, environment, book)
    nccl = nccl_step(run, book)
    routes, routing, plan_bands = routing_step(run, nccl, book)
    engines = engine_step(run, nccl, routes, plan_bands, book)
    routes = live_routes(routes, engines)
    frames = answer_frames(run, nccl.point_id)
    rows = StepRows.of(run)
    per_t = answers_at_t(run, nccl, routes, rows, book)
    nccl = _with_per_t(nccl, per_t)
    choices = choice_rows(run, frames.get("choices"), nccl, per_t, rows, book) if frames else []
    alternatives = alternative_rows(run, frames.get("alternatives"), routes, rows, book) if frames else []
    fused = fused_rows(run, reference_missing(run, nccl.env), book)
    engines = msgspec.structs.replace(engines, hints=fused_hints(run, fused, book, engines.fusion_refused))
    parts = step_parts(run, frames.get("headline"), per_t, nccl.point_id) if frames else None
    steps = verify_steps(run, parts, per_t, book) if parts is not None else []
    projection = projection_rows(run, parts, book) if parts is not None else []
    spec = speculation(run, projection, any(s.applied for s in steps), book)
    plan = measurement_plan(run, nccl, choices, fused, book)
    head = headline(run, nccl, steps, plan, book)
    shown = [(a.tokens, s, pt.shown_label(run, s, p), p) for a in per_t for s, p in _settings(run, a)]
    observed = observed_decision(run, nccl.point_id)
    environment = with_nccl_shown(environment, run, nccl_choices(run, shown), observed)
    sites, skew, draft = pt.per_collective(run, per_t)
    tables = Tables(
        choices=choices,
        alternatives=alternatives,
        without_result=missing_rows(run),
        breakdown=breakdown_rows(run, parts, per_t, book) if parts is not None else [],
        projection=projection,
        points=pt.points_table(run),
        matrix=pt.compat_matrix(run),
        heatmaps=pt.heatmaps(run),
        heatmap_unranked=bool(run.untested),
        collectives=pt.collectives(run),
        sites=sites,
        skew=skew,
        draft=draft,
        answer_live_note=pt.answer_live_note(run, per_t, nccl.point_id),
    )
    return Decision(
        run=run_facts(run, asked_engines(run)),
        environment=environment,
        claims=list(book.claims.values()),
        nccl=nccl.answer,
        routes=routes,
        routing=routing,
        fused=fused,
        steps=steps,
        speculation=spec,
        engines=engines,
        plan=plan,
        headline=head,
        unconfirmed=withdrawn,
        tables=tables,
    )


def _settings(run: RunAnalysis, answer: AnswerAtT) -> list[tuple[str, str | None]]:
    return [("baseline", run.baseline), ("answer", answer.point_id)]


def _with_per_t(nccl: NcclStep, per_t: list[AnswerAtT]) -> NcclStep:
    return replace(nccl, answer=msgspec.structs.replace(nccl.answer, per_t=per_t))


def _nothing_ran(run: RunAnalysis, environment: Environment, book: ClaimBook) -> Decision:
    """The Decision of a run with no replayed step (an import of single collectives): its environment and tables,
    nothing compared."""
    tables = Tables(
        choices=[], alternatives=[], without_result=[], breakdown=[], projection=[], points=pt.points_table(run),
        matrix=pt.compat_matrix(run), heatmaps=[], heatmap_unranked=False, collectives=pt.collectives(run), sites=[],
        skew=[], draft=[], answer_live_note="",
    )  # fmt: skip
    empty = Tuner(fields=[], rules=[], inputs=[], ranges={}, reach={}, no_rule="no replayed step: nothing to tune")
    nccl = NcclAnswer(
        file=None, live=False, why="no replayed step in this run", alternative=None, env={}, withdrawn_env={},
        point=None, fastest=None, baseline_total_us=None, claim=None, fastest_claim=None, keeps_baseline=False,
        sets=False, dropped=[], withheld=None, confirmation=None, keep="", notes=[f"Evidence: {run.evidence.label}."], graph_notes=[],
        graph_text=None, tuner=empty, per_t=[],
    )  # fmt: skip
    return Decision(
        run=run_facts(run, asked_engines(run)),
        environment=environment,
        claims=[],
        nccl=nccl,
        routes=[],
        routing=None,
        fused=[],
        steps=[],
        speculation=Speculation(setting="baseline", verdict="", noise=False, lead=""),
        engines=Engines(settings=[], hints=[], paths=[], fusion_refused={}, left_out=[]),
        plan=None,
        headline=Headline(text="No replayed steps in this run: nothing to decide.", claim=None, noise=True, below=[]),
        unconfirmed=book.withdrawn,
        tables=tables,
    )
