"""summary.json, read and written as the Decision's typed structure: the one file a report's every output can be
rendered from again (`commprof report --from-summary`). A numpy number the analysis left in a table is written as
the Python number it is; NaN is written as null. Pure (bytes in, bytes out)."""

from __future__ import annotations

from typing import Any

import msgspec

from commprof.report.decision.types import Report

# The layout of summary.json; a file of another layout is refused in one line, never half-read.
FORMAT = 2


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    if hasattr(value, "tolist"):  # a numpy array
        return value.tolist()
    raise NotImplementedError(f"summary.json cannot hold a {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)
_DECODER = msgspec.json.Decoder(Report)


def encode(report: Report) -> bytes:
    """summary.json's bytes: indented, one newline at the end."""
    return msgspec.json.format(_ENCODER.encode(report), indent=2) + b"\n"


def decode(data: bytes) -> Report:
    """A summary.json read back whole (msgspec.ValidationError or DecodeError where it is not one)."""
    return _DECODER.decode(data)
