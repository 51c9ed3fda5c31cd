"""The variables commprof may set, defined once: a sweep may set only these, a record may name only these, and an
export writes only these. Sourcing an export must run nothing, whatever the sweep file or run folder held.

Pure; every stage imports it (the sweep's validation, the records reader, the exports).
"""

from __future__ import annotations

import re

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# NCCL's, the serving engines' and their kernels' switches, torch's and the CUDA / OpenMP runtime's knobs commprof
# tunes, and commprof's own (a plug-in's knobs are named COMMPROF_*). No name a shell, the dynamic loader or
# Python acts on (PATH, PS1, PROMPT_COMMAND, BASH_ENV, LD_PRELOAD, PYTHONPATH, IFS) is among them.
EXPORT_PREFIXES = ("NCCL_", "SGLANG_", "VLLM_", "FLASHINFER_", "B12X_", "TORCH_NCCL_", "COMMPROF_")
EXPORT_NAMES = frozenset(
    {
        "OMP_NUM_THREADS",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_MODULE_LOADING",
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_CUDA_ALLOC_CONF",
        "TORCH_SYMMMEM",
    }
)
# NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN, NCCL_PROFILER_PLUGIN, VLLM_PLUGINS, ...: each names code to load.
_LOADS_CODE = re.compile(r"_PLUGINS?$")


def export_name_problem(name: object) -> str | None:
    """Why a sweep may not set, a record may not name and an export may not write the variable `name`; None
    where it may."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        return f"not an environment variable name: {name!r} (letters, digits and _, not starting with a digit)"
    if _LOADS_CODE.search(name):
        return f"{name} names code to load; set it on the launch yourself, never from a sweep file or a run"
    if name in EXPORT_NAMES or name.startswith(EXPORT_PREFIXES):
        return None
    return (
        f"{name} is not a variable commprof sets (allowed: {', '.join(p + '*' for p in EXPORT_PREFIXES)}, "
        f"{', '.join(sorted(EXPORT_NAMES))})"
    )


def is_export_name(name: object) -> bool:
    """Whether an export may write `name` (export_name_problem finds nothing)."""
    return export_name_problem(name) is None
