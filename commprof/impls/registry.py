"""Names the sweep accepts for an all-reduce implementation (built-ins and `package.module:Class` plug-ins), and
the facts each built-in's class states (options, fuses RMSNorm, runs on NCCL), read here by the sweep file's
validation, the simulator, the report, the GPU smoke and the trace matcher. Adding a built-in: its module, and
one line in BUILTINS.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from commprof.errors import UsageError
from commprof.impls.base import AllReduceImpl, EngineFlag, EngineSwitch, OptionKind, SmokeCase, TraceKernels

# Built-in name -> "module:Class". The modules import torch and FlashInfer only inside methods, so reading a
# class's facts costs nothing and FlashInfer is never needed on CPU.
BUILTINS: dict[str, str] = {
    "nccl": "commprof.impls.torch_dist:NcclAllReduce",
    "gloo": "commprof.impls.torch_dist:GlooAllReduce",
    "nccl+rmsnorm": "commprof.impls.torch_dist:TorchAllReduceRmsnorm",
    "flashinfer-fused": "commprof.impls.flashinfer_fused:FlashInferFusedAllReduce",
    "flashinfer-pcie-ipc": "commprof.impls.flashinfer_pcie:FlashInferPcieIpcAllReduce",
    "symm-mem": "commprof.impls.symm_mem:SymmMemAllReduce",
    "b12x": "commprof.impls.b12x:B12xAllReduce",
    "b12x-fused": "commprof.impls.b12x:B12xFusedAllReduce",
}

# What "the backend's default" means: the baseline of every sweep.
DEFAULT_FOR_BACKEND = {"nccl": "nccl", "gloo": "gloo"}
# Names of torch.distributed's own all-reduce: "default" runs the backend's, as "nccl" / "gloo" do there.
BACKEND_IMPLS = ("default", *DEFAULT_FOR_BACKEND.values())


def resolve_impl_name(name: str, backend: str) -> str:
    """ "default" becomes the backend's own all-reduce; other names pass through."""
    return DEFAULT_FOR_BACKEND[backend] if name == "default" else name


def known_names() -> tuple[str, ...]:
    """Every built-in name a sweep accepts, "default" first."""
    return ("default", *BUILTINS)


@cache
def builtin(name: str, backend: str = "nccl") -> type[AllReduceImpl] | None:
    """The class of a built-in name ("default": the backend's own), else None: plug-ins are not imported here."""
    name = resolve_impl_name(name, backend)
    return load_impl(name) if name in BUILTINS else None


def builtin_classes() -> dict[str, type[AllReduceImpl]]:
    """Every built-in's class, in BUILTINS order: the tables built from the registry (the engines' switches, the
    GPU smoke's points, the trace's kernel names) walk this, so a built-in's module is the one home of its facts."""
    return {name: load_impl(name) for name in BUILTINS}


# The tables built from the registry, each from what every built-in's class declares: the one home of each.


def libraries() -> tuple[str, ...]:
    """Every library a built-in names (its `library`), each once: what ImplContext's versions are read for."""
    return tuple(dict.fromkeys(cls.library for cls in builtin_classes().values() if cls.library))


def engine_switch_table() -> dict[str, tuple[EngineSwitch, ...]]:
    """Per built-in an engine can be switched to: each engine's switch, size variable and version, as declared."""
    return {name: cls.engine_switches for name, cls in builtin_classes().items() if cls.engine_switches}


def engine_flag_table() -> dict[str, tuple[EngineFlag, ...]]:
    """Per built-in whose class declares engine flags (the fused kinds'): its flags."""
    return {name: cls.engine_flags for name, cls in builtin_classes().items() if cls.engine_flags}


def smoke_table() -> dict[str, SmokeCase]:
    """Per built-in with a GPU smoke point: its case."""
    return {name: cls.smoke for name, cls in builtin_classes().items() if isinstance(cls.smoke, SmokeCase)}


def trace_kernel_table() -> dict[str, TraceKernels]:
    """Per built-in that launches kernels of its own: their names in a trace."""
    return {name: k for name, cls in builtin_classes().items() if isinstance(k := cls.trace_kernels, TraceKernels)}


def runs_as_table() -> dict[str, str]:
    """An answer's implementation -> the built-in whose kernels it runs ("default" is NCCL's)."""
    return {"default": "nccl"} | {
        name: cls.trace_kernels
        for name, cls in builtin_classes().items()
        if isinstance(cls.trace_kernels, str) and cls.trace_kernels in BUILTINS
    }


def option_kinds(name: str) -> dict[str, OptionKind] | None:
    """A built-in's options and what each takes; None: a plug-in, which checks its own."""
    cls = builtin(name)
    return None if cls is None else cls.option_kinds


def required_options(name: str) -> tuple[str, ...]:
    cls = builtin(name)
    return () if cls is None else cls.required_options


def fuses_rmsnorm(name: str) -> bool:
    """Whether a built-in replaces all-reduce + residual add + RMSNorm (plug-ins: as their records say)."""
    cls = builtin(name)
    return cls is not None and cls.fuses_rmsnorm


def runs_on_nccl(name: str) -> bool:
    """Whether a built-in's all-reduce is NCCL's own on the NCCL backend ("default" is)."""
    cls = builtin(name)
    return cls is not None and cls.runs_on_nccl


def algorithm(name: str, options: dict[str, Any], nbytes: int, world_size: int) -> str | None:
    """The algorithm a built-in runs for one all-reduce of `nbytes` (None: it decides itself, or a plug-in)."""
    cls = builtin(name)
    return None if cls is None else cls.algorithm(options, nbytes, world_size)


def unfused_reference() -> str:
    """The built-in fused kinds are set against: all-reduce, then residual add + RMSNorm, separately."""
    return next(name for name in BUILTINS if builtin(name).unfused_reference)


def load_impl(spec: str) -> type[AllReduceImpl]:
    """The class behind a built-in name or an importable "package.module:Name"; UsageError says what is wrong."""
    target = BUILTINS.get(spec, spec)
    if ":" not in target:
        raise UsageError(
            f"unknown all-reduce implementation {spec!r}; built-ins: {', '.join(BUILTINS)}, "
            "or give an importable package.module:Class"
        )
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise UsageError(f"implementation {spec!r}: expected package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"implementation {spec!r}: cannot import module {module_name!r} ({exc})") from None
    except Exception as exc:  # the plug-in's own module failed while importing: say so in one line
        raise UsageError(
            f"implementation {spec!r}: importing {module_name!r} failed ({type(exc).__name__}: {exc})"
        ) from None
    try:
        cls = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"implementation {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    problem = interface_problem(cls)
    if problem:
        raise UsageError(f"implementation {spec!r}: {problem} (see docs/implementations.md)")
    return cls


def interface_problem(cls) -> str | None:
    """Why `cls` does not follow the AllReduceImpl interface, or None when it does."""
    name = getattr(cls, "__name__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, AllReduceImpl)):
        return f"{name} is not a subclass of commprof.impls.base.AllReduceImpl"
    plain = _overrides(cls, "all_reduce")
    fused = _overrides(cls, "all_reduce_rmsnorm")
    if cls.fuses_rmsnorm and not fused:
        return f"{name} sets fuses_rmsnorm but does not define all_reduce_rmsnorm"
    if not plain and not (cls.fuses_rmsnorm and fused):
        return f"{name} defines neither all_reduce nor (fuses_rmsnorm and all_reduce_rmsnorm)"
    missing = [o for o in cls.required_options if o not in (cls.option_kinds or {})]
    if missing:
        return f"{name}.required_options names {', '.join(missing)}, which option_kinds does not describe"
    for gate in ("support", "support_tokens", "jit_builds"):
        owner = next(klass for klass in cls.__mro__ if gate in klass.__dict__)
        if not isinstance(owner.__dict__[gate], (classmethod, staticmethod)):
            return f"{name}.{gate} must be a classmethod (it is asked before any instance exists)"
    return None


def _overrides(cls: type, method: str) -> bool:
    return getattr(cls, method) is not getattr(AllReduceImpl, method)
