"""Where a verify step's time goes and what speculative decoding gains: the breakdown (communication, launch
overhead, compute) and the tokens/s projection at given accept lengths."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from commprof.report.analysis.frame import ok_rows
from commprof.report.decision.formatting import tps_column

# The field report's operating points: (accept length, verify T). See docs/report.md.
FIELD_REPORT_CASES = ((1.3, 8), (2.0, 4))


@dataclass(frozen=True)
class ComputeTimes:
    """Compute time of the target forward pass per T, ms, as the user gave it (`--compute-ms`)."""

    per_tokens: dict[int, float] = field(default_factory=dict)
    everywhere: float | None = None

    @property
    def given(self) -> bool:
        return self.everywhere is not None or bool(self.per_tokens)

    def for_tokens(self, tokens: int) -> float | None:
        """Exact T, else the single value, else the nearest T given (ties: the smaller T)."""
        if tokens in self.per_tokens:
            return self.per_tokens[tokens]
        if self.everywhere is not None:
            return self.everywhere
        if not self.per_tokens:
            return None
        nearest = min(self.per_tokens, key=lambda t: (abs(t - tokens), t))
        return self.per_tokens[nearest]

    def describe(self) -> str:
        if not self.given:
            return "not given"
        if self.everywhere is not None:
            return f"{self.everywhere:g} ms at every T"
        return ", ".join(f"T={t}: {ms:g} ms" for t, ms in sorted(self.per_tokens.items()))


def launch_overhead(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (source, point, T): eager − graph median, µs (NaN where either mode is missing or failed)."""
    ok = ok_rows(steps)
    keys = ["source", "point_id", "tokens"]
    read = [*keys, "median_us"]  # only the columns read: each selection below copies these alone
    eager = ok.loc[ok["mode"] == "eager", read].drop_duplicates(keys).set_index(keys)["median_us"]
    graph = ok.loc[ok["mode"] == "graph", read].drop_duplicates(keys).set_index(keys)["median_us"]
    both = pd.DataFrame({"eager_us": eager, "graph_us": graph})
    both["overhead_us"] = both["eager_us"] - both["graph_us"]
    return both.reset_index()


@dataclass(frozen=True)
class ShownPoints:
    """The settings a breakdown shows beside each other."""

    baseline: str
    """The baseline's point id."""
    recommended: str | None = None
    """(a)'s point id: a row of its own when given and not the baseline."""
    third: Literal["best", "answer"] = "best"
    """The headline's third setting: "best" (the fastest per T, best_point_id / best_us) or "answer" (the
    decision's point at T, answer_point_id / answer_us)."""


def breakdown(
    steps: pd.DataFrame,
    head: pd.DataFrame,
    shown: ShownPoints,
    compute: ComputeTimes,
    mode: str | None = None,
) -> pd.DataFrame:
    """Per (setting, T): communication, launch overhead and compute, ms, and comm's share, for each of `shown`'s
    settings ("baseline", "recommended", and its third).

    Communication is the step's collectives in `mode` (the headline's); launch overhead is eager − graph of the
    same point (shown, not added to what an engine running the captured graph pays); compute is what the user
    gave.
    """
    baseline, recommended, third = shown.baseline, shown.recommended, shown.third
    ids = {baseline, recommended, *head[f"{third}_point_id"].dropna()}
    overhead = launch_overhead(steps[steps["point_id"].isin(ids)]).set_index(["source", "point_id", "tokens"])
    overhead = overhead["overhead_us"]
    ok = ok_rows(steps, mode)
    ok = ok[["source", "point_id", "tokens", "median_us", "p90_us"]].drop_duplicates(["source", "point_id", "tokens"])
    p90 = ok.set_index(["source", "point_id", "tokens"])["p90_us"]
    chosen: dict[tuple, float] = {}
    if recommended is not None and recommended != baseline:
        rows = ok[ok["point_id"] == recommended]
        chosen = dict(zip(zip(rows["source"], rows["tokens"]), rows["median_us"]))
    rows = []
    for r in head.itertuples():
        settings = [("baseline", baseline, r.baseline_us)]
        if recommended is not None and recommended != baseline:
            settings.append(("recommended", recommended, chosen.get((r.source, r.tokens), math.nan)))
        settings.append((third, getattr(r, f"{third}_point_id"), getattr(r, f"{third}_us")))
        for setting, point_id, comm_us in settings:
            comm_p90_us = p90.get((r.source, point_id, r.tokens), math.nan) if isinstance(point_id, str) else math.nan
            compute_ms = compute.for_tokens(int(r.tokens))
            over_us = overhead.get((r.source, point_id, r.tokens), math.nan) if isinstance(point_id, str) else math.nan
            comm_ms = comm_us / 1000.0 if pd.notna(comm_us) else math.nan
            total = comm_ms + (compute_ms or 0.0)
            rows.append(
                {
                    "source": r.source,
                    "tokens": int(r.tokens),
                    "setting": setting,
                    "point_id": point_id,
                    "comm_ms": comm_ms,
                    "comm_p90_ms": comm_p90_us / 1000.0 if pd.notna(comm_p90_us) else math.nan,
                    "overhead_ms": over_us / 1000.0 if pd.notna(over_us) else math.nan,
                    "compute_ms": compute_ms if compute_ms is not None else math.nan,
                    "verify_ms": total if pd.notna(comm_ms) else math.nan,
                    "comm_share_pct": 100.0 * comm_ms / total if compute_ms is not None and total else math.nan,
                }
            )
    return pd.DataFrame(rows)


def tokens_per_second(accept: float, draft_ms: float, verify_ms: float) -> float:
    """Speculative decoding: accept_length tokens per (draft + verify)."""
    total = draft_ms + verify_ms
    return 1000.0 * accept / total if total > 0 else math.nan


def break_even_accept(draft_ms: float, verify_ms: float, decode_ms: float) -> float:
    """The accept length above which speculation beats plain decode: (draft + verify) / decode(T = 1).

    A raw ratio: below 1 it is not an accept length (those are >= 1, the bonus token) but means speculation
    pays at any accept length.
    """
    return (draft_ms + verify_ms) / decode_ms if decode_ms > 0 else math.nan


def pays_at_any_accept(ratio: float) -> bool:
    """True when the break-even ratio is below 1: every accept length (>= 1) beats plain decode."""
    return math.isfinite(ratio) and ratio < 1.0


def projection(parts: pd.DataFrame, draft_ms: float, accepts: tuple[float, ...]) -> pd.DataFrame:
    """Per (source, setting, T): plain-decode and speculative tokens/s at each accept length, and the break-even
    accept length, (draft + verify) / decode: where the tokens/s line crosses plain decode's, the statistic the
    projection's figure draws. Whether speculation pays at an accept length is a claim of the Decision, judged on
    these figures (decide_steps.py).

    T = 1 is plain decode; without it (or without a verify T) there is nothing to project: empty frame. An accept
    length above T is impossible (NaN). Without compute times the numbers cover communication only and are upper
    bounds, not throughput estimates.
    """
    rows = []
    for (source, setting), group in parts.groupby(["source", "setting"], sort=False):
        decode = group[(group["tokens"] == 1) & group["verify_ms"].notna()]
        if decode.empty:
            continue
        decode_ms = float(decode["verify_ms"].iloc[0])
        decode_point = decode["point_id"].iloc[0]
        plain = 1000.0 / decode_ms if decode_ms > 0 else math.nan
        for r in group[(group["tokens"] > 1) & group["verify_ms"].notna()].itertuples():
            spread_ms = r.comm_p90_ms - r.comm_ms if pd.notna(r.comm_p90_ms) else math.nan
            ratio = break_even_accept(draft_ms, r.verify_ms, decode_ms)
            row = {
                "source": source,
                "setting": setting,
                "tokens": r.tokens,
                "point_id": r.point_id,
                "decode_point_id": decode_point,  # the setting's point at T = 1 (the answer's may differ per T)
                "decode_ms": decode_ms,
                "plain_tokens_per_s": plain,
                "draft_ms": draft_ms,
                "verify_ms": r.verify_ms,
                "verify_p90_ms": r.verify_ms + spread_ms,
                "break_even_ratio": ratio,
                "break_even_accept": ratio if math.isfinite(ratio) and 1.0 <= ratio <= r.tokens else math.nan,
                "pays_at_any_accept": pays_at_any_accept(ratio),
                "never_pays": math.isfinite(ratio) and ratio > r.tokens,  # no accept length reaches it at this T
            }
            for accept in accepts:
                reached = accept <= r.tokens
                row[tps_column(accept)] = tokens_per_second(accept, draft_ms, r.verify_ms) if reached else math.nan
            rows.append(row)
    return pd.DataFrame(rows)
