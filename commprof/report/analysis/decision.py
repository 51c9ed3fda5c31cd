"""The run's one answer: per collective, mode and size band, the implementation, its options and the NCCL
environment under it, the point it was judged against (always the NCCL environment the answer itself sets), the
margin, the rule and the error figures; and what each engine must be told for it. Pure.

Built once per run from its analysis (`decide`); the first screen, the cards, the routing figure, summary.json,
recommend.env, nccl_tuner.conf, engine_flags.txt and routing.txt render only this object. Where a file cannot
express part of the answer, the Decision says what is left out and why (`left_out`), so that no file states
another answer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from commprof.evidence import MEASURED
from commprof.impls.registry import builtin_classes
from commprof.nccl_graph.export import GraphExport, graph_export
from commprof.records.schema import FUSED
from commprof.report.analysis import routing as rt
from commprof.report.analysis import routing_candidates as rc
from commprof.report.analysis.answer_frames import answer_frames
from commprof.report.analysis.answer_routes import Route, route_of_band, tokens_at, unjudged, withdrawn
from commprof.report.analysis.apply import apply_plan
from commprof.report.analysis.crossovers import routing_edges
from commprof.report.analysis.engine_dispatch import (
    TABLES,
    Op,
    engine_paths,
    engines_for,
    fusion_flag_fails,
    library_note,
    parse_engine,
    paths_basis,
)
from commprof.report.analysis.frame import ok_rows
from commprof.report.analysis.nccl_answer import (
    NcclAnswer,
    SpeculationAnswer,
    StepAnswer,
    nccl_answer,
    reference_missing,
    speculation_answer,
    step_answers,
)
from commprof.report.analysis.projection import ShownPoints, breakdown, projection
from commprof.report.analysis.routing_settings import EngineSetting, routing_settings
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.run_shape import box_of, compute_capability, step_dtype, step_shape
from commprof.report.analysis.tuner_rules import RECOMMEND_ENV, TUNER_CONF, ApplyPlan


@dataclass(frozen=True)
class Decision:
    """The one answer of a run (one source of it)."""

    run_id: str
    evidence: str  # the run's evidence label (measured on nccl, simulated with ... (expected error ±N %))
    expected_error_pct: float | None  # the run's expected error (a simulation's): the one figure every file quotes
    nccl_file: str | None  # recommend.env, nccl_tuner.conf or None: the one NCCL file to apply
    nccl_why: str
    nccl_env: dict[str, str]  # what recommend.env exports ({}: NCCL's defaults)
    nccl_point: str | None  # the point whose environment that is
    tuner_rules: tuple[str, ...]  # nccl_tuner.conf's active CSV lines
    routes: tuple[Route, ...]
    engine: tuple[EngineSetting, ...]
    left_out: tuple[str, ...]  # what no file expresses, and why
    engine_paths: tuple[dict[str, Any], ...] = ()  # per engine asked for: each op group's path, today and with it
    nccl_notes: tuple[str, ...] = ()  # recommend.env's words on its NCCL_GRAPH_FILE: exported at which file, or why not
    graph_text: str | None = field(repr=False, compare=False, default=None)  # the graph file to copy beside it
    plan: ApplyPlan = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    # The answer's per-T tables (headline, choices, alternatives, breakdown, projection: answer_frames, the headline
    # restated on the point the answer runs at each T): every table below the first screen names what it chose.
    tables: dict[str, pd.DataFrame] = field(repr=False, compare=False, default_factory=dict)
    speculation: SpeculationAnswer | None = None  # whether speculative decoding pays with what the answer applies
    routing: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)  # the plan behind `routes`
    backend: str = "nccl"  # the backend the baseline ran on (gloo on CPU ranks: NCCL never ran)
    unconfirmed: str = ""  # why nothing is recommended though the model predicts a gain (the box contradicts it)
    withdrawn_env: dict[str, str] = field(default_factory=dict)  # the environment an observation withdrew
    nccl_answer: NcclAnswer | None = None  # (a): the environment over every T as judged, its figures and words
    steps: tuple[StepAnswer, ...] = ()  # per verify T: the verify latency with the answer, its error and verdict
    compute_capability: float | None = None  # the run's GPUs' (what the engines' fusion dispatch reads)
    fusion_refused: dict[str, str] = field(default_factory=dict)  # engine -> why its fusion flag cannot act here
    engines: tuple[str, ...] = ("sglang", "vllm")  # the engines asked for (--engine): the only ones any output names

    @property
    def baseline_name(self) -> str:
        """What the kept sizes run on, as the files and the page name it: NCCL, or the backend that ran instead."""
        return "NCCL" if self.backend == "nccl" else self.backend

    @property
    def nccl_answer_point(self) -> str | None:
        """The point whose NCCL environment (a) exports (the baseline where it keeps it)."""
        return self.nccl_answer.point_id if self.nccl_answer is not None else None

    def names_engine(self, engine: str) -> bool:
        """Whether an output may name `engine` ("SGLang", "vLLM", "SGLang and vLLM"): one of those asked for."""
        return any(name in engine.lower() for name in self.engines)

    def runs_on(self, route: Route) -> str:
        """The name of what runs a band: the baseline's name where it kept the band, else the implementation."""
        return self.baseline_name if route.kept else route.impl

    def left_off_note(self, live: bool) -> str:
        """What a band's name is followed by where its engine setting is left off (`live` False): the baseline runs."""
        return "" if live else f" (switch left off, {self.baseline_name} runs)"

    def route(self, collective: str, mode: str, nbytes: int) -> Route | None:
        return next(
            (
                r
                for r in self.routes
                if (r.collective, r.mode) == (collective, mode) and r.min_bytes <= nbytes <= r.max_bytes
            ),
            None,
        )

    def answer_point(self, tokens: int, mode: str) -> str | None:
        """The point whose step the answer runs at T in `mode`: the point of the all-reduce band another
        implementation takes at T, else the point whose NCCL environment the answer sets (the baseline's when it
        keeps NCCL's)."""
        for r in self.routes:
            if r.collective == "all_reduce" and r.mode == mode and not r.kept and tokens in r.tokens:
                return r.point_id
        return self.nccl_point

    def live_point(self, tokens: int, mode: str) -> str | None:
        """The point whose step the answer's files actually run at T in `mode`: answer_point where an engine
        setting the files set live runs that band, else the point whose NCCL environment the answer sets. A switch
        left commented out (a simulation's, a run that may not act) sets nothing."""
        route = self._live_route(tokens, mode)
        return route.point_id if route is not None else self.nccl_point

    def live_verdict(self, tokens: int, mode: str) -> str:
        """The verdict that put live_point at T in `mode` there: its band's, else the NCCL environment's ("" where
        the answer keeps the baseline's)."""
        route = self._live_route(tokens, mode)
        if route is not None:
            return f"{route.verdict}: {route.reason}"
        answer = self.nccl_answer
        return f"{answer.verdict}: {answer.reason}" if answer is not None and answer.sets else ""

    def _live_route(self, tokens: int, mode: str) -> Route | None:
        for r in self.routes:
            if r.collective == "all_reduce" and r.mode == mode and not r.kept and tokens in r.tokens:
                return r if self.acts(r) else None
        return None

    def acts(self, route: Route) -> bool:
        """Whether the answer's files make `route` run: NCCL keeps it, or an engine setting they set live runs it."""
        return route.kept or any(
            s.live and s.impl == route.impl and s.min_bytes <= route.max_bytes and route.min_bytes <= s.max_bytes
            for s in self.engine
        )

    def per_tokens(self) -> list[dict[str, Any]]:
        """Per T, mode and collective: what runs there (the rows the first screen and summary.json show)."""
        rows = []
        for r in self.routes:
            for t in r.tokens:
                rows.append(
                    {
                        "tokens": t,
                        "mode": r.mode,
                        "collective": r.collective,
                        "impl": r.impl,
                        "options": r.options,
                        "nccl_env": r.nccl_env,
                        "band": [r.min_bytes, r.max_bytes],
                        "verdict": r.verdict,
                        "reason": r.reason,
                        "live": self.acts(r),  # False: its engine setting is left off, the baseline runs there
                    }
                )
        return sorted(rows, key=lambda row: (row["mode"], row["collective"], row["tokens"]))

    @property
    def live_engine(self) -> list[EngineSetting]:
        return [s for s in self.engine if s.live]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "evidence": self.evidence,
            "backend": self.backend,
            "expected_error_pct": self.expected_error_pct,
            "nccl": {
                "file": self.nccl_file,
                "why": self.nccl_why,
                "env": self.nccl_env,
                "withdrawn_env": self.withdrawn_env,
                "point_id": self.nccl_point,
                "tuner_rules": list(self.tuner_rules),
            },
            "routes": [asdict(r) for r in self.routes],
            "per_tokens": self.per_tokens(),
            "engine": [{**asdict(s), "variables": dict(s.variables)} for s in self.engine],
            "left_out": list(self.left_out),
            "unconfirmed": self.unconfirmed,
            "answer": asdict(self.nccl_answer) if self.nccl_answer is not None else None,
            "steps": [asdict(step) for step in self.steps],
            "speculation": asdict(self.speculation) if self.speculation is not None else None,
            "engine_paths": list(self.engine_paths),
        }


def decide(run: RunAnalysis) -> Decision:
    """The run's one answer, from its analysis."""
    plan = apply_plan(run)
    unconfirmed = not_confirmed(run)
    judged = nccl_answer(run, unconfirmed)
    frames = answer_frames(run, judged.point["point_id"] if judged.point is not None else None)
    run = replace(run, **frames)  # the per-T tables of what was chosen, built once, here
    graph = graph_of(run, plan.env)
    plan = replace(plan, env=graph.env)
    # The answer's environment and every verdict are judged first; an observation the model does not explain only
    # withdraws them afterwards (files comment them out), so it can never change what a verdict compares.
    env = dict(plan.env) if plan.choice == RECOMMEND_ENV else {}
    against = run.reference if env else run.baseline
    if unconfirmed and plan.choice:  # the box contradicts the model: no file may act on its answer
        plan = replace(plan, choice=None, why=unconfirmed)
    routing = run.routing
    if against is not None and against != run.routing_against and run.records:
        routing = judged_routing(run, against, env)
    hidden, dtype_bytes, tokens = step_shape(run)
    at = tokens_at(run.frame)
    routes = tuple(route_of_band(band, against, env, at) for band in routing.get("bands", []))
    if missing := reference_missing(run, env):  # a fused kind's win against the reference under other settings
        routes = tuple(unjudged(r, missing) if r.collective == FUSED else r for r in routes)
    if unconfirmed:
        routes = tuple(withdrawn(r, unconfirmed) for r in routes)
    left_out: list[str] = []
    if plan.choice is None and plan.env:
        left_out.append(f"recommend.env's settings are commented out: {plan.why}")
    elif plan.choice != RECOMMEND_ENV and plan.env:
        left_out.append(
            f"recommend.env's settings are the alternative to {plan.choice}, commented out: the routing is judged "
            "against NCCL's defaults"
        )
    backend = run.backend if run.evidence.level == MEASURED else "nccl"
    engine, notes = routing_settings(routing.get("bands", []), hidden, dtype_bytes, backend, _not_live(run))
    versions = run.meta_view.versions or {}
    engines, chosen = engines_for(run.options.engines, versions)
    asked = tuple(dict.fromkeys(parse_engine(text)[0] for text in engines))
    engine = [s for s in engine if s.engine.lower() in asked]  # never another engine's lines than those asked for
    if unconfirmed:  # withdrawn with every predicted claim: no setting keeps the prediction's "beyond" as its reason
        engine = [replace(s, live=False, why=f"withdrawn: {unconfirmed}") for s in engine]
    left_out += notes + engine_work(routes)
    error = run.evidence.model_error.pct if run.evidence.model_error is not None else None
    answer: dict[str, dict[str, str]] = {}
    for setting in engine:
        answer.setdefault(setting.engine, {}).update(dict(setting.variables))
    ops = [
        Op("layer all-reduce [T, hidden]", t, t * hidden * dtype_bytes, step_dtype(run), hidden)
        for t in tokens
        if hidden
    ]
    box = box_of(run)
    paths = engine_paths(engines, box, ops, answer, chosen) if ops else []
    for entry in paths:  # whether the files set those switches, or leave them off (and why, in `engine`)
        name = entry["engine"].split(" ")[0]
        entry["switches"] = answer.get(name, {})
        entry["live"] = any(s.live for s in engine if s.engine == name)
        entry["flashinfer"] = (
            library_note("flashinfer-python", versions["flashinfer"]) if "flashinfer" in versions else ""
        )
        entry["basis"] = paths_basis(box, backend or "nccl", run.evidence.label if run.evidence.simulated else None)
    decision = Decision(
        run_id=run.run_id,
        evidence=run.evidence.label,
        expected_error_pct=error,
        nccl_file=plan.choice,
        nccl_why=plan.why,
        nccl_env={} if unconfirmed else env,
        withdrawn_env=env if unconfirmed else {},
        nccl_point=against,
        tuner_rules=tuple(rule.csv() for rule in plan.rules) if plan.choice == TUNER_CONF else (),
        routes=routes,
        engine=tuple(engine),
        left_out=tuple(left_out),
        engine_paths=tuple(paths),
        nccl_notes=tuple(graph.notes),
        graph_text=graph.text,
        plan=plan,
        routing=routing,
        backend=backend or "nccl",
        unconfirmed=unconfirmed,
        nccl_answer=judged,
        steps=step_answers(run, judged, unconfirmed),
        compute_capability=compute_capability(run.meta),
        fusion_refused=fusion_refusals(compute_capability(run.meta)),
        engines=asked,
    )
    tables = {**frames, **answer_tables(run, decision)}
    applied = judged.sets and not unconfirmed
    spec = speculation_answer(tables.get("projection", pd.DataFrame()), applied)
    return replace(decision, tables=tables, speculation=spec)


def fusion_refusals(sm: float | None) -> dict[str, str]:
    """Engine -> why its fused all-reduce + RMSNorm flag cannot act on GPUs of this compute capability (its
    dispatch table's flag check, engine_dispatch.fusion_flag_fails); engines whose flag can act are left out."""
    engines = dict.fromkeys(table.engine for table in TABLES.values())
    return {engine: why for engine in engines if (why := fusion_flag_fails(engine, sm)) is not None}


NOT_CONFIRMED = "not confirmed on your box: measure first"


def not_confirmed(run: RunAnalysis) -> str:
    """Why the run's predicted answer may not be recommended: the engine's observed step time lies outside the
    model's expected error ("" when nothing was observed, or the model explains it)."""
    observed = run.observed
    if observed is None or observed.get("explained") is not False:
        return ""
    return f"{NOT_CONFIRMED} (the model does not explain the engine's observed step time)"


def graph_of(run: RunAnalysis, env: dict[str, str]) -> GraphExport:
    """The recommended point's NCCL_GRAPH_FILE as its records name it (nccl.graph_file), exported only if the file is
    still the one measured: the one file the decision reads, to check its hash and the GPUs it describes."""
    point = run.recommended
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


def judged_routing(run: RunAnalysis, against: str, env: dict[str, str]) -> dict[str, Any]:
    """The routing plan judged against `against` (the point whose NCCL environment the answer sets); crossover
    edges count only from searches that ran against that same environment."""
    return rt.routing_plan(
        rc.candidates(run.records, against),
        run.ranks,
        rc.floor_of(run.meta),
        routing_edges(run.crossovers, env),
        missing_floor=rc.missing_floor(run.meta),
    )


def _not_live(run: RunAnalysis) -> str:
    """Why no engine setting may be live even where a kernel won: the run is unfinished, nothing ran (a
    simulation) or the numbers were imported; "" when measured and finished."""
    rec = run.nccl_choice
    if rec is not None and rec.withheld:
        return f"not recommended: {rec.withheld}"
    if not_confirmed(run):
        return not_confirmed(run)
    if run.evidence.level == MEASURED:
        return ""
    if run.evidence.simulated:
        return (
            "not tested: a simulation ran nothing, so the kernel was never captured into a CUDA graph or checked "
            "against the exact reduction; measure it with a sweep on the box before enabling it"
        )
    return f"not tested: {run.evidence.label} times are not a measurement of the kernel on this box"


def decided_fusion(fusion: pd.DataFrame, decision: Decision, mode: str) -> pd.DataFrame:
    """The fused kinds' per-T comparison (choices.fusion_comparison) with its verdict taken from the decision: a
    fused kind wins at T only where the decision routes T's fused all-reduce + RMSNorm to it, and where the
    decision could not judge T (`not_judged`: why) it neither wins nor loses."""
    if fusion.empty:
        return fusion
    won = {
        (r.impl, t)
        for r in decision.routes
        if r.collective == FUSED and r.mode == mode and not r.kept
        for t in r.tokens
    }
    unjudged = {
        t: r.reason
        for r in decision.routes
        if r.collective == FUSED
        and r.mode == mode
        and r.verdict == "not judged"
        and not r.reason.startswith("baseline")
        for t in r.tokens
    }
    wins = [(impl, int(t)) in won for impl, t in zip(fusion["impl"], fusion["tokens"])]
    out = fusion.copy()
    out["beyond_uncertainty"] = pd.Series(wins, index=fusion.index, dtype=object)
    out["slower_beyond_uncertainty"] = pd.Series(
        [
            False if w or int(t) in unjudged else s
            for w, s, t in zip(wins, fusion["slower_beyond_uncertainty"], fusion["tokens"])
        ],
        index=fusion.index,
        dtype=object,
    )
    out["not_judged"] = [unjudged.get(int(t), "") for t in fusion["tokens"]]
    return out


def answer_tables(run: RunAnalysis, decision: Decision) -> dict[str, pd.DataFrame]:
    """The run's headline with the decision's point per T (answer_point_id, answer_us; route_point_id: the point
    its routes name, which differs where an engine switch is left commented out), and the breakdown and projection
    built on it; an observation the model does not explain withdraws every predicted break-even."""
    if run.headline.empty:
        return {}
    head = run.headline.copy()
    rows = ok_rows(run.steps, run.mode).drop_duplicates(["source", "point_id", "tokens"])
    times = rows.set_index(["source", "point_id", "tokens"])["median_us"]
    head["route_point_id"] = [decision.answer_point(int(t), run.mode) for t in head["tokens"]]
    points = [decision.live_point(int(t), run.mode) for t in head["tokens"]]
    head["answer_point_id"] = points
    head["answer_verdict"] = [decision.live_verdict(int(t), run.mode) for t in head["tokens"]]
    head["answer_us"] = [
        times.get((source, point, tokens), math.nan) if point is not None else math.nan
        for source, point, tokens in zip(head["source"], points, head["tokens"])
    ]
    shown = ShownPoints(run.baseline, run.reference, "answer")
    parts = breakdown(run.steps, head, shown, run.options.compute, mode=run.mode)
    spec = projection(parts, run.options.draft_ms or 0.0, run.options.accepts, run.evidence)
    if not spec.empty and decision.unconfirmed and run.evidence.simulated:
        verdicts = [c for c in spec.columns if c.startswith("verdict_at_")]
        spec = spec.assign(withdrawn=True, **{c: "within" for c in verdicts})
    return {"headline": head, "breakdown": parts, "projection": spec}


def engine_work(routes: tuple[Route, ...]) -> list[str]:
    """What no file can switch on: a fused kind the answer routes sizes to whose module declares no engine flag."""
    flagged = {name for name, cls in builtin_classes().items() if cls.engine_flags}
    taken = sorted({r.impl for r in routes if r.collective == FUSED and not r.kept} - flagged)
    return [
        f"{impl} takes fused all-reduce + RMSNorm sizes, but no engine setting runs it: engine work" for impl in taken
    ]
