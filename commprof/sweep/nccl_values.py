"""Legal values of the NCCL variables a sweep sets, and the known traps among them.

Each checker takes the value as TOML gave it (str, int or bool) and returns the string put in the
environment, or raises ValueError with what is allowed. Facts from NCCL 2.23-2.30 (docs/sweep-files.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable

ALGORITHMS = ("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter")
P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _as_int(raw, name_of_kind: str) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"expected {name_of_kind}, got {raw!r}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw):
        return int(raw)
    raise ValueError(f"expected {name_of_kind}, got {raw!r}")


def int_range(low: int, high: int) -> Callable[[object], str]:
    def check(raw) -> str:
        allowed = f"an integer {low}..{high}"
        value = _as_int(raw, allowed)
        if not low <= value <= high:
            raise ValueError(f"{value} is out of range (allowed: {allowed})")
        return str(value)

    return check


def positive_int(raw) -> str:
    value = _as_int(raw, "a positive integer (bytes)")
    if value < 1:
        raise ValueError(f"{value} is not positive (allowed: a positive integer, bytes)")
    return str(value)


def nthreads(raw) -> str:
    allowed = "a multiple of 32 in 64..512"
    value = _as_int(raw, allowed)
    if value % 32 or not 64 <= value <= 512:
        raise ValueError(f"{value} is not {allowed} (allowed: {allowed})")
    return str(value)


def flag(raw) -> str:
    """NCCL's 0/1 switches; TOML true/false are accepted too."""
    if isinstance(raw, bool):
        return "1" if raw else "0"
    if raw in (0, 1, "0", "1"):
        return str(raw)
    raise ValueError(f"{raw!r} is not a switch (allowed: 0, 1, true, false)")


def p2p_level(raw) -> str:
    allowed = f"{', '.join(P2P_LEVELS)} or the legacy integers 0..4"
    if isinstance(raw, int) and not isinstance(raw, bool):
        if 0 <= raw <= 4:
            return str(raw)
        raise ValueError(f"{raw} is out of range (allowed: {allowed})")
    if isinstance(raw, str) and raw.strip().upper() in P2P_LEVELS:
        return raw.strip().upper()
    if isinstance(raw, str) and raw.strip() in ("0", "1", "2", "3", "4"):
        return raw.strip()
    raise ValueError(f"{raw!r} is not a P2P level (allowed: {allowed})")


def thread_thresholds(raw) -> str:
    allowed = (
        'six integers "treeLL treeLL128 treeSimple ringLL ringLL128 ringSimple" separated by spaces; '
        "a negative one keeps NCCL's default for that slot"
    )
    if not isinstance(raw, str):
        raise ValueError(f"expected a string, got {raw!r} (allowed: {allowed})")
    fields = raw.split()
    if len(fields) != 6 or not all(re.fullmatch(r"-?\d+", f) for f in fields):
        raise ValueError(f"{raw!r} is not six integers (allowed: {allowed})")
    return " ".join(fields)


def _selection_list(tokens: tuple[str, ...], what: str) -> Callable[[object], str]:
    """NCCL_ALGO / NCCL_PROTO syntax: "a,b", "^a" (exclude), and since 2.24 "b;allreduce:a" per collective."""
    lookup = {t.lower(): t for t in tokens}
    allowed = (
        f"a comma list of {', '.join(tokens)} (any case), a leading ^ to exclude, and per collective "
        f"(NCCL >= 2.24) segments like \"allreduce:{tokens[0].lower()}\" joined by ';'; "
        f"collectives: {', '.join(COLLECTIVES)}"
    )

    def check_list(text: str, value: str) -> None:
        body = text[1:] if text.startswith("^") else text
        for name in (n.strip() for n in body.split(",")):
            if name.lower() not in lookup:
                where = f"{value!r}: " if name != value else ""
                raise ValueError(f"{where}{name!r} is not {what} (allowed: {allowed})")

    def check(raw) -> str:
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"expected a non-empty string, got {raw!r} (allowed: {allowed})")
        value = raw.strip()
        seen: set[str] = set()
        for segment in value.split(";"):
            segment = segment.strip()
            collective, sep, body = segment.rpartition(":")
            if sep:
                if collective.strip().lower() not in COLLECTIVES:
                    raise ValueError(f"{value!r}: {collective!r} is not a collective (allowed: {allowed})")
                if collective.strip().lower() in seen:
                    raise ValueError(f"{value!r}: {collective!r} is given twice (allowed: {allowed})")
                seen.add(collective.strip().lower())
            elif "" in seen:
                raise ValueError(f"{value!r}: more than one segment without a collective (allowed: {allowed})")
            else:
                seen.add("")
            check_list(body.strip(), value)
        return value

    return check


algo_list = _selection_list(ALGORITHMS, "an algorithm")
proto_list = _selection_list(PROTOCOLS, "a protocol")

# Variables a sweep validates by name (anywhere: [axes], [axes.env], [[points]], [[stages]]).
ENV_CHECKS: dict[str, Callable[[object], str]] = {
    "NCCL_ALGO": algo_list,
    "NCCL_PROTO": proto_list,
    "NCCL_MIN_NCHANNELS": int_range(1, 64),
    "NCCL_MAX_NCHANNELS": int_range(1, 64),
    "NCCL_MIN_CTAS": int_range(1, 64),
    "NCCL_MAX_CTAS": int_range(1, 64),
    "NCCL_NTHREADS": nthreads,
    "NCCL_BUFFSIZE": positive_int,
    "NCCL_LL_BUFFSIZE": positive_int,
    "NCCL_LL128_BUFFSIZE": positive_int,
    "NCCL_P2P_LEVEL": p2p_level,
    "NCCL_P2P_DISABLE": flag,
    "NCCL_SHM_DISABLE": flag,
    "NCCL_CUMEM_ENABLE": flag,
    "NCCL_GRAPH_REGISTER": flag,
    "NCCL_NVLS_ENABLE": flag,
    "NCCL_CGA_CLUSTER_SIZE": int_range(0, 8),
    "NCCL_THREAD_THRESHOLDS": thread_thresholds,
}


def env_value(name: str, raw) -> str:
    """The environment string for `name`; ValueError says what is allowed."""
    check = ENV_CHECKS.get(name)
    if check is not None:
        return check(raw)
    if isinstance(raw, bool):
        return "1" if raw else "0"
    if isinstance(raw, (int, float)) or isinstance(raw, str):
        return str(raw)
    raise ValueError(f"expected a string or a number, got {type(raw).__name__} {raw!r}")


def _segments(value: str) -> list[tuple[str, bool, set[str]]]:
    """(collective or "", excluding, lower-cased names) for each segment of an ALGO / PROTO value."""
    out = []
    for segment in value.split(";"):
        collective, _, body = segment.strip().rpartition(":")
        body = body.strip()
        excluding = body.startswith("^")
        names = {n.strip().lower() for n in body.lstrip("^").split(",")}
        out.append((collective.strip().lower(), excluding, names))
    return out


def value_traps(name: str, value: str, interconnect: str = "any") -> list[str]:
    """Known traps of one (validated) value, each a sentence for the user; `interconnect` is what the
    sweep file says it targets ("any", "pcie" or "nvlink")."""
    traps = []
    if name == "NCCL_ALGO":
        for collective, excluding, names in _segments(value):
            ring_off = ("ring" in names) if excluding else ("ring" not in names)
            if not collective and ring_off:
                traps.append(
                    f"NCCL_ALGO={value!r} applies to every collective and leaves broadcast / all-gather without "
                    "Ring, which torch needs at init: on NCCL >= 2.24 they fail with 'No algorithm/protocol "
                    'available\'. Restrict it to the all-reduce, e.g. "allreduce:tree"'
                )
    if name == "NCCL_PROTO" and interconnect != "nvlink":
        for _, excluding, names in _segments(value):
            if not excluding and "ll128" in names:
                traps.append(
                    f"NCCL_PROTO={value!r} forces LL128, which NCCL turns off on PCIe-only boxes because it can "
                    "corrupt data there; every point's results are checked, and a corrupt one is recorded "
                    "'wrong', never ranked"
                )
                break
    return traps
