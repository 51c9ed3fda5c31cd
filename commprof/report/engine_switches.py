"""What makes each serving engine run a PCIe all-reduce kernel instead of NCCL, and bound the sizes it takes:
the one home of these engine variables, read by the routing export and the engine flags alike."""

from __future__ import annotations

# vLLM's default largest CUDA-graph capture size (vllm/config/compilation.py, CompilationConfig:
# max_cudagraph_capture_size "capped at 512 by default"): FlashInfer PCIe IPC takes every size up to it x hidden.
VLLM_PCIE_IPC_DEFAULT_CAPTURE = 512

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
            "SGLang 0.5.23 with flashinfer-python >= 0.7.0 (sglang/srt/distributed/device_communicators/"
            "pcie_ipc_ar.py: eligible_group builds it for the tp group at world size 2 / 4 / 8 when "
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is set; PcieIpcCommunicator.should_pcie_ipc_ar takes a contiguous bf16 "
            "all-reduce of at most max_numel elements, max_numel = SGLANG_PCIE_IPC_MAX_NUMEL, else the decode width x "
            "hidden; larger ones stay on NCCL)",
        ),
        (
            "vLLM",
            "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1",
            None,
            "",
            "vLLM 0.33 with flashinfer-python >= 0.7.0 (vllm/distributed/device_communicators/"
            "flashinfer_pcie_ipc_all_reduce.py: FlashInferPcieIpcAllReduce, single node, world size 2 / 4 / 8; setup "
            "sizes the workspace to the largest CUDA-graph capture size x hidden and should_use takes every bf16 "
            "[tokens, hidden] all-reduce it holds: no size cap; off under VLLM_BATCH_INVARIANT)",
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
