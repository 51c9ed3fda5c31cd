"""FlashInfer's JIT modules built once, before any point, on a real GPU (needs FlashInfer installed)."""

from pathlib import Path

import pytest

from commprof.impls.gating import FLASHINFER_INSTALL
from commprof.impls.jit_build import run_build
from commprof.sweep.running.prebuild import run_builder


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.timeout(1200)
def test_flashinfer_modules_are_built_once_and_then_found_in_the_cache(tmp_path):
    pytest.importorskip("flashinfer", reason=f"FlashInfer is not installed ({FLASHINFER_INSTALL})")
    notes = []
    request = {
        "backend": "nccl",
        "world_size": 1,
        "dtype": "bfloat16",
        "tokens": [4],
        "hidden_size": 7168,
        "impls": [["nccl+rmsnorm", {}]],
    }
    report = run_builder(request, notes.append, tmp_path / "builds.log")
    (outcome,) = report["builds"].values()
    assert outcome["status"] in ("built", "cached"), outcome.get("error")
    assert report["cache_dir"] and any("flashinfer_norm" in n for n in notes)
    # The comm module PCIe IPC points use: first use compiles it, the second finds it on disk.
    first = run_build("flashinfer.jit.comm:gen_pcie_ipc_comm_module", lambda e: None)
    assert first["status"] in ("built", "cached"), first.get("error")
    assert Path(first["artifact"]).exists()
    again = run_build("flashinfer.jit.comm:gen_pcie_ipc_comm_module", lambda e: None)
    assert again["status"] == "cached" and again["seconds"] < 60
