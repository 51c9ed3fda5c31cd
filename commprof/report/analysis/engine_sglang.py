"""SGLang 0.5.23's all-reduce dispatch: GroupCoordinator.all_reduce tries NCCL symmetric memory and FlashInfer's
standalone all-reduce, then _resolve_outplace_all_reduce_method, where MSCCL++ goes before custom all-reduce and
PCIe IPC (both guarded by `not should_use_pymscclpp_allreduce`). SGLang turns FlashInfer's all-reduce fusion on by
itself for some architectures (engine_sglang_fusion), so the served model's architecture is part of what the
dispatch reads. Each gate read from the released wheel. Pure."""

from __future__ import annotations

from commprof.planner.engine_sizes import sglang_default_max_bs
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
from commprof.report.analysis.engine_sglang_fusion import (
    A2A_BACKEND,
    AUTO_ENABLE,
    ENFORCE_DISABLE,
    FLASHINFER_ALL_REDUCE,
    FUSION_BACKEND,
    auto_enable,
    fusion_fails,
)

SG = "sglang/srt/distributed"
DC = f"{SG}/device_communicators"
PS = f"{SG}/parallel_state.py"
EXEC = "sglang/srt/arg_groups/fields/exec_.py"
ENVIRON = "sglang/srt/environ.py"
V2_CONFIGS = f"{DC}/configs/custom_all_reduce_v2.py"

CUSTOM_AR_BUFFER = 8192 * 1024  # CustomAllreduce._MAX_CAR_SIZE (CUDA)
CUSTOM_AR_V2_MAX_KB = 16 * 1024  # SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB's default: caps every v2 threshold
CUSTOM_AR_V2_MAX = CUSTOM_AR_V2_MAX_KB * 1024
CUSTOM_AR_WORLD_SIZES = [2, 4, 6, 8]
MSCCLPP_WORLD_SIZES = (4, 8, 16, 32, 64)  # pymscclpp._SUPPORTED_WORLD_SIZES
PCIE_IPC_WORLD_SIZES = (2, 4, 8)
TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {
    9: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB},
    10: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB},
}


def _major(box: Box) -> int | None:
    return int(box.sm) if box.sm is not None else None


def _mscclpp(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "--enable-mscclpp"):
        return "--enable-mscclpp not given"
    if box.tp not in MSCCLPP_WORLD_SIZES:
        return f"world size {box.tp} not 4 / 8 / 16 / 32 / 64"
    return None


def _v2_world_sizes(box: Box) -> tuple[int, ...]:
    """configs/custom_all_reduce_v2.py _get_all_reduce_configs: the world sizes of the arch's tuned table (SM90:
    2-8; SM100 and SM107, every SM10x: 2-8 and 16), else the default config's 2 to 16."""
    if _major(box) == 9:
        return tuple(range(2, 9))
    if _major(box) == 10:
        return (*range(2, 9), 16)
    return tuple(range(2, 17))


def _custom(box: Box, op: Op, s: Switches) -> str | None:
    if on(s, "--disable-custom-all-reduce"):
        return "--disable-custom-all-reduce given"
    v2 = on(s, "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2") and box.tp in _v2_world_sizes(box)
    # v2 (the default on CUDA): only where every pair is NVLink, or across nodes in one NVLink clique.
    if v2 and (box.multicast is True if box.nodes > 1 else box.nvlink):
        if op.nbytes % 16:
            return "size not a multiple of 16 B"
        return None if op.nbytes <= CUSTOM_AR_V2_MAX else "above v2's 16 MiB (SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB)"
    if box.nodes > 1:
        return f"the group spans {box.nodes} nodes (v2 needs one NVLink clique)"
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


def decode_rows(box: Box) -> tuple[int, str]:
    """The rows of SGLang's widest decode reduction (base_runner._widest_decode_rows: the largest captured batch x
    tokens per request), with the default max_bs for the GPU's memory, and how it was read."""
    max_bs = sglang_default_max_bs(box.gpu_mem_gib, box.tp)
    memory = (
        f"{box.gpu_mem_gib:g} GiB GPUs" if box.gpu_mem_gib is not None else "GPU memory unknown: 90-160 GiB assumed"
    )
    return max_bs * box.tokens_per_request, (
        f"the default max_bs {max_bs} ({memory}, TP {box.tp}) x {box.tokens_per_request} token(s) per request"
    )


def _pcie_ipc(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"):
        return "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE not set"
    if box.tp not in PCIE_IPC_WORLD_SIZES:
        return f"world size {box.tp} not 2 / 4 / 8"
    if op.dtype != "bfloat16" or op.dims < 2:
        return f"{op.dims}-D {op.dtype}: only bf16 (>= 2-D) is tuned"
    numel = op.nbytes // 2
    cap = str(s.get("SGLANG_PCIE_IPC_MAX_NUMEL", "")).strip()
    if cap.isdigit() and int(cap) > 0:
        return None if numel <= int(cap) else f"{numel} elements > SGLANG_PCIE_IPC_MAX_NUMEL={cap}"
    # Unset: the workspace holds the widest decode reduction, sized on the model's hidden width.
    rows, how = decode_rows(box)
    limit = rows * (op.model_hidden or op.hidden)
    return None if numel <= limit else f"{numel} elements above its decode-width workspace ({rows} rows: {how})"


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


def _flag_default(name: str, field: str, value: str = "0", literal: object = False, scope: str = "ExecComm") -> Default:
    return Default(name, value, Cite(EXEC, scope, constant=field, value=literal))


def _env(name: str, literal: object) -> Cite:
    return Cite(ENVIRON, "Envs", constant=name, value=literal)


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
        FLASHINFER_ALL_REDUCE,
        Rule(
            "MSCCL++",
            (
                Cite(f"{DC}/pymscclpp.py", "should_mscclpp_allreduce", r"world_size not in _SUPPORTED_WORLD_SIZES"),
                Cite(f"{DC}/pymscclpp.py", "", constant="_SUPPORTED_WORLD_SIZES", value=MSCCLPP_WORLD_SIZES),
                _RESOLVER,
            ),
            _mscclpp,
            switch="--enable-mscclpp",
        ),
        Rule(
            "custom all-reduce",
            (
                Cite(f"{DC}/custom_all_reduce.py", "should_custom_ar", r"inp_size <= self\.max_size"),
                Cite(f"{DC}/custom_all_reduce.py", "CustomAllreduce", constant="_MAX_CAR_SIZE", value=CUSTOM_AR_BUFFER),
                Cite(
                    f"{DC}/custom_all_reduce.py",
                    "CustomAllreduce",
                    constant="_SUPPORTED_WORLD_SIZES",
                    value=CUSTOM_AR_WORLD_SIZES,
                ),
                Cite(
                    f"{DC}/custom_all_reduce_utils.py",
                    "can_use_custom_all_reduce_with_nvlink",
                    order=(r"in_the_same_node_as", r"world_size > 2 and not full_nvlink"),
                ),
                Cite(f"{DC}/custom_all_reduce.py", "dispatch_custom_allreduce", r"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2"),
                Cite(
                    f"{DC}/custom_all_reduce_v2.py",
                    "can_use_custom_all_reduce_v2",
                    order=(r"in_the_same_node_as", r"is_one_nvlink_clique", r"return full_nvlink is True"),
                ),
                Cite(f"{DC}/custom_all_reduce_v2.py", "should_custom_ar", r"inp_size % 16 != 0"),
                _env("SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB", CUSTOM_AR_V2_MAX_KB),
                Cite(
                    V2_CONFIGS,
                    "_get_all_reduce_configs",
                    order=(
                        r"cuda_major == 9",
                        r"_sm90_configs",
                        r"cuda_major == 10",
                        r"cuda_minor >= 7",
                        r"_sm107_configs",
                        r"_sm100_configs",
                        r"range\(2, 17\)",
                    ),
                ),
                Cite(V2_CONFIGS, "_sm90_configs", order=(r"\b2: config\(", r"\b8: config\(")),
                Cite(V2_CONFIGS, "_sm100_configs", order=(r"\b2: config\(", r"\b8: config\(", r"\b16: config\(")),
                Cite(V2_CONFIGS, "_sm107_configs", order=(r"\b2: config\(", r"\b8: config\(", r"\b16: config\(")),
            ),
            _custom,
        ),
        Rule(
            "FlashInfer PCIe IPC",
            (
                Cite(f"{DC}/pcie_ipc_ar.py", "should_pcie_ipc_ar", r"inp\.dtype is not torch\.bfloat16"),
                Cite(f"{DC}/pcie_ipc_ar.py", "should_pcie_ipc_ar", r"inp\.numel\(\) > self\.max_numel"),
                Cite(f"{DC}/pcie_ipc_ar.py", "_ensure_workspace", r"max_numel = width \* hidden"),
                Cite(
                    "sglang/srt/model_executor/runner/base_runner.py",
                    "_widest_decode_rows",
                    r"max\(capture_bs\) \* tokens_per_req",
                ),
                Cite(f"{DC}/pcie_ipc_ar.py", "", constant="_SUPPORTED_WORLD_SIZES", value=PCIE_IPC_WORLD_SIZES),
                _env("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", False),
                _env("SGLANG_PCIE_IPC_MAX_NUMEL", 0),
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
                Cite(
                    f"{DC}/all_reduce_utils.py",
                    "",
                    constant="TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",
                    value=TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES,
                ),
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
        _flag_default(ENFORCE_DISABLE, "enforce_disable_flashinfer_allreduce_fusion"),
        _flag_default(A2A_BACKEND, "moe_a2a_backend", "none", "none", "ExecMoe"),
        Default(
            FUSION_BACKEND,
            "",
            Cite(EXEC, "ExecComm", constant="flashinfer_allreduce_fusion_backend", value=None),
            auto_enable,
            AUTO_ENABLE,
        ),
        Default("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", "1", _env("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", True)),
    ),
    (
        Flag(
            FUSION_BACKEND,
            Cite(EXEC, "", r'Literal\["auto", "trtllm", "mnnvl", "cutedsl"\]'),
            fusion_fails,
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
