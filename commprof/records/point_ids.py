"""The point-id grammar: "p000" is the baseline, a sweep's points are "p001", "p002", ...; stage N of the staged
search measures its points as "sN-p000", "sN-p001", ... (stage 0 has no prefix)."""

from __future__ import annotations

import re

BASELINE_POINT_ID = "p000"
_POINT_ID = re.compile(r"^(?:s(\d+)-)?p\d+$")


def point_id(index: int, stage: int = 0) -> str:
    """The id of a stage's `index`-th point: point_id(3) is "p003", point_id(3, stage=2) is "s2-p003"."""
    return f"p{index:03d}" if stage == 0 else f"s{stage}-p{index:03d}"


def stage_of(point_id: str) -> int:
    """The sweep stage a point id belongs to: "p012" is stage 0, "s2-p003" stage 2."""
    match = _POINT_ID.match(point_id)
    return int(match.group(1)) if match and match.group(1) else 0
