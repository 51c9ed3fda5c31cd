"""What commprof relies on in a FlashInfer release: the PCIe IPC entry points, tune()'s copy-engine variants and
the kernel names the trace matcher looks for, each read in the flashinfer-python 0.7.4 wheel. Pure."""

from __future__ import annotations

from commprof.impls.flashinfer_pcie import COPY_ENGINE_KERNELS, PCIE_IPC_KERNELS
from commprof.report.analysis.engine_facts import Cite, LibraryFacts

COMM = "flashinfer/comm"
INCLUDE = "flashinfer/data/include/flashinfer/comm"
_KERNEL_FILES = {
    "copy_engine_retire_kernel": "pcie_ipc_all_gather.cuh",
    "copy_engine_pair_barrier_kernel": "pcie_ipc_all_gather.cuh",
}

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
        *(Cite(f"{INCLUDE}/pcie_ipc_all_reduce.cuh", "", rf"void {name}\b") for name in PCIE_IPC_KERNELS),
        *(
            Cite(f"{INCLUDE}/{_KERNEL_FILES.get(name, 'pcie_ipc_ce_ring.cuh')}", "", rf"__global__ void {name}\(")
            for name in COPY_ENGINE_KERNELS
        ),
    ),
)
