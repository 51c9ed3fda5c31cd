"""The NCCL variables commprof sweeps and models, defined once (TUNING): each with the grammar of its values, the
checker a sweep applies before anything runs. The only variables of NCCL's a sweep sets, a record names and an export
writes (commprof.env_names), and those the doctor warns of where they are set for every process. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from commprof.nccl_vocab import NCCL_PATH_TYPES, parse_selection, selection_allowed

# --- legal values of the variables a sweep sets: each checker takes the value as TOML gave it (str, int or
# bool) and returns the string put in the environment, or raises ValueError saying what is allowed ----------


def _as_int(raw: object, name_of_kind: str) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"expected {name_of_kind}, got {raw!r}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw):
        return int(raw)
    raise ValueError(f"expected {name_of_kind}, got {raw!r}")


def int_range(low: int, high: int) -> Callable[[object], str]:
    def check(raw: object) -> str:
        allowed = f"an integer {low}..{high}"
        value = _as_int(raw, allowed)
        if not low <= value <= high:
            raise ValueError(f"{value} is out of range (allowed: {allowed})")
        return str(value)

    return check


def positive_int(raw: object) -> str:
    value = _as_int(raw, "a positive integer (bytes)")
    if value < 1:
        raise ValueError(f"{value} is not positive (allowed: a positive integer, bytes)")
    return str(value)


def nthreads(raw: object) -> str:
    allowed = "a multiple of 32 in 64..512"
    value = _as_int(raw, allowed)
    if value % 32 or not 64 <= value <= 512:
        raise ValueError(f"{value} is not {allowed} (allowed: {allowed})")
    return str(value)


def flag(raw: object) -> str:
    """NCCL's 0/1 switches; TOML true/false are accepted too."""
    if isinstance(raw, bool):
        return "1" if raw else "0"
    if raw in (0, 1, "0", "1"):
        return str(raw)
    raise ValueError(f"{raw!r} is not a switch (allowed: 0, 1, true, false)")


def p2p_level(raw: object) -> str:
    """A level NCCL reads: a path type (written upper case, as NCCL compares it) or an old integer level."""
    allowed = f"{', '.join(NCCL_PATH_TYPES)} or an old integer level 0..5"
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw >= 0:
            return str(raw)
        raise ValueError(f"{raw} is out of range (allowed: {allowed})")
    if isinstance(raw, str) and raw.strip().upper() in NCCL_PATH_TYPES:
        return raw.strip().upper()  # NCCL's strcmp would ignore "sys": the environment gets "SYS"
    if isinstance(raw, str) and re.fullmatch(r"\d+", raw.strip()):
        return raw.strip()
    if isinstance(raw, str) and raw.strip().upper() == "NODE":
        raise ValueError(f"{raw!r}: NCCL has no NODE level (nvidia-smi's NODE is NCCL's PHB) (allowed: {allowed})")
    raise ValueError(f"{raw!r} is not a P2P level (allowed: {allowed})")


def thread_thresholds(raw: object) -> str:
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


def file_path(raw: object) -> str:
    """A file NCCL opens (NCCL_GRAPH_FILE, the one file variable a sweep may set): a non-empty path on one line."""
    if not isinstance(raw, str) or not raw.strip() or any(c in raw for c in "\n\r\0"):
        raise ValueError(f"{raw!r} is not a file path (allowed: a non-empty path on one line)")
    return raw.strip()


def _selection(variable: str) -> Callable[[object], str]:
    def check(raw: object) -> str:
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"expected a non-empty string, got {raw!r} (allowed: {selection_allowed(variable)})")
        value = raw.strip()
        parse_selection(variable, value)
        return value

    return check


@dataclass(frozen=True)
class TuningVariable:
    """One NCCL variable commprof sweeps and models, and the checker of its values."""

    name: str
    check: Callable[[object], str]  # the value as TOML gave it -> the environment string; ValueError: what is allowed


# Defined here once, in the order messages list them (tests/test_architecture.py fails on a second list).
TUNING = (
    TuningVariable("NCCL_ALGO", _selection("NCCL_ALGO")),
    TuningVariable("NCCL_PROTO", _selection("NCCL_PROTO")),
    TuningVariable("NCCL_MIN_NCHANNELS", int_range(1, 64)),
    TuningVariable("NCCL_MAX_NCHANNELS", int_range(1, 64)),
    TuningVariable("NCCL_MIN_CTAS", int_range(1, 64)),
    TuningVariable("NCCL_MAX_CTAS", int_range(1, 64)),
    TuningVariable("NCCL_NTHREADS", nthreads),
    TuningVariable("NCCL_BUFFSIZE", positive_int),
    TuningVariable("NCCL_LL_BUFFSIZE", positive_int),
    TuningVariable("NCCL_LL128_BUFFSIZE", positive_int),
    TuningVariable("NCCL_P2P_LEVEL", p2p_level),
    TuningVariable("NCCL_P2P_DISABLE", flag),
    TuningVariable("NCCL_SHM_DISABLE", flag),
    TuningVariable("NCCL_CUMEM_ENABLE", flag),
    TuningVariable("NCCL_GRAPH_REGISTER", flag),
    TuningVariable("NCCL_NVLS_ENABLE", flag),
    TuningVariable("NCCL_CGA_CLUSTER_SIZE", int_range(0, 8)),
    TuningVariable("NCCL_THREAD_THRESHOLDS", thread_thresholds),
    # The one file variable a sweep may set and an export may write: commprof reads the file by NCCL's own rules
    # before a point runs with it (nccl_graph/nccl_reader.py), and an export names it only at the file measured, by
    # sha256.
    TuningVariable("NCCL_GRAPH_FILE", file_path),
)
TUNING_NAMES = tuple(variable.name for variable in TUNING)
# Each one's value checker, by name (a sweep checks them in [axes], [axes.env], [[points]] and [[stages]]).
ENV_CHECKS: dict[str, Callable[[object], str]] = {variable.name: variable.check for variable in TUNING}


def env_value(name: str, raw: object) -> str:
    """The environment string for `name`; ValueError says what is allowed."""
    if isinstance(raw, str) and "\x00" in raw:  # execve cuts a variable at its first NUL: no process could see it
        raise ValueError(f"{raw!r} holds a NUL character, which no environment variable can carry")
    check = ENV_CHECKS.get(name)
    if check is not None:
        return check(raw)
    if isinstance(raw, bool):
        return "1" if raw else "0"
    if isinstance(raw, (int, float, str)):
        return str(raw)
    raise ValueError(f"expected a string or a number, got {type(raw).__name__} {raw!r}")
