"""Sizes as people read them: the one byte formatter of every command, the report and the exported files."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
# The ranges a number read from a file or flag may have before it reaches a page: no collective moves more than
# 256 TiB, no event, collective or step lasts more than a day.
MAX_BYTES = 1 << 48
MAX_TIME_US = 86_400e6


def bounded_bytes(count: object, size: object) -> int | None:
    """`count` elements of `size` bytes, when both are whole numbers and the product is from 1 to MAX_BYTES."""
    try:
        nbytes = int(count) * int(size)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    return nbytes if 0 < nbytes <= MAX_BYTES else None


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
