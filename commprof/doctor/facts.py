"""What the checks read, gathered once from the live machine or from a bundle directory.

Checks never open files or run programs: they receive `Facts`. Every raw input is a `Source` that carries
its text or the reason it is missing (not installed, permission denied, not in the bundle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Source:
    """One raw input, e.g. the output of `lspci -vvv`; `text` is None when it could not be read."""

    name: str  # bundle key: "lspci_full", "cmdline", ...
    where: str  # where it was read: "/proc/cmdline", "lspci -vvv", "bundle/cmdline.log"
    text: str | None = None
    missing: str = ""  # why text is None

    @property
    def ok(self) -> bool:
        return self.text is not None

    def why_missing(self) -> str:
        return f"{self.where}: {self.missing}"


@dataclass
class Facts:
    """Everything gathered for one doctor run.

    `topology` is the NVML probe (commprof.doctor.topology_probe) where NVML answered; `gpu_health` holds the per-GPU
    NVML health answers; `tests` holds the NCCL subprocess results (p2p pairs, all-GPU init, link load);
    `floor` the floor probe's result (or why there is none).
    """

    origin: str  # "live" or the bundle directory
    sources: dict[str, Source] = field(default_factory=dict)
    topology: dict[str, Any] | None = None
    gpu_health: list[dict[str, Any]] | None = None
    tests: dict[str, Any] = field(default_factory=dict)
    tp: int | None = None  # size of the TP group to judge (default: all GPUs)
    floor: dict[str, Any] | None = None  # the box's floor as meta.json records it (commprof.floor.record)

    def source(self, name: str) -> Source:
        return self.sources.get(name) or Source(name, name, None, "not gathered")

    def text(self, name: str) -> str | None:
        return self.source(name).text
