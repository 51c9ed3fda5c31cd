"""Sweep files (TOML): parse, validate and expand into points before anything runs.

The format is documented in docs/sweep-files.md. Every problem is reported as "file: key: problem
(allowed: ...)" and nothing starts; known traps become warnings. Pure apart from load_sweep reading the file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from commprof.errors import UsageError
from commprof.impls import registry
from commprof.impls.base import option_values
from commprof.nccl_vocab import ENV_CHECKS, ENV_NAME, MIN_MAX_PAIRS, env_value, value_traps
from commprof.planner.models import load_model, normalize_dtype
from commprof.planner.plan import PHASES
from commprof.records import point_ids
from commprof.sweep import staging
from commprof.sweep.dryrun import format_points_table
from commprof.sweep.points import (
    ANY,
    DEFAULT,
    Axis,
    Rule,
    Setting,
    SweepPoint,
    auto_label,
    baseline,
    combinations,
    expand_axes,
    point_key,
)

# The replay harness's defaults (commprof.harness.ReplayConfig), repeated so parsing never imports torch.
DEFAULT_ITERATIONS = 50
DEFAULT_WARMUP = 5
DEFAULT_POINT_TIMEOUT_S = 180.0

PLUGIN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")

# Shorthands that set a MIN / MAX pair to the same value.
SHORTHANDS = dict(zip(("channels", "ctas"), MIN_MAX_PAIRS))

TOP_KEYS = ("name", "description", "run", "axes", "points", "exclude", "stages", "report")
RUN_KEYS = ("model", "tp", "tokens", "phase", "dtype", "iterations", "warmup", "point_timeout_s", "interconnect")
# What the file is written for; only decides which trap warnings apply (the topology probe says what is there).
INTERCONNECTS = ("any", "pcie", "nvlink")
STAGE_KEYS = (
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
REPORT_KEYS = ("compute_ms", "draft_ms", "accept_lengths", "baseline")
SETTING_KEYS = ("impl", *SHORTHANDS, *ENV_CHECKS, "env")


def impl_variants(name: str) -> list[dict]:
    """Every setting of a built-in's required options, e.g. symm-mem: variant one_shot, then two_shot."""
    required = registry.required_options(name)
    kinds = registry.option_kinds(name) or {}
    values = [option_values(kinds[option]) for option in required]
    return [dict(zip(required, combination)) for combination in itertools.product(*values)]


@dataclass(frozen=True)
class StageSpec:
    """A refinement stage: the best `top_k` finished points (among `candidates`), crossed with `axes`."""

    index: int
    name: str
    description: str
    top_k: int
    axes: tuple[Axis, ...] = ()
    candidates: Rule | None = None
    rank_by: str = "geomean"
    iterations: int | None = None  # set: this stage re-measures its points with these iterations
    warmup: int | None = None
    include_baseline: bool = False

    def max_points(self) -> int:
        """Points this stage can produce at most (fewer when candidates are missing or repeat)."""
        return self.top_k * combinations(self.axes) + int(self.include_baseline)


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: what to replay, the points of stage 0 and the stages that refine them."""

    path: str | None
    content: str
    sha256: str
    name: str
    description: str
    model: str
    tp: int | None
    tokens: tuple[int, ...]
    phase: str
    dtype: str | None
    iterations: int
    warmup: int
    point_timeout_s: float
    points: tuple[SweepPoint, ...]
    stages: tuple[StageSpec, ...] = ()
    warnings: tuple[str, ...] = ()
    report: dict = field(default_factory=dict)
    excludes: tuple[Rule, ...] = ()
    interconnect: str = "any"

    def refine(self, stage: int, results: list[dict]) -> list[SweepPoint]:
        """The points of `stage` (>= 1), from the step records of the stages before it. Pure."""
        return staging.refine(self, stage, results)

    def iterations_for(self, point: SweepPoint) -> tuple[int, int]:
        """(iterations, warmup) for a point: its stage's own when that stage re-measures, else the run's."""
        if point.stage >= 1:
            stage = self.stages[point.stage - 1]
            return (stage.iterations or self.iterations, self.warmup if stage.warmup is None else stage.warmup)
        return self.iterations, self.warmup

    def estimate_seconds(self, per_point_overhead_s: float, step_ms_guess: float, modes: int = 2) -> float:
        """Estimated wall time: every point (stages at their upper bound) pays start-up plus its timed steps."""

        def cost(points: int, iterations: int, warmup: int) -> float:
            steps = (iterations + warmup) * len(self.tokens) * modes
            return points * (per_point_overhead_s + steps * step_ms_guess / 1000.0)

        total = cost(len(self.points), self.iterations, self.warmup)
        for stage in self.stages:
            total += cost(
                stage.max_points(),
                stage.iterations or self.iterations,
                self.warmup if stage.warmup is None else stage.warmup,
            )
        return total

    def max_points(self) -> int:
        return len(self.points) + sum(stage.max_points() for stage in self.stages)

    def with_overrides(
        self,
        model: str | None = None,
        tokens=None,
        phase: str | None = None,
        dtype: str | None = None,
        tp: int | None = None,
        iterations: int | None = None,
        warmup: int | None = None,
        point_timeout_s: float | None = None,
    ) -> SweepSpec:
        """This sweep with command-line values in place of the file's; None (or no tokens) keeps the file's."""
        changes: dict[str, Any] = {}
        if model is not None:
            load_model(model)
            changes["model"] = model
        if tokens:
            tokens = tuple(tokens)
            if any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in tokens):
                raise UsageError(f"tokens must be integers >= 1, got {list(tokens)}")
            changes["tokens"] = tuple(dict.fromkeys(tokens))
        if phase is not None:
            if phase not in PHASES:
                raise UsageError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
            changes["phase"] = phase
        if dtype is not None:
            changes["dtype"] = normalize_dtype(dtype)
        for name, value, minimum in (("tp", tp, 1), ("iterations", iterations, 1), ("warmup", warmup, 0)):
            if value is not None:
                if value < minimum:
                    raise UsageError(f"{name} must be >= {minimum}, got {value}")
                changes[name] = value
        if point_timeout_s is not None:
            if point_timeout_s <= 0:
                raise UsageError(f"the point time limit must be > 0 s, got {point_timeout_s}")
            changes["point_timeout_s"] = float(point_timeout_s)
        return replace(self, **changes)


class _Problems:
    """Collects "file: key: problem" lines so one pass reports every mistake in the file."""

    def __init__(self, source: str, interconnect: str = "any"):
        self.source = source
        self.interconnect = interconnect  # which trap warnings apply
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, key: str, text: str) -> None:
        self.errors.append(f"{self.source}: {key}: {text}")

    def warn(self, key: str, text: str) -> None:
        line = f"{self.source}: {key}: {text}"
        if line not in self.warnings:
            self.warnings.append(line)

    def raise_if_any(self) -> None:
        if self.errors:
            raise UsageError("\n".join(self.errors))


def _allowed(keys) -> str:
    return f"(allowed: {', '.join(keys)})"


def _table(value, key: str, problems: _Problems) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.error(key, f"expected a table, got {type(value).__name__}")
        return {}
    return value


def _unknown_keys(table: dict, allowed, key: str, problems: _Problems) -> None:
    for name in table:
        if name not in allowed:
            where = f"{key}.{name}" if key else name
            problems.error(where, f"unknown key {_allowed(allowed)}")


def _int(value, key: str, problems: _Problems, minimum: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        problems.error(key, f"expected an integer >= {minimum}, got {value!r}")
        return None
    if value < minimum:
        problems.error(key, f"{value} is below {minimum} (allowed: an integer >= {minimum})")
        return None
    return value


def _number(value, key: str, problems: _Problems, minimum: float, strict: bool = False) -> float | None:
    bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.error(key, f"expected a number {bound}, got {value!r}")
        return None
    if value < minimum or (strict and value == minimum):
        problems.error(key, f"{value} is out of range (allowed: a number {bound})")
        return None
    return float(value)


def _string(value, key: str, problems: _Problems) -> str | None:
    if not isinstance(value, str):
        problems.error(key, f"expected a string, got {value!r}")
        return None
    return value


# --- settings: the shared grammar of [axes], [[points]], [[exclude]] and stage axes ---------------------


def _impl_name(raw, key: str, problems: _Problems) -> str | None:
    if not isinstance(raw, str):
        problems.error(key, f"expected an implementation name, got {raw!r}")
        return None
    if raw in registry.known_names() or PLUGIN.match(raw):
        return raw
    problems.error(
        key,
        f"unknown implementation {raw!r} "
        f"(allowed: {', '.join(registry.known_names())}, or an importable package.module:Class)",
    )
    return None


def _impl_options(name: str, options, key: str, problems: _Problems) -> dict | None:
    if not isinstance(options, dict):
        problems.error(key, f"expected a table of options, got {options!r}")
        return None
    cls = registry.builtin(name) if name else None
    found = cls.option_problems(options) if cls is not None else []
    for option, text in found:
        problems.error(f"{key}.{option}" if option else key, text)
    return None if found else dict(options)


def _impl_setting(raw, key: str, problems: _Problems) -> Setting | None:
    """An [axes] impl entry: "name" or {name = "...", options = {...}}."""
    if isinstance(raw, dict):
        _unknown_keys(raw, ("name", "options"), key, problems)
        name = _impl_name(raw.get("name"), f"{key}.name", problems)
        options = _impl_options(name or "", raw.get("options", {}), f"{key}.options", problems)
        if name is None or options is None:
            return None
        return Setting(impl=name, options=options)
    name = _impl_name(raw, key, problems)
    if name is None or _impl_options(name, {}, key, problems) is None:
        return None
    return Setting(impl=name, options={})


def _env_string(
    name: str, raw, key: str, problems: _Problems, accept_any: bool = False, warn_traps: bool = True
) -> str | None:
    """A variable's value as the environment gets it; DEFAULT / ANY pass through; None after an error."""
    if raw == DEFAULT or (accept_any and raw == ANY):
        return raw
    try:
        value = env_value(name, raw)
    except ValueError as exc:
        problems.error(key, str(exc))
        return None
    if warn_traps:
        for trap in value_traps(name, value, problems.interconnect):
            problems.warn(key, trap)
    return value


def _values(raw, key: str, problems: _Problems, single: bool) -> list[tuple[str, Any]]:
    """(key of each value, value): a point takes one value per key, axes and rules a value or a list."""
    if isinstance(raw, list):
        if single:
            problems.error(key, "a point takes one value per key (put several in [axes])")
            return []
        if not raw:
            problems.error(key, "empty list (give at least one value, or leave the key out)")
        return [(f"{key}[{i}]", value) for i, value in enumerate(raw)]
    if isinstance(raw, dict):
        problems.error(key, "expected a value or a list of values, got a table")
        return []
    return [(key, raw)]


def _env_settings(targets: tuple[str, ...], raw, key: str, problems: _Problems, single: bool) -> list[Setting]:
    """Settings of one key; `targets` are the variables it sets (two for a MIN / MAX shorthand)."""
    settings = []
    for value_key, value in _values(raw, key, problems, single):
        text = _env_string(targets[0], value, value_key, problems)
        if text is None:
            continue
        if text == DEFAULT:
            settings.append(Setting(unset_env=targets))
        else:
            settings.append(Setting(set_env={target: text for target in targets}))
    return settings


def _parse_axes(table: dict, key: str, problems: _Problems) -> tuple[Axis, ...]:
    """[axes] (or a stage's axes) in file order: impl, known variables, shorthands, then [axes.env]."""
    _unknown_keys(table, SETTING_KEYS, key, problems)
    axes = []
    for name, raw in table.items():
        if name == "impl":
            entries = _values(raw, f"{key}.impl", problems, single=False)
            settings = [s for k, v in entries if (s := _impl_setting(v, k, problems)) is not None]
            axes.append(Axis("impl", tuple(settings)))
        elif name == "env":
            for var, values in _table(raw, f"{key}.env", problems).items():
                if not ENV_NAME.match(var):
                    problems.error(
                        f"{key}.env.{var}",
                        "not an environment variable name (allowed: letters, digits and _, not starting with a digit)",
                    )
                    continue
                axes.append(Axis(var, tuple(_env_settings((var,), values, f"{key}.env.{var}", problems, False))))
        elif name in SETTING_KEYS:
            targets = SHORTHANDS.get(name, (name,))
            axes.append(Axis(name, tuple(_env_settings(targets, raw, f"{key}.{name}", problems, False))))
    return tuple(axis for axis in axes if axis.settings)


def _parse_point(table: dict, key: str, problems: _Problems) -> tuple[str, dict, dict, str | None] | None:
    """An explicit [[points]] entry: (impl, env, options, label or None)."""
    allowed = (*SETTING_KEYS, "options", "label")
    _unknown_keys(table, allowed, key, problems)
    errors_before = len(problems.errors)
    impl = _impl_name(table["impl"], f"{key}.impl", problems) if "impl" in table else DEFAULT
    options = {}
    if impl is not None:
        options = _impl_options(impl, table.get("options", {}), f"{key}.options", problems) or {}
    label = _string(table["label"], f"{key}.label", problems) if "label" in table else None
    env: dict[str, str] = {}
    for name, raw in table.items():
        if name in ("impl", "options", "label") or name not in allowed:
            continue
        if name == "env":
            pairs = [((var,), var, value) for var, value in _table(raw, f"{key}.env", problems).items()]
            prefix = f"{key}.env"
        else:
            pairs, prefix = [(SHORTHANDS.get(name, (name,)), name, raw)], key
        for targets, var, value in pairs:
            if name == "env" and not ENV_NAME.match(var):
                problems.error(f"{prefix}.{var}", "not an environment variable name")
                continue
            for setting in _env_settings(targets, value, f"{prefix}.{var}", problems, single=True):
                _, env, _ = setting.apply(impl, env, options)
    if len(problems.errors) > errors_before:
        return None
    for low, high in MIN_MAX_PAIRS:
        if low in env and high in env and int(env[low]) > int(env[high]):
            problems.error(key, f"{low}={env[low]} is above {high}={env[high]} (allowed: min <= max)")
            return None
    return impl, env, options, label


def _parse_rule(table: dict, key: str, problems: _Problems, with_reason: bool) -> Rule | None:
    """An [[exclude]] entry or a stage's candidates: conditions on impl and variables."""
    allowed = (*SETTING_KEYS, "reason") if with_reason else SETTING_KEYS
    _unknown_keys(table, allowed, key, problems)
    conditions: dict[str, set[str]] = {}
    reason = ""
    for name, raw in table.items():
        if name == "reason" and with_reason:
            reason = _string(raw, f"{key}.reason", problems) or ""
            continue
        if name not in allowed:
            continue
        if name == "impl":
            names = {
                n
                for k, v in _values(raw, f"{key}.impl", problems, single=False)
                if (n := _impl_name(v, k, problems)) is not None
            }
            conditions["impl"] = names
            continue
        if name == "env":
            pairs = [((var,), f"{key}.env.{var}", value) for var, value in _table(raw, f"{key}.env", problems).items()]
        else:
            pairs = [(SHORTHANDS.get(name, (name,)), f"{key}.{name}", raw)]
        for targets, var_key, value in pairs:
            accepted = {
                text
                for k, v in _values(value, var_key, problems, single=False)
                if (text := _env_string(targets[0], v, k, problems, accept_any=True, warn_traps=False)) is not None
            }
            for target in targets:
                conditions[target] = accepted
    if not conditions:
        problems.error(key, "a rule needs at least one condition besides reason")
        return None
    return Rule(tuple((name, frozenset(values)) for name, values in conditions.items()), reason)


# --- expansion ------------------------------------------------------------------------------------------


def _stage0_points(axes, excludes, explicit, problems: _Problems) -> tuple[SweepPoint, ...]:
    points = [baseline()]
    seen = {points[0].key(): points[0].point_id}
    combos, dropped = expand_axes([points[0]], axes, excludes)
    if dropped:
        problems.warn("axes", f"{dropped} combinations skipped: a MIN channel / CTA count above its MAX")

    def add(impl, env, options, label, where: str | None) -> None:
        key = point_key(impl, env, options)
        if key in seen:
            if where:
                problems.warn(where, f"repeats {seen[key]}; listed once")
            return
        this_id = point_ids.point_id(len(points))
        seen[key] = this_id
        points.append(SweepPoint(this_id, label or auto_label(impl, env, options), impl, env, options))

    for impl, env, options in combos:
        add(impl, env, options, None, None)
    for index, (impl, env, options, label) in explicit:
        add(impl, env, options, label, f"points[{index}]")
    return tuple(points)


def _parse_stage(table, index: int, problems: _Problems) -> StageSpec | None:
    key = f"stages[{index - 1}]"
    table = _table(table, key, problems)
    _unknown_keys(table, STAGE_KEYS, key, problems)
    if "top_k" not in table:
        problems.error(f"{key}.top_k", "missing (allowed: an integer >= 1: how many of the best points to refine)")
    top_k = _int(table.get("top_k", 1), f"{key}.top_k", problems, 1)
    axes = _parse_axes(_table(table.get("axes"), f"{key}.axes", problems), f"{key}.axes", problems)
    candidates = None
    if "candidates" in table:
        candidates = _parse_rule(
            _table(table["candidates"], f"{key}.candidates", problems), f"{key}.candidates", problems, with_reason=False
        )
    rank_by = table.get("rank_by", "geomean")
    if rank_by not in staging.RANK_BY:
        problems.error(f"{key}.rank_by", f"{rank_by!r} is not a ranking (allowed: {', '.join(staging.RANK_BY)})")
    iterations = _int(table["iterations"], f"{key}.iterations", problems, 1) if "iterations" in table else None
    warmup = _int(table["warmup"], f"{key}.warmup", problems, 0) if "warmup" in table else None
    include_baseline = table.get("include_baseline", False)
    if not isinstance(include_baseline, bool):
        problems.error(f"{key}.include_baseline", f"expected true or false, got {include_baseline!r}")
    if not axes and "iterations" not in table and "axes" not in table:
        problems.error(
            key,
            "a stage needs axes to cross its best points with, or iterations to re-measure "
            "them with (successive halving)",
        )
    name = table.get("name", f"stage {index}")
    description = table.get("description", "")
    for field_name, value in (("name", name), ("description", description)):
        _string(value, f"{key}.{field_name}", problems)
    if top_k is None:
        return None
    return StageSpec(
        index=index,
        name=str(name),
        description=str(description),
        top_k=top_k,
        axes=axes,
        candidates=candidates,
        rank_by=str(rank_by),
        iterations=iterations,
        warmup=warmup,
        include_baseline=bool(include_baseline),
    )


def _per_tokens(raw, key: str, tokens: tuple[int, ...], problems: _Problems) -> float | dict[int, float] | None:
    """A number for every T, or a table {"T" = number} covering T values of [run] tokens."""
    if not isinstance(raw, dict):
        return _number(raw, key, problems, 0.0)
    out = {}
    for name, value in raw.items():
        if not re.fullmatch(r"\d+", name) or int(name) not in tokens:
            problems.error(f"{key}.{name}", f"not a T of run.tokens (allowed: {', '.join(map(str, tokens))})")
            continue
        number = _number(value, f"{key}.{name}", problems, 0.0)
        if number is not None:
            out[int(name)] = number
    return out


def _parse_report(table: dict, tokens, points: tuple[SweepPoint, ...], problems: _Problems) -> dict:
    _unknown_keys(table, REPORT_KEYS, "report", problems)
    report: dict[str, Any] = {}
    if "compute_ms" in table:
        report["compute_ms"] = _per_tokens(table["compute_ms"], "report.compute_ms", tokens, problems)
    if "draft_ms" in table:  # drafting does not depend on the verify step's T: one number
        report["draft_ms"] = _number(table["draft_ms"], "report.draft_ms", problems, 0.0)
    if "accept_lengths" in table:
        raw = table["accept_lengths"]
        values = raw if isinstance(raw, list) else [raw]
        lengths = [_number(v, f"report.accept_lengths[{i}]", problems, 1.0) for i, v in enumerate(values)]
        report["accept_lengths"] = [v for v in lengths if v is not None]
    if "baseline" in table:
        wanted = table["baseline"]
        match = [p.point_id for p in points if wanted in (p.point_id, p.label)]
        if not match:
            problems.error(
                "report.baseline",
                f"{wanted!r} is no stage-0 point id or label "
                f"(allowed: {', '.join(p.point_id for p in points[:8])}, ...)",
            )
        else:
            report["baseline"] = match[0]
    return report


def parse_sweep(text: str, path: str | None = None, source: str | None = None) -> SweepSpec:
    """Validate a sweep file's text and expand it; UsageError lists every problem, one line each.

    Problems name `source`, else `path`, else "<sweep>".
    """
    source = source or path or "<sweep>"
    problems = _Problems(source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{source}: not valid TOML: {exc}") from None
    _unknown_keys(data, TOP_KEYS, "", problems)

    name = data.get("name", Path(path).stem if path else "sweep")
    description = data.get("description", "")
    for key, value in (("name", name), ("description", description)):
        _string(value, key, problems)

    run = _table(data.get("run"), "run", problems)
    _unknown_keys(run, RUN_KEYS, "run", problems)
    model = run.get("model", "kimi-k2.5")
    if _string(model, "run.model", problems) is not None:
        try:
            load_model(model)
        except UsageError as exc:
            problems.error("run.model", str(exc))
    tp = _int(run["tp"], "run.tp", problems, 1) if "tp" in run else None
    interconnect = run.get("interconnect", "any")
    if interconnect in INTERCONNECTS:
        problems.interconnect = interconnect
    else:
        problems.error(
            "run.interconnect", f"{interconnect!r} is not an interconnect (allowed: {', '.join(INTERCONNECTS)})"
        )
    raw_tokens = run.get("tokens", [1])
    tokens: tuple[int, ...] = ()
    if not isinstance(raw_tokens, list) or not raw_tokens:
        problems.error("run.tokens", f"expected a non-empty list of integers >= 1, got {raw_tokens!r}")
    else:
        tokens = tuple(t for i, v in enumerate(raw_tokens) if (t := _int(v, f"run.tokens[{i}]", problems, 1)))
        if len(set(tokens)) != len(tokens):
            problems.error("run.tokens", f"{raw_tokens} lists a T twice")
    phase = run.get("phase", "verify")
    if phase not in PHASES:
        problems.error("run.phase", f"{phase!r} is not a phase (allowed: {', '.join(PHASES)})")
    dtype = None
    if "dtype" in run:
        try:
            dtype = normalize_dtype(run["dtype"])
        except UsageError as exc:
            problems.error("run.dtype", str(exc))
    iterations = _int(run.get("iterations", DEFAULT_ITERATIONS), "run.iterations", problems, 1)
    warmup = _int(run.get("warmup", DEFAULT_WARMUP), "run.warmup", problems, 0)
    timeout = _number(
        run.get("point_timeout_s", DEFAULT_POINT_TIMEOUT_S), "run.point_timeout_s", problems, 0.0, strict=True
    )

    axes = _parse_axes(_table(data.get("axes"), "axes", problems), "axes", problems)
    excludes = tuple(
        rule
        for i, table in enumerate(_list_of_tables(data, "exclude", problems))
        if (rule := _parse_rule(table, f"exclude[{i}]", problems, with_reason=True)) is not None
    )
    explicit = [
        (i, point)
        for i, table in enumerate(_list_of_tables(data, "points", problems))
        if (point := _parse_point(table, f"points[{i}]", problems)) is not None
    ]
    stages = tuple(
        stage
        for i, table in enumerate(_list_of_tables(data, "stages", problems), start=1)
        if (stage := _parse_stage(table, i, problems)) is not None
    )
    problems.raise_if_any()

    points = _stage0_points(axes, excludes, explicit, problems)
    report = _parse_report(_table(data.get("report"), "report", problems), tokens, points, problems)
    problems.raise_if_any()
    return SweepSpec(
        path=path,
        content=text,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        name=str(name),
        description=str(description).strip(),
        model=model,
        tp=tp,
        tokens=tokens,
        phase=phase,
        dtype=dtype,
        iterations=iterations,
        warmup=warmup,
        point_timeout_s=timeout,
        points=points,
        stages=stages,
        warnings=tuple(problems.warnings),
        report=report,
        excludes=excludes,
        interconnect=problems.interconnect,
    )


def _list_of_tables(data: dict, key: str, problems: _Problems) -> list[dict]:
    raw = data.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        problems.error(key, f"expected an array of tables ([[{key}]]), got {type(raw).__name__}")
        return []
    return raw


def load_sweep(path) -> SweepSpec:
    """Read and validate a sweep file; UsageError "file: key: problem (allowed: ...)" on any problem."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"sweep file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read sweep file {path}: {exc}") from None
    return parse_sweep(text, str(path))


def _toml_value(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # a JSON string or number is a valid TOML basic string or number


def default_sweep(
    model: str = "kimi-k2.5",
    tokens=(1, 4, 8),
    phase: str = "verify",
    dtype: str | None = None,
    tp: int | None = None,
    iterations: int | None = None,
    warmup: int | None = None,
    impls=("default",),
    point_timeout_s: float | None = None,
) -> SweepSpec:
    """The sweep `allreduce_sweep` runs without --sweep: the baseline (and any extra implementations).

    A built-in with required options runs in each of its variants (symm-mem: one_shot and two_shot).
    None for iterations, warmup or point_timeout_s means the defaults; a bad value is a UsageError
    naming the setting, as if it came from a file.
    """
    iterations = DEFAULT_ITERATIONS if iterations is None else iterations
    warmup = DEFAULT_WARMUP if warmup is None else warmup
    point_timeout_s = DEFAULT_POINT_TIMEOUT_S if point_timeout_s is None else point_timeout_s
    run = {
        "model": model,
        "tokens": list(tokens),
        "phase": phase,
        "dtype": dtype,
        "tp": tp,
        "iterations": iterations,
        "warmup": warmup,
        "point_timeout_s": point_timeout_s,
    }
    lines = [
        'name = "default"',
        'description = "NCCL defaults (the baseline) and the implementations named on the command line."',
        "",
        "[run]",
    ]
    lines += [f"{key} = {_toml_value(value)}" for key, value in run.items() if value is not None]
    entries = [_toml_value(DEFAULT)]
    for name in dict.fromkeys(impls):
        if name == DEFAULT:
            continue
        if registry.required_options(name):
            for options in impl_variants(name):
                table = ", ".join(f"{key} = {_toml_value(value)}" for key, value in options.items())
                entries.append(f"{{ name = {_toml_value(name)}, options = {{ {table} }} }}")
        else:
            entries.append(_toml_value(name))
    if len(entries) > 1:
        lines += ["", "[axes]", f"impl = [{', '.join(entries)}]"]
    return parse_sweep("\n".join(lines) + "\n", None, source="command line")


__all__ = [
    "SweepPoint",
    "SweepSpec",
    "StageSpec",
    "load_sweep",
    "parse_sweep",
    "default_sweep",
    "DEFAULT_ITERATIONS",
    "DEFAULT_WARMUP",
    "DEFAULT_POINT_TIMEOUT_S",
    "format_points_table",
]
