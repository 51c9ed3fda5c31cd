"""Which transport NCCL gives a GPU pair: P2P when the pair's path is within NCCL's P2P level, else SHM.

Mirrors NCCL's src/graph/paths.cc, identical in this respect across v2.27.7-1, v2.28.9-1, v2.29.7-1 and v2.30.7-1:
ncclTopoCheckP2p sets `p2pLevel = PATH_PXB`, raises it to PATH_SYS on x86 AMD hosts with at most 2 GPUs
(2.30: 2 GPU devices), lets ncclGetUserP2pLevel override it, and gives P2P when `path->type <= p2pLevel` and
NVML reports P2P read and write OK for the pair; otherwise the SHM transport (src/transport/shm.cc) connects it.
Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from commprof.nccl_vocab import NCCL_PATH_TYPES, nccl_user_p2p_level

PATHS_CC = (
    "NCCL src/graph/paths.cc ncclTopoCheckP2p (v2.27.7-1 l.315-326, v2.28.9-1 l.319-330, v2.29.7-1 l.323-334, "
    "v2.30.7-1 l.356-368) and ncclGetLevel (v2.28.9-1 l.216-252)"
)
# nvidia-smi topo -m levels as NCCL's topology names the same path (src/graph/topo.h): NCCL has no NODE, a path
# through the CPU between two host bridges of one socket is PATH_PHB; NV# is NVLink (PATH_NVL).
SMI_TO_NCCL_PATH = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


def nccl_path(smi_level: str) -> str | None:
    """NCCL's path type for an `nvidia-smi topo -m` cell ("NODE" -> "PHB", "NV4" -> "NVL"); None if unknown."""
    level = smi_level.strip().upper()
    if level.startswith("NV") and level[2:].isdigit():
        return "NVL"
    return SMI_TO_NCCL_PATH.get(level)


@dataclass(frozen=True)
class PairTransport:
    """NCCL's choice for one GPU pair under one environment, and why."""

    transport: str  # "P2P" or "SHM"
    level: str  # the P2P level NCCL compared the path against
    reason: str

    def to_dict(self) -> dict:
        return {"transport": self.transport, "level": self.level, "reason": self.reason}


def default_p2p_level(cpu_vendor: str | None, gpus: int) -> tuple[str, str]:
    """NCCL's P2P level before the user's variables, and why."""
    if cpu_vendor == "AMD" and gpus <= 2:
        return "SYS", "AMD x86 host with at most 2 GPUs: NCCL raises its default level to SYS"
    return "PXB", "NCCL's default level PXB: no P2P across a CPU host bridge or further"


def pair_transport(
    path: str, env: Mapping[str, str], cpu_vendor: str | None, gpus: int, p2p_ok: bool | None
) -> PairTransport:
    """NCCL's transport for a pair whose path type is `path` (NCCL's names), under `env`.

    p2p_ok: NVML's P2P read and write status of the pair (None: unknown, taken as OK and said so).
    """
    level, why = default_p2p_level(cpu_vendor, gpus)
    user = nccl_user_p2p_level(env)
    if user is not None:
        level, why = user.level, user.reason
    if NCCL_PATH_TYPES.index(path) > NCCL_PATH_TYPES.index(level):
        return PairTransport("SHM", level, f"path {path} beyond P2P level {level} ({why})")
    if p2p_ok is False:
        return PairTransport("SHM", level, f"path {path} within level {level}, but NVML reports P2P not OK")
    known = "" if p2p_ok else "; NVML P2P status not recorded, assumed OK"
    return PairTransport("P2P", level, f"path {path} within P2P level {level} ({why}){known}")
