"""The Decision's tables: every row any table of the page shows (table 1, (b), the breakdown, the projection, every
point per T, the compatibility matrix, the heatmaps, the op sites), each verdict-bearing row naming its claim. Types
only, frozen (msgspec)."""

from __future__ import annotations

from typing import Any

from commprof.report.decision.claim import Frozen


class ChoiceRow(Frozen):
    """Table 1: one point at one T, each role it plays there, and its claim against the baseline."""

    tokens: int
    roles: list[str]
    role_labels: list[str]
    point_id: str
    label: str
    impl: str
    settings: str
    median_us: float | None
    p90_us: float | None
    cv: float | None
    baseline_us: float | None
    saved_pct: float | None
    speedup: float | None
    other_impl: bool
    claim: str | None


class AlternativeRow(Frozen):
    """(b) at one T: the fastest other all-reduce implementation against (a)'s point."""

    tokens: int
    bytes: int | None
    point_id: str
    label: str
    impl: str
    median_us: float | None
    reference: str
    reference_us: float | None
    saved_pct: float | None
    routed: bool  # the Decision's routes give it this T's size
    claim: str | None


class ImplementationMissing(Frozen):
    impl: str
    fused: bool
    status: str
    message: str | None


class BreakdownRow(Frozen):
    tokens: int
    setting: str  # baseline, recommended, answer
    setting_label: str
    point_id: str | None
    comm_ms: float | None
    comm_p90_ms: float | None
    overhead_ms: float | None
    compute_ms: float | None
    verify_ms: float | None
    comm_share_pct: float | None
    claim: str | None


class TpsCell(Frozen):
    accept: float
    tokens_per_s: float | None  # None: the accept length is above T
    verdict: str  # pays / loses / within: speculation against plain decode, the cell's claim
    claim: str | None


class ProjectionRow(Frozen):
    setting: str
    setting_label: str
    tokens: int
    point_id: str | None
    decode_point_id: str | None
    decode_ms: float
    plain_tokens_per_s: float | None
    draft_ms: float
    verify_ms: float
    break_even: float | None  # (draft + verify) / decode: where the chart's lines cross plain decode
    withdrawn: bool
    cells: list[TpsCell]


class PointsTable(Frozen):
    """Every (point, T), column by column, in the table's order (fastest first per T in the headline mode)."""

    point_id: list[str]
    tokens: list[int]
    label: list[str]
    impl: list[str]
    settings: list[str]
    status_eager: list[str | None]
    status_graph: list[str | None]
    eager_us: list[float | None]
    graph_us: list[float | None]
    tail_us: list[float | None]
    cv: list[float | None]
    speedup: list[float | None]
    reference: list[str | None]
    fused: list[bool]
    rank_skew_pct: list[float | None]
    superseded_by: list[str | None]
    tail: str  # the tail column's header


class Matrix(Frozen):
    """Every point x (T, mode) with its status, as shown (a simulated ok is "not tested")."""

    columns: list[str]
    points: list[tuple[str, str]]
    statuses: list[list[str | None]]
    messages: list[dict[str, Any]]
    note: str


class Heatmap(Frozen):
    tokens: int
    rows_axis: str
    columns_axis: str
    columns: list[str]
    labels: list[str]
    ms: list[list[float | None]]  # every point's best
    ranked_ms: list[list[float | None]]  # over the points a verdict may rest on


class Tables(Frozen):
    choices: list[ChoiceRow]
    alternatives: list[AlternativeRow]
    without_result: list[ImplementationMissing]
    breakdown: list[BreakdownRow]
    projection: list[ProjectionRow]
    points: PointsTable | None
    matrix: Matrix | None
    heatmaps: list[Heatmap]
    heatmap_unranked: bool
    collectives: list[dict[str, Any]]  # imported or simulated single collectives
    sites: list[dict[str, Any]]  # per T and setting, per op site: ops, bytes, median, max, total, and the values
    skew: list[dict[str, Any]]
    draft: list[dict[str, Any]]
    answer_live_note: str
