"""The engine releases a plan can be made for: where engines issue a family's collectives differently, the plan
follows the one named (`plan --engine`, the sweep's `[run] engine`). Pure."""

from __future__ import annotations

from commprof.errors import UsageError

# The releases whose model files commprof read, per engine (commprof.planner.architectures cites the files).
PLAN_ENGINES = {"sglang": ("0.5.23",), "vllm": ("0.33",)}
# The engine a plan follows when none is named: SGLang's model files, the first engine commprof's sweeps target.
DEFAULT_ENGINE = "sglang==0.5.23"
ENGINE_HELP = "sglang==0.5.23 or vllm==0.33 (the engine whose model files the plan follows)"


def parse_plan_engine(text: str) -> str:
    """ "vllm==0.33.1" -> "vllm==0.33" (vLLM's patch releases share their model files); UsageError naming the
    known releases for any other engine or version."""
    name, sep, version = str(text).strip().partition("==")
    name, version = name.strip().lower(), version.strip()
    if name == "vllm":
        version = ".".join(version.split(".")[:2])
    if not sep or version not in PLAN_ENGINES.get(name, ()):
        known = ", ".join(f"{n}=={v}" for n, versions in PLAN_ENGINES.items() for v in versions)
        raise UsageError(f"--engine {text!r}: no model files read for that release (known: {known})")
    return f"{name}=={version}"


def engine_name(engine: str) -> str:
    """ "vllm==0.33" -> "vllm"."""
    return engine.partition("==")[0]
