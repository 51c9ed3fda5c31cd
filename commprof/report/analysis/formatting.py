"""How the report writes numbers: units and sensible precision (steps in ms, single collectives in µs), "—" for
anything not measured (never zero). Where numbers come from is commprof.evidence's to say."""

from __future__ import annotations

import html
import math
from typing import Any

from commprof.report.analysis.frame import ENV_PREFIX
from commprof.units import format_bytes


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
