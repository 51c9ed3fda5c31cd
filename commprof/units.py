"""Sizes as people read them: the one byte formatter of every command, the report and the exported files."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(count: float) -> str:
    """A byte count in binary units, up to two decimals with trailing zeros dropped: 512 B, 14 KiB, 1.25 MiB."""
    value = float(count)
    unit = _UNITS[0]
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{text} {unit}"
