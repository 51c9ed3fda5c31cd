"""FlashInfer is an optional extra: the CLI, the sweep's gates and the unfused reference work without it."""

import subprocess
import sys

import pytest
import torch

from commprof.impls.base import ImplContext
from commprof.impls.registry import load_impl

# Runs a module as `python -m` would, with every `import flashinfer...` failing as on a box without it.
WITHOUT_FLASHINFER = """
import runpy, sys
sys.modules["flashinfer"] = None
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.processes
@pytest.mark.parametrize(
    "argv",
    [
        ["commprof", "--help"],
        ["commprof", "plan", "--model", "kimi-k2.5", "--tp", "8", "--tokens", "4"],
        ["commprof.allreduce_sweep", "--help"],
        ["commprof.gpu_smoke", "--help"],
    ],
)
def test_commands_run_without_flashinfer(argv):
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_FLASHINFER, *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "flashinfer" not in proc.stderr.lower()


@pytest.mark.parametrize("name, options", [("flashinfer-fused", {"use_oneshot": True}), ("flashinfer-pcie-ipc", {})])
def test_flashinfer_points_name_the_extra_when_it_is_missing(name, options):
    ctx = ImplContext(
        "nccl", 8, "bfloat16", (4,), 7168, "cuda", (9, 0), True, libraries={"flashinfer-python": None}, options=options
    )
    support = load_impl(name).support(ctx)
    assert not support and "pip install 'commprof[flashinfer]'" in support.reason


def test_unfused_reference_falls_back_to_torch_ops_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    impl = load_impl("nccl+rmsnorm")({})
    impl.setup(None, None, torch.device("cuda", 0))
    assert "torch ops" in impl.detail() and "commprof[flashinfer]" in impl.detail()
