"""The Decision's third step, the routing per size: the routing plan judged against the NCCL environment (a) sets,
each band with its claim at the band's largest size (the taken implementation, or the fastest other one where the
baseline keeps the band, against the baseline). A band the claims do not put beyond error stays the baseline's;
a fused band whose unfused reference never ran under (a)'s environment is not compared. Reads (a). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from commprof.impls.registry import unfused_reference
from commprof.records.schema import FUSED
from commprof.report.analysis import routing as rt
from commprof.report.analysis import routing_candidates as rc
from commprof.report.analysis.claims import ClaimBook
from commprof.report.analysis.crossovers import routing_edges
from commprof.report.analysis.decide_nccl import NcclStep
from commprof.report.analysis.interleaved import MEASURED_AGAIN, Interleaved
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
    judging = _Judging(
        str(against), dict(nccl.env), tokens_at(run.frame), book, reference_missing(run, nccl.env), run.interleaved
    )
    routes = [_route(band, judging) for band in plan["bands"]]
    return routes, plan_shown(run, plan), plan["bands"]


@dataclass(frozen=True)
class _Judging:
    """What every band of the plan is judged with."""

    against: str  # the point the routes are judged against
    env: dict[str, str]  # the NCCL environment (a) sets
    at: dict[tuple[str, int], set[int]]  # (collective, op bytes) -> the T that send it (tokens_at)
    book: ClaimBook
    missing: str  # why the fused bands are not compared ("" where they are: reference_missing)
    confirming: Interleaved | None  # the run's interleaved confirmation (None: it made none)


def _route(band: dict, judging: _Judging) -> Route:
    against, env, at = judging.against, judging.env, judging.at
    kept_by_plan = bool(band["baseline"])
    size = band["sizes"][-1] if band.get("sizes") else {}
    claim, reason = _judged(band, size, judging)
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


def _judged(band: dict, size: dict, judging: _Judging):
    """The band's claim (None: nothing compared) and why, in words that judge nothing the claim does not."""
    if band["collective"] == FUSED and judging.missing:
        return None, judging.missing
    if band["baseline"] and not size.get("rival"):  # nothing else ran here, or this mode routes nothing
        words = str(band["evidence"].get("verdict") or "")
        return None, words or f"largest size: {format_bytes(band['max_bytes'])}"
    claim, confirmed = _band_claim(band, size, judging)
    if claim is None:
        return None, "not compared: a side has no time at the band's largest size"
    side = (size.get("rival") or {}).get("impl", band["impl"])
    at = format_bytes(size.get("bytes") or band["at_bytes"])
    if confirmed:  # the plan's winner measured again beside its reference: the confirmation decides
        reference = _reference_words(band)
        return claim, (
            f"confirmed: measured again between two measurements of {reference}, {side} beat it at {at} by more "
            "than its spread and the noise floor"
            if claim.beyond
            else f"not confirmed: measured again beside {reference}, {side} did not beat it at {at} by more than "
            "its spread and the noise floor"
        )
    return claim, claim.reason or f"{side} against the baseline at {at}"


def _band_claim(band: dict, size: dict, judging: _Judging):
    """The band's claim at its largest size: the taken implementation (or the fastest rival) against the
    baseline there, per op; and whether its figures are the interleaved confirmation's. In a run that confirmed,
    the implementation the plan gives the band is judged on its measurement beside the baseline's (an all-reduce
    band judged against (a)'s point: beside that point's own measurement there), and where it was not measured
    again there, a first-pass gain has no verdict: measured apart from the baseline's, it decides nothing."""
    book, confirming = judging.book, judging.confirming
    rival = size.get("rival") if band["baseline"] else None
    side = rival or {"impl": band["impl"], "time_us": size.get("time_us"), "p90_us": size.get("p90_us"),
                     "error_pct": size.get("error_pct"), "label": band["label"]}  # fmt: skip
    where = f"{band['collective']} {band['mode']} {band['min_bytes']}-{band['max_bytes']} B"
    simulated = book.evidence.simulated
    errors = (side.get("error_pct"), size.get("baseline_error_pct")) if simulated else None
    nbytes = int(size.get("bytes") or band["at_bytes"])
    subject = (
        f"{side['impl']} ({side.get('label')}) against the baseline, one {band['collective']} op of "
        f"{format_bytes(nbytes)}, {band['mode']} mode"
    )
    figures = ((side.get("time_us"), side.get("p90_us")), (size.get("baseline_us"), size.get("baseline_p90_us")))
    unknown, confirmed = "", False
    if confirming is not None and rival is None:
        # the NCCL environment (a) sets, where the routes are judged against it: its own measurement there
        versus = judging.against if judging.env and band["collective"] != FUSED else None
        beside, why = confirming.beside(
            str(band["point_id"]), band["mode"], size=(band["collective"], nbytes), against=versus
        )
        if beside is not None:
            figures, subject, confirmed = beside, subject + MEASURED_AGAIN, True
        elif book.evidence.beats(figures[0][0], figures[0][1], figures[1][0]) is True:
            unknown = (
                f"not judged: {why}, so its first-pass figures, measured apart from {_reference_words(band)}'s, "
                "decide nothing in a run that confirms"
            )
    claim = book.compare(f"{where}: {side['impl']} vs the baseline", subject, figures, errors=errors, unknown=unknown)
    return claim, confirmed


def _reference_words(band: dict) -> str:
    """What a band's winner is judged against, in words: the baseline, or a fused band's unfused reference."""
    return "its unfused reference" if band["collective"] == FUSED else "the baseline"


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
