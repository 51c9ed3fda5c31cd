"""The Decision's engine step: what each engine asked for is told for the routed bands (their switches, live only
where a measurement on the box stands behind them), the fused kinds' flags, the op-by-op paths the engines' dispatch
takes today and with the answer, and what no file can express. Reads (a) and the routes. Pure."""

from __future__ import annotations

import msgspec

from commprof.evidence import MEASURED
from commprof.impls.registry import builtin_classes, engine_flag_table
from commprof.records.schema import FUSED
from commprof.report.analysis.claims import ClaimBook
from commprof.report.analysis.decide_nccl import NcclStep
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
from commprof.report.analysis.routing_settings import routing_settings
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.analysis.run_shape import box_of, compute_capability, step_dtype, step_shape
from commprof.report.decision.formatting import claim_words
from commprof.report.decision.types import RECOMMEND_ENV, EngineHint, Engines, EngineSetting, FusedRow, Route


def engine_step(
    run: RunAnalysis, nccl: NcclStep, routes: list[Route], plan_bands: list[dict], book: ClaimBook
) -> Engines:
    """The engines' settings for the routes (each band's claim in its words), each live only where it may act."""
    withdrawn = book.withdrawn
    hidden, dtype_bytes, tokens = step_shape(run)
    backend = run.backend if run.evidence.level == MEASURED else "nccl"
    bands = [
        {
            **band,
            "baseline": route.kept,
            "evidence": {**band["evidence"], "verdict": claim_words(book.get(route.claim))},
        }
        for band, route in zip(plan_bands, routes)
    ]
    settings, notes = routing_settings(bands, hidden, dtype_bytes, backend, not_live(run, nccl, withdrawn))
    versions = run.meta.versions or {}
    engines, chosen = engines_for(run.options.engines, versions)
    asked = asked_engines(run)
    settings = [s for s in settings if s.engine.lower() in asked]  # never another engine's lines than those asked
    left_out = _left_out(nccl) + notes + engine_work(routes)
    switches: dict[str, dict[str, str]] = {}
    for setting in settings:
        switches.setdefault(setting.engine, {}).update(dict(setting.variables))
    hidden_ops = [
        Op("layer all-reduce [T, hidden]", t, t * hidden * dtype_bytes, step_dtype(run), hidden)
        for t in tokens
        if hidden
    ]
    box = box_of(run)
    paths = engine_paths(engines, box, hidden_ops, switches, chosen) if hidden_ops else []
    for entry in paths:  # whether the files set those switches, or leave them off (and why, in `settings`)
        name = entry["engine"].split(" ")[0]
        entry["switches"] = switches.get(name, {})
        entry["live"] = any(s.live for s in settings if s.engine == name)
        entry["flashinfer"] = (
            library_note("flashinfer-python", versions["flashinfer"]) if "flashinfer" in versions else ""
        )
        entry["basis"] = paths_basis(box, backend or "nccl", run.evidence.label if run.evidence.simulated else None)
    return Engines(
        settings=[_setting(s) for s in settings],
        hints=[],
        paths=paths,
        fusion_refused=fusion_refusals(compute_capability(run.meta)),
        left_out=left_out,
    )


def asked_engines(run: RunAnalysis) -> tuple[str, ...]:
    """The engines asked for (--engine, else those installed, else commprof's defaults), by name."""
    engines, _ = engines_for(run.options.engines, run.meta.versions or {})
    return tuple(dict.fromkeys(parse_engine(text)[0] for text in engines))


def _setting(setting) -> EngineSetting:
    return EngineSetting(
        engine=setting.engine,
        impl=setting.impl,
        min_bytes=int(setting.min_bytes),
        max_bytes=int(setting.max_bytes),
        variables=[(str(k), str(v)) for k, v in setting.variables],
        live=bool(setting.live),
        why=setting.why,
        version=setting.version,
        workspace=setting.workspace,
    )


def _left_out(nccl: NcclStep) -> list[str]:
    plan = nccl.plan
    if nccl.answer.file is None and plan.env:
        return [f"recommend.env's settings are commented out: {nccl.answer.why}"]
    if plan.choice != RECOMMEND_ENV and plan.env:
        return [
            f"recommend.env's settings are the alternative to {plan.choice}, commented out: the routing is judged "
            "against NCCL's defaults"
        ]
    return []


def not_live(run: RunAnalysis, nccl: NcclStep, withdrawn: str) -> str:
    """Why no engine setting may be live even where a kernel won: the run is unfinished, the box contradicts the
    model, nothing ran (a simulation) or the numbers were imported; "" when measured and finished."""
    if nccl.answer.withheld:
        return f"not recommended: {nccl.answer.withheld}"
    if withdrawn:
        return f"withdrawn: {withdrawn}"
    if run.evidence.level == MEASURED:
        return ""
    if run.evidence.simulated:
        return (
            "not tested: a simulation ran nothing, so the kernel was never captured into a CUDA graph or checked "
            "against the exact reduction; measure it with a sweep on the box before enabling it"
        )
    return f"not tested: {run.evidence.label} times are not a measurement of the kernel on this box"


def fusion_refusals(sm: float | None) -> dict[str, str]:
    """Engine -> why its fused all-reduce + RMSNorm flag cannot act on GPUs of this compute capability (its
    dispatch table's flag check, engine_dispatch.fusion_flag_fails); engines whose flag can act are left out."""
    engines = dict.fromkeys(table.engine for table in TABLES.values())
    return {engine: why for engine in engines if (why := fusion_flag_fails(engine, sm)) is not None}


def engine_work(routes: list[Route]) -> list[str]:
    """What no file can switch on: a fused kind the answer routes sizes to whose module declares no engine flag."""
    flagged = {name for name, cls in builtin_classes().items() if cls.engine_flags}
    taken = sorted({r.impl for r in routes if r.collective == FUSED and not r.kept} - flagged)
    return [
        f"{impl} takes fused all-reduce + RMSNorm sizes, but no engine setting runs it: engine work" for impl in taken
    ]


def fused_hints(run: RunAnalysis, fused: list[FusedRow], book: ClaimBook, refused: dict[str, str]) -> list[EngineHint]:
    """SGLang / vLLM flags of the fused kinds: where one beat its reference beyond error at some T (or lost at every
    T), each flag with the version it was written for; an engine whose fusion cannot act on these GPUs gets one
    "no flag" hint saying why. Only what this run compared; a simulation's stay commented out."""
    other = nccl_file_for_other_backend(run)
    hints = [other] if other is not None else []
    claims = [(row, book.get(row.claim)) for row in fused]
    won = [row for row, claim in claims if claim is not None and claim.beyond]
    lost = [row for row, claim in claims if claim is not None and claim.slower]
    flags = engine_flag_table()
    if any(r.impl in flags for r in won):
        hints += _acting(
            _flags(flags, [r.impl for r in won], "won"), _won_why(run, won, flags), _untested(run), refused
        )
    elif fused and len(lost) == len(fused):
        how = "predicted" if run.evidence.simulated else "measured"
        why = f"the fused all-reduce + RMSNorm was slower than its unfused reference at every T {how} (each T's claim: (c))"
        hints += _acting(_flags(flags, [r.impl for r in lost], "lost"), why, "", refused)
    asked = asked_engines(run)
    return [h for h in hints if any(name in h.engine.lower() for name in asked)]


def _won_why(run: RunAnalysis, won: list[FusedRow], flags: dict) -> str:
    tokens = ", ".join(str(r.tokens) for r in won if r.impl in flags)
    verb = "is predicted to beat" if run.evidence.simulated else "beat"
    return (
        f"the FlashInfer fused all-reduce + RMSNorm {verb} its unfused reference at T = {tokens} (each T's claim: "
        "(c)); the engine uses it only where its FlashInfer build supports this GPU: check its log says it initialised"
    )


def _untested(run: RunAnalysis) -> str:
    if not run.evidence.simulated:
        return ""
    return (
        "not tested: a simulation ran nothing, so the fused all-reduce + RMSNorm was never captured into a CUDA "
        "graph or checked against the exact reduction; measure it with a sweep on the box before enabling it"
    )


def nccl_file_for_other_backend(run: RunAnalysis) -> EngineHint | None:
    """Where the baseline ran on another backend than the engines' NCCL: no file of this run tunes an engine."""
    backend = run.evidence.backend
    if run.evidence.level != MEASURED or backend in (None, "nccl"):
        return None
    return EngineHint(
        engine="SGLang and vLLM",
        setting="",
        version="—",
        why=f"this run's all-reduce ran on {backend} (CPU ranks); engines run theirs on NCCL on GPUs, where nothing "
        f"measured here applies: its files are for {backend} launches only. Run the sweep on the GPU box to tune the "
        "engine",
    )


def _acting(flags: list, why: str, untested: str, refused: dict[str, str]) -> list[EngineHint]:
    hints, said = [], set()
    for flag in flags:
        fails = refused.get(flag.engine)
        if fails is None:
            hints.append(EngineHint(engine=flag.engine, setting=flag.setting, version=flag.version,
                                    why=flag.note or why, untested=untested))  # fmt: skip
        elif flag.engine not in said:
            said.add(flag.engine)
            hints.append(EngineHint(engine=flag.engine, setting="", version="—", why=f"{why}; but {fails}: no flag"))
    return hints


def _flags(flags: dict, impls: list[str], when: str) -> list:
    """The `when` flags of these implementations, each once, in their modules' order."""
    found: list = []
    for impl in dict.fromkeys(impls):
        found += [f for f in flags.get(impl, ()) if f.when == when and f not in found]
    return found


def live_routes(routes: list[Route], engines: Engines) -> list[Route]:
    """The routes with `live` set: NCCL keeps a band, or an engine setting the files set live runs it."""

    def acts(route: Route) -> bool:
        return route.kept or any(
            s.live and s.impl == route.impl and s.min_bytes <= route.max_bytes and route.min_bytes <= s.max_bytes
            for s in engines.settings
        )

    return [msgspec.structs.replace(r, live=acts(r)) for r in routes]
