"""vLLM 0.33 and 0.34's all-reduce dispatch (CudaCommunicator.all_reduce, unchanged between them), each gate read
from the released wheel's file and function, with vLLM's defaults. Pure."""

from __future__ import annotations

from commprof.report.analysis.engine_facts import (
    Box,
    Cite,
    Default,
    EngineTable,
    Flag,
    KiB,
    MiB,
    Op,
    Rule,
    Switches,
    always,
    not_here,
    on,
    sm_int,
    sm_key,
    sm_text,
)

DC = "vllm/distributed/device_communicators"
UTILS = f"{DC}/all_reduce_utils.py"
ENVS = "vllm/envs.py"

# all_reduce_utils.py: per capability and world size, the sizes each path takes when torch symm-mem is live.
CUSTOM_ALL_REDUCE_MAX_SIZES = {
    "9.0": {2: 64 * MiB, 4: 32 * MiB, 6: MiB // 2, 8: MiB // 4},
    "10.0": {2: 2 * MiB, 4: 2 * MiB, 6: 1 * MiB, 8: 1 * MiB},
    "10.3": {2: 4 * MiB, 4: 4 * MiB, 6: 8 * MiB, 8: 4 * MiB},
    "10.7": {2: 4 * MiB, 4: 4 * MiB, 6: 8 * MiB, 8: 4 * MiB},
}
SYMM_MEM_ALL_REDUCE_MAX_SIZES = {
    "9.0": {2: 64 * MiB, 4: 32 * MiB, 6: 64 * MiB, 8: 64 * MiB},
    "10.0": {2: 8 * MiB, 4: 32 * MiB, 6: 128 * MiB, 8: 128 * MiB},
    "10.3": {2: 4 * MiB, 4: 32 * MiB, 6: 32 * MiB, 8: 64 * MiB},
    "10.7": {2: 4 * MiB, 4: 32 * MiB, 6: 32 * MiB, 8: 64 * MiB},
}
FI_MNNVL_ALLREDUCE_MAX_SIZE_MB = {
    (100, 8, 1): 128,
    (100, 8, 2): 128,
    (103, 4, 1): 80,
    (103, 8, 1): 128,
    (103, 8, 2): 128,
    (103, 16, 4): 8,
}
NCCL_SYMM_RANGES = {4: (16 * KiB, 512 * KiB), 8: (16 * KiB, 128 * KiB)}
# compilation/passes/fusion/allreduce_rms_fusion.py: FlashInfer all-reduce's cap, MB, per capability and TP.
FI_ALLREDUCE_FUSION_MAX_SIZE_MB = {
    90: {2: 64, 4: 2, 8: 0.5},
    100: {2: 64, 4: 32, 8: 1, 16: 64},
    103: {2: 64, 4: 64, 8: 4, 16: 64},
    107: {2: 64, 4: 64, 8: 2},
}
CUSTOM_AR_BUFFER = 8192 * 1024  # CustomAllreduce.__init__ max_size
CUSTOM_AR_WORLD_SIZES = [2, 4, 6, 8, 16]
PCIE_IPC_WORLD_SIZES = (2, 4, 8)
PCIE_IPC_CAPTURE = 512  # the default largest CUDA-graph capture size (1024 on the SM100 family)


def _const(file: str, name: str, function: str = "") -> Cite:
    """A constant the table mirrors: the check evaluates `name`'s literal in the wheel against ours."""
    return Cite(file, function, rf"\b{name}\b\s*(:[^=]*)?=")


def _symm_live(box: Box) -> str | None:
    """Why vLLM's torch symm-mem communicator is off on this box (SymmMemCommunicator.__init__), or None."""
    key = sm_key(box)
    if key not in SYMM_MEM_ALL_REDUCE_MAX_SIZES:
        return f"{sm_text(box)}: no SYMM_MEM_ALL_REDUCE_MAX_SIZES entry"
    if box.tp not in SYMM_MEM_ALL_REDUCE_MAX_SIZES[key]:
        return f"world size {box.tp} not in SYMM_MEM_ALL_REDUCE_MAX_SIZES[{key!r}]"
    if box.multicast is not True:
        return "the symmetric buffer has no multicast address (needs NVSwitch)" + (
            "" if box.multicast is False else "; unknown on this box"
        )
    return None


def _symm(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "VLLM_ALLREDUCE_USE_SYMM_MEM"):
        return "VLLM_ALLREDUCE_USE_SYMM_MEM=0"
    why = _symm_live(box)
    if why:
        return why
    if op.dtype != "bfloat16":
        return f"{op.dtype}: its buffer is bf16 only"
    cap = SYMM_MEM_ALL_REDUCE_MAX_SIZES[sm_key(box)][box.tp]
    return None if op.nbytes <= cap and op.nbytes % 4 == 0 else f"above its {cap // MiB} MiB buffer"


def _fi_cap(box: Box) -> int | None:
    """FlashInfer all-reduce's largest input (FlashInferAllReduce.__init__): the MNNVL table where its backend is
    MNNVL (one node with multicast, or Blackwell across nodes), else FI_ALLREDUCE_FUSION_MAX_SIZE_MB."""
    cc = sm_int(box)
    default = FI_ALLREDUCE_FUSION_MAX_SIZE_MB.get(cc, {}).get(box.tp) if cc is not None else None
    if default is None:
        return None
    mnnvl = box.multicast is True or box.nodes > 1
    tuned = FI_MNNVL_ALLREDUCE_MAX_SIZE_MB.get((cc, box.tp, box.nodes)) if mnnvl else None
    return int((tuned if tuned is not None else default) * MiB)


def _fi(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "VLLM_ALLREDUCE_USE_FLASHINFER"):
        return "VLLM_ALLREDUCE_USE_FLASHINFER=0"
    cap = _fi_cap(box)
    if cap is None:
        return f"{sm_text(box)}, TP {box.tp}: no FI_ALLREDUCE_FUSION_MAX_SIZE_MB entry (disabled)"
    if box.nodes > 1 and (sm_int(box) or 0) < 100:
        return "several nodes need MNNVL on Blackwell (_resolve_fi_ar_backend)"
    if box.multicast is not True and not box.p2p:
        return "without multicast it falls back to FlashInfer's trtllm IPC workspace, which needs P2P"
    if op.dims != 2 or op.dtype not in ("float16", "bfloat16", "float32"):
        return f"{op.dims}-D {op.dtype}: takes 2-D fp16 / bf16 / fp32"
    return None if op.nbytes <= cap else f"above its {cap / MiB:g} MiB workspace"


def _nccl_symm(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "VLLM_USE_NCCL_SYMM_MEM"):
        return "VLLM_USE_NCCL_SYMM_MEM=0"
    if _fi(box, op, s) is None:
        return "FlashInfer all-reduce takes it (checked first)"
    if box.tp < 4:
        return "world size below 4"
    if box.tp in NCCL_SYMM_RANGES:
        low, high = NCCL_SYMM_RANGES[box.tp]
        return None if op.nbytes <= low or op.nbytes >= high else "custom all-reduce's preferred range"
    return None if box.tp > 8 else "no range for this world size"


def _pcie_ipc(box: Box, op: Op, s: Switches) -> str | None:
    if not on(s, "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC"):
        return "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=0"
    if box.tp not in PCIE_IPC_WORLD_SIZES or box.nodes > 1:
        return f"world size {box.tp} on {box.nodes} node(s): one node, 2 / 4 / 8"
    model_dtype = op.model_dtype or op.dtype
    if model_dtype not in ("bfloat16", "float16") or op.dtype != model_dtype:
        return f"{op.dtype} (model {model_dtype}): only bf16 / fp16 equal to the model's dtype"
    if op.dims != 2 or op.hidden != (op.model_hidden or op.hidden):
        return "only 2-D ops at the model's hidden width"
    capture = 1024 if (sm_int(box) or 0) // 10 == 10 else PCIE_IPC_CAPTURE
    return None if op.tokens <= capture else f"T {op.tokens} above the largest capture size ({capture})"


def _custom(box: Box, op: Op, s: Switches) -> str | None:
    if box.tp not in CUSTOM_AR_WORLD_SIZES or box.tp > 8:
        return f"world size {box.tp} not 2 / 4 / 6 / 8"
    if box.tp > 2 and not box.nvlink:
        return "off for more than two PCIe-only GPUs"
    if not box.p2p:
        return "needs P2P between every pair"
    cap = CUSTOM_AR_BUFFER
    key = sm_key(box)
    symm_live = on(s, "VLLM_ALLREDUCE_USE_SYMM_MEM") and _symm_live(box) is None
    if symm_live and box.tp in CUSTOM_ALL_REDUCE_MAX_SIZES.get(key, {}):
        cap = min(CUSTOM_ALL_REDUCE_MAX_SIZES[key][box.tp], cap)
    if op.nbytes % 16:
        return "size not a multiple of 16 B"
    return None if op.nbytes < cap else f"at or above its {cap / MiB:g} MiB cap"


def _fusion_inert(box: Box) -> str | None:
    """enable_allreduce_rms_fusion: fuse_allreduce_rms acts only on SM90 and the SM100 family."""
    cc = sm_int(box)
    if cc is None or cc == 90 or cc // 10 == 10:
        return None
    return (
        f"fuse_allreduce_rms is never on for {sm_text(box)} (only SM90 and the SM100 family): setting it does nothing"
    )


def vllm_table(version: str, wheel: str) -> EngineTable:
    """vLLM's dispatch as read in the `wheel` release (the 0.33 and 0.34 wheels hold the same)."""
    dispatch = Cite(
        f"{DC}/cuda_communicator.py",
        "all_reduce",
        order=(
            r"fi_ar_comm\.should_use_fi_ar",
            r"should_nccl_symm_mem_allreduce",
            r"qr_comm\.should_quick_allreduce",
            r"fi_pcie_ipc_ar_comm\.should_use",
            r"if use_fi_ar:",
            r"aiter_ar_comm\.should_custom_ar",
            r"ca_comm\.should_custom_ar",
            r"symm_mem_comm\.should_use_symm_mem",
            r"pynccl_comm\.all_reduce",
        ),
    )
    fi = f"{DC}/flashinfer_all_reduce.py"
    pcie = f"{DC}/flashinfer_pcie_ipc_all_reduce.py"
    custom = f"{DC}/custom_all_reduce.py"
    symm = f"{DC}/symm_mem.py"
    rules = (
        Rule(
            "NCCL symmetric memory",
            (
                Cite(UTILS, "should_nccl_symm_mem_allreduce", r"min_world_size"),
                _const(UTILS, "NCCL_SYMM_MEM_ALL_REDUCE_CONFIG"),
            ),
            _nccl_symm,
            switch="VLLM_USE_NCCL_SYMM_MEM",
        ),
        Rule("quick-reduce", (Cite(f"{DC}/cuda_communicator.py", "__init__", r"is_rocm\(\)"),), not_here("ROCm only")),
        Rule(
            "FlashInfer PCIe IPC",
            (
                Cite(pcie, "should_use", r"inp\.dim\(\) == 2.*\n.*shape\[1\] == self\.hidden_dim.*\n.*self\.dtype"),
                Cite(pcie, "setup", r"dtype not in _SUPPORTED_DTYPES"),
                _const(pcie, "_SUPPORTED_WORLD_SIZES"),
                Cite(pcie, "__init__", r"in_the_same_node_as"),
            ),
            _pcie_ipc,
            impl="flashinfer-pcie-ipc",
            switch="VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC",
        ),
        Rule(
            "FlashInfer all-reduce",
            (
                Cite(fi, "should_use_fi_ar", r"len\(input_tensor\.shape\) != 2"),
                Cite(fi, "__init__", r"default_fi_allreduce_fusion_max_size_mb"),
                Cite(fi, "_resolve_fi_ar_backend", r'backend = "mnnvl"\s+allow_trtllm_fallback = True'),
                Cite(fi, "get_fi_ar_workspace", r'backend = "trtllm"'),
                _const("vllm/compilation/passes/fusion/allreduce_rms_fusion.py", "FI_ALLREDUCE_FUSION_MAX_SIZE_MB"),
                _const(UTILS, "FI_MNNVL_ALLREDUCE_MAX_SIZE_MB"),
            ),
            _fi,
            switch="VLLM_ALLREDUCE_USE_FLASHINFER",
        ),
        Rule(
            "AITER custom all-reduce",
            (Cite(f"{DC}/aiter_custom_all_reduce.py", "AiterCustomAllreduce"),),
            not_here("ROCm only: rocm_aiter_ops.is_custom_all_reduce_enabled"),
        ),
        Rule(
            "custom all-reduce",
            (
                Cite(custom, "should_custom_ar", r"inp_size < self\.max_size"),
                Cite(custom, "__init__", r"min\(\s*CUSTOM_ALL_REDUCE_MAX_SIZES"),
                Cite(custom, "__init__", r"world_size > 2 and not fully_connected"),
                _const(custom, "_SUPPORTED_WORLD_SIZES", "CustomAllreduce"),
                _const(UTILS, "CUSTOM_ALL_REDUCE_MAX_SIZES"),
            ),
            _custom,
        ),
        Rule(
            "torch symm-mem",
            (
                Cite(symm, "should_use_symm_mem", r"inp\.dtype != self\.dtype"),
                Cite(symm, "__init__", r"multicast_ptr == 0"),
                _const(UTILS, "SYMM_MEM_ALL_REDUCE_MAX_SIZES"),
            ),
            _symm,
            switch="VLLM_ALLREDUCE_USE_SYMM_MEM",
        ),
        Rule("NCCL", (Cite(f"{DC}/pynccl.py", "all_reduce"),), always, impl="nccl"),
    )
    defaults = tuple(
        Default(name, value, Cite(ENVS, "", rf'"{name}", "{value}"'))
        for name, value in (
            ("VLLM_ALLREDUCE_USE_SYMM_MEM", "1"),
            ("VLLM_ALLREDUCE_USE_FLASHINFER", "1"),
            ("VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC", "0"),
            ("VLLM_USE_NCCL_SYMM_MEM", "0"),
        )
    )
    flags = (
        Flag(
            "fuse_allreduce_rms",
            Cite(
                "vllm/config/vllm.py",
                "enable_allreduce_rms_fusion",
                r"is_device_capability_family\(100\)\s*or current_platform\.is_device_capability\(90\)",
            ),
            _fusion_inert,
        ),
    )
    facts = (
        Cite(
            "vllm/config/vllm.py",
            "_set_cudagraph_sizes",
            r"1024 if current_platform\.is_device_capability_family\(100\) else 512",
        ),
    )
    return EngineTable("vLLM", "vllm", version, wheel, dispatch, rules, defaults, flags, facts)


VLLM_0_33 = vllm_table("0.33", "0.33.0")
VLLM_0_34 = vllm_table("0.34", "0.34.0")
