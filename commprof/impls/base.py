"""The all-reduce implementation interface: what the replay harness needs from NCCL, FlashInfer or your kernel.

An implementation is a class. The harness asks it, before anything is allocated, whether it runs here
(`gate(ctx)`: its options, then `support(ctx)`, a pure function of the facts in `ImplContext`), then, in
every rank of one fresh process group: `setup()` once, `prepare()` with every shape it will see before CUDA-graph capture,
`all_reduce()` (or `all_reduce_rmsnorm()` for fused kinds) per op, `teardown()` at the end.
See docs/implementations.md for a worked example.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from commprof.errors import UsageError

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist

    from commprof.planner.plan import StepPlan


@dataclass(frozen=True)
class Support:
    """Whether an implementation can run here, and if not, why (shown to the user as "unsupported: <reason>")."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


SUPPORTED = Support(True)


def unsupported(reason: str) -> Support:
    return Support(False, reason)


# What an option takes: bool (true / false) or the tuple of allowed strings.
OptionKind = type[bool] | tuple[str, ...]


@dataclass(frozen=True)
class EngineSwitch:
    """What makes one serving engine run this implementation instead of NCCL, each name read in the engine's
    own source at the version or PR `version` names."""

    engine: str
    switch: str  # the environment that turns it on ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1")
    size_variable: str | None  # the variable bounding the sizes it takes; None: the engine has none
    unit: str  # that variable's unit: "bytes" or "elements" ("" without one)
    version: str  # the version written for and its source
    before: str = "NCCL"  # the engine's dispatch path it is tried before (engine_dispatch derives its rule there)
    released: tuple[str, ...] = ()  # engine versions whose release reads it ("0.34"); () : a fork or open PR only


@dataclass(frozen=True)
class EngineFlag:
    """A serving engine's flag or variable for what an implementation does (the fused all-reduce + RMSNorm):
    set where it won beyond the evidence's uncertainty, or, `when` "lost", the engine's own turned off where it
    was slower at every T."""

    engine: str
    setting: str  # as written on the command line or in the environment
    version: str  # the version written for and its source
    when: str = "won"  # "won" or "lost"
    note: str = ""  # why, in place of the verdict (what a variable chooses)


@dataclass(frozen=True)
class TraceKernels:
    """The kernels an implementation launches, as a profiler trace names them (commprof.trace.kernels)."""

    label: str  # for people
    pattern: str  # regex over the demangled kernel name
    collective: str  # "all_reduce", "all_reduce+rmsnorm"; NCCL's: "from the name"
    source: str  # library, version and file the names are read from


@dataclass(frozen=True)
class SmokeCase:
    """The GPU smoke's point for an implementation (commprof.gpu_smoke.points): its label and options."""

    label: str
    options: dict[str, Any] = field(default_factory=dict)
    gated_ok: bool = True  # an "unsupported" record passes (the box may lack its library or GPU generation)
    title: str = ""  # the verdict's words; empty: "<label>, eager + graph"


@dataclass(frozen=True)
class RmsNormOperands:
    """The inputs of one all-reduce + residual add + RMSNorm, as all_reduce_rmsnorm receives them."""

    x: Any  # this rank's partial sums, [T, H]
    residual: Any  # the residual added to the sum, [T, H]
    weight: Any  # RMSNorm's gamma, [H]
    eps: float  # RMSNorm's epsilon


def whole_names(*names: str) -> str:
    """Whole identifiers: `one_shot_all_reduce_kernel` does not match `multimem_one_shot_all_reduce_kernel`."""
    return r"(?<![A-Za-z0-9_])(" + "|".join(names) + r")(?![A-Za-z0-9_])"


@dataclass(frozen=True)
class ImplContext:
    """Facts about this run that decide whether an implementation applies; fabricate one to test gating."""

    backend: str  # "nccl" or "gloo"
    world_size: int
    dtype: str  # canonical name, e.g. "bfloat16"
    tokens: tuple[int, ...]  # every T of the run
    hidden_size: int
    device_type: str = "cpu"  # "cuda" or "cpu"
    compute_capability: tuple[int, int] | None = None
    p2p_all_pairs: bool | None = None  # None: unknown (no GPUs, or not probed)
    p2p_detail: str = ""
    p2p_atomics: bool | None = None  # native atomics on peer memory between every pair (NVML); None: unknown
    p2p_atomics_detail: str = ""
    # Installed version per library an implementation names (its `library`, a distribution on PyPI); a library
    # absent here or None is not installed.
    libraries: dict[str, str | None] = field(default_factory=dict)
    torch_version: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    # True for a simulated box: every library a kernel needs counts as installed at a version that has it, so
    # only the hardware and shape rules decide (the simulator predicts that box, not this machine's packages).
    libraries_assumed: bool = False

    def version(self, library: str) -> str | None:
        """The installed version of `library` (a distribution name: "flashinfer-python"), None: not installed."""
        return self.libraries.get(library)


class AllReduceImpl:
    """Base class of all-reduce implementations; subclasses override what differs.

    The defaults describe an implementation that captures into CUDA graphs, needs no preparation, does not
    fuse RMSNorm and checks its own options. `all_reduce` returns the reduced tensor (it may reduce in place).
    The class attributes are the facts the sweep file's validation, the simulator and the report read
    (through commprof.impls.registry) without running anything.
    """

    name: ClassVar[str] = ""
    library: ClassVar[str | None] = None  # the distribution it needs beyond torch ("flashinfer-python"); None: none
    fuses_rmsnorm: ClassVar[bool] = False  # True: replaces all-reduce + residual add + RMSNorm
    capturable: ClassVar[bool] = True  # False: graph mode is recorded unsupported, eager still runs
    # True: the all-reduce is NCCL's own (on the NCCL backend), so NCCL variables act on it and the cost model
    # predicts it; False: NCCL variables change nothing it does.
    runs_on_nccl: ClassVar[bool] = False
    # True: all-reduce, then residual add + RMSNorm as separate kernels, the reference fused kinds are set against.
    unfused_reference: ClassVar[bool] = False
    # Option name -> what it takes; None: any options (the implementation checks its own).
    option_kinds: ClassVar[dict[str, OptionKind] | None] = None
    required_options: ClassVar[tuple[str, ...]] = ()  # each value of these is its own sweep point
    # What the tables built from the registry say of it; every built-in states each one in its own class (an
    # empty tuple or a sentence saying why there is none), tests/test_architecture.py checks.
    engine_switches: ClassVar[tuple[EngineSwitch, ...]] = ()  # () : no engine has a switch that runs it
    engine_flags: ClassVar[tuple[EngineFlag, ...]] = ()  # () : no engine flag acts on what it does
    # Its kernels in a trace; a str: the implementation whose kernels it runs ("nccl"), or why it has none.
    trace_kernels: ClassVar[TraceKernels | str] = "launches no kernel of its own"
    smoke: ClassVar[SmokeCase | str] = "the GPU smoke has no point for it"  # a str: why there is none

    def __init__(self, options: dict[str, Any] | None = None):
        self.options = dict(options or {})
        problems = self.option_problems(self.options)
        if problems:
            raise UsageError(problems[0][1])
        # Where this point keeps what a library would otherwise share between points and processes (FlashInfer's
        # tune cache, b12x's plan selections): set by the trial before setup(), one folder per setting that has a
        # preparation and per point otherwise; None outside a sweep, where the library's own default applies.
        self.state_dir: Path | None = None

    @classmethod
    def option_problems(cls, options: dict[str, Any]) -> list[tuple[str | None, str]]:
        """(option, problem) for each unknown, mistyped or missing option (option None: the whole table).

        Every problem is a sentence naming the implementation and ending in "(allowed: ...)".
        """
        kinds = cls.option_kinds
        if kinds is None:
            return []
        problems: list[tuple[str | None, str]] = []
        for option, value in options.items():
            kind = kinds.get(option)
            if kind is None:
                allowed = ", ".join(kinds) or "none"
                problems.append((option, f"{cls.name} has no option {option!r} (allowed: {allowed})"))
            elif not _is_value_of(kind, value):
                problems.append(
                    (
                        option,
                        f"{value!r} is not a value of {cls.name}'s option {option!r} (allowed: {values_text(kind)})",
                    )
                )
        for option in cls.required_options:
            if option not in options:
                problems.append((None, f"{cls.name} needs option {option!r} (allowed: {values_text(kinds[option])})"))
        return problems

    @classmethod
    def gate(cls, ctx: ImplContext) -> Support:
        """What the trial asks before anything is allocated: the point's options, then support(ctx)."""
        problems = cls.option_problems(ctx.options)
        return unsupported(problems[0][1]) if problems else cls.support(ctx)

    @classmethod
    def support(cls, ctx: ImplContext) -> Support:
        """Whether this runs here (options already checked); a refusal's reason is recorded as is."""
        return SUPPORTED

    @classmethod
    def jit_builds(cls, backend: str, options: dict[str, Any]) -> tuple[str, ...]:
        """What this implementation compiles on first use on `backend`, as importable "module:callable" names;
        the call returns a buildable with `name` and `build_and_load()` (FlashInfer's JIT spec generators do).
        The sweep builds each once before its first point, outside every point's time limit."""
        return ()

    @classmethod
    def preparation(cls, backend: str, options: dict[str, Any]) -> str | None:
        """What a setting (these options on `backend`) does once before any of its points is timed, collectively
        on every rank, in words ("tunes its launch configurations"); None: nothing. The sweep runs setup() and
        prepare() for it in a worker of its own before the first point, outside every point's time limit, with
        `state_dir` the setting's folder, which every point of the setting then gets: what the preparation left
        there (a tune cache, compiled plans) is what the points load, and no other setting's."""
        return None

    @classmethod
    def algorithm(cls, options: dict[str, Any], nbytes: int, world_size: int) -> str | None:
        """The algorithm ("one-shot" / "two-shot") one all-reduce of `nbytes` runs with these options; None where
        the implementation decides for itself (NCCL, FlashInfer's PCIe IPC). Read by the simulator and the floor."""
        return None

    @classmethod
    def support_tokens(cls, ctx: ImplContext, tokens: int) -> Support:
        """Per-T gating (e.g. two-shot kernels need T > world size); asked after support(ctx) passed."""
        return SUPPORTED

    def setup(self, group: dist.ProcessGroup, plan: StepPlan, device: torch.device) -> None:
        """Called once per process group, with the run's largest plan (workspaces are sized from it)."""
        self.group = group
        self.device = device

    def prepare(self, shapes: list[tuple[int, ...]]) -> None:
        """Called with every [T, H] shape before CUDA-graph capture; collective on some implementations."""

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def all_reduce_rmsnorm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused kinds: returns (rmsnorm(sum(x) + residual) * weight, sum(x) + residual)."""
        raise NotImplementedError

    def detail(self) -> str | None:
        """What exactly ran, where an implementation chooses at setup (recorded with every result)."""
        return None

    def teardown(self) -> None:
        """Release workspaces; called on every rank, also after a failure."""


def option_values(kind: OptionKind) -> tuple:
    """Every value an option of this kind takes, in order."""
    return (True, False) if kind is bool else tuple(kind)


def values_text(kind: OptionKind) -> str:
    return ", ".join("true" if v is True else "false" if v is False else str(v) for v in option_values(kind))


def _is_value_of(kind: OptionKind, value: Any) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    return isinstance(value, str) and value in kind
