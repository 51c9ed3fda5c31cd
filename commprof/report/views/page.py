"""The page: index.html's view of each run's Decision (formatted strings and inline SVG, nothing left to compute),
the side-by-side comparison of several runs (each rendering its own Decision), the cost-model checks, and the
template filled in."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from commprof.records.schema import EAGER_INCLUDES, EAGER_INCLUDES_WHY
from commprof.report.decision.formatting import axis_name, claim_words, fmt_ms, fmt_pct, fmt_x
from commprof.report.decision.observation import EXPLANATIONS_SHOWN, Observed
from commprof.report.decision.types import Decision, Report
from commprof.report.views.answers import UNFUSED_REFERENCE, headline_answers
from commprof.report.views.breakdown import (
    FIELD_REPORT_CASES,
    SETTING_LABELS,
    SHORT_SETTING_LABELS,
    breakdown_rows,
    per_collective,
    projection_rows,
)
from commprof.report.views.costmodel_check import check_view
from commprof.report.views.drawing import draw
from commprof.report.views.environment import environment
from commprof.report.views.notes import engine_paths, engine_settings, page_notes
from commprof.report.views.routing import routing_view
from commprof.report.views.tables import choice_rows, collectives_rows, compat_matrix, heatmap_view, points_table
from commprof.report.views.templating import templates
from commprof.units import format_bytes

OBSERVED_HEADINGS = {True: "The model explains the observation", False: "The model does not explain this box"}


def observed_rows(observed: Observed | None) -> dict[str, Any] | None:
    """The observation card: the engine's number beside the prediction, formatted, and where the model does not
    explain it, the first ranked explanations (commprof explain says more)."""
    if observed is None:
        return None

    def ms(value: Any) -> str:
        return f"{value:.2f} ms" if isinstance(value, (int, float)) else "—"

    given = observed.t_given
    rows = [
        {
            "tokens": f"{r['tokens']}" if given else f"{r['tokens']}?",
            "observed": ms(r["observed_ms"]),
            "today": ms(r["today_ms"]),
            "band": f"{ms(r['band_ms'][0])} – {ms(r['band_ms'][1])}" if r.get("band_ms") else "—",
            "answer": ms(r["answer_ms"]),
            "css": {True: "ok", False: "fail"}.get(r["explained"], ""),
        }
        for r in observed.rows
    ]
    found = observed.explanations
    return {
        "source": observed.source,
        "mode": observed.mode,
        # The card's heading, short like every heading; the verdict's words in full below it.
        "heading": OBSERVED_HEADINGS.get(observed.explained, "Not judged by the model"),
        "verdict": observed.verdict,
        "checks": observed.checks,
        "explanations_note": observed.explanations_note,
        "rows": rows,
        "css": {True: "ok", False: "fail"}.get(observed.explained, "warn"),
        "t_note": "" if given else " (its T not given: set beside every T of the run)",
        "explain": {
            "verdict": found.verdict,
            "entries": [
                {
                    "condition": e.condition,
                    "magnitude": e.magnitude,
                    "state": e.state,
                    "records": e.evidence,
                    "read": e.confirmed_by[0] if e.confirmed_by else "",
                    "fix": e.fix,
                }
                for e in found.explanations[:EXPLANATIONS_SHOWN]
            ],
            "next": found.tell_apart,
            "landmines": found.landmines,
        }
        if found is not None
        else None,
    }


def answer_rows(decision: Decision) -> list[dict[str, Any]]:
    """The routes per T, mode and collective, as the first screen's answer table shows them (each row also carries
    the route's own words as JSON, so a test reads back what the page says)."""
    rows = []
    defaults = (
        "NCCL's defaults" if decision.run.backend == "nccl" else f"NCCL did not run ({decision.run.backend} backend)"
    )
    for r in decision.routes:
        for t in r.tokens:
            key = {
                "tokens": t, "mode": r.mode, "collective": r.collective, "impl": r.impl, "options": r.options,
                "nccl_env": r.nccl_env, "band": [r.min_bytes, r.max_bytes],
            }  # fmt: skip
            rows.append(
                {
                    **key,
                    "run": r.impl
                    + (f" {json.dumps(r.options, sort_keys=True)}" if r.options else "")
                    + (f" ({r.compared} against it)" if r.kept and r.compared else "")
                    + (
                        ""
                        if r.live
                        else f" (switch left off, {'NCCL' if decision.run.backend == 'nccl' else decision.run.backend} runs)"
                    ),
                    "env": " ".join(f"{k}={v}" for k, v in sorted(r.nccl_env.items())) or defaults,
                    "sizes": f"{format_bytes(r.min_bytes)} – {format_bytes(r.max_bytes)}",
                    "verdict": claim_words(decision.claim(r.claim), f"no verdict: {r.reason}"),
                    "key": json.dumps(key, sort_keys=True),
                }
            )
    return sorted(rows, key=lambda row: (row["mode"], row["collective"], row["tokens"]))


def plan_view(decision: Decision) -> dict[str, Any] | None:
    """A simulation's answer: what to measure, ranked, each predicted gain with the model's error as its range."""
    plan = decision.plan
    if plan is None:
        return None
    rows = []
    for c in plan.candidates:
        span = f"{c.low_pct:.1f} to {c.high_pct:.1f} %" if c.low_pct is not None else "error unknown"
        rows.append(
            {
                "rank": c.rank, "point": f"{c.point_id} {c.label}", "what": c.what, "tokens": c.tokens,
                "gain": fmt_pct(c.gain_pct), "range": span,
                "claim": claim_words(decision.claim(c.claim)),
                "settings": " ".join(f"{k}={v}" for k, v in sorted(c.env.items())) or c.impl,
            }
        )  # fmt: skip
    return {"rows": rows, "command": plan.command, "why": plan.why}


@dataclass(frozen=True)
class PageFigures:
    """The parts of a run's page that carry its figures, asked for as soon as the run is decided: a worker draws
    them while the rest of the report is computed (views/drawing.py)."""

    routing: dict[str, Any] | None  # routing_view: the routing plan, its figure the page's first
    per_collective: dict[str, Any]  # breakdown.per_collective: per-op sites per T, the sites figure's data
    svg: dict[str, Any]  # the other figures by name, in the page's order


def page_figures(decision: Decision) -> PageFigures:
    """A Decision's figures, asked for in the page's order."""
    routing = routing_view(decision)
    collectives = per_collective(decision)
    return PageFigures(routing, collectives, _figures(decision, collectives))


def page_view(decision: Decision, texts: dict[str, str], figures: PageFigures) -> dict[str, Any]:
    """The template's view of one run: formatted strings and inline SVG (`figures`: page_figures of its Decision;
    `texts`: its exported files' texts), nothing left to compute."""
    run, env = decision.run, decision.environment
    svg = figures.svg
    page: dict[str, Any] = {
        "name": run.name,
        "run_id": run.run_id,
        "source": run.source,
        "source_label": env.evidence.label,
        "evidence": env.evidence,
        "simulated": run.simulated,
        "banners": [{"level": n.level, "text": n.text} for n in env.notices],
        "headline": decision.headline,
        "plan": plan_view(decision),
        "mode": run.mode,
        "mode_why": run.mode_reason,
        "baseline": run.baseline,
        "notes": page_notes(decision),
        "noise_rule": env.evidence.rule,
        "has_steps": run.has_steps,
        "all_failed": run.all_failed,
        "tokens": run.tokens,
        "answers": headline_answers(decision),
        "observed": observed_rows(env.observed),
        "routing": figures.routing,
        "answer": answer_rows(decision),
        "engine_paths": engine_paths(decision),
        "engine_settings": engine_settings(decision),
        "accepts": [f"{a:g}" for a in run.accepts],
        "choices": choice_rows(decision),
        "shared_gpus": run.shared_gpus,
        "fusion": [
            {
                "tokens": r.tokens,
                "point_id": r.point_id,
                "label": r.label,
                "impl": r.impl,
                "time": fmt_ms(r.median_us),
                "reference": r.reference or "—",
                "reference_time": fmt_ms(r.reference_us),
                "saved": fmt_pct(r.saved_pct),
                "speedup": fmt_x(r.speedup),
                "noise": claim_words(decision.claim(r.claim), r.reason or "not compared"),
            }
            for r in decision.fused
        ],
        "env": environment(decision),
        "texts": {name.replace(".", "_"): text for name, text in texts.items()},
        "hints": decision.engines.hints,
        "breakdown": breakdown_rows(decision),
        "points": points_table(decision),
        "eager_includes": EAGER_INCLUDES,
        "eager_includes_why": EAGER_INCLUDES_WHY,
        "points_tail": decision.tables.points.tail if decision.tables.points is not None else "tail",
        "matrix": compat_matrix(decision),
        "per_collective": figures.per_collective,
        "projection": projection_rows(decision),
        "answer_live_note": decision.tables.answer_live_note,
        "spec_label": _spec_label(decision),
        "collectives": collectives_rows(decision),
        "heatmaps": [heatmap_view(h) for h in decision.tables.heatmaps],
        "heatmap_unranked": decision.tables.heatmap_unranked,
        "heatmap_rows": axis_name(decision.tables.heatmaps[0].rows_axis) if decision.tables.heatmaps else "",
        "heatmap_columns": axis_name(decision.tables.heatmaps[0].columns_axis or None)
        if decision.tables.heatmaps and decision.tables.heatmaps[0].columns_axis
        else "",
        "svg": svg,
    }
    if "drift" in svg:
        page["drift_sentence"] = env.drift["sentence"]
    return page


def _spec_label(decision: Decision) -> str:
    from commprof.report.views.verify_answers import spec_label

    return spec_label(decision)


def _figures(decision: Decision, collectives: dict[str, Any]) -> dict[str, Any]:
    """The run's figures (after the routing plan's), in the page's order."""
    svg: dict[str, Any] = {}
    tables, run = decision.tables, decision.run
    if tables.breakdown:
        parts = pd.DataFrame([_plain(r) for r in tables.breakdown])
        svg["breakdown"] = draw("figures.breakdown_svg", parts, run.compute_given, run.mode, SHORT_SETTING_LABELS)
        if tables.projection:
            svg["projection"] = draw(
                "figures.projection_svg", parts, run.draft_ms or 0.0, tuple(run.accepts), FIELD_REPORT_CASES,
                SETTING_LABELS,
            )  # fmt: skip
    if collectives["per_tokens"]:
        svg["sites"] = draw("figures.sites_svg", collectives["per_tokens"])
    ok = [c for c in tables.collectives if c["status"] == "ok"]
    if ok:
        svg["collectives"] = draw("figures.collectives_svg", pd.DataFrame([{**c, "source": run.source} for c in ok]))
    drift = decision.environment.drift
    if drift is not None and len(drift["samples"]) >= 2:
        svg["drift"] = draw("drift_figure.drift_svg", drift)
    return svg


def _plain(row: Any) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__struct_fields__}


def comparison_view(decisions: list[Decision]) -> dict[str, Any] | None:
    """Several runs side by side, each from its own Decision: per run and T, the baseline's and the answer's step
    time and the claim at that T (what the answer runs there against the baseline); a simulated run's answer is its
    measurement plan, each candidate a proposal to measure, never an answer applied. None for a single run."""
    if len(decisions) < 2:
        return None
    named = [(f"{d.run.name} ({d.environment.evidence.label})", d) for d in decisions if d.nccl.per_t]
    rows = []
    heads = {}
    for k, (name, decision) in enumerate(named):
        rows += _compared_rows(name, decision)
        applied = decision.plan is None  # a simulation applies nothing: its baseline alone is drawn
        heads[f"{k + 1}. {name}"] = pd.DataFrame(
            [
                {"tokens": a.tokens, "baseline_us": a.baseline_us, "answer_us": a.answer_us if applied else None}
                for a in decision.nccl.per_t
            ]
        )
    return {
        "svg": draw("figures.comparison_svg", heads) if heads else "",
        "rows": rows,
        "note": " ".join(f"{d.run.name}: {d.environment.evidence.label}; {d.headline.text}" for d in decisions),
    }


PROPOSED = "proposed, not measured: predicted"  # a simulated run's row: a candidate of its plan, to measure


def _compared_rows(name: str, decision: Decision) -> list[dict[str, Any]]:
    """One run's rows: a measured run's answer at each T; a simulated run's plan, candidate by candidate."""
    plan = decision.plan
    if plan is None:
        return [
            {
                "run": name,
                "tokens": at.tokens,
                "baseline": fmt_ms(at.baseline_us),
                "answer": fmt_ms(at.answer_us),
                "verdict": claim_words(decision.claim(at.claim), "keeps the baseline: nothing compared"),
                "settings": at.settings,
            }
            for at in decision.nccl.per_t
        ]
    if not plan.candidates:
        return [{"run": name, "tokens": "", "baseline": "—", "answer": "nothing to measure",
                 "verdict": "no setting is predicted faster than the baseline", "settings": ""}]  # fmt: skip
    rows = []
    for c in plan.candidates:
        claim = decision.claim(c.claim)
        scale = 1000.0 if claim is not None and claim.unit == "ms" else 1.0
        settings = " ".join(f"{k}={v}" for k, v in sorted(c.env.items())) or c.label
        rows.append(
            {
                "run": name,
                "tokens": c.tokens,
                "baseline": fmt_ms(claim.before * scale) if claim is not None else "—",
                "answer": f"to measure (rank {c.rank})",
                "verdict": f"{PROPOSED} {claim_words(claim)}",
                "settings": f"{c.point_id}: {settings} (measure first: confirm.toml)",
            }
        )
    return rows


def index_html(report: Report, pages: list[dict[str, Any]], generated: str | None = None) -> str:
    """templates/index.html filled in: every run's page, the comparison, the banners and the cost-model checks."""
    banners_shown = [b for page in pages for b in page["banners"]]
    if report.incomparable:
        banners_shown.insert(0, {"level": "fail", "text": f"Not comparable: {report.incomparable}."})
    return (
        templates()
        .get_template("index.html")
        .render(
            runs=[{**page, "anchor": f"r{k}"} for k, page in enumerate(pages, 1)],
            comparison=comparison_view(report.runs),
            banners=banners_shown,
            costmodel_checks=[check_view(check) for check in report.costmodel_checks],
            band=f"±{report.costmodel_checks[0].band * 100:.0f} %" if report.costmodel_checks else "",
            unfused_reference=UNFUSED_REFERENCE,
            title=" vs ".join(d.run.name for d in report.runs),
            generated=generated or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        )
    )
