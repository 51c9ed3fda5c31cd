"""What commprof relies on in a FlashInfer release: the PCIe IPC entry points, tune()'s copy-engine variants, the
kernel names the trace matcher looks for, and the all-reduce fusion workspaces' size rules the engines' dispatch
reads (trtllm and MNNVL), each read in the flashinfer-python 0.7.4 wheel. Pure."""

from __future__ import annotations

import math

from commprof.impls.flashinfer_pcie import COPY_ENGINE_KERNELS, PCIE_IPC_KERNELS
from commprof.report.analysis.engine_facts import Cite, LibraryFacts

COMM = "flashinfer/comm"
INCLUDE = "flashinfer/data/include/flashinfer/comm"
MNNVL = f"{COMM}/trtllm_mnnvl_ar.py"
_KERNEL_FILES = {
    "copy_engine_retire_kernel": "pcie_ipc_all_gather.cuh",
    "copy_engine_pair_barrier_kernel": "pcie_ipc_all_gather.cuh",
    "kernel_pcie_ipc_ce_sm120_binary_wait_clear": "pcie_ipc_ce_sm120.cuh",
}

MNNVL_ONE_SHOT_THRESHOLD = 64 * 1024 * 8 * 2  # trtllm_mnnvl_ar.py: one-shot up to tokens x hidden x TP x bytes
MNNVL_BUFFER_ALIGNMENT = 2 * 16  # MNNVLAllReduceFusionWorkspace: TWOSHOT_NUM_STAGES x PACKED_ALIGNMENT_BYTES


def mnnvl_required_bytes(tp: int, tokens: int, hidden: int, element: int) -> int:
    """MNNVLAllReduceFusionWorkspace.get_required_buffer_size_bytes with the AUTO strategy: one-shot holds every
    rank's tokens, two-shot two stages of TP-rounded token slices."""
    if tokens * hidden * tp * element <= MNNVL_ONE_SHOT_THRESHOLD:
        return tokens * hidden * tp * element
    return 2 * math.ceil(tokens / tp) * tp * hidden * element


def mnnvl_buffer_bytes(tp: int, max_tokens: int, hidden: int, element: int) -> int:
    """The Lamport buffer MNNVLAllReduceFusionWorkspace.__init__ sizes for `max_tokens` rows of `hidden`: the
    larger of one-shot at the threshold and two-shot at `max_tokens`, rounded to its alignment."""
    one_shot_tokens = min(MNNVL_ONE_SHOT_THRESHOLD // (tp * element * hidden), max_tokens)
    one_shot = one_shot_tokens * hidden * tp * element
    two_shot = 2 * math.ceil(max_tokens / tp) * tp * hidden * element
    size = max(one_shot, two_shot)
    return -(-size // MNNVL_BUFFER_ALIGNMENT) * MNNVL_BUFFER_ALIGNMENT


FLASHINFER_0_7_4 = LibraryFacts(
    "flashinfer-python",
    "0.7.4",
    (
        Cite(f"{COMM}/__init__.py", "", r"PcieIpcAllReduceWorkspace as PcieIpcAllReduceWorkspace"),
        Cite(f"{COMM}/pcie_ipc_ar.py", "PcieIpcAllReduceWorkspace", r"def tune\("),
        Cite(f"{COMM}/pcie_ipc_ar.py", "PcieIpcAllReduceWorkspace", r"def supports\("),
        Cite(
            f"{COMM}/pcie_ipc_policy.py",
            "IpcVariant",
            order=(
                r"COPY_ENGINE_RING = 4",
                r"COPY_ENGINE_ISLAND = 5",
                r"COPY_ENGINE_RING_MEMOP = 6",
                r"COPY_ENGINE_RING_PIPED = 7",
            ),
        ),
        Cite(f"{COMM}/allreduce.py", "create_allreduce_fusion_workspace"),
        # The trtllm workspace refuses what its metadata was not built for: more elements than max_token_num x
        # hidden_dim, and an fp32 input on a 16-bit Lamport buffer (use_fp32_lamport).
        Cite(
            f"{COMM}/trtllm_ar.py",
            "check_trtllm_allreduce_fusion_workspace_metadata",
            r'metadata\["use_fp32_lamport"\] != \(dtype == torch\.float32\)',
        ),
        Cite(f"{COMM}/trtllm_ar.py", "check_trtllm_allreduce_fusion_workspace_metadata", r"token_num \* hidden_dim >"),
        Cite(MNNVL, "", constant="MNNVL_ONE_SHOT_THRESHOLD", value=MNNVL_ONE_SHOT_THRESHOLD),
        Cite(MNNVL, "get_required_buffer_size_bytes", r"2 \* math\.ceil\(num_tokens / tp_size\) \* tp_size"),
        Cite(MNNVL, "MNNVLAllReduceFusionWorkspace", r"buffer_size_in_bytes = max\(one_shot_size_bytes, two_shot"),
        Cite(MNNVL, "MNNVLAllReduceFusionWorkspace", r"Multicast pointer is null"),
        *(Cite(f"{INCLUDE}/pcie_ipc_all_reduce.cuh", "", rf"void {name}\b") for name in PCIE_IPC_KERNELS),
        *(
            Cite(f"{INCLUDE}/{_KERNEL_FILES.get(name, 'pcie_ipc_ce_ring.cuh')}", "", rf"__global__ void\s+{name}\(")
            for name in COPY_ENGINE_KERNELS
        ),
    ),
)
