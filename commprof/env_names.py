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
# Names of a file or folder a library reads, writes or loads from: NCCL_CONF_FILE (NCCL src/misc/param.cc
# initEnvFunc hands it to setEnvFile, which sets every NAME=VALUE the file holds, a plug-in's name included),
# NCCL_DEBUG_FILE (opened for writing, debug.cc), NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE / NCCL_GRAPH_DUMP_FILE
# (topo.cc, search.cc), TORCH_NCCL_DEBUG_INFO_TEMP_FILE (torch's flight recorder dump), FLASHINFER_WORKSPACE_BASE
# and FLASHINFER_*_DIR (flashinfer 0.7.4 jit/env.py), VLLM_CONFIG_ROOT / VLLM_CACHE_ROOT (vLLM envs.py).
_NAMES_A_FILE = re.compile(r"_(FILES?|CONF|CONFIG|ROOT|BASE|DIRS?|PATHS?|FOLDER|WORKTREE)(_|$)")
# Those the pattern misses, read in flashinfer 0.7.4: a log file (__init__.py FLASHINFER_LOGDEST, jit/core.py
# FLASHINFER_JIT_BUILD_LOG), a program it runs (jit/core.py FLASHINFER_NVCC, jit/cpp_ext.py *_LAUNCHER), a file
# the autotuner loads (autotuner.py FLASHINFER_TACTICS_BLOCKLIST), a command b12x records and a vLLM folder.
NAMES_CODE_OR_FILE = frozenset(
    {
        "FLASHINFER_LOGDEST",
        "FLASHINFER_JIT_BUILD_LOG",
        "FLASHINFER_NVCC",
        "FLASHINFER_NVCC_LAUNCHER",
        "FLASHINFER_CXX_LAUNCHER",
        "FLASHINFER_TACTICS_BLOCKLIST",
        "B12X_PROBE_COMMAND",
        "VLLM_ASSETS_CACHE",
    }
)
# The one file variable a sweep may set and an export may write: commprof reads the file by NCCL's own rules before
# a point runs with it (nccl_graph/nccl_reader.py), and an export names it only at the file measured, by sha256.
CHECKED_FILE_NAMES = frozenset({"NCCL_GRAPH_FILE"})


def export_name_problem(name: object) -> str | None:
    """Why a sweep may not set, a record may not name and an export may not write the variable `name`; None
    where it may."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        return f"not an environment variable name: {name!r} (letters, digits and _, not starting with a digit)"
    if _LOADS_CODE.search(name):
        return f"{name} names code to load; set it on the launch yourself, never from a sweep file or a run"
    if name in NAMES_CODE_OR_FILE or (_NAMES_A_FILE.search(name) and name not in CHECKED_FILE_NAMES | EXPORT_NAMES):
        return (
            f"{name} names a file, folder or program a library reads, writes or runs; set it on the launch "
            "yourself, never from a sweep file or a run"
        )
    if name in EXPORT_NAMES or name.startswith(EXPORT_PREFIXES):
        return None
    return (
        f"{name} is not a variable commprof sets (allowed: {', '.join(p + '*' for p in EXPORT_PREFIXES)}, "
        f"{', '.join(sorted(EXPORT_NAMES))})"
    )


def is_export_name(name: object) -> bool:
    """Whether an export may write `name` (export_name_problem finds nothing)."""
    return export_name_problem(name) is None
