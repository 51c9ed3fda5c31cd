"""The variables commprof may set, defined once: an allow-list of the tuning variables it sweeps and models. A sweep
may set only these, a record may name only these, and an export writes only these. Sourcing an export must run,
load, open, listen on or dial out to nothing, whatever the sweep file or run folder held.

Pure; every stage imports it (the sweep's validation, the records reader, the exports).
"""

from __future__ import annotations

import re

from commprof.nccl_tuning import TUNING_NAMES

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# The tuning variables commprof sweeps and models, and no other: a sweep may set only these (and a plug-in's
# COMMPROF_* knobs), a record may name only these, and an export writes only these live. NCCL and the engines read
# many more, and some make a process listen or dial out (NCCL_COMM_ID, NCCL_RAS_ADDR, NCCL_SOCKET_IFNAME,
# NCCL_HOSTID, VLLM_HOST_IP, VLLM_PORT), fill a disk (NCCL_DEBUG=TRACE) or load code: a file a user pastes must set
# none of them, whatever the sweep file or run folder held.
#
# NCCL's: its tuning variables, each with its value checker (commprof.nccl_tuning.TUNING, defined there once).
NCCL_TUNING = frozenset(TUNING_NAMES)
# The engines' all-reduce switches and size caps commprof routes with and models: the implementations' engine
# switches and flags (commprof.impls) and the engine versions' dispatch tables (commprof.report.analysis.engine_*);
# a test holds every one they name in this list.
ENGINE_SWITCHES = frozenset(
    {
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
        "SGLANG_PCIE_IPC_MAX_NUMEL",
        "SGLANG_B12X_PCIE_AR",
        "SGLANG_B12X_ONESHOT_MAX_BYTES",
        "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2",
        "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC",
        "VLLM_ALLREDUCE_USE_FLASHINFER",
        "VLLM_ALLREDUCE_USE_SYMM_MEM",
        "VLLM_USE_NCCL_SYMM_MEM",
        "VLLM_FLASHINFER_ALLREDUCE_BACKEND",
        "VLLM_ENABLE_PCIE_ALLREDUCE",
        "VLLM_PCIE_ALLREDUCE_BACKEND",
        "VLLM_PCIE_ONESHOT_ALLREDUCE_MAX_SIZE",
    }
)
# The CPU and CUDA runtime's and torch's: threads per rank (the CPU smoke sweeps it), CUDA's hardware queues, and
# torch's allocator and symmetric-memory backend (read once at load: commprof.torch_env says so in a sweep).
RUNTIME_TUNING = frozenset(
    {
        "OMP_NUM_THREADS",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_CUDA_ALLOC_CONF",
        "TORCH_SYMMMEM",
    }
)
TUNING_VARIABLES = NCCL_TUNING | ENGINE_SWITCHES | RUNTIME_TUNING
# A plug-in implementation's own knobs (docs/sweep-files.md): no library but the plug-in reads them.
PLUGIN_PREFIX = "COMMPROF_"
# COMMPROF_SGLANG_ARGS, COMMPROF_VLLM_ARGS: the engines' command-line flags engine_flags.txt collects; a value
# exported under one would become a flag of the engine's launch.
_CARRIES_FLAGS = re.compile(r"_ARGS?$")
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


def export_name_problem(name: object) -> str | None:
    """Why a sweep may not set, a record may not name and an export may not write the variable `name`; None
    where it may."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        return f"not an environment variable name: {name!r} (letters, digits and _, not starting with a digit)"
    if _LOADS_CODE.search(name):
        return f"{name} names code to load; set it on the launch yourself, never from a sweep file or a run"
    if name in NAMES_CODE_OR_FILE or (_NAMES_A_FILE.search(name) and name not in TUNING_VARIABLES):
        return (
            f"{name} names a file, folder or program a library reads, writes or runs; set it on the launch "
            "yourself, never from a sweep file or a run"
        )
    if name in TUNING_VARIABLES or (name.startswith(PLUGIN_PREFIX) and not _CARRIES_FLAGS.search(name)):
        return None
    return (
        f"{name} is not a tuning variable commprof sweeps or models; set it on the launch yourself, never from a "
        f"sweep file or a run (allowed: {', '.join(sorted(TUNING_VARIABLES))}, and {PLUGIN_PREFIX}* for a "
        "plug-in's own knobs)"
    )


def is_export_name(name: object) -> bool:
    """Whether an export may write `name` (export_name_problem finds nothing)."""
    return export_name_problem(name) is None


# What an exported value may be written as without quotes: a letter or digit first, then nothing bash or zsh acts
# on. zsh expands a value starting with "=" as a command's path (`export NCCL_IB_HCA==mlx5_0` runs a lookup of
# mlx5_0), and "~" or "=" after a ":" inside it (an assignment's value is a colon list there); shlex.quote leaves
# all three bare.
_BARE_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,+@%/-]*")


def shell_value(text: str) -> str:
    """`text` as one word bash and zsh read literally in `export NAME=<word>`: bare where it is plain, else in
    single quotes (a quote inside as '"'"')."""
    if _BARE_VALUE.fullmatch(text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"
