"""NCCL's vocabulary, defined once: its algorithms, protocols and collectives in every spelling commprof meets,
the grammar of NCCL_ALGO / NCCL_PROTO, what NCCL makes of the P2P level variables, and the known traps among the
values a sweep sets (the variables it sets and their checkers: commprof.nccl_tuning).

Spellings: NCCL_ALGO / NCCL_PROTO values (ncclAlgoStr / ncclProtoStr / ncclFuncStr, matched case-insensitively),
NCCL_DEBUG=INFO TUNING lines (ncclAlgoToString; 2.20-2.23 print the NCCL_ALGO_* number instead), the example
tuner plugin's CSV (plugins/tuner/example) and commprof's own cost model and step plan. Facts from NCCL
2.23-2.30 (src/graph/tuning.cc, src/include/nccl_common.h, its environment-variable docs; docs/sweep-files.md),
and for 2.31 / 2.32 from the released libraries (the note on NCCL 2.31.2 and 2.32.3 below). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Name:
    """One algorithm, protocol or collective as each place that names it spells it."""

    env: str  # in NCCL_ALGO / NCCL_PROTO prefixes and lists, e.g. "CollnetDirect" (any case)
    log: str  # in NCCL's TUNING log lines, e.g. "COLLNET_DIRECT"
    tuner: str  # in the example tuner plugin's CSV, e.g. "collnet_direct"
    model: str | None  # in commprof's cost model / step plan, e.g. "ring"; None: never used inside one node
    number: int  # NCCL's enum value (NCCL_ALGO_*, NCCL_PROTO_*, ncclFunc_t)

    def spellings(self) -> set[str]:
        return {s.lower() for s in (self.env, self.log, self.tuner, self.model) if s}


# In the order error messages list them.
ALGORITHMS = (
    Name("Ring", "RING", "ring", "ring", 1),
    Name("Tree", "TREE", "tree", "tree", 0),
    Name("CollnetDirect", "COLLNET_DIRECT", "collnet_direct", None, 2),
    Name("CollnetChain", "COLLNET_CHAIN", "collnet_chain", None, 3),
    Name("NVLS", "NVLS", "nvls", "nvls", 4),
    Name("NVLSTree", "NVLS_TREE", "nvls_tree", None, 5),
    Name("PAT", "PAT", "pat", None, 6),
)
PROTOCOLS = (
    Name("LL", "LL", "ll", "LL", 0),
    Name("LL128", "LL128", "ll128", "LL128", 1),
    Name("Simple", "SIMPLE", "simple", "Simple", 2),
)
# model: the step plan's collective; None for those a decode / verify step does not issue.
COLLECTIVES = (
    Name("allreduce", "AllReduce", "allreduce", "all_reduce", 4),
    Name("broadcast", "Broadcast", "broadcast", None, 0),
    Name("reduce", "Reduce", "reduce", None, 1),
    Name("allgather", "AllGather", "allgather", "all_gather", 2),
    Name("reducescatter", "ReduceScatter", "reducescatter", "reduce_scatter", 3),
)
MODEL_PROTOCOLS = tuple(p.model for p in PROTOCOLS if p.model)  # cost-model tables are indexed in this order
PLAN_COLLECTIVES = tuple(c.model for c in COLLECTIVES if c.model)

# 2.20-2.23 TUNING lines print NCCL_ALGO_* / NCCL_PROTO_* numbers (src/include/nccl_common.h).
ALGO_BY_NUMBER = tuple(a.log for a in sorted(ALGORITHMS, key=lambda a: a.number))
PROTO_BY_NUMBER = tuple(p.log for p in sorted(PROTOCOLS, key=lambda p: p.number))
# NCCL_TOPO_PATTERN_* (src/include/graph.h), as GRAPH lines print them.
GRAPH_PATTERNS = {1: "balanced_tree", 2: "split_tree", 3: "tree", 4: "ring", 5: "nvls", 6: "collnet_direct"}
# ncclDataType_t (src/nccl.h.in) -> (name, bytes per element), as COLL lines print "datatype %d".
DATATYPES = {
    0: ("int8", 1),
    1: ("uint8", 1),
    2: ("int32", 4),
    3: ("uint32", 4),
    4: ("int64", 8),
    5: ("uint64", 8),
    6: ("float16", 2),
    7: ("float32", 4),
    8: ("float64", 8),
    9: ("bfloat16", 2),
    10: ("float8e4m3", 1),
    11: ("float8e5m2", 1),
}

# Path types through a CPU host bridge or between sockets, beyond NCCL's default P2P level (PXB): NCCL's graph
# lines print PHB or SYS (src/graph/topo.h), `nvidia-smi topo -m` also NODE (NCCL's PHB inside one socket).
HOST_PATHS = ("PHB", "NODE", "SYS")
# The path types a topology preset names its worst GPU pair with (gpu_path), nearest first.
P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
DEFAULT_P2P_LEVEL = "PXB"
# Every path type NCCL_P2P_LEVEL may name, nearest first: topoPathTypeStr[0..PATH_SYS] of src/graph/topo.cc
# (v2.27-2.30). NCCL compares them case-sensitively (strcmp in paths.cc ncclGetLevel): "sys" is ignored.
NCCL_PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
# paths.cc levelsOldToNew: a value starting with a digit is an old level; above 5 it is clamped to 5.
OLD_P2P_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")


# The variables NCCL's ncclGetLevel reads for the P2P level, the first winning (nccl_user_p2p_level).
P2P_LEVEL_VARIABLES = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL")


@dataclass(frozen=True)
class UserP2pLevel:
    """The P2P level NCCL reads from NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, and the variable that set it."""

    level: str
    reason: str
    variable: str  # the one of P2P_LEVEL_VARIABLES that decided it


def c_strtol(text: str) -> int | None:
    """C's strtol(text, NULL, 0): leading blanks, a sign, 0x (hex) / 0 (octal) / decimal; None where no digit."""
    m = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if not m:
        return None
    digits = m.group(2)
    value = int(digits, 16) if digits[:2].lower() == "0x" else int(digits, 8) if digits.startswith("0") else int(digits)
    return -value if m.group(1) == "-" else value


def nccl_user_p2p_level(env: Mapping[str, str]) -> UserP2pLevel | None:
    """What NCCL's ncclGetLevel (src/graph/paths.cc) makes of the environment; None: NCCL keeps its default.

    NCCL_P2P_DISABLE disables P2P only when strtol gives exactly 1; otherwise NCCL_P2P_LEVEL is read: an exact,
    case-sensitive path type name, else a value starting with a digit as an old level (clamped to 5), else ignored.
    """
    disable = env.get("NCCL_P2P_DISABLE")
    if disable is not None and c_strtol(disable) == 1:
        return UserP2pLevel("LOC", f"NCCL_P2P_DISABLE={disable}: level LOC, no P2P", "NCCL_P2P_DISABLE")
    raw = env.get("NCCL_P2P_LEVEL")
    if raw is None:
        return None
    if raw in NCCL_PATH_TYPES:
        return UserP2pLevel(raw, f"NCCL_P2P_LEVEL={raw}", "NCCL_P2P_LEVEL")
    if raw[:1].isdigit():
        old = min(c_strtol(raw) or 0, len(OLD_P2P_LEVELS) - 1)
        return UserP2pLevel(
            OLD_P2P_LEVELS[old], f"NCCL_P2P_LEVEL={raw}: old level {old} = {OLD_P2P_LEVELS[old]}", "NCCL_P2P_LEVEL"
        )
    return None


# Variables that bound one count from both sides; NCCL expects MIN <= MAX.
MIN_MAX_PAIRS = (("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"), ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"))
CHANNEL_VARIABLES = tuple(name for pair in MIN_MAX_PAIRS for name in pair)

# Every variable NCCL reads starts with this; a backend other than NCCL reads none of them.
VARIABLE_PREFIX = "NCCL_"

_SELECTIONS = {"NCCL_ALGO": (ALGORITHMS, "an algorithm"), "NCCL_PROTO": (PROTOCOLS, "a protocol")}


def is_nccl_variable(name: str) -> bool:
    """Whether NCCL (and only NCCL) reads this environment variable."""
    return name.startswith(VARIABLE_PREFIX)


def named(names: tuple[Name, ...], text: object) -> Name | None:
    """The entry of `names` that `text` spells in any of its spellings (any case), else None."""
    if text is None:
        return None
    wanted = str(text).strip().lower()
    return next((n for n in names if wanted in n.spellings()), None)


# --- NCCL_ALGO / NCCL_PROTO: "a,b", "^a" (exclude), and since 2.24 "b;allreduce:a" per collective -----------


@dataclass(frozen=True)
class Segment:
    """One ';'-separated part of an NCCL_ALGO / NCCL_PROTO value."""

    collective: Name | None  # None: every collective
    excluding: bool  # a leading ^: everything but `names`
    names: tuple[Name, ...]


def selection_allowed(variable: str) -> str:
    """What an NCCL_ALGO / NCCL_PROTO value may be, for error messages."""
    names, _ = _SELECTIONS[variable]
    return (
        f"a comma list of {', '.join(n.env for n in names)} (any case), a leading ^ to exclude, and per collective "
        f"(NCCL >= 2.24) segments like \"allreduce:{names[0].env.lower()}\" joined by ';'; "
        f"collectives: {', '.join(c.env for c in COLLECTIVES)}"
    )


def parse_selection(variable: str, value: str) -> tuple[Segment, ...]:
    """Segments of an NCCL_ALGO / NCCL_PROTO value, checked as NCCL's parseList (tuning.cc) checks it.

    ValueError names the offending part and what is allowed: an unknown name or collective, a segment after
    the first without a collective (NCCL rejects it), or a collective given twice (NCCL keeps the last; a slip).
    """
    names, what = _SELECTIONS[variable]
    allowed = f"(allowed: {selection_allowed(variable)})"
    segments: list[Segment] = []
    seen: set[str] = set()
    for index, part in enumerate(value.split(";")):
        prefix, sep, body = part.strip().rpartition(":")
        collective = None
        if sep:
            collective = _env_named(COLLECTIVES, prefix)
            if collective is None:
                raise ValueError(f"{value!r}: {prefix.strip()!r} is not a collective {allowed}")
            if collective.env in seen:
                raise ValueError(f"{value!r}: {prefix.strip()!r} is given twice {allowed}")
            seen.add(collective.env)
        elif index > 0:
            raise ValueError(
                f"{value!r}: {part.strip()!r} has no collective: only the first segment may omit it {allowed}"
            )
        body = body.strip()
        excluding = body.startswith("^")
        entries = []
        for entry in (e.strip() for e in body.removeprefix("^").split(",")):
            match = _env_named(names, entry)
            if match is None:
                where = f"{value!r}: " if entry != value else ""
                raise ValueError(f"{where}{entry!r} is not {what} {allowed}")
            entries.append(match)
        segments.append(Segment(collective, excluding, tuple(entries)))
    return tuple(segments)


def _env_named(names: tuple[Name, ...], text: str) -> Name | None:
    """NCCL's own spelling only (it compares with strcasecmp): "collnet_direct" is no NCCL_ALGO name."""
    return next((n for n in names if n.env.lower() == text.strip().lower()), None)


def modelled_selection(variable: str, value: str) -> dict[str, set[str] | None]:
    """Per plan collective, the cost model's names an NCCL_ALGO / NCCL_PROTO value enables (None: left alone).

    Algorithms NCCL never uses inside one node (CollNet, NVLSTree, PAT) drop out. ValueError as parse_selection.
    """
    names, _ = _SELECTIONS[variable]
    modelled = {n.model for n in names if n.model}
    enabled: dict[str, set[str] | None] = dict.fromkeys(PLAN_COLLECTIVES)
    for segment in parse_selection(variable, value):
        chosen = {n.model for n in segment.names if n.model}
        result = modelled - chosen if segment.excluding else chosen
        if segment.collective is None:
            targets = list(enabled)
        else:
            targets = [segment.collective.model] if segment.collective.model else []
        for target in targets:
            enabled[target] = set(result)
    return enabled


def forced(variable: str, value: str | None, collective: str) -> Name | None:
    """The single algorithm / protocol an NCCL_ALGO / NCCL_PROTO value forces on `collective` (any spelling).

    Its own segment wins over the one for every collective; lists, ^ exclusions and invalid values give None
    (no single choice).
    """
    if not value:
        return None
    try:
        segments = parse_selection(variable, str(value))
    except ValueError:
        return None
    target = named(COLLECTIVES, collective)
    segment = next((s for s in segments if s.collective is not None and s.collective == target), None)
    segment = segment or next((s for s in segments if s.collective is None), None)
    if segment is None or segment.excluding or len(segment.names) != 1:
        return None
    return segment.names[0]


# Files that replace NCCL's own topology detection (NCCL_TOPO_FILE) or graph search (NCCL_GRAPH_FILE), read at
# every communicator's init (src/graph/topo.cc, search.cc ncclTopoCompute); and where NCCL writes what it
# detected and searched (NCCL_TOPO_DUMP_FILE in init.cc, NCCL_GRAPH_DUMP_FILE in search.cc ncclTopoDumpGraphs).
GRAPH_FILE_VARIABLES = ("NCCL_GRAPH_FILE", "NCCL_TOPO_FILE")
DUMP_VARIABLES = ("NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE")


def value_traps(name: str, value: str, interconnect: str = "any") -> list[str]:
    """Known traps of one (validated) value, each a sentence for the user; `interconnect` is what the
    sweep file says it targets ("any", "pcie" or "nvlink")."""
    traps = []
    if name == "NCCL_ALGO":
        ring = named(ALGORITHMS, "ring")
        for segment in parse_selection(name, value):
            ring_off = (ring in segment.names) if segment.excluding else (ring not in segment.names)
            if segment.collective is None and ring_off:
                traps.append(
                    f"NCCL_ALGO={value!r} applies to every collective and leaves broadcast / all-gather without "
                    "Ring, which torch needs at init: on NCCL >= 2.24 they fail with 'No algorithm/protocol "
                    'available\'. Restrict it to the all-reduce, e.g. "allreduce:tree"'
                )
    if name == "NCCL_PROTO" and interconnect != "nvlink" and forces_ll128(value):
        traps.append(
            f"NCCL_PROTO={value!r} forces LL128, which NCCL turns off on PCIe-only boxes because it can "
            "corrupt data there; every point's results are checked, and a corrupt one is recorded "
            "'wrong', never ranked"
        )
    return traps


def forces_ll128(value: str) -> bool:
    """Whether an NCCL_PROTO value enables LL128 by name: NCCL keeps LL128 off on PCIe-only boxes, where it can
    corrupt data. ValueError: a value NCCL cannot read."""
    ll128 = named(PROTOCOLS, "ll128")
    return any(not segment.excluding and ll128 in segment.names for segment in parse_selection("NCCL_PROTO", value))


# NCCL 2.31.2 and 2.32.3 (no v2.31 / v2.32 tag in the NVIDIA/nccl snapshot, only 2.31.0a* pre-releases), read in
# the nvidia-nccl-cu12 wheels' lib/libnccl.so.2 against 2.30.7's (strings; the tables' doubles as bytes): the same
# ncclAlgoStr / ncclProtoStr / ncclFuncStr names in the same order; every NCCL_* variable commprof writes is still
# read (2.31 drops NCCL_SYM_CTAS, never set here); tuner API v2-v6; the explainer's format strings; the tuning
# tables of costmodel/latency.py are 2.30.7's in 2.31.2, and 2.32.3 changes two Blackwell figures (llMaxBws N1
# 282.0 -> 282.4, perChMaxTreeLL128Bws N2 31.67 -> 36.7).

# Which NCCL versions' example tuner plugin reads nccl_tuner.conf, and which NCCL loads the plugin built (read in
# NCCL's source: NCCL_TUNER_CONFIG_FILE first appears in ext-tuner/example/plugin.c at v2.27.5-1; that plugin
# exports ncclTunerPlugin_v4 (2.27), v5 (2.28, 2.29), v5 and v6 (2.30; the 2.31.0a7 tree's too), and NCCL loads
# tuner_v2 ... its own newest from src/plugin/tuner/ (2.31.2 and 2.32.3: v2-v6, in their libnccl.so.2); the folder
# moved to plugins/tuner/example in 2.29).
TUNER_PLUGIN_NOTE = (
    "NCCL >= 2.27.5 with its example tuner plugin built from the same NCCL release (ext-tuner/example in 2.27-2.28, "
    "plugins/tuner/example from 2.29; earlier examples ignore NCCL_TUNER_CONFIG_FILE); a plugin built from a "
    "newer NCCL than the one that loads it is refused (2.27 loads tuner API v2-v4, 2.28-2.29 v2-v5, 2.30-2.32 v2-v6)"
)
