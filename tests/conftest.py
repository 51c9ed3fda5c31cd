"""Shared test setup: GPU-only tests skip with a reason where CUDA is absent (and share one pytest-xdist worker
where it is present); reports that several test files read are rendered once per session (read, never write)."""

from pathlib import Path

import pytest

from commprof.cli import main

TESTS = Path(__file__).resolve().parent
PCIE8_SWEEP = TESTS.parent / "sweeps" / "pcie8-verify.toml"
GLOO_RUN = TESTS / "fixtures" / "report" / "cpu-smoke-gloo"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        # One pytest-xdist worker runs every GPU test, one after another: they share the GPUs and time them.
        for item in items if config.pluginmanager.hasplugin("xdist") else ():
            if "gpu" in item.keywords:
                item.add_marker(pytest.mark.xdist_group("gpu"))
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
