"""What makes each serving engine run a PCIe all-reduce kernel instead of NCCL, and bound the sizes it takes:
the one home of these engine variables, read by the routing export and the engine flags alike."""

from __future__ import annotations

# Per commprof implementation: (engine, what turns it on, the variable bounding the sizes it takes (None: the
# engine has none), that variable's unit ("bytes" or "elements"), the version written for and its source).
ROUTING_VARIABLES: dict[str, tuple[tuple[str, str, str | None, str, str], ...]] = {
    "flashinfer-pcie-ipc": (
        (
            "SGLang",
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1",
            "SGLANG_PCIE_IPC_MAX_NUMEL",
            "elements",
            "SGLang main with sgl-project/sglang#34528 (FlashInfer PCIe IPC: bf16, TP 2 / 4 / 8; its workspace is "
            "max batch x draft tokens x hidden elements, overridden by SGLANG_PCIE_IPC_MAX_NUMEL)",
        ),
        (
            "vLLM",
            "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1",
            None,
            "",
            "vLLM 0.30 (vllm-project/vllm#53576: opt-in, single node, PCIe only, TP 2 / 4 / 8)",
        ),
    ),
    "b12x": (
        (
            "SGLang",
            "SGLANG_B12X_PCIE_AR=1",
            None,
            "",
            "SGLang main with sgl-project/sglang#32479 (b12x PCIe all-reduce on SM12x)",
        ),
        (
            "vLLM (community PCIe fork)",
            "VLLM_ENABLE_PCIE_ALLREDUCE=1 VLLM_PCIE_ALLREDUCE_BACKEND=b12x",
            "VLLM_PCIE_ONESHOT_ALLREDUCE_MAX_SIZE",
            "bytes",
            "the community vLLM PCIe all-reduce fork (VLLM_PCIE_TWOSHOT_ALLREDUCE_MAX_SIZE bounds two-shot, "
            "default 768 KB)",
        ),
    ),
}
