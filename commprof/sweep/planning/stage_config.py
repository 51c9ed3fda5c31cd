"""A sweep file's [[stages]]: refinement stages (the best points crossed with axes, or re-measured) and crossover
searches (`kind = "crossover"`), each a typed structure read by msgspec; the readers below check what a type cannot
say and return the stage, or None after recording its problems. Pure."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from commprof.problems import Boolean, String, choice, integer, table
from commprof.records.plan_file import MAX_STAGE_NAME
from commprof.records.schema import GRAPH_FIRST
from commprof.records.values import MAX_COUNT
from commprof.sweep.planning.settings import SweepProblems, impl_name, parse_axes, parse_rule
from commprof.sweep.planning.spec import DEFAULT, CrossoverStage, StageSpec
from commprof.sweep.planning.staging import RANK_BY

STAGE_KINDS = ("refine", "crossover")
SEARCH_MODES = GRAPH_FIRST
MAX_SEARCH_BYTES = 1 << 30  # above 1 GiB no engine routes by size, and one size would take minutes
_DEFAULTS = CrossoverStage(0, "", "")
_SEARCH_BYTES = integer(1, MAX_SEARCH_BYTES)
_MODES = "a non-empty list of modes (allowed: graph, eager)"
_NAME = Annotated[
    str, msgspec.Meta(max_length=MAX_STAGE_NAME, extra={"want": f"a string of at most {MAX_STAGE_NAME} characters"})
]  # as plan.jsonl names the stage


class StageKind(msgspec.Struct, frozen=True):
    """What every stage table says first: its kind (the rest of its keys mean nothing without one)."""

    kind: choice(STAGE_KINDS, "a stage kind") = "refine"


class RefineTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A refinement stage: its best points crossed with axes, or measured again with more iterations."""

    kind: Literal["refine"] = "refine"
    name: _NAME | None = None  # None: "stage <index>"
    description: String = ""
    top_k: integer(1, missing="an integer >= 1: how many of the best points to refine")
    candidates: table(dict[str, Any]) | None = None  # a rule the points refined must match (settings.parse_rule)
    rank_by: choice(RANK_BY, "a ranking") = "geomean"
    iterations: integer(1, most=MAX_COUNT) | None = None  # None: the run's
    warmup: integer(0, most=MAX_COUNT) | None = None
    include_baseline: Boolean = False  # the baseline is refined too, whatever its rank
    axes: table(dict[str, Any]) = {}  # crossed with the best points (settings.parse_axes)


class CrossoverTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A crossover search stage (spec.CrossoverStage, whose defaults these are)."""

    kind: Literal["crossover"]
    name: _NAME = "crossover"
    description: String = ""
    impls: Annotated[list[Any], msgspec.Meta(extra={"want": "a list of implementation names"})] = []  # []: every
    # non-baseline setting that ran ok earlier
    modes: Annotated[list[choice(SEARCH_MODES, "a mode")], msgspec.Meta(min_length=1, extra={"want": _MODES})] = (
        msgspec.field(default_factory=lambda: list(_DEFAULTS.modes))
    )
    min_bytes: _SEARCH_BYTES = _DEFAULTS.min_bytes
    max_bytes: _SEARCH_BYTES = _DEFAULTS.max_bytes
    step_bytes: _SEARCH_BYTES = _DEFAULTS.step_bytes
    max_rounds: integer(1, 64) = _DEFAULTS.max_rounds
    rounds: integer(1, most=MAX_COUNT) = _DEFAULTS.rounds
    warmup: integer(0, most=MAX_COUNT) = _DEFAULTS.warmup


def parse_stage(raw: dict, index: int, problems: SweepProblems) -> StageSpec | CrossoverStage | None:
    """The index-th stage (1-based) of the file, of the kind its `kind` key names (default: refine)."""
    at = ("stages", index - 1)
    before = len(problems.errors)
    kind = problems.read({"kind": raw.get("kind", "refine")}, StageKind, at).kind
    if len(problems.errors) > before:  # its other keys mean nothing without a kind
        return None
    if kind == "crossover":
        return _crossover_stage(problems.read(raw, CrossoverTable, at), index, problems)
    return _refine_stage(problems.read(raw, RefineTable, at), raw, index, problems)


def _refine_stage(stage: RefineTable, raw: dict, index: int, problems: SweepProblems) -> StageSpec | None:
    key = f"stages[{index - 1}]"
    axes = parse_axes(stage.axes, f"{key}.axes", problems)
    candidates = None
    if stage.candidates is not None:
        candidates = parse_rule(stage.candidates, f"{key}.candidates", problems, with_reason=False)
    if not axes and "iterations" not in raw and "axes" not in raw:
        problems.error(
            key,
            "a stage needs axes to cross its best points with, or iterations to re-measure "
            "them with (successive halving)",
        )
    if stage.top_k is None:
        return None
    return StageSpec(
        index=index,
        name=f"stage {index}" if stage.name is None else stage.name,
        description=stage.description,
        top_k=stage.top_k,
        axes=axes,
        candidates=candidates,
        rank_by=stage.rank_by,
        iterations=stage.iterations,
        warmup=stage.warmup,
        include_baseline=stage.include_baseline,
    )


def _crossover_stage(stage: CrossoverTable, index: int, problems: SweepProblems) -> CrossoverStage | None:
    key = f"stages[{index - 1}]"
    impls: list[str] = []
    for i, raw in enumerate(stage.impls):
        name = impl_name(raw, f"{key}.impls[{i}]", problems)
        if name == DEFAULT:
            problems.error(f"{key}.impls[{i}]", "the baseline is what every search is timed against, not a candidate")
        elif name is not None:
            impls.append(name)
    if stage.min_bytes > stage.max_bytes:
        problems.error(f"{key}.min_bytes", f"{stage.min_bytes} is above max_bytes {stage.max_bytes}")
    return CrossoverStage(
        index=index,
        name=stage.name,
        description=stage.description,
        impls=tuple(dict.fromkeys(impls)),
        modes=tuple(dict.fromkeys(m for m in stage.modes if m is not None)),
        min_bytes=stage.min_bytes,
        max_bytes=stage.max_bytes,
        step_bytes=stage.step_bytes,
        max_rounds=stage.max_rounds,
        rounds=stage.rounds,
        warmup=stage.warmup,
    )
