"""What makes each serving engine run a PCIe all-reduce kernel instead of NCCL, and bound the sizes it takes:
the one home of these engine variables, read by the routing export and the engine flags alike."""

from __future__ import annotations

# Per commprof implementation: (engine, what turns it on, the variable bounding the sizes it takes (None: the
# engine has none), that variable's unit ("bytes" or "elements"), the version written for and its source).
# Each name was read in the engine's own source at the PR or commit named; "open PR" means the name exists only
# on that PR's branch (not merged when checked), so a stock release ignores it.
ROUTING_VARIABLES: dict[str, tuple[tuple[str, str, str | None, str, str], ...]] = {
    "flashinfer-pcie-ipc": (
        (
            "SGLang",
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1",
            "SGLANG_PCIE_IPC_MAX_NUMEL",
            "elements",
            "an SGLang build with the open PR sgl-project/sglang#34528 (not merged when checked) and "
            "flashinfer-python >= 0.7.0: FlashInfer PCIe IPC, bf16 workspace, TP 2 / 4 / 8; its workspace holds "
            "chunked-prefill-size x hidden elements unless SGLANG_PCIE_IPC_MAX_NUMEL sets it, and larger "
            "all-reduces stay on NCCL",
        ),
        (
            "vLLM",
            "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1",
            None,
            "",
            "vLLM 0.30+ with flashinfer-python >= 0.7.0 (vllm-project/vllm#53576, merged 2026-08-24: opt-in, single "
            "node, PCIe only, TP 2 / 4 / 8, workspace sized to the CUDA-graph capture shapes; vLLM's own API docs "
            "list it in v0.32.0, 0.30 is a third-party changelog's; with FlashInfer 0.6.18 it stays on NCCL)",
        ),
    ),
    "b12x": (
        (
            "SGLang",
            "SGLANG_B12X_PCIE_AR=1",
            "SGLANG_B12X_ONESHOT_MAX_BYTES",
            "bytes",
            "an SGLang build with the open PR sgl-project/sglang#32479 (not merged when checked): b12x one-shot on "
            "SM12x, TP 2 / 4 / 8; the revisions read call OneshotAllReducePool.all_reduce without the plan= that "
            "b12x 1.5 requires, so it runs a b12x before 1.5, not the 1.5 kernels commprof measures",
        ),
        (
            "vLLM (community PCIe fork)",
            "VLLM_ENABLE_PCIE_ALLREDUCE=1 VLLM_PCIE_ALLREDUCE_BACKEND=b12x",
            "VLLM_PCIE_ONESHOT_ALLREDUCE_MAX_SIZE",
            "bytes",
            "the vLLM fork local-inference-lab/vllm (vllm/distributed/device_communicators/b12x_pcie_all_reduce.py "
            "at cdbbc9d: the bound also sizes the one-shot buffers; the revision read calls b12x without plan=, "
            "b12x's pre-1.5 API); revisions with VLLM_PCIE_TWOSHOT_ALLREDUCE_MAX_SIZE bound two-shot with it, "
            "default 768 KB in some and off in others",
        ),
    ),
}
