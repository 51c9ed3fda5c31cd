"""Which sweep points can act on this launch, decided before any worker starts.

A point whose implementation cannot run here, or whose variables only a backend this launch does not use reads
(NCCL_* on gloo), is recorded "unsupported" with the reason and never timed, ranked or exported: a measurement
of settings that cannot act would rank noise. `--dry-run` shows the same verdicts up front. Pure apart from
`launch_context`, which reads the installed packages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from commprof.nccl_vocab import is_nccl_variable

if TYPE_CHECKING:
    from commprof.impls.base import ImplContext
    from commprof.sweep.planning.points import SweepPoint


def inert_variables(env: dict[str, str], backend: str) -> list[str]:
    """The point's variables this backend never reads: NCCL's own when NCCL does not run."""
    return sorted(name for name in env if is_nccl_variable(name)) if backend != "nccl" else []


def inert_reason(env: dict[str, str], backend: str) -> str | None:
    """ "NCCL_ALGO has no effect on the gloo backend (NCCL does not run here)", or None."""
    names = inert_variables(env, backend)
    if not names:
        return None
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    verb = "has" if len(names) == 1 else "have"
    return f"{listed} {verb} no effect on the {backend} backend (NCCL does not run here)"


def launch_context(backend: str, world_size: int, dtype: str, tokens: Iterable[int], hidden_size: int):
    """The facts the controller can gate implementations on: a CPU launch's (no CUDA to ask), else None (the
    workers gate with their GPUs' facts, which asking here would tie the controller to a CUDA context)."""
    if backend == "nccl":
        return None
    from commprof.impls.context import build_impl_context

    return build_impl_context(backend, world_size, dtype, tuple(tokens), hidden_size)


def refusal(point: SweepPoint, backend: str, context: ImplContext | None) -> str | None:
    """Why `point` cannot act on this launch (its implementation's own reason first), or None.

    `context`: launch_context(...); None leaves the implementation to the workers' gate.
    """
    return _impl_refusal(point, backend, context) or inert_reason(point.env, backend)


def refusals(points: Iterable[SweepPoint], backend: str, context: ImplContext | None) -> dict[str, str]:
    """Point id -> why it will not run, for every point of `points` that will not. Each implementation and options
    is asked once: a million-point sweep has a handful."""
    out, asked = {}, {}
    for point in points:
        key = (point.impl, repr(sorted(point.options.items())))
        if key not in asked:
            asked[key] = _impl_refusal(point, backend, context)
        reason = asked[key] or inert_reason(point.env, backend)
        if reason:
            out[point.point_id] = reason
    return out


def _impl_refusal(point: SweepPoint, backend: str, context: ImplContext | None) -> str | None:
    if context is None:
        return None
    from dataclasses import replace

    from commprof.impls.registry import load_impl, resolve_impl_name

    support = load_impl(resolve_impl_name(point.impl, backend)).support(replace(context, options=dict(point.options)))
    return None if support else support.reason
