"""Every call commprof makes into b12x, checked against a record of b12x's own declarations (tests/b12x_record.py,
b12x 1.5.1) by driving the real implementations through a fake b12x, so it runs without b12x; where a b12x is
importable, each call made is bound against its signature too, and b12x's limits are compared with commprof's."""

import importlib
import inspect

import pytest
import torch
import torch.distributed as dist

from commprof.impls import b12x as b
from commprof.impls.registry import load_impl
from commprof.planner.models import ModelShape
from commprof.planner.plan import build_step_plan
from tests.b12x_record import PROGRESS_FIELDS, SIGNATURES, SURFACE_WORLD_SIZES, FakeB12x, recorded_signature

TOKENS, HIDDEN = 8, 1024


def drive(monkeypatch, name: str, options: dict, world_size: int, state_dir=None) -> FakeB12x:
    """setup, prepare, one op eager and one under capture, and teardown, as the harness runs them."""
    fake = FakeB12x()
    for module, value in fake.modules.items():
        monkeypatch.setitem(__import__("sys").modules, module, value)
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world_size)
    monkeypatch.setattr(dist, "barrier", lambda group=None: None)
    plan = build_step_plan(ModelShape("tiny", 2, HIDDEN, 256, "bfloat16", "test"), world_size, TOKENS)
    impl = load_impl(name)(options)
    impl.state_dir = state_dir
    impl.setup(object(), plan, torch.device("cpu"))
    try:
        impl.prepare([(TOKENS, HIDDEN)])
        x = torch.zeros(TOKENS, HIDDEN, dtype=torch.bfloat16)
        for capturing[0] in (False, True):
            impl.all_reduce(x)
            if impl.fuses_rmsnorm:
                impl.all_reduce_rmsnorm(x, torch.zeros_like(x), torch.ones(HIDDEN, dtype=x.dtype), 1e-6)
    finally:
        impl.teardown()
    return fake


CASES = {
    "oneshot": ("b12x", {"variant": "oneshot"}, 8),
    "auto": ("b12x", {}, 8),
    "twoshot": ("b12x", {"variant": "twoshot"}, 4),
    "dma": ("b12x", {"variant": "dma"}, 8),
    "fused": ("b12x-fused", {}, 8),
}


@pytest.fixture(scope="module")
def driven():
    with pytest.MonkeyPatch.context() as monkeypatch:
        return {case: drive(monkeypatch, *args) for case, args in CASES.items()}


def test_every_call_fits_the_record_and_every_recorded_call_is_made(driven):
    made = {name for fake in driven.values() for name in fake.names()}
    assert made == set(SIGNATURES)  # nothing recorded goes unchecked, nothing made goes unrecorded


def test_the_session_outlives_the_timed_ops_and_closes_before_the_runtimes(driven):
    for case, fake in driven.items():
        names = fake.names()
        close = names.index("preparation.PreparationSession.close")
        ops = [i for i, n in enumerate(names) if n.endswith((".all_reduce", ".all_reduce_fused_add_rms_norm"))]
        runtime_closes = [i for i, n in enumerate(names) if n.startswith("pcie.") and n.endswith(".close")]
        assert ops and max(ops) < close < min(runtime_closes), case


def test_each_variant_builds_its_runtime_and_primes_once_per_shape(driven):
    assert "pcie.DmaAllReduce" in driven["dma"].names()
    assert "pcie.PCIeTwoShotBF16.capture" in driven["twoshot"].names()  # graph capture inside runtime.capture
    assert driven["fused"].names().count("pcie._oneshot_preparation._OneshotExecutionState.run_fused") == 1
    assert driven["auto"].names().count("pcie._oneshot_preparation._OneshotExecutionState.run_plain") == 1


def test_a_sweeps_session_keeps_its_plan_selections_in_the_settings_folder(monkeypatch, tmp_path):
    """b12x looks every request up in a selection cache, shared by every process on the box unless the session
    names its own (1.5.1 preparation/session.py _selection_cache): a point's session names the setting's folder."""
    fake = drive(monkeypatch, "b12x", {"variant": "oneshot"}, 8, state_dir=tmp_path / "prepared" / "b12x")
    (session,) = [kwargs for name, _, kwargs in fake.calls if name == "preparation.PreparationSession"]
    assert session["cache_dir"] == str(tmp_path / "prepared" / "b12x" / "b12x-selections")
    assert session["autotune"] is False and (tmp_path / "prepared" / "b12x" / "b12x-selections").is_dir()
    assert "compiles its CuTe kernels" in b.B12xAllReduce.preparation("nccl", {}) and not b.B12xAllReduce.preparation(
        "gloo", {}
    )


def installed(name: str):
    """The installed b12x object a record entry names."""
    root, *path = name.split(".")
    module = {"pcie": "b12x.comm.pcie", "preparation": "b12x.preparation"}[root]
    if path[0].startswith("_"):  # a private submodule: b12x's lazy package does not expose it as an attribute
        module, path = f"{module}.{path[0]}", path[1:]
    target = importlib.import_module(module)
    for part in path:
        target = getattr(target, part)
    return target


def installed_signature(name: str) -> inspect.Signature:
    signature = inspect.signature(installed(name))
    params = list(signature.parameters.values())
    if params and params[0].name in ("self", "cls"):
        signature = signature.replace(parameters=params[1:])
    return signature


def test_the_record_still_describes_the_installed_b12x(driven):
    pytest.importorskip("b12x.comm.pcie", reason="b12x is not installed (pip install 'commprof[b12x]')")
    for name in SIGNATURES:
        now = {p.name: (p.kind, p.default is p.empty) for p in installed_signature(name).parameters.values()}
        then = {p.name: (p.kind, p.default is p.empty) for p in recorded_signature(name).parameters.values()}
        required_now = {n for n, (_, required) in now.items() if required}
        # a new optional parameter is no drift; a renamed, removed, re-kinded or newly required one is
        assert all(now.get(n) == shape for n, shape in then.items()) and required_now <= set(then), (
            f"{name} changed in the installed b12x: update tests/b12x_record.py and commprof's call"
        )
    for fake in driven.values():
        for name, args, kwargs in fake.calls:
            installed_signature(name).bind(*args, **kwargs)
    assert set(PROGRESS_FIELDS) <= set(installed("preparation.PreparationProgress").__dataclass_fields__)


def test_commprofs_limits_match_the_record_and_the_installed_b12x():
    assert SURFACE_WORLD_SIZES[b.SURFACES["oneshot"]] == SURFACE_WORLD_SIZES[b.SURFACES["fused"]]
    assert SURFACE_WORLD_SIZES[b.SURFACES["oneshot"]] == b.ONESHOT_WORLD_SIZES
    assert SURFACE_WORLD_SIZES[b.SURFACES["twoshot"]] == b.TWOSHOT_WORLD_SIZES
    assert SURFACE_WORLD_SIZES[b.SURFACES["dma"]] == b.DMA_WORLD_SIZES
    pytest.importorskip("b12x.comm.pcie", reason="b12x is not installed (pip install 'commprof[b12x]')")
    from b12x.comm.pcie import _tuning, pcie_dma, pcie_oneshot, pcie_twoshot_bf16

    assert {s: _tuning.SURFACES[s] for s in SURFACE_WORLD_SIZES} == SURFACE_WORLD_SIZES
    assert b.ONESHOT_WORLD_SIZES == pcie_oneshot.SUPPORTED_WORLD_SIZES
    assert b.TWOSHOT_WORLD_SIZES == pcie_twoshot_bf16.SUPPORTED_WORLD_SIZES
    assert b.DMA_WORLD_SIZES == pcie_dma.SUPPORTED_WORLD_SIZES
    assert {str(d).removeprefix("torch.") for d in pcie_oneshot.SUPPORTED_DTYPES} == set(b.ONESHOT_DTYPES)
    assert {str(d).removeprefix("torch.") for d in pcie_dma.SUPPORTED_DTYPES} == set(b.ONESHOT_DTYPES)


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.skipif(
    torch.cuda.device_count() < 2 or torch.cuda.get_device_capability(0)[0] != 12,
    reason="needs at least 2 SM12x GPUs (b12x runs on consumer Blackwell only)",
)
@pytest.mark.parametrize("name", ["b12x", "b12x-fused"])
def test_b12x_runs_verified_on_two_gpus(name):
    from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode
    from tests.distributed import run_nccl_ranks

    def body(rank, world_size, device):
        plan = build_step_plan(ModelShape("tiny", 2, 1024, 256, "bfloat16", "test"), world_size, 4)
        impl = load_impl(name)({})
        impl.setup(dist.group.WORLD, plan, device)
        try:
            impl.prepare([(4, 1024)])
            replay = StepReplay(plan, impl, dist.group.WORLD, device, ReplayConfig(iterations=3, warmup=1))
            return [replay_mode(replay, mode).status for mode in ("eager", "graph")], impl.detail()
        finally:
            impl.teardown()

    for statuses, detail in run_nccl_ranks(body, world_size=2):
        assert statuses == ["ok", "ok"] and "b12x.comm.pcie" in detail
