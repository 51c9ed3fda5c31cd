"""How the report writes numbers: units and sensible precision (steps in ms, single collectives in µs), "—" for
anything not measured (never zero). Where numbers come from is commprof.evidence's to say."""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

from commprof.units import format_bytes

# Columns of the settings a point sets in the records' frame: "env.NCCL_ALGO", ...
ENV_PREFIX = "env."

# Counts a step record always carries: integers, even where other kinds of record in the frame (crossover searches,
# single collectives) leave them empty and pandas made the whole column float.
STEP_INTEGERS = ("tp", "tokens", "world_size", "hidden_size", "num_layers", "all_reduce_count", "all_gather_count")

# Counts any record carries: written as integers (empty where a record has none), never as "8.0".
COUNT_COLUMNS = (*STEP_INTEGERS, "total_bytes", "iterations", "stage")


def fmt_ms(us: Any) -> str:
    """A step time given in µs, shown in ms."""
    if not finite(us):
        return "—"
    ms = float(us) / 1000.0
    return f"{ms:.3f} ms" if ms < 1 else f"{ms:.2f} ms"


def fmt_ms_value(ms: Any) -> str:
    return "—" if not finite(ms) else (f"{float(ms):.3f} ms" if float(ms) < 1 else f"{float(ms):.2f} ms")


def fmt_us(us: Any) -> str:
    """A single collective's time, µs."""
    if not finite(us):
        return "—"
    return f"{float(us):.1f} µs" if float(us) < 1000 else f"{float(us):,.0f} µs"


def fmt_pct(value: Any) -> str:
    return "—" if not finite(value) else f"{float(value):.1f} %"


def fmt_x(value: Any) -> str:
    return "—" if not finite(value) else f"{float(value):.2f}×"


def fmt_num(value: Any, digits: int = 2) -> str:
    return "—" if not finite(value) else f"{float(value):.{digits}f}"


def fmt_bytes(value: Any) -> str:
    return "—" if not finite(value) else format_bytes(value)


def escaped(value: Any) -> str:
    """HTML-escaped text, for the big tables the template renders without autoescape."""
    return html.escape(str(value), quote=True)


def finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def finite_or_none(value: Any) -> float | None:
    """`value` as a float where it is a finite number, else None (a frame's NaN, an infinite ratio, a missing
    figure): what a Decision holds, as summary.json holds it."""
    return float(value) if finite(value) else None


def sentence(text: str) -> str:
    """`text` with its first letter upper-case and the rest as written (str.capitalize lowercases "GPUs", "NCCL")."""
    return text[:1].upper() + text[1:]


def axis_name(axis: str | None) -> str:
    return "—" if axis is None else axis.removeprefix(ENV_PREFIX)


def tokens_text(tokens: Any) -> str:
    """T values as "1, 4, 8"."""
    return ", ".join(str(int(t)) for t in tokens)


def range_pct(values: Any) -> str:
    """A few percentages as one figure ("40 %") or their range ("20–40 %")."""
    low, high = float(min(values)), float(max(values))
    return f"{high:.0f} %" if abs(high - low) < 0.5 else f"{low:.0f}–{high:.0f} %"


def tail_header(words: Any, simulated: bool = False) -> str:
    """A column of slow tails headed by its statistics' words (stats.tail_word: "p99", "max of n"), each once."""
    named = sorted({str(w) for w in words if isinstance(w, str)})
    return "tail" if simulated or not named else " / ".join(named)


def env_text(env: dict[str, str], backend: str | None = None) -> str:
    """A point's settings as one line; when it sets nothing, the defaults of the backend it ran on ("NCCL
    defaults", "gloo defaults")."""
    name = "NCCL" if backend in (None, "nccl") else backend
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or f"{name} defaults"


def whole_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its count columns as nullable integers, where every value present is whole."""
    whole = {
        column: frame[column].astype("Int64")
        for column in COUNT_COLUMNS
        if column in frame and frame[column].dtype.kind == "f" and (frame[column].dropna() % 1 == 0).all()
    }
    return frame.assign(**whole) if whole else frame


def tps_column(accept: float) -> str:
    """The projection's column of tokens/s at one accept length, e.g. "tps_at_1_3"."""
    return "tps_at_" + f"{accept:g}".replace(".", "_")


def break_even_text(ratio: Any, tokens: int | None = None) -> str:
    """A break-even accept length as shown (where the tokens/s line crosses plain decode's): below 1 it is below
    every accept length; above T no accept length reaches it at this T. Whether speculation pays at an accept length
    is its cell's claim, not this figure's."""
    if not finite(ratio):
        return "—"
    if float(ratio) < 1.0:
        return f"{float(ratio):.2f} (below every accept length)"
    if tokens is not None and float(ratio) > tokens:
        return f"{float(ratio):.2f} (above T = {tokens}: no accept length reaches it)"
    return f"{float(ratio):.2f}"


def error_words(claim: Any) -> str:
    """A claim's error as every output writes it: "±13.7 %", or "error unknown"."""
    return f"±{claim.error_pct:.1f} %" if claim.error_pct is not None else "error unknown"


def claim_words(claim: Any, nothing: str = "no verdict: nothing compared") -> str:
    """A claim as every output writes it, figure, error and verdict together: "20.8 % less (±13.7 %): beyond error",
    "3.0 % more (±5.1 %): inside error"; `nothing` where there is no claim (nothing was compared)."""
    if claim is None:
        return nothing
    way = "less" if claim.gain_pct >= 0 else "more"
    said = f"{abs(claim.gain_pct):.1f} % {way} ({error_words(claim)}): {claim.verdict}"
    return said + (f" ({claim.reason})" if claim.reason else "")
