"""Shared test setup: GPU-only tests skip with a reason where CUDA is absent, and run one at a time across
pytest-xdist workers where it is present; reports several files read are rendered once per session (read only)."""

import fcntl
import os
from pathlib import Path

import pytest

from commprof.cli import main

TESTS = Path(__file__).resolve().parent
PCIE8_SWEEP = TESTS.parent / "sweeps" / "pcie8-verify.toml"
GLOO_RUN = TESTS / "fixtures" / "report" / "cpu-smoke-gloo"


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA GPUs (torch.cuda.is_available() is false)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def one_gpu_test_at_a_time(request, tmp_path_factory):
    """GPU tests share the GPUs and time them: under pytest-xdist, one runs at a time, whichever its worker."""
    if "gpu" not in request.keywords:
        yield
        return
    with open(tmp_path_factory.getbasetemp().parent / "gpu-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the workers' temp folders share this parent
        yield


@pytest.fixture(scope="session")
def gloo_report(tmp_path_factory):
    """The real 2-rank gloo run of sweeps/cpu-smoke.toml (tests/fixtures/report/cpu-smoke-gloo) rendered once."""
    out = tmp_path_factory.mktemp("gloo") / "out"
    assert main(["report", str(GLOO_RUN), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def pcie8_simulated(tmp_path_factory):
    """sweeps/pcie8-verify.toml simulated on the 8 x PCIe Gen5 preset, then rendered, as a user would: from an empty
    folder, the sweep and the preset named as the package ships them."""
    root = tmp_path_factory.mktemp("pcie8")
    checkout = os.getcwd()
    os.chdir(root)
    try:
        assert main(["simulate", "--topology", "pcie-gen5-switch-p2p", "--sweep", "pcie8-verify", "--out", "sim"]) == 0
        assert main(["report", "--latest", "sim", "--out", "report"]) == 0
    finally:
        os.chdir(checkout)
    return root / "report"
