"""A throw-away built-in for the registry test: it declares every fact the tables built from the registry read."""

from commprof.impls.base import AllReduceImpl, EngineFlag, EngineSwitch, SmokeCase, TraceKernels, whole_names


class ThrowawayAllReduce(AllReduceImpl):
    """Never run: its module is all a new implementation needs besides one registry line."""

    name = "throwaway"
    library = "throwaway-lib"
    option_kinds = {"fast": bool}
    trace_kernels = TraceKernels("throw-away all-reduce", whole_names("throwaway_ar_kernel"), "all_reduce", "tests")
    engine_switches = (
        EngineSwitch(
            "SGLang",
            "SGLANG_THROWAWAY_AR=1",
            "SGLANG_THROWAWAY_MAX_BYTES",
            "bytes",
            "test",
            before="custom all-reduce",
            released=("0.5.23",),
        ),
    )
    engine_flags = (EngineFlag("SGLang", "--throwaway-fusion", "test"),)
    smoke = SmokeCase("throwaway fast", {"fast": True})

    def all_reduce(self, x):
        return x


class QuietAllReduce(AllReduceImpl):
    """A built-in that states "none" for each table."""

    name = "quiet"
    trace_kernels = "launches no kernel: a test's"
    engine_switches = ()
    engine_flags = ()
    smoke = "a test's: no GPU point"

    def all_reduce(self, x):
        return x
