"""The shapes of an engine's dispatch as data: the box and op it reads, each rule with the places in the released
wheel it is read from (a file, the function holding the fact, and the text or constant that states it, which
tools/check_engine_facts.py checks in a downloaded wheel), the switches' defaults (with what the engine sets by
itself per model and launch) and the engine's order. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MiB = 1 << 20
KiB = 1 << 10


@dataclass(frozen=True)
class Box:
    """What the engines' dispatch reads of the box, and of the server launched on it (engines turn paths on by
    themselves per model and launch)."""

    sm: float | None  # compute capability, 12.0 for SM120 (None: unknown)
    tp: int
    nvlink: bool  # every GPU pair over NVLink
    p2p: bool  # peer-to-peer works between every pair
    multicast: bool | None = None  # NVLink multicast (NVSwitch) for the TP group; None: unknown (counts as absent)
    nodes: int = 1  # nodes the TP group spans
    architecture: str = ""  # the served model's config `architectures[0]`, the class the engine loads ("": unknown)
    dp_attention: bool = False  # the server runs DP attention
    gpu_mem_gib: float | None = None  # each GPU's memory (None: unknown): SGLang sizes its decode batch by it
    tokens_per_request: int = 1  # rows one request adds to a decode batch (K + 1 when verifying K drafts)


@dataclass(frozen=True)
class Op:
    """One op group of the plan at one T: the layers' all-reduces of [T, hidden]."""

    group: str
    tokens: int
    nbytes: int
    dtype: str
    hidden: int
    model_dtype: str = ""  # the model's dtype ("": the op's); FlashInfer PCIe IPC in vLLM takes only that one
    model_hidden: int = 0  # the model's hidden width (0: the op's); vLLM's PCIe IPC workspace is built for it
    dims: int = 2  # the tensor's rank; [T, hidden] is 2


@dataclass(frozen=True)
class Cite:
    """Where one fact is read in a released wheel: the file, the function or class holding it ("" : module level),
    and what states it there: a regular expression over its text (`pattern`; "" with nothing else: its existence
    is the fact), expressions that must appear in this order (`order`: a dispatch order), or a constant assigned
    in it (`constant`) whose literal must equal `value`, the value commprof's table holds.

    tools/check_engine_facts.py checks each in the wheel, and fingerprints the whole body of every cited function
    or class, so a gate added anywhere in it shows as a change to re-read."""

    file: str
    function: str = ""
    pattern: str = ""
    order: tuple[str, ...] = ()
    constant: str = ""
    value: object = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.file}: {self.function}" if self.function else self.file


Switches = dict[str, str]
Check = Callable[[Box, Op, Switches], str | None]  # None: the rule takes the op; else why not


@dataclass(frozen=True)
class Rule:
    """One path of an engine's dispatch: its name, where each gate is read, the check of those gates, and the
    commprof implementation that runs the same kernel (None: none does)."""

    path: str
    cites: tuple[Cite, ...]
    check: Check
    impl: str | None = None
    switch: str = ""  # the variable or flag that turns it on ("" : on by default or not switchable)

    @property
    def source(self) -> str:
        return "; ".join(dict.fromkeys(str(c) for c in self.cites))


@dataclass(frozen=True)
class Derived:
    """What an engine sets a switch to by itself on one box and launch, and why (said on the page)."""

    value: str | None  # the value it sets; None: it leaves the default (`why` says why, or what is unknown)
    why: str


@dataclass(frozen=True)
class Default:
    """A switch's value when nobody sets it, as the engine's source states it; `derive`: the rule by which the
    engine sets it itself for some models and launches (None where it does not apply), read at `rule`."""

    switch: str
    value: str
    cite: Cite
    derive: Callable[[Box, Switches], Derived | None] | None = None
    rule: Cite | None = None


@dataclass(frozen=True)
class Flag:
    """An engine flag commprof may write, and why it cannot act on a box (None: it can, or unknown)."""

    setting: str
    cite: Cite
    fails: Callable[[Box], str | None]


@dataclass(frozen=True)
class EngineTable:
    """One engine version's all-reduce dispatch: its rules in the order the engine tries them."""

    engine: str  # "SGLang", "vLLM"
    package: str  # the distribution on PyPI ("sglang", "vllm")
    version: str  # the table's version ("0.33": every 0.33.x)
    wheel: str  # the release the facts were checked on ("0.33.0")
    dispatch: Cite  # the function whose order the rules follow, with that order
    rules: tuple[Rule, ...]
    defaults: tuple[Default, ...] = ()
    flags: tuple[Flag, ...] = ()
    facts: tuple[Cite, ...] = ()  # other facts commprof states about this version (capture sizes, ...)

    def effective(self, switches: Switches, box: Box | None = None) -> Switches:
        """The switches as the engine sees them: every default, what the engine sets itself on `box` where nobody
        set the switch, then what was set."""
        seen = {d.switch: d.value for d in self.defaults} | dict(switches)
        for default, derived in self.derived(switches, box):
            if derived.value is not None:
                seen[default.switch] = derived.value
        return seen

    def derived(self, switches: Switches, box: Box | None) -> list[tuple[Default, Derived]]:
        """The defaults the engine derives itself on `box` (those not set in `switches`), with what it derives."""
        if box is None:
            return []
        seen = {d.switch: d.value for d in self.defaults} | dict(switches)
        found = []
        for default in self.defaults:
            if default.derive is not None and default.switch not in switches:
                derived = default.derive(box, seen)
                if derived is not None:
                    found.append((default, derived))
        return found

    def cites(self) -> tuple[Cite, ...]:
        """Every fact this table states, for the maintainer's check."""
        found = [self.dispatch, *(d.cite for d in self.defaults), *(f.cite for f in self.flags), *self.facts]
        found += [d.rule for d in self.defaults if d.rule is not None]
        for rule in self.rules:
            found += rule.cites
        return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class LibraryFacts:
    """A library's facts commprof relies on (kernel names, variants, entry points), checked like a table's."""

    package: str
    version: str
    facts: tuple[Cite, ...]

    def cites(self) -> tuple[Cite, ...]:
        return self.facts


def version_numbers(version: str) -> tuple[int, ...]:
    """ "0.5.23" -> (0, 5, 23), for ordering releases; a part without digits is 0, and no part is read past 18
    digits (a version string comes from the command line)."""
    parts = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch in "0123456789")[:18]  # not "²" (isdigit), not 5000 digits
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def on(switches: Switches, name: str) -> bool:
    return str(switches.get(name, "")).strip().lower() not in ("", "0", "false", "none")


def sm_text(box: Box) -> str:
    return f"SM {box.sm:g}" if box.sm is not None else "an unknown SM"


def sm_key(box: Box) -> str | None:
    """vLLM's capability key: "9.0", "10.3"."""
    return f"{box.sm:.1f}" if box.sm is not None else None


def sm_int(box: Box) -> int | None:
    """Capability as vLLM's to_int(): 90, 103, 120."""
    return round(box.sm * 10) if box.sm is not None else None


def not_here(what: str) -> Check:
    """A path that cannot apply on the boxes commprof reads (ROCm, another platform): said so."""
    return lambda box, op, switches: f"not on this box ({what})"


def always(box: Box, op: Op, switches: Switches) -> str | None:
    return None
