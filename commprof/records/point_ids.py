"""The point-id grammar: "p000" is the baseline, a sweep's points are "p001", "p002", ...; stage N of the staged
search measures its points as "sN-p000", "sN-p001", ... (stage 0 has no prefix). And the run-id grammar.

Ids become file and folder names (points/<id>/, nccl-tests/<id>.txt, a report's per-run folders): readers accept
only ids of these grammars, so a crafted run folder cannot name a path outside the folder it is written to."""

from __future__ import annotations

import re

BASELINE_POINT_ID = "p000"
POINT_ID = re.compile(r"(?:s([0-9]{1,4})-)?p[0-9]{1,9}")


# A run id: the run folder's name (records.files.new_run_dir), letters, digits, ".", "_" and "-", starting with a
# letter or digit, at most 200 characters.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def is_run_id(text: object) -> bool:
    return isinstance(text, str) and RUN_ID.fullmatch(text) is not None


def point_id(index: int, stage: int = 0) -> str:
    """The id of a stage's `index`-th point: point_id(3) is "p003", point_id(3, stage=2) is "s2-p003"."""
    return f"p{index:03d}" if stage == 0 else f"s{stage}-p{index:03d}"


def is_point_id(text: object) -> bool:
    """Whether `text` is a point id of this grammar (ids become file names: nothing else is accepted)."""
    return isinstance(text, str) and POINT_ID.fullmatch(text) is not None


def stage_of(point_id: str) -> int:
    """The sweep stage a point id belongs to: "p012" is stage 0, "s2-p003" stage 2."""
    match = POINT_ID.fullmatch(point_id)
    return int(match.group(1)) if match and match.group(1) else 0
