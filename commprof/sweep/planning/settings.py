"""The grammar every setting of a sweep file shares: [axes], [[points]], [[exclude]] and a stage's axes and
candidates name an implementation (with its options) or variables, with a value, a list of values or
"default" ("*" in rules). Each reader returns what it built, or None after recording the problem.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any

import msgspec

from commprof.env_names import export_name_problem
from commprof.impls import registry
from commprof.impls.base import option_values
from commprof.nccl_tuning import ENV_CHECKS, env_value
from commprof.nccl_vocab import MIN_MAX_PAIRS, value_traps
from commprof.problems import Problems
from commprof.records.values import MAX_SETTINGS
from commprof.sweep.planning.graph_axis import GRAPH_AXIS, GRAPH_VARIABLE, graph_values
from commprof.sweep.planning.spec import ANY, DEFAULT, Axis, Rule, Setting
from commprof.torch_env import frozen_variable

PLUGIN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")

# Shorthands that set a MIN / MAX pair to the same value.
SHORTHANDS = dict(zip(("channels", "ctas"), MIN_MAX_PAIRS))
SETTING_KEYS = ("impl", *SHORTHANDS, *ENV_CHECKS, GRAPH_AXIS, "env")
# What a sweep file may say it is written for; only decides which trap warnings apply.
INTERCONNECTS = ("any", "pcie", "nvlink")


class SweepProblems(Problems):
    """A sweep file's problems, and which interconnect's trap warnings apply to its values."""

    def __init__(self, source: str, interconnect: str = "any") -> None:
        super().__init__(source)
        self.interconnect = interconnect


def impl_variants(name: str) -> list[dict]:
    """Every setting of a built-in's required options, e.g. symm-mem: variant one_shot, then two_shot."""
    required = registry.required_options(name)
    kinds = registry.option_kinds(name) or {}
    values = [option_values(kinds[option]) for option in required]
    return [dict(zip(required, combination)) for combination in itertools.product(*values)]


def impl_name(raw: object, key: str, problems: SweepProblems) -> str | None:
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


def _impl_options(name: str, options: object, key: str, problems: SweepProblems) -> dict | None:
    if not isinstance(options, dict):
        problems.error(key, f"expected a table of options, got {options!r}")
        return None
    cls = registry.builtin(name) if name else None
    found = cls.option_problems(options) if cls is not None else []
    for option, text in found:
        problems.error(f"{key}.{option}" if option else key, text)
    return None if found else dict(options)


class ImplEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An [axes] impl entry written as a table: an implementation with its options."""

    name: Any = None  # a built-in's name or "package.module:Class" (impl_name: the registry knows the names)
    options: Annotated[dict[str, Any], msgspec.Meta(extra={"want": "a table of options"})] = {}  # checked by the
    # implementation's class (option_problems)


def _impl_setting(raw: object, key: str, problems: SweepProblems) -> Setting | None:
    """An [axes] impl entry: "name" or {name = "...", options = {...}}."""
    if isinstance(raw, dict):
        before = len(problems.errors)
        entry = problems.read(raw, ImplEntry, (key,))
        name = impl_name(entry.name, f"{key}.name", problems)
        options = _impl_options(name or "", entry.options, f"{key}.options", problems)
        if name is None or options is None or len(problems.errors) > before:
            return None
        return Setting(impl=name, options=options)
    name = impl_name(raw, key, problems)
    if name is None or _impl_options(name, {}, key, problems) is None:
        return None
    return Setting(impl=name, options={})


def _env_string(
    name: str, raw: object, key: str, problems: SweepProblems, accept_any: bool = False, warn_traps: bool = True
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


def value_list(raw: object, key: str, problems: SweepProblems, single: bool) -> list[tuple[str, Any]]:
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


def _env_settings(
    targets: tuple[str, ...], raw: object, key: str, problems: SweepProblems, single: bool
) -> list[Setting]:
    """Settings of one key; `targets` are the variables it sets (two for a MIN / MAX shorthand)."""
    frozen = frozen_variable(targets[0])
    if frozen:
        problems.error(key, frozen)
        return []
    settings = []
    if targets[0] == GRAPH_VARIABLE:  # nccl_graph or NCCL_GRAPH_FILE: "auto", "generated" or a path
        values = graph_values(raw, key, problems, single)
    else:
        values = value_list(raw, key, problems, single)
    for value_key, value in values:
        text = _env_string(targets[0], value, value_key, problems)
        if text is None:
            continue
        if text == DEFAULT:
            settings.append(Setting(unset_env=targets))
        else:
            settings.append(Setting(set_env={target: text for target in targets}))
    return settings


def _targets(name: str) -> tuple[str, ...]:
    """The variables a setting key sets: a MIN / MAX pair for a shorthand, NCCL_GRAPH_FILE for nccl_graph."""
    return (GRAPH_VARIABLE,) if name == GRAPH_AXIS else SHORTHANDS.get(name, (name,))


def parse_axes(table: dict, key: str, problems: SweepProblems) -> tuple[Axis, ...]:
    """[axes] (or a stage's axes) in file order: impl, known variables, shorthands, then [axes.env]."""
    problems.unknown_keys(table, SETTING_KEYS, key)
    axes = []
    for name, raw in table.items():
        if name == "impl":
            entries = value_list(raw, f"{key}.impl", problems, single=False)
            settings = [s for k, v in entries if (s := _impl_setting(v, k, problems)) is not None]
            axes.append(Axis("impl", tuple(settings)))
        elif name == "env":
            variables = problems.table(raw, f"{key}.env")
            if len(axes) + len(variables) > MAX_SETTINGS:  # counted before a name is checked: one line, not 10**5
                problems.error(key, f"more than {MAX_SETTINGS} settings (allowed: at most {MAX_SETTINGS} per point)")
                return ()
            for var, values in variables.items():
                if refused := export_name_problem(var):
                    problems.error(f"{key}.env.{var}", refused)
                    continue
                axes.append(Axis(var, tuple(_env_settings((var,), values, f"{key}.env.{var}", problems, False))))
        elif name in SETTING_KEYS:
            targets = _targets(name)
            axes.append(Axis(name, tuple(_env_settings(targets, raw, f"{key}.{name}", problems, False))))
        if len(axes) > MAX_SETTINGS:
            problems.error(key, f"more than {MAX_SETTINGS} settings (allowed: at most {MAX_SETTINGS} per point)")
            return ()
    return tuple(axis for axis in axes if axis.settings)


def parse_point(table: dict, key: str, problems: SweepProblems) -> tuple[str, dict, dict, str | None] | None:
    """An explicit [[points]] entry: (impl, env, options, label or None)."""
    allowed = (*SETTING_KEYS, "options", "label")
    problems.unknown_keys(table, allowed, key)
    errors_before = len(problems.errors)
    impl = impl_name(table["impl"], f"{key}.impl", problems) if "impl" in table else DEFAULT
    options = {}
    if impl is not None:
        options = _impl_options(impl, table.get("options", {}), f"{key}.options", problems) or {}
    label = problems.string(table["label"], f"{key}.label") if "label" in table else None
    settings = sum(
        len(raw) if name == "env" and isinstance(raw, dict) else name in SETTING_KEYS for name, raw in table.items()
    )
    if settings > MAX_SETTINGS:
        problems.error(key, f"{settings} settings (allowed: at most {MAX_SETTINGS} per point)")
        return None
    env: dict[str, str] = {}
    for name, raw in table.items():
        if name in ("impl", "options", "label") or name not in allowed:
            continue
        if name == "env":
            pairs = [((var,), var, value) for var, value in problems.table(raw, f"{key}.env").items()]
            prefix = f"{key}.env"
        else:
            pairs, prefix = [(_targets(name), name, raw)], key
        for targets, var, value in pairs:
            if name == "env" and (refused := export_name_problem(var)):
                problems.error(f"{prefix}.{var}", refused)
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


def parse_rule(table: dict, key: str, problems: SweepProblems, with_reason: bool) -> Rule | None:
    """An [[exclude]] entry or a stage's candidates: conditions on impl and variables."""
    allowed = (*SETTING_KEYS, "reason") if with_reason else SETTING_KEYS
    problems.unknown_keys(table, allowed, key)
    conditions: dict[str, set[str]] = {}
    reason = ""
    for name, raw in table.items():
        if name == "reason" and with_reason:
            reason = problems.string(raw, f"{key}.reason") or ""
            continue
        if name not in allowed:
            continue
        if name == "impl":
            names = {
                n
                for k, v in value_list(raw, f"{key}.impl", problems, single=False)
                if (n := impl_name(v, k, problems)) is not None
            }
            conditions["impl"] = names
            continue
        if name == "env":
            pairs = [((var,), f"{key}.env.{var}", value) for var, value in problems.table(raw, f"{key}.env").items()]
        else:
            pairs = [(_targets(name), f"{key}.{name}", raw)]
        for targets, var_key, value in pairs:
            listed = (
                graph_values(value, var_key, problems, single=False)
                if targets[0] == GRAPH_VARIABLE
                else value_list(value, var_key, problems, single=False)
            )
            accepted = {
                text
                for k, v in listed
                if (text := _env_string(targets[0], v, k, problems, accept_any=True, warn_traps=False)) is not None
            }
            for target in targets:
                conditions[target] = accepted
    if not conditions:
        problems.error(key, "a rule needs at least one condition besides reason")
        return None
    return Rule(tuple((name, frozenset(values)) for name, values in conditions.items()), reason)
