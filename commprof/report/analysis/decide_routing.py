"""The Decision's third step, the routing per size: the routing plan judged against the NCCL environment (a) sets,
each band with its claim at the band's largest size (the taken implementation, or the fastest other one where the
baseline keeps the band, against the baseline). A band the claims do not put beyond error stays the baseline's;
a fused band whose unfused reference never ran under (a)'s environment is not compared. Reads (a). Pure."""

from __future__ import annotations

from typing import Any

import pandas as pd

from commprof.impls.registry import unfused_reference
from commprof.records.schema import FUSED
from commprof.report.analysis import routing as rt
from commprof.report.analysis import routing_candidates as rc
from commprof.report.analysis.claims import ClaimBook
from commprof.report.analysis.crossovers import routing_edges
from commprof.report.analysis.decide_nccl import NcclStep
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.formatting import finite_or_none
from commprof.report.decision.types import Route, RoutingPlan
from commprof.units import format_bytes


def routing_step(
    run: RunAnalysis, nccl: NcclStep, book: ClaimBook
) -> tuple[list[Route], RoutingPlan | None, list[dict]]:
    """Every band of every collective and mode as a Route, the plan's figure and notes, and its bands as planned."""
    against = nccl.point_id if nccl.env else run.baseline
    if against is None or not run.records:
        return [], None, []
    plan = rt.routing_plan(
        rc.candidates(run.records, against),
        run.ranks,
        rc.floor_of(run.meta),
        routing_edges(run.crossovers, nccl.env),
        missing_floor=rc.missing_floor(run.meta),
    )
    at = tokens_at(run.frame)
    missing = reference_missing(run, nccl.env)
    routes = [_route(band, against, nccl.env, at, book, missing) for band in plan["bands"]]
    return routes, plan_shown(run, plan), plan["bands"]


def _route(band: dict, against: str, env: dict, at: dict, book: ClaimBook, missing: str) -> Route:
    kept_by_plan = bool(band["baseline"])
    size = band["sizes"][-1] if band.get("sizes") else {}
    claim, reason = _judged(band, size, book, missing)
    taken = claim is not None and not kept_by_plan and claim.beyond
    impl = band["impl"] if taken or kept_by_plan else unfused_reference() if band["collective"] == FUSED else "nccl"
    return Route(
        collective=band["collective"],
        mode=band["mode"],
        min_bytes=int(band["min_bytes"]),
        max_bytes=int(band["max_bytes"]),
        tokens=_tokens(band, at),
        impl="nccl" if impl == "default" else impl,
        options=dict(band.get("options") or {}) if taken else {},
        point_id=str(band["point_id"]) if taken or kept_by_plan else against,
        label=str(band["label"]),
        nccl_env=dict(env),
        judged_against=str(against),
        kept=not taken,
        live=not taken,  # an engine setting the files set live runs a taken band: the engine step says
        claim=claim.id if claim is not None else None,
        compared=(size.get("rival") or {}).get("impl", band["impl"]) if claim is not None else "",
        reason=reason,
        at_bytes=int(band["at_bytes"]),
        time_us=finite_or_none(band.get("time_us")),
        baseline_us=finite_or_none(band.get("baseline_us")),
        floor_us=finite_or_none(band.get("floor_us")),
        pct_of_floor=finite_or_none(band.get("pct_of_floor")),
        evidence=str(band["evidence"].get("label") or ""),
        boundary=str(band.get("boundary") or ""),
    )


def _judged(band: dict, size: dict, book: ClaimBook, missing: str):
    """The band's claim (None: nothing compared) and why, in words that judge nothing the claim does not."""
    if band["collective"] == FUSED and missing:
        return None, missing
    if band["baseline"] and not size.get("rival"):  # nothing else ran here, or this mode routes nothing
        words = str(band["evidence"].get("verdict") or "")
        return None, words or f"largest size: {format_bytes(band['max_bytes'])}"
    claim = _band_claim(band, size, book)
    if claim is None:
        return None, "not compared: a side has no time at the band's largest size"
    side = (size.get("rival") or {}).get("impl", band["impl"])
    return (
        claim,
        claim.reason or f"{side} against the baseline at {format_bytes(size.get('bytes') or band['at_bytes'])}",
    )


def _band_claim(band: dict, size: dict, book: ClaimBook):
    """The band's claim at its largest size: the taken implementation (or the fastest rival) against the
    baseline there, per op."""
    rival = size.get("rival") if band["baseline"] else None
    side = rival or {"impl": band["impl"], "time_us": size.get("time_us"), "p90_us": size.get("p90_us"),
                     "error_pct": size.get("error_pct"), "label": band["label"]}  # fmt: skip
    where = f"{band['collective']} {band['mode']} {band['min_bytes']}-{band['max_bytes']} B"
    simulated = book.evidence.simulated
    errors = (side.get("error_pct"), size.get("baseline_error_pct")) if simulated else None
    return book.compare(
        f"{where}: {side['impl']} vs the baseline",
        f"{side['impl']} ({side.get('label')}) against the baseline, one {band['collective']} op of "
        f"{format_bytes(size.get('bytes') or band['at_bytes'])}, {band['mode']} mode",
        ((side.get("time_us"), side.get("p90_us")), (size.get("baseline_us"), size.get("baseline_p90_us"))),
        errors=errors,
    )


def _tokens(band: dict, at: dict[tuple[str, int], set[int]]) -> list[int]:
    return sorted(
        {
            t
            for (collective, nbytes), ts in at.items()
            if collective == band["collective"] and band["min_bytes"] <= nbytes <= band["max_bytes"]
            for t in ts
        }
    )


def tokens_at(frame: pd.DataFrame) -> dict[tuple[str, int], set[int]]:
    """(collective, op bytes) -> the T whose step sends an op of that collective and size (the fused kinds' ops
    are all-reduces of the same sizes), from the records' frame: each distinct op list once."""
    if frame.empty or not {"op_us", "tokens", "kind"} <= set(frame.columns):
        return {}
    steps = frame[
        (frame["kind"].fillna("step") == "step")
        & pd.to_numeric(frame["tokens"], errors="coerce").notna()
        & frame["op_us"].map(lambda ops: isinstance(ops, dict))
    ]
    # Records read from a file share one list per distinct plan column (records.files): each pair made tuples once.
    lists = {
        (int(tokens), id(ops.get("collectives")), id(ops.get("bytes"))): ops
        for tokens, ops in zip(pd.to_numeric(steps["tokens"]), steps["op_us"])
    }
    distinct = {
        (tokens, tuple(ops.get("collectives") or ()), tuple(ops.get("bytes") or ()))
        for (tokens, _, _), ops in lists.items()
    }
    at: dict[tuple[str, int], set[int]] = {}
    for tokens, collectives, sizes in distinct:
        if len(collectives) != len(sizes):
            continue
        for collective, nbytes in zip(collectives, sizes):
            if collective is None or nbytes is None:
                continue
            at.setdefault((str(collective), int(nbytes)), set()).add(tokens)
            if collective == "all_reduce":
                at.setdefault((FUSED, int(nbytes)), set()).add(tokens)
    return dict(sorted(at.items()))


def reference_missing(run: RunAnalysis, env: dict[str, str]) -> str:
    """Why the fused kinds cannot be compared with their unfused reference under the NCCL environment the answer
    sets (the reference ran only under other settings), and what decides it; "" where it ran under it."""
    if not env or run.steps.empty:
        return ""
    reference = unfused_reference()
    rows = run.steps[(run.steps["impl"] == reference) & (run.steps["status"] == "ok")]
    if rows.empty or any(dict(e or {}) == env for e in rows["env"]):
        return ""
    settings = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    return (
        f"not compared: {reference}, the unfused reference, never ran under {settings}, the NCCL environment the "
        f"answer sets; a sweep point of {reference} with {settings} decides it"
    )


def plan_shown(run: RunAnalysis, plan: dict[str, Any]) -> RoutingPlan | None:
    """The plan's figure and notes in the headline mode (its bands are the routes)."""
    if not plan.get("bands"):
        return None
    modes = {b["mode"] for b in plan["bands"]}
    mode = run.mode if run.mode in modes else sorted(modes)[0]
    figures = plan.get("floor")
    floor = (
        f"{figures['evidence']} figures ({figures['source']}) on {plan['ranks']} GPUs: one-shot, two-shot or ring, "
        "whichever is cheapest at each size"
        if figures
        else plan.get("missing_floor") or rc.NO_FLOOR
    )
    below = sorted(
        {
            f"{c['label']} ({c['collective']}) at {format_bytes(c['bytes'])}"
            for c in plan["curves"]
            if c["below_floor"] and c["mode"] == mode
        }
    )
    return RoutingPlan(
        mode=mode,
        rule=plan["rules"].get(plan["bands"][0]["evidence"]["level"], ""),  # one source per run: one level
        floor=floor,
        ranks=plan.get("ranks"),
        floor_figures=figures,
        curves=plan["curves"],
        gaps=plan["gaps"],
        below_floor="; ".join(below),
        crossovers=run.crossovers,
    )
