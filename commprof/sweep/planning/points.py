"""How points are built: labels, the baseline, and axes crossed into points minus the excluded. Pure."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from typing import Any

from commprof.nccl_vocab import MIN_MAX_PAIRS
from commprof.records.point_ids import BASELINE_POINT_ID
from commprof.sweep.planning.spec import BASELINE_LABEL, DEFAULT, Axis, Rule, SweepPoint

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
    ("NCCL_GRAPH_FILE", "graph"),
)


def baseline() -> SweepPoint:
    """p000: the backend's own all-reduce with no variable set (NCCL's defaults)."""
    return SweepPoint(BASELINE_POINT_ID, BASELINE_LABEL, DEFAULT, {}, {})


def option_text(value: Any) -> str:
    """An option value as TOML writes it (true / false, numbers, strings bare)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


def auto_label(impl: str, env: dict[str, str], options: dict[str, Any]) -> str:
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


def cross(bases: Iterable[SweepPoint], axes: tuple[Axis, ...]) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """Every base crossed with every combination of axis values, in file order: (impl, env, options)."""
    out = []
    for base in bases:
        for combination in itertools.product(*(axis.settings for axis in axes)):
            impl, env, options = base.impl, dict(base.env), dict(base.options)
            for setting in combination:
                impl, env, options = setting.apply(impl, env, options)
            out.append((impl, env, options))
    return out


def _min_max_ok(env: dict[str, str]) -> bool:
    return all(not (low in env and high in env) or int(env[low]) <= int(env[high]) for low, high in MIN_MAX_PAIRS)


def expand_axes(
    bases: Iterable[SweepPoint], axes: tuple[Axis, ...], excludes: tuple[Rule, ...]
) -> tuple[list[tuple[str, dict[str, str], dict[str, Any]]], int]:
    """Bases crossed with the axes, minus excluded ones and MIN > MAX pairs: (combinations, dropped count)."""
    kept, dropped = [], 0
    for impl, env, options in cross(bases, axes):
        if not _min_max_ok(env):
            dropped += 1
        elif not any(rule.matches(SweepPoint("", "", impl, env, options)) for rule in excludes):
            kept.append((impl, env, options))
    return kept, dropped


def sweep_impls(spec) -> list[tuple[str, dict]]:
    """Every (implementation, options) a sweep can run: its points' and those its stages' axes add. Pure."""
    found: dict[object, tuple[str, dict]] = {}
    settings = [(p.impl, p.options) for p in spec.points]
    for stage in spec.stages:
        if stage.kind == "crossover":  # a search runs settings that ran before, or the ones it names
            settings += [(name, {}) for name in stage.impls]
            continue
        settings += [(s.impl, s.options or {}) for axis in stage.axes for s in axis.settings if s.impl is not None]
    for impl, options in settings:
        try:  # hashable option values (every built-in's): no text per point, which a million points would pay
            key: object = (impl, frozenset(options.items())) if options else impl
        except TypeError:
            key = json.dumps([impl, options], sort_keys=True)
        found.setdefault(key, (impl, dict(options)))
    return list(found.values())


def preparation(impl: str, options: dict, backend: str) -> str | None:
    """What a setting does once before its points are timed (AllReduceImpl.preparation), in words; None: nothing,
    or its library is not installed here (its points are refused with the install command, in no time)."""
    from commprof.impls.registry import load_impl, resolve_impl_name
    from commprof.versions import installed_version

    cls = load_impl(resolve_impl_name(impl, backend))
    what = cls.preparation(backend, options)
    if what is None or (cls.library is not None and installed_version(cls.library) is None):
        return None
    return what
