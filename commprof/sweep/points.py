"""Sweep points, the axis values that build them, and the rules that select them. Pure data, no I/O."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from commprof.nccl_vocab import MIN_MAX_PAIRS
from commprof.records.point_ids import BASELINE_POINT_ID

BASELINE_LABEL = "defaults"

# Written in an axis, a rule or a point, "default" means "leave unset" (NCCL's own choice); in a rule, "*"
# means "set to anything".
DEFAULT = "default"
ANY = "*"


# How labels name variables, in the order they list them; a MIN/MAX pair with equal values shows as one.
_LABEL_ORDER = (
    ("NCCL_ALGO", "ALGO"),
    ("NCCL_PROTO", "PROTO"),
    (("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"), "ch"),
    (("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"), "ctas"),
    ("NCCL_NTHREADS", "threads"),
    ("NCCL_BUFFSIZE", "buff"),
    ("NCCL_P2P_LEVEL", "P2P"),
    ("NCCL_THREAD_THRESHOLDS", "thresholds"),
)


@dataclass(frozen=True)
class SweepPoint:
    """One configuration to measure: an implementation, its options and the environment it runs under."""

    point_id: str
    label: str
    impl: str
    env: dict[str, str]
    options: dict
    stage: int = 0

    def key(self) -> str:
        """Canonical identity (implementation, sorted environment and options) for de-duplication and resume."""
        return point_key(self.impl, self.env, self.options)

    def __hash__(self) -> int:  # env and options are dicts: hash what identifies the point
        return hash((self.point_id, self.key(), self.stage))

    def to_dict(self) -> dict:
        return {
            "point_id": self.point_id,
            "label": self.label,
            "impl": self.impl,
            "env": dict(self.env),
            "options": dict(self.options),
            "stage": self.stage,
        }

    @property
    def is_baseline(self) -> bool:
        return self.impl == DEFAULT and not self.env and not self.options


def point_key(impl: str, env: dict[str, str], options: dict) -> str:
    return json.dumps({"impl": impl, "env": env, "options": options}, sort_keys=True, separators=(",", ":"))


def baseline() -> SweepPoint:
    """p000: the backend's own all-reduce with no variable set (NCCL's defaults)."""
    return SweepPoint(BASELINE_POINT_ID, BASELINE_LABEL, DEFAULT, {}, {})


def option_text(value: Any) -> str:
    """An option value as TOML writes it (true / false, numbers, strings bare)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


def auto_label(impl: str, env: dict[str, str], options: dict) -> str:
    """A short human label, e.g. "ALGO=Ring PROTO=LL ch=4" or "flashinfer-fused use_oneshot=true"."""
    parts = []
    if impl != DEFAULT:
        parts.append(" ".join([impl] + [f"{k}={option_text(v)}" for k, v in sorted(options.items())]))
    rest = dict(env)
    for name, short in _LABEL_ORDER:
        if isinstance(name, tuple):
            low, high = name
            if low in rest and rest.get(high) == rest[low]:
                rest.pop(high)
                parts.append(f"{short}={rest.pop(low)}")
        elif name in rest:
            parts.append(f"{short}={'/'.join(rest.pop(name).split())}")
    for name in sorted(rest):
        parts.append(f"{name.removeprefix('NCCL_')}={rest[name]}")
    return " ".join(parts) or BASELINE_LABEL


@dataclass(frozen=True)
class Setting:
    """One value of one axis: what it changes in a point (implementation, and variables set or unset)."""

    impl: str | None = None
    options: dict | None = None
    set_env: dict[str, str] = field(default_factory=dict)
    unset_env: tuple[str, ...] = ()

    def apply(self, impl: str, env: dict[str, str], options: dict) -> tuple[str, dict[str, str], dict]:
        if self.impl is not None:
            impl, options = self.impl, dict(self.options or {})
        env = {k: v for k, v in env.items() if k not in self.unset_env}
        env.update(self.set_env)
        return impl, env, options


@dataclass(frozen=True)
class Axis:
    """One swept key (as written in the file, e.g. "channels" or "NCCL_PROTO") and its values in order."""

    name: str
    settings: tuple[Setting, ...]


@dataclass(frozen=True)
class Rule:
    """A selection: a point matches when every condition does. Conditions map an implementation ("impl")
    or variable name to the accepted values, where "default" accepts unset and "*" any set value."""

    conditions: tuple[tuple[str, frozenset[str]], ...]
    reason: str = ""

    def describe(self) -> str:
        """E.g. "impl = default, NCCL_PROTO in LL, LL128"."""
        parts = []
        for name, accepted in self.conditions:
            values = sorted(accepted)
            parts.append(f"{name} = {values[0]}" if len(values) == 1 else f"{name} in {', '.join(values)}")
        return ", ".join(parts)

    def matches(self, point: SweepPoint) -> bool:
        for name, accepted in self.conditions:
            if name == "impl":
                if point.impl not in accepted:
                    return False
                continue
            value = point.env.get(name)
            if value is None:
                if DEFAULT not in accepted:
                    return False
            elif ANY not in accepted and value not in accepted:
                return False
        return True


def cross(bases: Iterable[SweepPoint], axes: tuple[Axis, ...]) -> list[tuple[str, dict[str, str], dict]]:
    """Every base crossed with every combination of axis values, in file order: (impl, env, options)."""
    out = []
    for base in bases:
        for combination in itertools.product(*(axis.settings for axis in axes)):
            impl, env, options = base.impl, dict(base.env), dict(base.options)
            for setting in combination:
                impl, env, options = setting.apply(impl, env, options)
            out.append((impl, env, options))
    return out


def combinations(axes: tuple[Axis, ...]) -> int:
    count = 1
    for axis in axes:
        count *= len(axis.settings)
    return count


def _min_max_ok(env: dict[str, str]) -> bool:
    return all(not (low in env and high in env) or int(env[low]) <= int(env[high]) for low, high in MIN_MAX_PAIRS)


def expand_axes(
    bases: Iterable[SweepPoint], axes: tuple[Axis, ...], excludes: tuple[Rule, ...]
) -> tuple[list[tuple[str, dict, dict]], int]:
    """Bases crossed with the axes, minus excluded ones and MIN > MAX pairs: (combinations, dropped count)."""
    kept, dropped = [], 0
    for impl, env, options in cross(bases, axes):
        if not _min_max_ok(env):
            dropped += 1
        elif not any(rule.matches(SweepPoint("", "", impl, env, options)) for rule in excludes):
            kept.append((impl, env, options))
    return kept, dropped
