"""A sweep file's [[stages]]: refinement stages (the best points crossed with axes, or re-measured) and crossover
searches (`kind = "crossover"`). Each reader returns the stage, or None after recording its problems. Pure."""

from __future__ import annotations

from commprof.records.schema import GRAPH_FIRST
from commprof.sweep.planning.settings import SweepProblems, impl_name, parse_axes, parse_rule
from commprof.sweep.planning.spec import DEFAULT, CrossoverStage, StageSpec
from commprof.sweep.planning.staging import RANK_BY

STAGE_KINDS = ("refine", "crossover")
STAGE_KEYS = (
    "kind",
    "name",
    "description",
    "top_k",
    "candidates",
    "rank_by",
    "iterations",
    "warmup",
    "include_baseline",
    "axes",
)
CROSSOVER_KEYS = (
    "kind",
    "name",
    "description",
    "impls",
    "modes",
    "min_bytes",
    "max_bytes",
    "step_bytes",
    "max_rounds",
    "rounds",
    "warmup",
)
SEARCH_MODES = GRAPH_FIRST
MAX_SEARCH_BYTES = 1 << 30  # above 1 GiB no engine routes by size, and one size would take minutes


def parse_stage(table: object, index: int, problems: SweepProblems) -> StageSpec | CrossoverStage | None:
    """The index-th stage (1-based) of the file, of the kind its `kind` key names (default: refine)."""
    key = f"stages[{index - 1}]"
    table = problems.table(table, key)
    kind = problems.choice(table.get("kind", "refine"), f"{key}.kind", STAGE_KINDS, "a stage kind")
    if kind is None:  # its other keys mean nothing without a kind
        return None
    if kind == "crossover":
        return _crossover_stage(table, index, key, problems)
    return _refine_stage(table, index, key, problems)


def _names(table: dict, index: int, key: str, problems: SweepProblems, default: str) -> tuple[str, str]:
    name = table.get("name", default)
    description = table.get("description", "")
    for field_name, value in (("name", name), ("description", description)):
        problems.string(value, f"{key}.{field_name}")
    return str(name), str(description)


def _refine_stage(table: dict, index: int, key: str, problems: SweepProblems) -> StageSpec | None:
    problems.unknown_keys(table, STAGE_KEYS, key)
    if "top_k" not in table:
        problems.error(f"{key}.top_k", "missing (allowed: an integer >= 1: how many of the best points to refine)")
    top_k = problems.integer(table.get("top_k", 1), f"{key}.top_k", 1)
    axes = parse_axes(problems.table(table.get("axes"), f"{key}.axes"), f"{key}.axes", problems)
    candidates = None
    if "candidates" in table:
        candidates = parse_rule(
            problems.table(table["candidates"], f"{key}.candidates"), f"{key}.candidates", problems, with_reason=False
        )
    rank_by = table.get("rank_by", "geomean")
    problems.choice(rank_by, f"{key}.rank_by", RANK_BY, "a ranking")
    iterations = problems.integer(table["iterations"], f"{key}.iterations", 1) if "iterations" in table else None
    warmup = problems.integer(table["warmup"], f"{key}.warmup", 0) if "warmup" in table else None
    include_baseline = problems.boolean(table.get("include_baseline", False), f"{key}.include_baseline")
    if not axes and "iterations" not in table and "axes" not in table:
        problems.error(
            key,
            "a stage needs axes to cross its best points with, or iterations to re-measure "
            "them with (successive halving)",
        )
    name, description = _names(table, index, key, problems, f"stage {index}")
    if top_k is None:
        return None
    return StageSpec(
        index=index,
        name=name,
        description=description,
        top_k=top_k,
        axes=axes,
        candidates=candidates,
        rank_by=str(rank_by),
        iterations=iterations,
        warmup=warmup,
        include_baseline=bool(include_baseline),
    )


def _crossover_stage(table: dict, index: int, key: str, problems: SweepProblems) -> CrossoverStage | None:
    problems.unknown_keys(table, CROSSOVER_KEYS, key)
    defaults = CrossoverStage(index, "", "")
    impls: list[str] = []
    raw_impls = table.get("impls", [])
    if not isinstance(raw_impls, list):
        problems.error(f"{key}.impls", f"expected a list of implementation names, got {raw_impls!r}")
        raw_impls = []
    for i, raw in enumerate(raw_impls):
        name = impl_name(raw, f"{key}.impls[{i}]", problems)
        if name == DEFAULT:
            problems.error(f"{key}.impls[{i}]", "the baseline is what every search is timed against, not a candidate")
        elif name is not None:
            impls.append(name)
    modes = table.get("modes", list(defaults.modes))
    if not isinstance(modes, list) or not modes:
        problems.error(f"{key}.modes", f"expected a non-empty list of modes (allowed: graph, eager), got {modes!r}")
        modes = []
    modes = [m for i, m in enumerate(modes) if problems.choice(m, f"{key}.modes[{i}]", SEARCH_MODES, "a mode")]
    sizes = {}
    for name in ("min_bytes", "max_bytes", "step_bytes"):
        sizes[name] = problems.integer(table.get(name, getattr(defaults, name)), f"{key}.{name}", 1, MAX_SEARCH_BYTES)
    if sizes["min_bytes"] and sizes["max_bytes"] and sizes["min_bytes"] > sizes["max_bytes"]:
        problems.error(f"{key}.min_bytes", f"{sizes['min_bytes']} is above max_bytes {sizes['max_bytes']}")
    counts = {
        "max_rounds": problems.integer(table.get("max_rounds", defaults.max_rounds), f"{key}.max_rounds", 1, 64),
        "rounds": problems.integer(table.get("rounds", defaults.rounds), f"{key}.rounds", 1),
        "warmup": problems.integer(table.get("warmup", defaults.warmup), f"{key}.warmup", 0),
    }
    name, description = _names(table, index, key, problems, "crossover")
    if None in sizes.values() or None in counts.values():
        return None
    return CrossoverStage(
        index=index,
        name=name,
        description=description,
        impls=tuple(dict.fromkeys(impls)),
        modes=tuple(dict.fromkeys(modes)),
        **sizes,
        **counts,
    )
