"""The Decision's second step, answer (a): the NCCL environment over every T (the ranking's fastest, in its
minimal form, judged against the baseline), the one NCCL file that applies it (recommend.env or nccl_tuner.conf's
per-size rules), and the claims behind both. It reads the environment step's evidence and observation only. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from commprof.evidence import MEASURED
from commprof.nccl_graph.export import GraphExport, graph_export
from commprof.report.analysis.apply import apply_plan
from commprof.report.analysis.claims import ClaimBook
from commprof.report.analysis.interleaved import MEASURED_AGAIN
from commprof.report.analysis.nccl_choice import NcclChoice, choose_environment, confirmed_choice
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.tuner_rules import TUNER_FIELDS, ApplyPlan
from commprof.report.analysis.words import how_to_firm_up, keep_text, not_a_result_notes
from commprof.report.decision.formatting import claim_words, finite_or_none, fmt_ms
from commprof.report.decision.types import RECOMMEND_ENV, NcclAnswer, PointRef, Tuner, TunerInput


@dataclass(frozen=True)
class NcclStep:
    """What the step decided, for the steps after it."""

    choice: NcclChoice
    plan: ApplyPlan
    answer: NcclAnswer

    @property
    def point_id(self) -> str | None:
        """The point whose environment recommend.env holds (the baseline's where it keeps it)."""
        return self.answer.point.point_id if self.answer.point is not None else None

    @property
    def env(self) -> dict[str, str]:
        """The NCCL environment the answer sets, live or not ({} where it keeps the baseline's)."""
        return dict(self.answer.env) if self.answer.file == RECOMMEND_ENV else {}


def nccl_step(run: RunAnalysis, book: ClaimBook) -> NcclStep:
    """Choose (a), the file that applies it, and make the claim over every T."""
    ranked = run.ok_ranked  # the candidates are judged on these rows only
    choice = choose_environment(
        ranked, run.baseline, run.mode, run.evidence, impl=run.baseline_family, withheld=run.unfinished
    )
    if run.interleaved is not None:  # a run that confirmed beside the baseline answers only with a confirmed point
        choice = confirmed_choice(choice, ranked, run.mode, run.evidence, run.baseline_family, run.interleaved)
    plan = apply_plan(run, choice)
    graph = graph_of(run, plan.env, choice.chosen)
    plan = replace(plan, env=graph.env)
    claim, fastest_claim = _claims(run, choice, book)
    live = run.evidence.level == MEASURED and not book.withdrawn and choice.withheld is None
    sets = plan.choice is not None and not book.withdrawn
    answer = NcclAnswer(
        file=plan.choice if sets else None,
        live=live,
        why=book.withdrawn or plan.why,
        alternative=plan.alternative,
        env=dict(plan.env) if plan.choice else {},
        withdrawn_env=dict(plan.env) if book.withdrawn and choice.recommends else {},
        point=point_ref(choice.chosen, run),
        fastest=point_ref(choice.fastest, run),
        baseline_total_us=finite_or_none(choice.baseline_total_us),
        claim=claim,
        fastest_claim=fastest_claim,
        keeps_baseline=choice.keeps_baseline,
        sets=sets,
        dropped=list(choice.dropped),
        withheld=choice.withheld,
        confirmation=choice.confirmation,
        keep=keep_text(run, choice),
        notes=recommend_notes(run, choice, book, (claim, fastest_claim)),
        graph_notes=list(graph.notes),
        graph_text=graph.text,
        tuner=tuner_of(plan),
        per_t=[],
    )
    return NcclStep(choice, plan, answer)


def _claims(run: RunAnalysis, choice: NcclChoice, book: ClaimBook) -> tuple[str | None, str | None]:
    """The claim over every T (the exported point, or the fastest where the baseline is kept, against the
    baseline) and, where a variable was dropped, the fastest against the exported point."""
    fastest, base = choice.fastest, choice.baseline_total_us
    if fastest is None or choice.beyond_uncertainty is None:
        return None, None
    shown = choice.chosen if choice.recommends else fastest
    tokens = ", ".join(map(str, fastest["tokens_covered"]))
    made = book.compare(
        f"every T: {shown['point_id']} vs {run.baseline}",
        f"{shown['point_id']} ({shown['settings']}) against the baseline {run.baseline}, {run.mode}-mode step time "
        f"summed over T = {tokens}" + (MEASURED_AGAIN if _confirmed_figures(run, shown) else ""),
        ((shown["total_us"], shown["p90_total_us"]), (base, math.nan)),
        unknown=_unconfirmable(run, choice, str(shown["point_id"])),
    )
    dropped = None
    if choice.dropped and choice.exported is not None:
        exported = choice.exported
        dropped = book.compare(
            f"every T: {fastest['point_id']} vs {exported['point_id']}",
            f"{fastest['point_id']} (with {', '.join(choice.dropped)}) against {exported['point_id']}, "
            f"{run.mode}-mode step time summed over T = {tokens}",
            ((fastest["total_us"], fastest["p90_total_us"]), (exported["total_us"], math.nan)),
        )
    return (made.id if made else None), (dropped.id if dropped else None)


def _confirmed_figures(run: RunAnalysis, point: pd.Series) -> bool:
    """Whether the claim's figures are the interleaved confirmation's (the point measured beside the baseline)."""
    found = run.interleaved.of(str(point["point_id"])) if run.interleaved is not None else None
    return found is not None and found.baseline_us is not None and run.interleaved.noise_floor_pct is not None


def _unconfirmable(run: RunAnalysis, choice: NcclChoice, point_id: str) -> str:
    """Why the claim over every T has no verdict in a run whose interleaved confirmation could not confirm its point
    ("" where it has one): the point was not measured again beside the baseline, or the confirmation has no noise
    floor; its first-pass figures, measured apart from the baseline's, decide nothing."""
    interleaved = run.interleaved
    if interleaved is None or not (choice.confirmation or "").startswith("not confirmed"):
        return ""
    found = interleaved.of(point_id)
    if found is None or found.baseline_us is None:
        return (
            f"not judged: {point_id} was not measured again beside the baseline, and its first-pass figures decide "
            f"nothing in a run that confirms ({interleaved.sentence()})"
        )
    if interleaved.noise_floor_pct is None:
        return f"not judged: the interleaved confirmation has no noise floor ({interleaved.sentence()})"
    return ""


def recommend_notes(
    run: RunAnalysis, rec: NcclChoice, book: ClaimBook, claims: tuple[str | None, str | None]
) -> list[str]:
    """recommend.env's comment lines: the evidence, what was chosen and its claim in the claim's words (marked as a
    withdrawn prediction where an observation the model does not explain withdrew it)."""
    lines = [f"Evidence: {run.evidence.label}. Rule: {run.evidence.rule}.", *not_a_result_notes(run)]
    fastest = rec.fastest
    if fastest is None:
        return lines
    claim, against = (book.get(c) for c in claims)
    tokens = ", ".join(map(str, fastest["tokens_covered"]))
    if rec.keeps_baseline and fastest["point_id"] == run.baseline:
        chosen = [f"{keep_text(run, rec)}: no point was faster than the baseline {run.baseline} over T = {tokens}."]
    elif rec.keeps_baseline:
        why = f", but {rec.withheld}" if rec.withheld else ""
        chosen = [
            f'{keep_text(run, rec)}: the fastest point, {fastest["point_id"]} "{fastest["label"]}" '
            f"({fastest['settings']}), over T = {tokens} against the baseline {run.baseline}: "
            f"{claim_words(claim, 'not compared')}{why}.",
            how_to_firm_up(run),
        ]
    else:
        point = rec.chosen
        chosen = [
            f'Point {point["point_id"]} "{point["label"]}" ({point["settings"]}, impl {point["impl"]}): its '
            f"{run.mode}-mode step time summed over T = {tokens} is {fmt_ms(point['total_us'])} vs "
            f"{fmt_ms(rec.baseline_total_us)} for the baseline {run.baseline}: {claim_words(claim)}."
        ]
        if rec.dropped:
            chosen.append(
                f"Not exported: {', '.join(rec.dropped)}. The fastest point, {fastest['point_id']}, sets "
                f"{'it' if len(rec.dropped) == 1 else 'them'} too; against {point['point_id']}: "
                f"{claim_words(against, 'not compared')}."
            )
    if rec.confirmation:
        chosen.append(f"{rec.confirmation[0].upper()}{rec.confirmation[1:]}.")
    if book.withdrawn:
        chosen = [f"Predicted, and withdrawn by the engine's observed step time: {line}" for line in chosen]
    return lines + chosen


def point_ref(row: pd.Series | None, run: RunAnalysis) -> PointRef | None:
    if row is None:
        return None
    covered = row.get("tokens_covered")
    return PointRef(
        point_id=str(row["point_id"]),
        label=str(row.get("label")),
        impl=str(row.get("impl")),
        settings=str(row.get("settings")),
        env={str(k): str(v) for k, v in dict(row.get("env") or {}).items()},
        total_us=finite_or_none(row.get("total_us")),
        p90_total_us=finite_or_none(row.get("p90_total_us")),
        tokens=[int(t) for t in covered] if covered is not None else [],
    )


def tuner_of(plan: ApplyPlan) -> Tuner:
    inputs = [
        TunerInput(
            collective=str(r.collective),
            bytes=int(r.bytes),
            tokens=int(r.tokens),
            point_id=str(r.point_id),
            label=str(r.label),
            algorithm=r.algorithm if isinstance(r.algorithm, str) else None,
            protocol=r.protocol if isinstance(r.protocol, str) else None,
            note=note if isinstance(note := getattr(r, "note", None), str) and note else None,
        )
        for r in (plan.inputs.sort_values(["collective", "bytes"]).itertuples() if not plan.inputs.empty else [])
    ]
    return Tuner(
        fields=list(TUNER_FIELDS),
        rules=[rule.csv() for rule in plan.rules],
        inputs=inputs,
        ranges={k: (int(v[0]), int(v[1])) for k, v in plan.ranges.items()},
        reach={k: (int(v[0]), int(v[1])) for k, v in plan.reach.items()},
        no_rule=plan.no_rule,
    )


def graph_of(run: RunAnalysis, env: dict[str, str], point: pd.Series | None) -> GraphExport:
    """The exported point's NCCL_GRAPH_FILE as its records name it (nccl.graph_file), exported only if the file is
    still the one measured: the one file the decision reads, to check its hash and the GPUs it describes."""
    ran_with = None
    if point is not None and "nccl" in run.frame:
        rows = run.frame[run.frame["point_id"] == point["point_id"]]
        ran_with = next((n["graph_file"] for n in rows["nccl"] if isinstance(n, dict) and n.get("graph_file")), None)
    text = None
    if ran_with and ran_with.get("path"):
        try:
            text = Path(ran_with["path"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
    return graph_export(env, ran_with, text, run.meta)
