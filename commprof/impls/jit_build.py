"""Build what FlashInfer compiles on first use, once per machine, before a sweep's first point.

FlashInfer ships no compiled kernels for its comm modules: the first call JIT-compiles them with nvcc, which
takes minutes and would happen inside a point's time limit (and start over at the next point when killed).
The sweep runs `python -m commprof.impls.jit_build REQUEST` on each node before its first point: it asks every
implementation of the sweep what it builds (`AllReduceImpl.jit_builds`: "module:callable" names whose call
returns something with `name` and `build_and_load()`, as FlashInfer's JIT spec generators do), skips those whose gate refuses this
machine anyway (their points will say why), builds the rest into FlashInfer's cache, and prints one JSON line
per event for the sweep's progress display.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from typing import Any

from commprof.records.vocab import BUILD_STATUSES

ERROR_LINES = 25
BUILT, CACHED, FAILED = BUILD_STATUSES


def planned_builds(request: dict[str, Any]) -> list[str]:
    """The builds of every implementation of `request` that this machine's gate lets run, in first-use order."""
    from commprof.impls.context import build_impl_context
    from commprof.impls.registry import load_impl, resolve_impl_name

    builds: dict[str, None] = {}
    for impl, options in request["impls"]:
        cls = load_impl(resolve_impl_name(impl, request["backend"]))
        wanted = cls.jit_builds(request["backend"], options)
        if not wanted:
            continue
        ctx = build_impl_context(
            request["backend"],
            request["world_size"],
            request["dtype"],
            request["tokens"],
            request["hidden_size"],
            options,
        )
        if cls.gate(ctx):  # the trial's own gate: options, then support
            builds.update(dict.fromkeys(wanted))
    return list(builds)


def resolve(build: str) -> Any:
    """The buildable behind "module:callable": what the callable returns (a FlashInfer JIT spec, or anything
    with `name` and `build_and_load()`); calling it builds nothing yet."""
    module_name, _, attr = build.partition(":")
    return getattr(importlib.import_module(module_name), attr)()


def run_build(build: str, emit) -> dict[str, Any]:
    """Run one build; its outcome (status built / cached / failed, seconds, the compiler's error)."""
    started = time.monotonic()
    name, artifact = build, None
    try:
        target = resolve(build)
        name = getattr(target, "name", build)
        cached = bool(getattr(target, "is_compiled", False))
        emit({"event": "start", "build": build, "name": name, "cached": cached})
        artifact = getattr(target, "jit_library_path", None)
        target.build_and_load()  # what FlashInfer itself calls on first use: loads the cache when built
        status = CACHED if cached else BUILT
        error = None
    except Exception as exc:  # a compiler error, a missing nvcc, an unsupported architecture: all are outcomes
        status, error = FAILED, compiler_error(f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=3))
    outcome = {"build": build, "name": name, "status": status, "seconds": round(time.monotonic() - started, 1)}
    if status != FAILED and artifact is not None:
        outcome["artifact"] = str(artifact)
    if error:
        outcome["error"] = error
    emit({"event": "done", **outcome})
    return outcome


def compiler_error(message: str, trace: str) -> str:
    """The lines of a failed build that say why: those naming an error, else the message's last lines."""
    lines = [line for line in message.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() and not line.lstrip().startswith("[")]
    shown = (errors or lines)[-ERROR_LINES:] or trace.strip().splitlines()[-3:]
    return "\n".join(shown)[:4000]


def cache_dir() -> str | None:
    """Where FlashInfer keeps what it compiled (FLASHINFER_WORKSPACE_BASE moves it); None when no build
    imported FlashInfer."""
    env = sys.modules.get("flashinfer.jit.env")
    return str(env.FLASHINFER_JIT_DIR) if env is not None else None


def main(argv: list[str] | None = None) -> int:
    request = json.loads((argv or sys.argv[1:])[0])

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    builds = planned_builds(request)
    emit({"event": "plan", "builds": builds})
    for build in builds:
        run_build(build, emit)
    emit({"event": "end", "cache_dir": cache_dir()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
