"""The page: index.html's view of each run (formatted strings and inline SVG, nothing left to compute), its
banners, the side-by-side comparison of several runs, and the template filled in."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from typing import Any

from commprof.explain.ranking import Explained
from commprof.explain.words import state_words
from commprof.records.schema import EAGER_INCLUDES, EAGER_INCLUDES_WHY
from commprof.report.analysis.compared import CostModelCheck
from commprof.report.analysis.costmodel_check import PREDICTION_BAND
from commprof.report.analysis.decision import Decision, decided_fusion
from commprof.report.analysis.formatting import axis_name, fmt_ms, fmt_pct, fmt_x, tail_header
from commprof.report.analysis.projection import FIELD_REPORT_CASES
from commprof.report.analysis.ranking import UNFUSED_REFERENCE_IMPL
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.words import how_to_firm_up, spec_label
from commprof.report.exports.files import RunExports
from commprof.report.views.answers import headline_answers
from commprof.report.views.box import environment
from commprof.report.views.breakdown import (
    SETTING_LABELS,
    SHORT_SETTING_LABELS,
    answer_live_note,
    breakdown_rows,
    per_collective,
    projection_rows,
)
from commprof.report.views.costmodel_check import check_view
from commprof.report.views.drawing import draw
from commprof.report.views.notes import engine_paths, engine_settings, page_notes
from commprof.report.views.routing import routing_view
from commprof.report.views.tables import choice_rows, collectives_rows, compat_matrix, heatmap_view, points_table
from commprof.report.views.templating import templates
from commprof.units import format_bytes


def banners(run: RunAnalysis) -> list[dict[str, str]]:
    """The page's banners for one run: shared GPUs, simulated, a failing box, failed records, doctor warnings,
    eager mode."""
    out = []
    if run.drift is not None and run.drift.exceeded:
        out.append({"level": "shared", "text": f"{run.name}: {run.drift.sentence()}."})
    if run.spacing is not None:
        out.append({"level": "info", "text": f"{run.name}: {run.spacing['sentence']}"})
    if run.shared_gpus:
        out.append(
            {
                "level": "shared",
                "text": f"SHARED GPUs: in {run.name} several ranks ran on one GPU "
                "(--share-gpus). A functional check that every setting runs and gives the right answer, not "
                "a tuning result: its times say nothing about a box with one GPU per rank.",
            }
        )
    if run.simulated:
        out.append(
            {
                "level": "sim",
                "text": f"SIMULATED: {run.name} comes from the cost model ({run.evidence.label}), not from a "
                "measurement. A predicted gain counts only beyond the model's expected error; nothing was run, "
                "so CUDA-graph capture and correctness are not tested. Measure before acting on it.",
            }
        )
        if run.evidence.uncalibrated:
            out.append({"level": "sim", "text": f"Uncalibrated model: {how_to_firm_up(run)}"})
    elif run.source == "nccl-tests":
        out.append({"level": "info", "text": f"{run.name}: imported from nccl-tests logs."})
    doctor = run.doctor
    if doctor and doctor["failed"]:
        out.append(
            {
                "level": "fail",
                "text": f"{run.name}: doctor checks failed ({', '.join(doctor['failed'])}): "
                "numbers measured on a box with failing checks are not tuning results. Fix the box "
                "(section 2 says how) and measure again.",
            }
        )
    if run.all_failed:
        out.append(
            {
                "level": "fail",
                "text": f"{run.name}: every point failed; no tuning result. See the CUDA-graph compatibility matrix.",
            }
        )
    elif run.failed_count:
        counts = run.failures[run.failures["failed"]]["status"].value_counts()
        detail = ", ".join(f"{k} {v}" for k, v in counts.items())
        out.append(
            {
                "level": "fail",
                "text": f"{run.name}: {run.failed_count} of {len(run.frame)} records failed "
                f"({detail}). Failed settings are excluded from the answer.",
            }
        )
    if doctor and doctor["warned"] and not doctor["failed"]:
        out.append(
            {
                "level": "warn",
                "text": f"{run.name}: doctor warnings ({', '.join(doctor['warned'])}): "
                "the box may not reach its best numbers; see section 2.",
            }
        )
    if run.completeness is not None and not run.completeness.complete:
        out.append({"level": "fail", "text": f"{run.name}: {run.completeness.sentence(run.options.allow_partial)}"})
    if not run.steps.empty and run.mode == "eager":
        out.append({"level": "info", "text": f"{run.name}: headline uses {run.mode_reason}."})
    return out


def observed_rows(observed: dict[str, Any] | None) -> dict[str, Any] | None:
    """The observation card: the engine's number beside the prediction, formatted."""
    if observed is None:
        return None

    def ms(value: Any) -> str:
        return f"{value:.2f} ms" if isinstance(value, (int, float)) else "—"

    given = observed["t_given"]
    rows = [
        {
            "tokens": f"{r['tokens']}" if given else f"{r['tokens']}?",
            "observed": ms(r["observed_ms"]),
            "today": ms(r["today_ms"]),
            "band": f"{ms(r['band_ms'][0])} – {ms(r['band_ms'][1])}" if r.get("band_ms") else "—",
            "answer": ms(r["answer_ms"]),
            "css": {True: "ok", False: "fail"}.get(r["explained"], ""),
        }
        for r in observed["rows"]
    ]
    return {
        **observed,
        "rows": rows,
        "css": {True: "ok", False: "fail"}.get(observed["explained"], "warn"),
        "t_note": "" if given else " (its T not given: set beside every T of the run)",
        "explain": _explained_rows(observed.get("explanations")),
    }


def _explained_rows(explained: Explained | None, shown: int = 3) -> dict[str, Any] | None:
    """The first ranked explanations of an unexplained observation, each in one line (commprof explain says more)."""
    if explained is None:
        return None
    items = [
        {
            "condition": e.condition,
            "magnitude": e.magnitude,
            "state": state_words(e),
            "records": e.evidence.status,
            "read": e.evidence.lines[0] if e.evidence.lines else "",
            "fix": e.evidence.fix if e.conditions else "",
        }
        for e in explained.explanations[:shown]
    ]
    return {
        "verdict": explained.verdict,
        "entries": items,
        "next": explained.tell_apart,
        "landmines": explained.landmines,
    }


def answer_rows(decision: Decision) -> list[dict[str, Any]]:
    """The decision per T, mode and collective, as the first screen's answer table shows it (each row also carries
    the decision's own words as JSON, so a test reads back what the page says)."""
    rows = []
    defaults = "NCCL's defaults" if decision.backend == "nccl" else f"NCCL did not run ({decision.backend} backend)"
    for row in decision.per_tokens():
        key = {k: row[k] for k in ("tokens", "mode", "collective", "impl", "options", "nccl_env", "band")}
        rows.append(
            {
                **row,
                "run": row["impl"]
                + (f" {json.dumps(row['options'], sort_keys=True)}" if row["options"] else "")
                + decision.left_off_note(row["live"]),
                "env": " ".join(f"{k}={v}" for k, v in sorted(row["nccl_env"].items())) or defaults,
                "sizes": f"{format_bytes(row['band'][0])} – {format_bytes(row['band'][1])}",
                "key": json.dumps(key, sort_keys=True),
            }
        )
    return rows


@dataclass(frozen=True)
class PageFigures:
    """The parts of a run's page that carry its figures, asked for as soon as the run is decided: a worker draws
    them while the rest of the report is computed (views/drawing.py)."""

    routing: dict[str, Any]  # routing_view: the routing plan, its figure the page's first
    per_collective: dict[str, Any]  # breakdown.per_collective: per-op sites per T, the sites figure's data
    svg: dict[str, Any]  # the other figures by name, in the page's order


def page_figures(run: RunAnalysis, decision: Decision) -> PageFigures:
    """A decided run's figures, asked for in the page's order (`run`: with the decision's tables)."""
    routing = routing_view(run, decision.routing)
    collectives = per_collective(run, decision)
    return PageFigures(routing, collectives, _figures(run, collectives))


def page_view(run: RunAnalysis, exports: RunExports, figures: PageFigures) -> dict[str, Any]:
    """The template's view of one run: formatted strings and inline SVG (`figures`: page_figures of the run and
    its decision), nothing left to compute."""
    tokens = run.tokens
    routing, collectives, svg = figures.routing, figures.per_collective, figures.svg
    page: dict[str, Any] = {
        "name": run.name,
        "run_id": run.run_id,
        "source": run.source,
        "source_label": run.evidence.label,
        "evidence": run.evidence,
        "simulated": run.simulated,
        "banners": banners(run),
        "mode": run.mode,
        "mode_why": run.mode_reason,
        "baseline": run.baseline,
        "notes": page_notes(run, exports),
        "noise_rule": run.evidence.rule,
        "beyond": run.evidence.beyond,
        "has_steps": not run.steps.empty,
        "all_failed": run.all_failed,
        "tokens": tokens,
        "answers": headline_answers(run, exports.decision),
        "observed": observed_rows(run.observed),
        "routing": routing,
        "answer": answer_rows(exports.decision),
        "engine_paths": engine_paths(exports.decision),
        "engine_settings": engine_settings(exports.decision),
        "accepts": [f"{a:g}" for a in run.options.accepts],
        "choices": choice_rows(run, exports.decision),
        "shared_gpus": run.shared_gpus,
        "fusion": [
            {
                "tokens": int(r.tokens),
                "point_id": r.point_id,
                "label": r.label,
                "impl": r.impl,
                "time": fmt_ms(r.median_us),
                "reference": r.reference,
                "reference_time": fmt_ms(r.reference_us),
                "saved": fmt_pct(r.saved_pct),
                "speedup": fmt_x(r.speedup),
                "noise": "yes"
                if r.beyond_uncertainty is True
                else "slower"
                if r.slower_beyond_uncertainty is True
                else f"no: {run.evidence.within}"
                if r.beyond_uncertainty is False
                else "—",
            }
            for r in decided_fusion(run.fusion, exports.decision, run.mode).itertuples()
        ],
        "env": environment(run, exports.decision),
        "exports": exports,
        "breakdown": breakdown_rows(run, exports.decision),
        "points": points_table(run),
        "eager_includes": EAGER_INCLUDES,
        "eager_includes_why": EAGER_INCLUDES_WHY,
        "points_tail": tail_header(
            run.speedups["tail_stat"].unique() if "tail_stat" in run.speedups else (), run.simulated
        ),
        "matrix": compat_matrix(run),
        "per_collective": collectives,
        "projection": projection_rows(run, exports.decision),
        "answer_live_note": answer_live_note(run, exports.decision),
        "spec_label": spec_label(run),
        "collectives": collectives_rows(run),
        "heatmaps": [],
        "heatmap_unranked": False,
        "heatmap_rows": "",
        "heatmap_columns": "",
        "svg": svg,
    }
    if run.heatmaps:
        page["heatmaps"] = [heatmap_view(t, every, ranked) for t, every, ranked in run.heatmaps]
        page["heatmap_unranked"] = bool(run.untested)
        rows_axis, *columns_axis = run.heatmap_axes
        page["heatmap_rows"] = axis_name(rows_axis)
        page["heatmap_columns"] = axis_name(columns_axis[0]) if columns_axis else ""
    if "drift" in svg:
        page["drift_sentence"] = run.drift.sentence()
    return page


def _figures(run: RunAnalysis, collectives: dict[str, Any]) -> dict[str, Any]:
    """The run's figures (after the routing plan's), in the page's order."""
    svg: dict[str, Any] = {}
    if not run.breakdown.empty:
        svg["breakdown"] = draw(
            "figures.breakdown_svg", run.breakdown, run.options.compute.given, run.mode, SHORT_SETTING_LABELS
        )
    if not run.projection.empty:
        svg["projection"] = draw(
            "figures.projection_svg",
            run.breakdown,
            run.options.draft_ms or 0.0,
            run.options.accepts,
            FIELD_REPORT_CASES,
            SETTING_LABELS,
        )
    if collectives["per_tokens"]:
        svg["sites"] = draw("figures.sites_svg", collectives["per_tokens"])
    if not run.collectives.empty and (run.collectives["status"] == "ok").any():
        svg["collectives"] = draw("figures.collectives_svg", run.collectives)
    if run.drift is not None and len(run.drift.samples) >= 2:
        svg["drift"] = draw("drift_figure.drift_svg", run.drift)
    return svg


def comparison_view(runs: list[RunAnalysis]) -> dict[str, Any] | None:
    """Several runs side by side: per run and T, the baseline's and the answer's step time (decision.answer_tables: the
    decision's point at T), None for a single run."""
    if len(runs) < 2:
        return None
    named = [
        (f"{r.name} ({r.evidence.label})", r) for r in runs if not r.headline.empty and "answer_point_id" in r.headline
    ]
    rows = []
    for name, run in named:
        points = run.steps.drop_duplicates("point_id").set_index("point_id")
        for h in run.headline.itertuples():
            point = h.answer_point_id
            kept = point == run.baseline or point is None
            impl = points.loc[point, "impl"] if point in points.index else ""
            settings = points.loc[point, "settings"] if point in points.index else "—"
            saved = 100.0 * (h.baseline_us - h.answer_us) / h.baseline_us if h.baseline_us else float("nan")
            rows.append(
                {
                    "run": name,
                    "tokens": int(h.tokens),
                    "baseline": fmt_ms(h.baseline_us),
                    "answer": fmt_ms(h.answer_us),
                    "saved": "—" if kept else fmt_pct(saved),
                    "verdict": "keeps the baseline" if kept else h.answer_verdict,
                    "settings": f"{point}: " + (settings if impl in run.baseline_family else f"{impl} ({settings})"),
                }
            )
    headlines = {f"{k + 1}. {name}": r.headline for k, (name, r) in enumerate(named)}
    return {
        "svg": draw("figures.comparison_svg", headlines) if headlines else "",
        "rows": rows,
        "note": " ".join(f"{r.name}: {r.evidence.label}; {r.evidence.rule}." for r in runs),
    }


# Banner order on the page: what makes every number doubtful first.
_BANNER_ORDER = {"shared": 0, "sim": 0, "fail": 1, "warn": 2, "info": 3}


def index_html(
    runs: list[RunAnalysis], pages: list[dict[str, Any]], checks: list[CostModelCheck], mismatch: str | None = None
) -> str:
    """templates/index.html filled in: every run's page, the comparison, the banners and the cost-model checks
    (`mismatch`: why the runs' steps are not comparable, compared.incomparable)."""
    banners_shown = sorted(
        (b for page in pages for b in page["banners"]), key=lambda b: _BANNER_ORDER.get(b["level"], 3)
    )
    if mismatch:
        banners_shown.insert(0, {"level": "fail", "text": f"Not comparable: {mismatch}."})
    return (
        templates()
        .get_template("index.html")
        .render(
            runs=[{**page, "anchor": f"r{k}"} for k, page in enumerate(pages, 1)],
            comparison=comparison_view(runs),
            banners=banners_shown,
            costmodel_checks=[check_view(check) for check in checks],
            band=f"±{PREDICTION_BAND * 100:.0f} %",
            unfused_reference=UNFUSED_REFERENCE_IMPL,
            title=" vs ".join(r.name for r in runs),
            generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        )
    )
