"""SGLang 0.5.23's all-reduce dispatch: GroupCoordinator.all_reduce tries NCCL symmetric memory and FlashInfer's
standalone all-reduce, then _resolve_outplace_all_reduce_method, where MSCCL++ goes before custom all-reduce and
PCIe IPC (both guarded by `not should_use_pymscclpp_allreduce`). Each gate read from the released wheel. Pure."""

from __future__ import annotations

from commprof.report.analysis.engine_facts import (
    Box,
    Cite,
    Default,
    EngineTable,
    Flag,
    MiB,
    Op,
    Rule,
    Switches,
    always,
    not_here,
    on,
    sm_text,
)

SG = "sglang/srt/distributed"
DC = f"{SG}/device_communicators"
PS = f"{SG}/parallel_state.py"
EXEC = "sglang/srt/arg_groups/fields/exec_.py"
FUSION = "sglang/srt/layers/flashinfer_comm_fusion.py"

CUSTOM_AR_BUFFER = 8192 * 1024  # CustomAllreduce._MAX_CAR_SIZE (CUDA)
CUSTOM_AR_V2_MAX = (
    16 * 1024 * 1024
)  # SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB's default, x 1024: caps every v2 threshold
CUSTOM_AR_WORLD_SIZES = [2, 4, 6, 8]
MSCCLPP_WORLD_SIZES = (4, 8, 16, 32, 64)  # pymscclpp._SUPPORTED_WORLD_SIZES
PCIE_IPC_WORLD_SIZES = (2, 4, 8)
TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {
    9: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB},
    10: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB},
}
FI_STANDALONE_TOKENS = 2048  # ensure_workspace_initialized's max_token_num


def _major(box: Box) -> int | None:
    return int(box.sm) if box.sm is not None else None


def _mscclpp(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "--enable-mscclpp"):
        return "--enable-mscclpp not given"
    if box.tp not in MSCCLPP_WORLD_SIZES:
        return f"world size {box.tp} not 4 / 8 / 16 / 32 / 64"
    return None


def _v2_world_sizes(box: Box) -> tuple[int, ...]:
    """configs/custom_all_reduce_v2.py: the world sizes of the arch's tuned table (others: 2 to 16)."""
    if _major(box) == 9:
        return tuple(range(2, 9))
    if _major(box) == 10 and box.sm is not None and box.sm < 10.7:
        return (*range(2, 9), 16)
    return tuple(range(2, 17))


def _custom(box: Box, op: Op, s: Switches) -> str | None:
    if on(s, "--disable-custom-all-reduce"):
        return "--disable-custom-all-reduce given"
    if on(s, "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2") and box.nvlink and box.tp in _v2_world_sizes(box):
        if op.nbytes % 16:  # v2 (the default on CUDA): only where every pair is NVLink
            return "size not a multiple of 16 B"
        return None if op.nbytes <= CUSTOM_AR_V2_MAX else "above v2's 16 MiB (SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB)"
    if box.tp not in CUSTOM_AR_WORLD_SIZES:
        return f"world size {box.tp} not 2 / 4 / 6 / 8"
    if box.tp > 2 and not box.nvlink:
        return "off for more than two PCIe-only GPUs"
    if not box.p2p:
        return "needs P2P between every pair"
    if op.nbytes % 16:
        return "size not a multiple of 16 B"
    return None if op.nbytes <= CUSTOM_AR_BUFFER else "above its 8 MiB buffer"


def _nccl_symm(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "--enable-symm-mem"):
        return "--enable-symm-mem not given"
    if _mscclpp(box, op, s) is None or _custom(box, op, s) is None:
        return "MSCCL++ or custom all-reduce takes it"
    return None


def _fi_standalone(box: Box, op: Op, s: Switches) -> str | None:
    backend = s.get("--flashinfer-allreduce-fusion-backend", "")
    if _major(box) not in (9, 10):
        return f"not on this box: {sm_text(box)} (the fusion backend needs SM90 or SM10x)"
    if not on(s, "--flashinfer-allreduce-fusion-backend"):
        return (
            "--flashinfer-allreduce-fusion-backend not given (SGLang sets it itself for some MoE architectures: "
            "check the server's log)"
        )
    if backend == "cutedsl":
        return "cutedsl has no workspace for the standalone all-reduce"
    if op.dims != 2:
        return "only 2-D ops"
    return None if op.tokens <= FI_STANDALONE_TOKENS else f"T above its {FI_STANDALONE_TOKENS}-token workspace"


def _pcie_ipc(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"):
        return "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE not set"
    if box.tp not in PCIE_IPC_WORLD_SIZES:
        return f"world size {box.tp} not 2 / 4 / 8"
    if op.dtype != "bfloat16" or op.dims < 2:
        return f"{op.dims}-D {op.dtype}: only bf16 (>= 2-D) is tuned"
    cap = s.get("SGLANG_PCIE_IPC_MAX_NUMEL")
    if not cap or not str(cap).strip().isdigit() or int(cap) == 0:
        return None  # sized to the server's decode width x hidden: decode-sized ops only
    numel = op.nbytes // 2
    return None if numel <= int(cap) else f"{numel} elements > SGLANG_PCIE_IPC_MAX_NUMEL={cap}"


def _symm(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "--enable-torch-symm-mem"):
        return "--enable-torch-symm-mem not given"
    sizes = TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(_major(box) or 0)
    if sizes is None:
        return f"{sm_text(box)}: only SM9x / SM10x"
    if box.tp not in sizes:
        return f"world size {box.tp} not in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"
    if box.multicast is not True:
        return "the symmetric buffer has no multicast address (needs NVSwitch)" + (
            "" if box.multicast is False else "; unknown on this box"
        )
    if op.dtype != "bfloat16":
        return f"{op.dtype}: bf16 only"
    return None if op.nbytes < sizes[box.tp] else "above its buffer"


def sglang_fusion_fails(sm: float | None) -> str | None:
    """Why SGLang 0.5.23's FlashInfer all-reduce fusion cannot start on these GPUs (None: it can, or unknown)."""
    if sm is None or int(sm) in (9, 10):
        return None
    return f"raises at start-up on SM {sm:g} (FlashInfer allreduce fusion requires SM90 or SM10X)"


def _fusion(box: Box) -> str | None:
    return sglang_fusion_fails(box.sm)


def _flag_default(name: str, field: str) -> Default:
    return Default(name, "0", Cite(EXEC, "", rf"\b{field}: A\[[^]]*?\] = False"))


_DISPATCH = Cite(
    PS,
    "all_reduce",
    order=(
        r"should_use_pymscclpp_allreduce = \(",
        r"is_symmetric_memory_enabled\(\)",
        r"_can_use_flashinfer_allreduce\(input_\)",
        r"_resolve_outplace_all_reduce_method\(",
    ),
)
_RESOLVER = Cite(
    PS,
    "_resolve_outplace_all_reduce_method",
    r"not should_use_pymscclpp_allreduce\s+and self\.ca_comm\.should_custom_ar",
    order=(r'return "ca"', r'return "pcie_ipc"', r'return "qr"', r'return "pymscclpp"', r'return "torch_symm_mem"'),
)

SGLANG_0_5_23 = EngineTable(
    "SGLang",
    "sglang",
    "0.5.23",
    "0.5.23",
    _DISPATCH,
    (
        Rule(
            "NCCL symmetric memory",
            (Cite(PS, "all_reduce", r"not should_use_pymscclpp_allreduce\s+and not should_use_custom_allreduce"),),
            _nccl_symm,
            switch="--enable-symm-mem",
        ),
        Rule(
            "FlashInfer all-reduce",
            (
                Cite(FUSION, "can_use_flashinfer_allreduce", r"input_\.ndim != 2"),
                Cite(FUSION, "_resolve_backend", r"requires SM90 or SM10X"),
                Cite(FUSION, "ensure_workspace_initialized", r"max_token_num: int = 2048"),
                Cite(f"{SG}/bootstrap.py", "_set_all_reduce_flags", r"not uses_cutedsl_ar_fusion\(\)"),
            ),
            _fi_standalone,
            switch="--flashinfer-allreduce-fusion-backend",
        ),
        Rule(
            "MSCCL++",
            (
                Cite(f"{DC}/pymscclpp.py", "should_mscclpp_allreduce", r"world_size not in _SUPPORTED_WORLD_SIZES"),
                Cite(f"{DC}/pymscclpp.py", "", r"_SUPPORTED_WORLD_SIZES = \(4, 8, 16, 32, 64\)"),
                _RESOLVER,
            ),
            _mscclpp,
            switch="--enable-mscclpp",
        ),
        Rule(
            "custom all-reduce",
            (
                Cite(f"{DC}/custom_all_reduce.py", "should_custom_ar", r"inp_size <= self\.max_size"),
                Cite(f"{DC}/custom_all_reduce.py", "CustomAllreduce", r"_MAX_CAR_SIZE = 8192 \* 1024"),
                Cite(f"{DC}/custom_all_reduce.py", "CustomAllreduce", r"_SUPPORTED_WORLD_SIZES = \[2, 4, 6, 8\]"),
                Cite(
                    f"{DC}/custom_all_reduce_utils.py",
                    "can_use_custom_all_reduce_with_nvlink",
                    r"world_size > 2 and not full_nvlink",
                ),
                Cite(f"{DC}/custom_all_reduce.py", "dispatch_custom_allreduce", r"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2"),
                Cite(f"{DC}/custom_all_reduce_v2.py", "can_use_custom_all_reduce_v2", r"return full_nvlink is True"),
                Cite(f"{DC}/custom_all_reduce_v2.py", "should_custom_ar", r"inp_size % 16 != 0"),
                Cite("sglang/srt/environ.py", "", r"SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB = EnvInt\(16 \* 1024\)"),
                Cite(
                    f"{DC}/configs/custom_all_reduce_v2.py",
                    "_get_all_reduce_configs",
                    r"return \{world_size: default for world_size in range\(2, 17\)\}",
                ),
            ),
            _custom,
        ),
        Rule(
            "FlashInfer PCIe IPC",
            (
                Cite(f"{DC}/pcie_ipc_ar.py", "should_pcie_ipc_ar", r"inp\.dtype is not torch\.bfloat16"),
                Cite(f"{DC}/pcie_ipc_ar.py", "", r"_SUPPORTED_WORLD_SIZES = \(2, 4, 8\)"),
                Cite("sglang/srt/environ.py", "", r"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE = EnvBool\(False\)"),
            ),
            _pcie_ipc,
            impl="flashinfer-pcie-ipc",
            switch="SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
        ),
        Rule(
            "quick all-reduce",
            (Cite(PS, "_resolve_outplace_all_reduce_method", r"qr_comm\.should_quick_allreduce"),),
            not_here("ROCm only"),
        ),
        Rule(
            "torch symm-mem",
            (
                Cite(f"{DC}/torch_symm_mem.py", "should_torch_symm_mem_allreduce", r"inp\.dtype != self\.dtype"),
                Cite(f"{DC}/torch_symm_mem.py", "__init__", r"multicast_ptr == 0"),
                Cite(f"{DC}/all_reduce_utils.py", "", r"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = \{"),
            ),
            _symm,
            switch="--enable-torch-symm-mem",
        ),
        Rule("NCCL", (Cite(PS, "_all_reduce_in_place", r"pynccl_comm"),), always, impl="nccl"),
    ),
    (
        _flag_default("--enable-symm-mem", "enable_symm_mem"),
        _flag_default("--enable-mscclpp", "enable_mscclpp"),
        _flag_default("--enable-torch-symm-mem", "enable_torch_symm_mem"),
        _flag_default("--disable-custom-all-reduce", "disable_custom_all_reduce"),
        Default(
            "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2",
            "1",
            Cite("sglang/srt/environ.py", "", r"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2 = EnvBool\(True\)"),
        ),
    ),
    (
        Flag(
            "--flashinfer-allreduce-fusion-backend",
            Cite(EXEC, "", r'Literal\["auto", "trtllm", "mnnvl", "cutedsl"\]'),
            _fusion,
        ),
    ),
    (
        Cite(
            "sglang/srt/arg_groups/memory_hook.py",
            "handle_gpu_memory_settings",
            order=(
                r"gpu_mem < 20 \* 1024",
                r"max_bs = 8\b",
                r"gpu_mem < 35 \* 1024",
                r"max_bs = 48",
                r"max_bs = 160",
                r"gpu_mem < 60 \* 1024",
                r"max_bs = 32",
                r"max_bs = 160",
                r"gpu_mem < 90 \* 1024",
                r"max_bs = 256",
                r"max_bs = 512",
                r"gpu_mem < 160 \* 1024",
                r"max_bs = 256",
                r"max_bs = 512",
                r"max_bs = 512",
                r"max_bs = 160",
            ),
        ),
    ),
)
