"""Plug-in classes that break the AllReduceImpl interface in one way each, for load_impl's checks."""

from commprof.impls.base import SUPPORTED, AllReduceImpl


class DefinesNothing(AllReduceImpl):
    """Neither all_reduce nor a fused all_reduce_rmsnorm."""

    name = "defines-nothing"


class FusedWithoutNorm(AllReduceImpl):
    """Claims to fuse RMSNorm but defines only the plain all-reduce."""

    name = "fused-without-norm"
    fuses_rmsnorm = True

    def all_reduce(self, x):
        return x


class NormWithoutFlag(AllReduceImpl):
    """Defines all_reduce_rmsnorm without fuses_rmsnorm, and no all_reduce: nothing the harness can call."""

    name = "norm-without-flag"

    def all_reduce_rmsnorm(self, x, residual, weight, eps):
        return x, residual


class FusedOnly(AllReduceImpl):
    """Follows the interface with only the fused call (fuses_rmsnorm and all_reduce_rmsnorm)."""

    name = "fused-only"
    fuses_rmsnorm = True

    def all_reduce_rmsnorm(self, x, residual, weight, eps):
        return x, residual


class SupportNotClassmethod(AllReduceImpl):
    """support() written as an instance method: it is asked before any instance exists."""

    name = "support-not-classmethod"

    def support(self, ctx):
        return SUPPORTED

    def all_reduce(self, x):
        return x


def not_a_class(x):
    return x


class RequiredWithoutKind(AllReduceImpl):
    """Requires an option it does not describe: validation could not say what the option takes."""

    name = "required-without-kind"
    required_options = ("mode",)

    def all_reduce(self, x):
        return x
