"""Shared test setup: GPU-only tests skip with a reason where CUDA is absent; reports that several test files
read are rendered once per session (read them, never write into them)."""

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


@pytest.fixture(scope="session")
def gloo_report(tmp_path_factory):
    """The real 2-rank gloo run of sweeps/cpu-smoke.toml (tests/fixtures/report/cpu-smoke-gloo) rendered once."""
    out = tmp_path_factory.mktemp("gloo") / "out"
    assert main(["report", str(GLOO_RUN), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def pcie8_simulated(tmp_path_factory):
    """sweeps/pcie8-verify.toml simulated on the 8 x PCIe Gen5 preset, then rendered, as a user would."""
    root = tmp_path_factory.mktemp("pcie8")
    sim = ["simulate", "--topology", "pcie-gen5-switch-p2p", "--sweep", str(PCIE8_SWEEP), "--out", str(root / "sim")]
    assert main(sim) == 0
    out = root / "report"
    assert main(["report", "--latest", str(root / "sim"), "--out", str(out)]) == 0
    return out
