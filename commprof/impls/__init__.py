"""All-reduce implementations the sweep compares as equals; see base.py for the interface."""

from commprof.impls.base import SUPPORTED, AllReduceImpl, ImplContext, Support, unsupported
from commprof.impls.registry import BUILTINS, load_impl, resolve_impl_name

__all__ = [
    "SUPPORTED",
    "AllReduceImpl",
    "BUILTINS",
    "ImplContext",
    "Support",
    "load_impl",
    "resolve_impl_name",
    "unsupported",
]
