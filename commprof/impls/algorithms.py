"""Which all-reduce algorithm runs at a size when a point leaves the choice to the default, as engines decide it.

Engines switch from one-shot to two-shot by message size: the community vLLM PCIe fork's
VLLM_PCIE_ONESHOT_ALLREDUCE_MAX_SIZE, and the one-shot ceilings of 64-112 KB that Kimi / GLM serving configs
on 8 x RTX PRO 6000 use (commprof's frontier reference notes). The default takes the low end of that range:
one-shot up to 64 KiB, two-shot above, and every record says which ran (`impl_detail`).
"""

from __future__ import annotations

from collections.abc import Iterable

from commprof.floor.model import ALGORITHMS

ONE_SHOT, TWO_SHOT = ALGORITHMS
ONE_SHOT_MAX_BYTES = 64 * 1024
DEFAULT_RULE = f"one-shot up to {ONE_SHOT_MAX_BYTES >> 10} KiB, two-shot above (as engines switch by size)"


def by_size(nbytes: int, one_shot_max_bytes: int = ONE_SHOT_MAX_BYTES) -> str:
    """The default's choice for one all-reduce of `nbytes`."""
    return ONE_SHOT if nbytes <= one_shot_max_bytes else TWO_SHOT


def ran_text(algorithms: Iterable[str], chosen_by: str) -> str:
    """What ran, for a record: "one-shot (default: one-shot up to 64 KiB, two-shot above ...)"."""
    seen = sorted(set(algorithms))
    if not seen:
        return f"nothing ran yet ({chosen_by})"
    return f"{' and '.join(seen)} ({chosen_by})"
