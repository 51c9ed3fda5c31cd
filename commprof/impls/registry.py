"""Names the sweep accepts for an all-reduce implementation: built-ins and `package.module:Class` plug-ins."""

from __future__ import annotations

import importlib

from commprof.errors import UsageError
from commprof.impls.base import AllReduceImpl

# Built-in name -> "module:Class", imported only when used (FlashInfer must never be needed on CPU).
BUILTINS: dict[str, str] = {
    "nccl": "commprof.impls.torch_dist:NcclAllReduce",
    "gloo": "commprof.impls.torch_dist:GlooAllReduce",
    "nccl+rmsnorm": "commprof.impls.torch_dist:TorchAllReduceRmsnorm",
    "flashinfer-fused": "commprof.impls.flashinfer_fused:FlashInferFusedAllReduce",
    "flashinfer-pcie-ipc": "commprof.impls.flashinfer_pcie:FlashInferPcieIpcAllReduce",
    "symm-mem": "commprof.impls.symm_mem:SymmMemAllReduce",
}

# What "the backend's default" means: the baseline of every sweep.
DEFAULT_FOR_BACKEND = {"nccl": "nccl", "gloo": "gloo"}


def resolve_impl_name(name: str, backend: str) -> str:
    """ "default" becomes the backend's own all-reduce; other names pass through."""
    return DEFAULT_FOR_BACKEND[backend] if name == "default" else name


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
    for gate in ("support", "support_tokens"):
        owner = next(klass for klass in cls.__mro__ if gate in klass.__dict__)
        if not isinstance(owner.__dict__[gate], (classmethod, staticmethod)):
            return f"{name}.{gate} must be a classmethod (it is asked before any instance exists)"
    return None


def _overrides(cls: type, method: str) -> bool:
    return getattr(cls, method) is not getattr(AllReduceImpl, method)
