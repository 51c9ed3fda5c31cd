"""The Decision's size bands: per collective, mode and band, what runs there, the environment it runs under,
the point it was judged against, the margin and the typed verdict with its reason; built from the routing plan's
bands, each band's T read from the records' frame. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from commprof.evidence import Verdict
from commprof.impls.registry import unfused_reference
from commprof.records.schema import FUSED
from commprof.report.analysis import routing_candidates as rc
from commprof.units import format_bytes


@dataclass(frozen=True)
class Route:
    """One size band of one collective in one mode: what runs there and why."""

    collective: str
    mode: str
    min_bytes: int
    max_bytes: int
    tokens: tuple[int, ...]  # the plan's T whose op of this collective falls in the band
    impl: str  # "nccl" (the NCCL environment below) or the implementation that took these sizes from it
    options: dict[str, Any]
    point_id: str
    nccl_env: dict[str, str]  # the NCCL environment the answer sets: what every band of the run runs under
    judged_against: str  # the point whose NCCL environment that is
    margin_pct: float | None  # time saved against it at the band's largest measured size (None: kept)
    rule: str  # the rule that admitted it (or kept NCCL)
    errors: dict[str, Any]  # the error figures the rule used
    verdict: Verdict  # the rule's outcome for this band
    reason: str  # why, in words, once
    kept: bool  # NCCL keeps these sizes


def tokens_at(frame: pd.DataFrame) -> dict[tuple[str, int], set[int]]:
    """(collective, op bytes) -> the T whose step sends an op of that collective and size (the fused kinds' ops
    are all-reduces of the same sizes), from the records' frame (frame.records_frame): each distinct op list once,
    in (collective, bytes) order."""
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


def route_of_band(band: dict, against: str | None, env: dict, at: dict[tuple[str, int], set[int]]) -> Route:
    sizes = [s["bytes"] for s in band.get("sizes", [])]
    inside = tuple(
        sorted(
            {
                t
                for (collective, nbytes), ts in at.items()
                if collective == band["collective"] and band["min_bytes"] <= nbytes <= band["max_bytes"]
                for t in ts
            }
        )
    )
    kept = bool(band["baseline"])
    margin = None
    if not kept and band.get("baseline_us"):
        margin = 100.0 * (band["baseline_us"] - band["time_us"]) / band["baseline_us"]
    evidence = band.get("evidence") or {}
    errors = {"level": evidence.get("level")}
    if evidence.get("expected_error_pct") is not None or evidence.get("level") == "simulated":
        errors["impl_pct"] = evidence.get("expected_error_pct")
        errors["basis"] = evidence.get("expected_error_basis")
    reason = str(evidence.get("verdict") or f"largest size: {format_bytes(max(sizes or [0]))}")
    return Route(
        collective=band["collective"],
        mode=band["mode"],
        min_bytes=int(band["min_bytes"]),
        max_bytes=int(band["max_bytes"]),
        tokens=inside,
        impl="nccl" if kept and band["impl"] in ("default", "nccl") else band["impl"],
        options=dict(band.get("options") or {}),
        point_id=str(band["point_id"]),
        nccl_env=dict(env),
        judged_against=str(against),
        margin_pct=None if margin is None or not math.isfinite(margin) else round(margin, 1),
        rule=str(evidence.get("rule") or ""),
        errors=errors,
        verdict=band_verdict(kept, reason),
        reason=reason,
        kept=kept,
    )


def band_verdict(kept: bool, reason: str) -> Verdict:
    """A band's typed verdict from the routing's words: taken (beyond error), kept because every alternative stayed
    inside error, else kept with nothing judged (no alternative ran, or none could be compared)."""
    if not kept:
        return "beyond error"
    if any(words in reason for words in rc.WITHIN.values()):
        return "inside error"
    return "not judged"


def withdrawn(route: Route, why: str) -> Route:
    """A route an observation withdrew: the baseline keeps the band under NCCL's own environment (the answer sets
    none), and the prediction it set aside is named."""
    if route.kept:
        return replace(route, nccl_env={})
    predicted = f"{route.impl} predicted {route.margin_pct:g} % faster" if route.margin_pct is not None else route.impl
    return replace(unjudged(route, f"withdrawn, {why}: {predicted}"), nccl_env={})


def unjudged(route: Route, why: str) -> Route:
    """A band no implementation may take: the baseline (NCCL, or the fused kinds' unfused reference) keeps it,
    `not judged`, and why."""
    if route.kept and route.verdict == "not judged":
        return route
    keeper = unfused_reference() if route.collective == FUSED else "nccl"
    return replace(route, kept=True, impl=keeper, options={}, margin_pct=None, verdict="not judged", reason=why)
