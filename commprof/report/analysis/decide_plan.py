"""The Decision's last steps: a simulation's measurement plan (a simulation proposes, a measurement disposes: every
setting it predicts faster than the baseline, ranked by its predicted gain with the model's error as a range, and
the sweep that measures them on the box) and the headline, at most 25 words: the answer, its figure, its basis.
Reads every step before. Pure."""

from __future__ import annotations

import json
from typing import Any

import tomllib

from commprof.records.run_meta import as_written
from commprof.report.analysis.claims import ClaimBook
from commprof.report.analysis.decide_nccl import NcclStep
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.claim import Claim
from commprof.report.decision.formatting import range_pct, tokens_text
from commprof.report.decision.tables import ChoiceRow
from commprof.report.decision.types import (
    TUNER_CONF,
    Candidate,
    FusedRow,
    Headline,
    MeasurementPlan,
    PointRef,
    VerifyStep,
)

MAX_CANDIDATES = 8
MAX_HEADLINE_WORDS = 25
# The [run] keys confirm.toml keeps from the simulated sweep: what the step is and how long each point is timed.
RUN_KEYS = (
    "model", "tp", "tokens", "phase", "dtype", "interconnect", "iterations", "warmup", "point_timeout_s", "layout",
    "engine", "spec", "num_steps", "draft_vocab", "dp_attention", "compute", "skew",
)  # fmt: skip


def measurement_plan(
    run: RunAnalysis, nccl: NcclStep, choices: list[ChoiceRow], fused: list[FusedRow], book: ClaimBook
) -> MeasurementPlan | None:
    """A simulated run's answer: the baseline and the settings it predicts faster, ranked, and confirm.toml."""
    if not run.simulated or run.steps.empty or run.baseline is None:
        return None
    found: dict[str, tuple[Claim, int, str]] = {}
    compared = [(r.point_id, r.claim, r.tokens, _kind(run, r.impl)) for r in choices]
    compared += [(r.point_id, r.claim, r.tokens, "fused all-reduce + RMSNorm") for r in fused]
    verify = [c for c in compared if c[2] > 1]
    for point_id, claim_id, tokens, what in verify or compared:  # ranked by the verify steps' T where there are
        claim = book.get(claim_id)
        if claim is None or claim.gain_pct <= 0 or point_id == run.baseline:
            continue
        if point_id not in found or claim.gain_pct > found[point_id][0].gain_pct:
            found[point_id] = (claim, tokens, what)
    ranked = sorted(found.items(), key=lambda item: -item[1][0].gain_pct)[:MAX_CANDIDATES]
    points = run.steps.drop_duplicates("point_id").set_index("point_id")
    candidates = [
        _candidate(rank, point_id, claim, tokens, what, points.loc[point_id])
        for rank, (point_id, (claim, tokens, what)) in enumerate(ranked, 1)
    ]
    tp = run.meta.world_size or (int(run.steps["tp"].dropna().iloc[0]) if "tp" in run.steps else 0)
    return MeasurementPlan(
        baseline=nccl.answer.point if nccl.answer.point and nccl.answer.point.point_id == run.baseline else _base(run),
        candidates=candidates,
        run=_run_table(run),
        report=_report_table(run),
        command=f"torchrun --nproc-per-node {tp} -m commprof.allreduce_sweep --sweep confirm.toml",
        why=(
            "a simulation ran nothing: every setting here is a prediction of the cost model, to be measured on the "
            "box before anything is set; confirm.toml measures the baseline and these candidates"
        ),
    )


def _kind(run: RunAnalysis, impl: str) -> str:
    return "NCCL environment" if impl in run.baseline_family else "all-reduce implementation"


def _candidate(rank: int, point_id: str, claim: Claim, tokens: int, what: str, row: Any) -> Candidate:
    error = claim.error_pct
    return Candidate(
        rank=rank,
        point_id=point_id,
        label=str(row["label"]),
        impl=str(row["impl"]),
        options=json.loads(row["options"]) if isinstance(row.get("options"), str) else {},  # the frame's JSON
        env={str(k): str(v) for k, v in dict(row["env"] or {}).items()},
        what=what,
        gain_pct=claim.gain_pct,
        low_pct=claim.gain_pct - error if error is not None else None,
        high_pct=min(claim.gain_pct + error, 100.0) if error is not None else None,  # no step takes less than 0
        tokens=tokens,
        claim=claim.id,
    )


def _base(run: RunAnalysis) -> PointRef | None:
    rows = run.steps[run.steps["point_id"] == run.baseline]
    if rows.empty:
        return None
    row = rows.iloc[0]
    return PointRef(
        point_id=str(run.baseline),
        label=str(row["label"]),
        impl=str(row["impl"]),
        settings=str(row["settings"]),
        env={str(k): str(v) for k, v in dict(row["env"] or {}).items()},
    )


def _run_table(run: RunAnalysis) -> dict[str, Any]:
    """confirm.toml's [run]: the simulated sweep's own, else what meta.json's plan says was replayed."""
    content = run.meta.sweep.content if run.meta.sweep else None
    table: dict[str, Any] = {}
    if content is not None:
        try:
            table = dict(tomllib.loads(content).get("run") or {})
        except tomllib.TOMLDecodeError:
            table = {}
    if not table:
        table = as_written(run.meta.plan) or {}
    return {k: table[k] for k in RUN_KEYS if k in table}


def _report_table(run: RunAnalysis) -> dict[str, Any]:
    return as_written(run.meta.sweep.report if run.meta.sweep else None) or {}


# --------------------------------------------------------------------------------------------- the headline


def headline(run: RunAnalysis, nccl: NcclStep, steps: list[VerifyStep], plan: MeasurementPlan | None,
             book: ClaimBook) -> Headline:  # fmt: skip
    """The first line of the page and of the terminal: the answer, its figure, its basis; at most 25 words."""
    basis = run.evidence.label
    text, claim, noise = _headline(run, nccl, steps, plan, book)
    words = text.split()
    if len(words) > MAX_HEADLINE_WORDS:  # a label longer than any commprof writes: cut, and said to be cut
        text = " ".join(words[: MAX_HEADLINE_WORDS - 1]) + " …"
    below = [f"Basis: {basis}. Rule: {run.evidence.rule}."]
    return Headline(text=text, claim=claim, noise=noise, below=below)


def _headline(run, nccl, steps, plan, book) -> tuple[str, str | None, bool]:
    basis = _short_basis(run)
    if run.steps.empty:
        return "No replayed steps in this run: nothing to decide.", None, True
    if run.all_failed:
        return "No answer: every point failed (see the CUDA-graph compatibility matrix).", None, True
    if book.withdrawn:
        return "No answer: the model does not explain this box's observed step; measure on the box.", None, True
    if nccl.answer.withheld:
        return f"No answer yet: the run is incomplete ({basis}).", None, True
    if plan is not None:
        return _plan_headline(run, plan, steps, book, basis)
    if run.steps["point_id"].nunique() <= 1:
        return f"Nothing compared: only the baseline ran ({basis}).", None, True
    beyond = [(s, book.get(s.claim)) for s in steps if s.claim and book.get(s.claim).beyond]
    what = _what_to_apply(run, nccl, [s for s, _c in beyond])
    if what and beyond:
        gains = range_pct([c.gain_pct for _s, c in beyond])
        at = _span(s.tokens for s, _c in beyond)
        return f"{what}: verify step {gains} faster at T = {at} ({basis}).", beyond[0][1].id, False
    if (nccl.answer.confirmation or "").startswith("not confirmed"):
        return (
            f"Keep {_defaults(run)}: nothing beat them measured again beside them ({basis}).",
            nccl.answer.claim,
            True,
        )
    return f"Keep {_defaults(run)}: nothing beat them by more than its error ({basis}).", nccl.answer.claim, True


def _plan_headline(run, plan: MeasurementPlan, steps, book, basis: str) -> tuple[str, str | None, bool]:
    if not plan.candidates:
        return f"Nothing to measure: no setting is predicted faster than the baseline ({basis}).", None, True
    top = plan.candidates[0]
    verify = [book.get(s.claim) for s in steps if s.claim and s.point_id == top.point_id]
    if verify:
        gains = range_pct([c.gain_pct for c in verify])
        errors = [c.error_pct for c in verify if c.error_pct is not None]
        error = f" (±{max(errors):.0f} %)" if errors else ""
        figure = f"predicted {gains} less verify latency{error}"
        claim = verify[0].id
    else:
        error = f" (±{top.gain_pct - top.low_pct:.0f} %)" if top.low_pct is not None else ""
        figure = f"predicted {top.gain_pct:.0f} % less communication at T = {top.tokens}{error}"
        claim = top.claim
    return f"Measure {top.point_id} ({_short(top.label)}) first: {figure}; {basis}.", claim, False


def _what_to_apply(run: RunAnalysis, nccl: NcclStep, faster: list[VerifyStep]) -> str:
    """What the files set live for the faster verify steps: the NCCL file, the engine switch of an implementation
    the steps run (a routed band's, set live), or both; "" where nothing is set."""
    live = nccl.answer.file is not None and nccl.answer.live
    what = "Apply nccl_tuner.conf" if nccl.answer.file == TUNER_CONF else f"Set {_point(nccl.answer.point)}"
    switched = _switched(run, faster)
    if not switched:
        return what if live else ""
    engine = f"switch the engine to {', '.join(switched)} (engine_flags.txt)"
    return f"{what} and {engine}" if live else engine[:1].upper() + engine[1:]


def _switched(run: RunAnalysis, steps: list[VerifyStep]) -> list[str]:
    """The implementations other than the baseline's that these verify steps run (a routed band's, its switch
    live), each once."""
    impl = run.steps.drop_duplicates("point_id").set_index("point_id")["impl"]
    found = [str(impl.get(s.point_id)) for s in steps if s.point_id in impl.index]
    return list(dict.fromkeys(i for i in found if i not in run.baseline_family))


def _span(tokens) -> str:
    """A few T as "4, 8, 16"; more as their range, so the headline stays short."""
    tokens = sorted(tokens)
    return tokens_text(tokens) if len(tokens) <= 3 else f"{tokens[0]}–{tokens[-1]}"


def _point(point: PointRef | None) -> str:
    return f"{point.point_id} ({_short(point.label)})" if point is not None else "the answer"


def _short(label: str) -> str:
    """A label in at most three words."""
    words = label.split()
    return " ".join(words[:3]) + ("…" if len(words) > 3 else "")


def _short_basis(run: RunAnalysis) -> str:
    evidence = run.evidence
    if evidence.simulated:
        return f"simulated with {evidence.calibration or 'the uncalibrated model'}"
    if evidence.level == "measured":
        return f"measured on {evidence.backend}" if evidence.backend else "measured"
    return "imported"


def _defaults(run: RunAnalysis) -> str:
    name = "NCCL" if run.backend in (None, "nccl") else str(run.backend)
    return f"{name}'s defaults"
