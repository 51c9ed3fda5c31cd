"""vLLM 0.33 and 0.34's all-reduce dispatch (CudaCommunicator.all_reduce, in the same order in both), each gate read
from the released wheel's file and function, with vLLM's defaults. 0.34 adds three gates: FlashInfer all-reduce
takes only rows of whole 16-byte vectors, HiSparse moves it to the trtllm backend (off across nodes), and custom
all-reduce refuses a group that spans nodes. Pure."""

from __future__ import annotations

from commprof.planner.engine_sizes import vllm_graphs
from commprof.planner.models import DTYPE_BYTES
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
    version_numbers,
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


HISPARSE = "attention_config.hisparse_config"  # set (or inferred from a HiSparseConnector): HiSparse is on


def _const(file: str, name: str, value: object, function: str = "") -> Cite:
    """A constant the table mirrors: the check evaluates `name`'s literal in the wheel against `value`."""
    return Cite(file, function, constant=name, value=value)


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


def _fi_cap(box: Box, mnnvl_allowed: bool = True) -> int | None:
    """FlashInfer all-reduce's largest input (FlashInferAllReduce.__init__): the MNNVL table where its backend is
    MNNVL (one node with multicast, or Blackwell across nodes), else FI_ALLREDUCE_FUSION_MAX_SIZE_MB."""
    cc = sm_int(box)
    default = FI_ALLREDUCE_FUSION_MAX_SIZE_MB.get(cc, {}).get(box.tp) if cc is not None else None
    if default is None:
        return None
    mnnvl = mnnvl_allowed and (box.multicast is True or box.nodes > 1)
    tuned = FI_MNNVL_ALLREDUCE_MAX_SIZE_MB.get((cc, box.tp, box.nodes)) if mnnvl else None
    return int((tuned if tuned is not None else default) * MiB)


def _fi_check(row_vectors: bool, hisparse: bool):
    """FlashInferAllReduce's gates; 0.34 adds `row_vectors` (should_use_fi_ar: hidden x element size a whole number
    of 16-byte vectors) and `hisparse` (_resolve_fi_ar_backend: trtllm on one node, off across nodes)."""

    def check(box: Box, op: Op, s: Switches) -> str | None:
        if not on(s, "VLLM_ALLREDUCE_USE_FLASHINFER"):
            return "VLLM_ALLREDUCE_USE_FLASHINFER=0"
        sparse = hisparse and on(s, HISPARSE)
        cap = _fi_cap(box, mnnvl_allowed=not sparse)
        if cap is None:
            return f"{sm_text(box)}, TP {box.tp}: no FI_ALLREDUCE_FUSION_MAX_SIZE_MB entry (disabled)"
        if sparse and box.nodes > 1:
            return "HiSparse across nodes: off (mnnvl can crash with HiSparse, trtllm is one node only)"
        if box.nodes > 1 and (sm_int(box) or 0) < 100:
            return "several nodes need MNNVL on Blackwell (_resolve_fi_ar_backend)"
        if sparse and not box.p2p:
            return "HiSparse runs it on the trtllm IPC workspace, which needs P2P"
        if box.multicast is not True and not box.p2p:
            return "without multicast it falls back to FlashInfer's trtllm IPC workspace, which needs P2P"
        if op.dims != 2 or op.dtype not in ("float16", "bfloat16", "float32"):
            return f"{op.dims}-D {op.dtype}: takes 2-D fp16 / bf16 / fp32"
        if op.nbytes > cap:
            return f"above its {cap / MiB:g} MiB workspace"
        element = DTYPE_BYTES.get(op.dtype, 2)
        if row_vectors and op.hidden * element % 16:
            return f"a row of {op.hidden} x {element} B is not whole 16-byte vectors"
        return None

    return check


def _nccl_symm_check(fi):
    def check(box: Box, op: Op, s: Switches) -> str | None:
        if not on(s, "VLLM_USE_NCCL_SYMM_MEM"):
            return "VLLM_USE_NCCL_SYMM_MEM=0"
        if fi(box, op, s) is None:
            return "FlashInfer all-reduce takes it (checked first)"
        if box.tp < 4:
            return "world size below 4"
        if box.tp in NCCL_SYMM_RANGES:
            low, high = NCCL_SYMM_RANGES[box.tp]
            return None if op.nbytes <= low or op.nbytes >= high else "custom all-reduce's preferred range"
        return None if box.tp > 8 else "no range for this world size"

    return check


def _pcie_ipc_check(release: str):
    """FlashInfer PCIe IPC up to the largest capture size of `release` (setup() prepares the capture sizes:
    commprof.planner.engine_sizes.vllm_graphs; 0.34's SM100 family captures up to 8192 tokens by default)."""

    def check(box: Box, op: Op, s: Switches) -> str | None:
        why = _pcie_ipc(box, op, s)
        if why is not None:
            return why
        capture = vllm_graphs(release, (sm_int(box) or 0) // 10 == 10, box.tokens_per_request).largest
        return None if op.tokens <= capture else f"T {op.tokens} above the largest capture size ({capture})"

    return check


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
    return None


def _custom_check(mnnvl_only_refused: bool):
    """CustomAllreduce across nodes: 0.33 keeps it only for two ranks on MNNVL (Blackwell with multicast; no fully
    connected check spans nodes), 0.34 never (should_custom_ar refuses mnnvl_only)."""

    def check(box: Box, op: Op, s: Switches) -> str | None:
        if box.nodes > 1:
            if mnnvl_only_refused:
                return f"the group spans {box.nodes} nodes (mnnvl_only: all-gather / reduce-scatter only)"
            if (sm_int(box) or 0) < 100 or box.multicast is not True:
                return f"the group spans {box.nodes} nodes without MNNVL multicast"
            if box.tp != 2:
                return f"across nodes only two ranks (world size {box.tp}, not fully connected)"
        return _custom(box, op, s)

    return check


def _custom(box: Box, op: Op, s: Switches) -> str | None:
    if box.tp not in CUSTOM_AR_WORLD_SIZES or box.tp > 8:
        return f"world size {box.tp} not 2 / 4 / 6 / 8"
    if box.nodes == 1 and box.tp > 2 and not box.nvlink:
        return "off for more than two PCIe-only GPUs"
    if box.nodes == 1 and not box.p2p:
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


NCCL_SYMM_MEM_ALL_REDUCE_CONFIG = {
    "min_world_size": 4,
    "custom_ar_preferred_ranges": NCCL_SYMM_RANGES,
    "always_use_above_world_size": 8,
}


def vllm_table(version: str, wheel: str) -> EngineTable:
    """vLLM's dispatch as read in the `wheel` release; from 0.34 with its three new gates."""
    v34 = version_numbers(version) >= (0, 34)
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
    fi_check = _fi_check(row_vectors=v34, hisparse=v34)
    fi_cites = (
        Cite(fi, "should_use_fi_ar", r"len\(input_tensor\.shape\) != 2"),
        Cite(fi, "__init__", r"default_fi_allreduce_fusion_max_size_mb"),
        Cite(fi, "_resolve_fi_ar_backend", r'backend = "mnnvl"\s+allow_trtllm_fallback = True'),
        Cite(fi, "get_fi_ar_workspace", r'backend = "trtllm"'),
        _const(
            "vllm/compilation/passes/fusion/allreduce_rms_fusion.py",
            "FI_ALLREDUCE_FUSION_MAX_SIZE_MB",
            FI_ALLREDUCE_FUSION_MAX_SIZE_MB,
        ),
        _const(UTILS, "FI_MNNVL_ALLREDUCE_MAX_SIZE_MB", FI_MNNVL_ALLREDUCE_MAX_SIZE_MB),
    )
    custom_cites = (
        Cite(custom, "should_custom_ar", r"inp_size < self\.max_size"),
        Cite(custom, "__init__", r"min\(\s*CUSTOM_ALL_REDUCE_MAX_SIZES"),
        Cite(custom, "__init__", r"same_node and world_size > 2 and not fully_connected"),
        Cite(custom, "__init__", r"not same_node and not self\.mnnvl_multicast_ptr"),
        _const(custom, "_SUPPORTED_WORLD_SIZES", CUSTOM_AR_WORLD_SIZES, "CustomAllreduce"),
        _const(UTILS, "CUSTOM_ALL_REDUCE_MAX_SIZES", CUSTOM_ALL_REDUCE_MAX_SIZES),
    )
    if v34:
        fi_cites += (
            Cite(fi, "should_use_fi_ar", r"hidden_dim \* element_size % 16 != 0"),
            Cite(fi, "_resolve_fi_ar_backend", order=(r"hisparse_config is not None", r'return "trtllm", False')),
            Cite("vllm/config/attention.py", "AttentionConfig", constant="hisparse_config", value=None),
        )
        custom_cites += (Cite(custom, "should_custom_ar", r"self\.disabled or self\.mnnvl_only"),)
    else:
        custom_cites += (Cite(custom, "should_custom_ar", r"self\.world_size == 2 or self\.fully_connected"),)
    rules = (
        Rule(
            "NCCL symmetric memory",
            (
                Cite(UTILS, "should_nccl_symm_mem_allreduce", r"min_world_size"),
                _const(UTILS, "NCCL_SYMM_MEM_ALL_REDUCE_CONFIG", NCCL_SYMM_MEM_ALL_REDUCE_CONFIG),
            ),
            _nccl_symm_check(fi_check),
            switch="VLLM_USE_NCCL_SYMM_MEM",
        ),
        Rule("quick-reduce", (Cite(f"{DC}/cuda_communicator.py", "__init__", r"is_rocm\(\)"),), not_here("ROCm only")),
        Rule(
            "FlashInfer PCIe IPC",
            (
                Cite(pcie, "should_use", r"inp\.dim\(\) == 2.*\n.*shape\[1\] == self\.hidden_dim.*\n.*self\.dtype"),
                Cite(pcie, "setup", r"dtype not in _SUPPORTED_DTYPES"),
                _const(pcie, "_SUPPORTED_WORLD_SIZES", PCIE_IPC_WORLD_SIZES),
                Cite(pcie, "__init__", r"in_the_same_node_as"),
            ),
            _pcie_ipc_check(version),
            impl="flashinfer-pcie-ipc",
            switch="VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC",
        ),
        Rule("FlashInfer all-reduce", fi_cites, fi_check, switch="VLLM_ALLREDUCE_USE_FLASHINFER"),
        Rule(
            "AITER custom all-reduce",
            (Cite(f"{DC}/aiter_custom_all_reduce.py", "AiterCustomAllreduce"),),
            not_here("ROCm only: rocm_aiter_ops.is_custom_all_reduce_enabled"),
        ),
        Rule("custom all-reduce", custom_cites, _custom_check(mnnvl_only_refused=v34)),
        Rule(
            "torch symm-mem",
            (
                Cite(symm, "should_use_symm_mem", r"inp\.dtype != self\.dtype"),
                Cite(symm, "__init__", r"multicast_ptr == 0"),
                _const(UTILS, "SYMM_MEM_ALL_REDUCE_MAX_SIZES", SYMM_MEM_ALL_REDUCE_MAX_SIZES),
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
    if v34:
        defaults += (
            Default(
                HISPARSE,
                "",
                Cite("vllm/config/attention.py", "AttentionConfig", constant="hisparse_config", value=None),
            ),
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
    # The capture sizes commprof.planner.engine_sizes reads: the largest one here, a sweep's `engine:vllm` T values.
    facts = (
        Cite(
            "vllm/config/vllm.py",
            "_set_cudagraph_sizes",
            r"1024 if current_platform\.is_device_capability_family\(100\) else 512",
        ),
        Cite("vllm/engine/arg_utils.py", "get_batch_defaults", r"OPENAI_API_SERVER: 8192"),
    )
    if v34:
        facts += (
            Cite(
                "vllm/config/vllm.py",
                "_split_cudagraph_capture_sizes",
                order=(
                    r"is_device_capability_family\(100\)",
                    r"max_decode_cudagraph_capture_tokens = 8192",
                    r"8192 if max_prefill_tokens is None",
                    r"decode_cudagraph_capture_grid\(",
                    r"min\(cdiv\(s, q\), max_num_seqs\)",
                ),
            ),
            Cite("vllm/config/compilation.py", "decode_cudagraph_capture_grid", r"0\.65 \* n \*\* \(2 / 3\)"),
            Cite("vllm/config/compilation.py", "decode_cudagraph_capture_shapes", r"min\(max_reqs, max_tokens // q\)"),
        )
    return EngineTable("vLLM", "vllm", version, wheel, dispatch, rules, defaults, flags, facts)


VLLM_0_33 = vllm_table("0.33", "0.33.0")
VLLM_0_34 = vllm_table("0.34", "0.34.0")
