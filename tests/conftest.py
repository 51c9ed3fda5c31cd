"""Shared test setup: GPU-only tests skip with a reason where CUDA is absent, and run one at a time across
pytest-xdist workers where it is present; a test that starts a process (fork, subprocess, torchrun, a browser)
carries the `processes` marker, or it fails saying so (a GPU test starts rank processes or CUDA work in a child,
so every one carries both `gpu` and `processes`: tests/test_test_rules.py checks it; elsewhere a sweep command runs
up to its first point, with no fork server); what several files read is
made once: reports and simulated runs for a whole `make test`, kept until a source changes (tests/built_once.py),
and the real launches once per pytest run (tests/shared_runs.py).

Tests are told apart by their markers (`item.get_closest_marker`), never by keyword: an item's keywords hold the
names of the folders above it, so a checkout inside a folder named `gpu` or `processes` would match them all."""

import contextlib
import fcntl
import multiprocessing.process
import multiprocessing.util
import os
import subprocess
from pathlib import Path

# matplotlib builds its font cache the first time a process loads its fonts on a machine without one (a fresh CI
# box): two `fc-list` runs, which the rule below would count against whichever test draws first. Loaded here.
import matplotlib.font_manager  # noqa: F401
import pytest
from markupsafe import Markup

from commprof.cli import main
from commprof.replay.forkserver import ForkServer
from commprof.report import command as report_command
from commprof.report import worker
from commprof.report.views.drawing import drawn_by
from tests.built_once import built_once
from tests.shared_runs import gloo_launch, lost_agent_launch, shared_launch, smoke_launch

TESTS = Path(__file__).resolve().parent
PCIE8_SWEEP = TESTS.parent / "sweeps" / "pcie8-verify.toml"
GLOO_RUN = TESTS / "fixtures" / "report" / "cpu-smoke-gloo"


def marked(item, name: str) -> bool:
    """Whether a test carries the marker `name` (on itself, its class or its module)."""
    return item.get_closest_marker(name) is not None


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA GPUs (torch.cuda.is_available() is false)")
    for item in items:
        if marked(item, "gpu"):
            item.add_marker(skip)


# A report renders in one process in tests; those marked `processes` may fork its workers (worker.FORK = True).
worker.FORK = False

# Every way a test can start a process; each start is counted while a test sets up and runs.
STARTS = [0]


def _counting(owner, name):
    real = getattr(owner, name)

    def counted(*args, **kwargs):
        STARTS[0] += 1
        return real(*args, **kwargs)

    setattr(owner, name, counted)


for _owner, _name in [
    (os, "fork"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (subprocess.Popen, "_execute_child"),
    (multiprocessing.util, "spawnv_passfds"),
    (multiprocessing.process.BaseProcess, "start"),  # a forkserver context's processes are forked by its server
]:
    _counting(_owner, _name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.stash[STARTS_BEFORE] = STARTS[0]
    yield


STARTS_BEFORE = pytest.StashKey[int]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test (or a fixture it set up) that started a process fails unless it is marked `processes`."""
    outcome = yield
    report = outcome.get_result()
    started = STARTS[0] - item.stash.get(STARTS_BEFORE, STARTS[0])
    if call.when == "call" and report.passed and started and not marked(item, "processes"):
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} started {started} process(es): mark it @pytest.mark.processes"


class NoForkServer(contextlib.nullcontext):
    """A sweep's fork server in a test not marked `processes`: a sweep command runs there up to its first point
    (its checks, its dry-run listing), and a point asked of it fails the test, naming the marker."""

    def __init__(self) -> None:
        super().__init__(self)

    def launch(self, *args, **kwargs):
        raise AssertionError("a sweep point runs in forked processes: mark the test @pytest.mark.processes")


@pytest.fixture(autouse=True)
def no_fork_server_unless_marked(request, monkeypatch):
    if not marked(request.node, "processes"):
        monkeypatch.setattr(ForkServer, "start", classmethod(lambda cls: NoForkServer()))


def draw_no_figures(monkeypatch) -> None:
    """Reports rendered with every figure an empty <svg>, for tests of what the page and the files say (drawing was
    half of each render): the figures are drawn, and checked, by the tests of the figures and of the rendered
    scenarios."""

    @contextlib.contextmanager
    def empty_figures():
        with drawn_by(lambda module, function, args, kwargs: Markup("<svg></svg>")):
            yield

    monkeypatch.setattr(report_command, "figure_worker", empty_figures)


@pytest.fixture
def figures_not_drawn(monkeypatch) -> None:
    draw_no_figures(monkeypatch)


@pytest.fixture(autouse=True)
def one_gpu_test_at_a_time(request, tmp_path_factory):
    """GPU tests share the GPUs and time them: under pytest-xdist, one runs at a time, whichever its worker."""
    if not marked(request.node, "gpu"):
        yield
        return
    with open(tmp_path_factory.getbasetemp().parent / "gpu-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the workers' temp folders share this parent
        yield


def _built(request, tmp_path_factory, name: str, build) -> tuple[Path, dict]:
    """`build` made once for a whole `make test` and kept in pytest's cache until a source changes
    (tests/built_once.py); without pytest's cache, once for this process."""
    cache = getattr(request.config, "cache", None)
    return built_once(cache.mkdir("built") if cache else tmp_path_factory.mktemp("built"), name, build)


def _gloo_report(folder: Path) -> dict:
    assert main(["report", str(GLOO_RUN), "--out", str(folder / "out")]) == 0
    return {"report": "out"}


@pytest.fixture(scope="session")
def gloo_report(request, tmp_path_factory) -> Path:
    """The real 2-rank gloo run of sweeps/cpu-smoke.toml (tests/fixtures/report/cpu-smoke-gloo) rendered once.
    Read, never write."""
    root, found = _built(request, tmp_path_factory, "gloo-report", _gloo_report)
    return root / found["report"]


@pytest.fixture(scope="session")
def scenarios(request, tmp_path_factory) -> dict[str, Path]:
    """Every shipped scenario, rendered once for a whole `make test` (every pytest-xdist worker) and kept in
    pytest's cache until a source changes (tests/built_once.py): name -> report folder. Read, never write."""
    from tests import claims_check
    from tests.test_decision import SIM_DIRS, TERMINALS, rendered_scenarios

    root, found = _built(request, tmp_path_factory, "scenarios", rendered_scenarios)
    SIM_DIRS.update({name: root / path for name, path in found["runs"].items()})
    TERMINALS.update(found["terminals"])
    claims_check.RUN_DIRS.update({run_id: root / path for run_id, path in found["run_ids"].items()})
    return {name: root / path for name, path in found["reports"].items()}


def _pcie8_simulated(root: Path) -> dict:
    checkout = os.getcwd()
    os.chdir(root)
    try:
        assert main(["simulate", "--topology", "pcie-gen5-switch-p2p", "--sweep", "pcie8-verify", "--out", "sim"]) == 0
        assert main(["report", "--latest", "sim", "--out", "report"]) == 0
    finally:
        os.chdir(checkout)
    return {"report": "report"}


@pytest.fixture(scope="session")
def pcie8_simulated(request, tmp_path_factory) -> Path:
    """sweeps/pcie8-verify.toml simulated on the 8 x PCIe Gen5 preset, then rendered, as a user would: from an empty
    folder, the sweep and the preset named as the package ships them. Made once (tests/built_once.py); read, never
    write."""
    root, found = _built(request, tmp_path_factory, "pcie8-simulated", _pcie8_simulated)
    return root / found["report"]


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory) -> dict:
    """The GPU smoke's own 2-rank launch on gloo, run once for a pytest run (tests/shared_runs.py)."""
    return shared_launch(tmp_path_factory, "smoke", smoke_launch)


@pytest.fixture(scope="session")
def gloo_sweep(tmp_path_factory) -> dict:
    """A 2-rank gloo sweep launched as two torchrun nodes, run once for a pytest run (tests/shared_runs.py)."""
    return shared_launch(tmp_path_factory, "gloo", gloo_launch)


@pytest.fixture(scope="session")
def lost_agent_sweep(tmp_path_factory) -> dict:
    """A 2-rank sweep with a slow rank-0 doctor whose torchrun agent is killed after its first point, run once for a
    pytest run (tests/shared_runs.py)."""
    return shared_launch(tmp_path_factory, "lost-agent", lost_agent_launch)
