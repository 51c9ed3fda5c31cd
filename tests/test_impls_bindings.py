"""Every call into FlashInfer and torch symmetric memory, bound against the installed signatures (FlashInfer's: the
installed package where there is one, else the record of 0.7.4 in tests/flashinfer_record.py, served as a fake).

Two layers: the argument builders bound directly, and each built-in run through the real harness on one
gloo rank with the kernels swapped for CPU stand-ins that bind every call they receive (so what the class
really passes is checked) and compute the one-rank result, which the harness then verifies.
"""

import dataclasses
import importlib.util
import inspect
import sys

import pytest
import torch
import torch.distributed as dist

from commprof.impls import flashinfer_fused, flashinfer_pcie, symm_mem
from commprof.impls.base import RmsNormOperands
from commprof.impls.registry import load_impl
from commprof.planner.models import ModelShape
from commprof.planner.plan import build_step_plan
from commprof.replay.harness import ReplayConfig, StepReplay, replay_mode
from tests import flashinfer_record as record

INSTALLED = importlib.util.find_spec("flashinfer") is not None
FAKE = {} if INSTALLED else record.fake_flashinfer()
comm = importlib.import_module("flashinfer.comm") if INSTALLED else FAKE["flashinfer.comm"]


@pytest.fixture(autouse=True, scope="module")
def flashinfer_or_its_record():
    """Without FlashInfer, its recorded modules stand in for it (and package metadata says 0.7.4) in this module."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, module in FAKE.items():
            monkeypatch.setitem(sys.modules, name, module)
        if not INSTALLED:
            monkeypatch.setattr("commprof.impls.torch_dist.installed_version", lambda *names: record.VERSION)
        yield


X = torch.zeros(4, 64, dtype=torch.bfloat16)


def bind(fn, *args, **kwargs):
    """Bind against the installed signature; a renamed or missing argument fails here."""
    return inspect.signature(fn).bind(*args, **kwargs)


def binding(real, compute):
    """A stand-in for `real` that binds each call against real's signature, then runs `compute`."""
    signature = inspect.signature(real)

    def stand_in(*args, **kwargs):
        signature.bind(*args, **kwargs)
        return compute(*args, **kwargs)

    return stand_in


def schema_bind(op, *args):
    """Bind positional arguments against a torch op's schema, checking Tensor and str slots by type."""
    arguments = op.default._schema.arguments
    assert len(args) == len([a for a in arguments if not a.has_default_value()]) <= len(arguments)
    for arg, value in zip(arguments, args):
        expected = {"Tensor": torch.Tensor, "str": str}[str(arg.type)]
        assert isinstance(value, expected), f"{op}: {arg.name} must be {arg.type}, got {type(value).__name__}"


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def replay_on_one_rank(impl, group, tokens=4, hidden=64):
    """setup, prepare, one verified eager replay through the harness, teardown: what trial.py does."""
    plan = build_step_plan(ModelShape("tiny", 2, hidden, 256, "bfloat16", "test"), 1, tokens)
    impl.setup(group, plan, torch.device("cpu"))
    try:
        impl.prepare([(tokens, hidden)])
        replay = StepReplay(plan, impl, group, torch.device("cpu"), ReplayConfig(iterations=2, warmup=1))
        return replay_mode(replay, "eager")
    finally:
        impl.teardown()


def rmsnorm_fp32(summed, weight, eps):
    rows = summed.float()
    return (rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(summed.dtype)


# --- FlashInfer fused all-reduce + RMSNorm ----------------------------------------------------------------


def test_fused_calls_bind_against_flashinfer():
    bind(
        comm.create_allreduce_fusion_workspace,
        **flashinfer_fused.workspace_kwargs(
            world_size=8, rank=0, max_token_num=64, hidden_dim=7168, dtype=torch.bfloat16, group=None
        ),
    )
    plain = flashinfer_fused.allreduce_kwargs(X, object(), comm.AllReduceFusionPattern.kAllReduce, True)
    bind(comm.allreduce_fusion, **plain)
    fused = flashinfer_fused.fused_kwargs(
        RmsNormOperands(X, X, X[0], 1e-6), object(), comm.AllReduceFusionPattern.kARResidualRMSNorm, False, X, X
    )
    bound = bind(comm.allreduce_fusion, **fused)
    assert bound.arguments["use_oneshot"] is False and bound.arguments["trigger_completion_at_end"] is True
    assert comm.AllReduceFusionPattern.kAllReduce == 0 and comm.AllReduceFusionPattern.kARResidualRMSNorm == 1
    bind(comm.TRTLLMAllReduceFusionWorkspace.destroy, object())


def test_fused_workspace_is_trtllm_never_auto():
    kwargs = flashinfer_fused.workspace_kwargs(2, 1, 16, 64, torch.bfloat16, None)
    assert kwargs["backend"] == "trtllm" and "trtllm" in str(
        inspect.signature(comm.create_allreduce_fusion_workspace).parameters["backend"].annotation
    )


def test_fused_runs_through_the_harness_with_the_exact_reduction(monkeypatch, one_rank):
    calls = []

    def create(**kwargs):
        calls.append(("create", kwargs))
        return type("Workspace", (), {"destroy": lambda self: calls.append(("destroy", {}))})()

    def allreduce_fusion(
        input,
        workspace,
        pattern,
        output=None,
        residual_in=None,
        rms_gamma=None,
        rms_eps=1e-6,
        residual_out=None,
        norm_out=None,
        use_oneshot=None,
        **rest,
    ):
        calls.append(("fusion", {"pattern": pattern, "use_oneshot": use_oneshot}))
        summed = input.clone()  # one rank: the all-reduce is the identity
        if pattern == comm.AllReduceFusionPattern.kAllReduce:
            return summed
        residual_out.copy_(summed + residual_in)
        norm_out.copy_(rmsnorm_fp32(residual_out, rms_gamma, rms_eps))
        return norm_out

    monkeypatch.setattr(
        comm, "create_allreduce_fusion_workspace", binding(comm.create_allreduce_fusion_workspace, create)
    )
    monkeypatch.setattr(comm, "allreduce_fusion", binding(comm.allreduce_fusion, allreduce_fusion))
    impl = load_impl("flashinfer-fused")({"use_oneshot": True})
    result = replay_on_one_rank(impl, one_rank)
    assert result.status == "ok", result.message
    created = calls[0][1]
    assert created["max_token_num"] == 4 and created["hidden_dim"] == 64 and created["dtype"] == torch.bfloat16
    assert created["world_size"] == 1 and created["rank"] == 0 and created["group"] is one_rank
    patterns = [c[1]["pattern"] for c in calls if c[0] == "fusion"]
    assert patterns[:5] == [0, 1, 1, 1, 1]  # embed is a plain all-reduce; every layer op is fused
    assert all(c[1]["use_oneshot"] is True for c in calls if c[0] == "fusion")
    assert calls[-1][0] == "destroy"


def test_fused_returns_norm_then_residual(monkeypatch, one_rank):
    """A kernel writing the two outputs the wrong way round is caught by the harness's check."""

    def swapped(
        input,
        workspace,
        pattern,
        residual_in=None,
        rms_gamma=None,
        rms_eps=1e-6,
        residual_out=None,
        norm_out=None,
        **rest,
    ):
        if pattern == 0:
            return input.clone()
        norm_out.copy_(input + residual_in)
        residual_out.copy_(rmsnorm_fp32(norm_out, rms_gamma, rms_eps))
        return norm_out

    monkeypatch.setattr(
        comm, "create_allreduce_fusion_workspace", lambda **kw: type("W", (), {"destroy": lambda self: None})()
    )
    monkeypatch.setattr(comm, "allreduce_fusion", swapped)
    result = replay_on_one_rank(load_impl("flashinfer-fused")({"use_oneshot": False}), one_rank)
    assert result.status == "wrong"


# --- FlashInfer PCIe IPC ----------------------------------------------------------------------------------


def test_pcie_ipc_calls_bind_against_flashinfer():
    workspace = comm.PcieIpcAllReduceWorkspace
    kwargs = flashinfer_pcie.workspace_kwargs(
        group=None, max_numel=64 * 7168, dtype=torch.bfloat16, tune_cache="t.json"
    )
    bind(workspace, **kwargs)
    args, kwargs = flashinfer_pcie.tune_args(7168, torch.bfloat16)
    bind(workspace.tune, None, *args, **kwargs)
    args, kwargs = flashinfer_pcie.prepare_args([(1, 7168), (64, 7168)], torch.bfloat16)
    assert args == ([(1, 7168), (64, 7168)],)
    bind(workspace.prepare, None, *args, **kwargs)
    bind(workspace.all_reduce, None, X)
    bind(workspace.rebind_stream, None)
    bind(workspace.destroy, None)


class FakeStream:
    def __init__(self, name):
        self.name, self.waited_on = name, []

    def wait_stream(self, other):
        self.waited_on.append(other.name)


def fake_pcie_workspace(log):
    real = comm.PcieIpcAllReduceWorkspace

    class Workspace:
        def __init__(self, *args, **kwargs):
            bind(real, *args, **kwargs)
            log.append(("init", kwargs))

        def tune(self, *args, **kwargs):
            bind(real.tune, self, *args, **kwargs)
            log.append(("tune", args))

        def prepare(self, *args, **kwargs):
            bind(real.prepare, self, *args, **kwargs)
            log.append(("prepare", args[0]))
            return {shape: object() for shape in args[0]}

        def all_reduce(self, *args, **kwargs):
            bind(real.all_reduce, self, *args, **kwargs)
            return args[0].clone()  # out of place; one rank: the identity

        def rebind_stream(self):
            log.append(("rebind", None))

        def destroy(self):
            log.append(("destroy", None))

    return Workspace


def test_pcie_ipc_runs_through_the_harness_sized_exactly(monkeypatch, one_rank):
    log = []
    monkeypatch.setattr(comm, "PcieIpcAllReduceWorkspace", fake_pcie_workspace(log))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: STREAM)
    result = replay_on_one_rank(load_impl("flashinfer-pcie-ipc")({"tune": True}), one_rank, tokens=4, hidden=64)
    assert result.status == "ok", result.message
    assert [entry[0] for entry in log[:3]] == ["init", "tune", "prepare"]  # tune before prepare
    assert log[0][1]["max_numel"] == 4 * 64 and log[0][1]["dtype"] == torch.bfloat16
    assert log[1][1] == ([64],) and log[2][1] == [(4, 64)]
    assert ("rebind", None) not in log and log[-1] == ("destroy", None)


STREAM = FakeStream("default")


def test_pcie_ipc_tune_cache_is_the_settings_own_and_a_prepared_one_is_loaded_not_retuned(
    monkeypatch, one_rank, tmp_path
):
    """An untuned point reads a tune cache no tuned point wrote (its own folder: seeds); a tuned point whose setting
    the sweep prepared loads that tuning and does not tune inside its own time limit."""
    log = []
    monkeypatch.setattr(comm, "PcieIpcAllReduceWorkspace", fake_pcie_workspace(log))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: STREAM)
    untuned = load_impl("flashinfer-pcie-ipc")({})
    untuned.state_dir = tmp_path / "points" / "p001" / "state"
    assert replay_on_one_rank(untuned, one_rank).status == "ok"
    assert log[0][1]["tune_cache"] == str(untuned.state_dir / flashinfer_pcie.TUNE_CACHE)
    assert "tune" not in [e[0] for e in log] and "seed launch configurations (untuned)" in untuned.detail()
    assert untuned.preparation("nccl", {}) is None and "tune" in untuned.preparation("nccl", {"tune": True})
    prepared = tmp_path / "prepared" / "flashinfer-pcie-ipc-tuned"
    prepared.mkdir(parents=True)
    (prepared / flashinfer_pcie.TUNE_CACHE).write_text("{}")  # what the preparation's tune() wrote
    log.clear()
    tuned = load_impl("flashinfer-pcie-ipc")({"tune": True})
    tuned.state_dir = prepared
    assert replay_on_one_rank(tuned, one_rank).status == "ok"
    assert log[0][1]["tune_cache"] == str(prepared / flashinfer_pcie.TUNE_CACHE)
    assert "tune" not in [e[0] for e in log] and tuned.detail().startswith(
        "PcieIpcAllReduceWorkspace.all_reduce with tuned"
    )


def test_pcie_ipc_follows_the_caller_to_another_stream(monkeypatch):
    log = []
    impl = load_impl("flashinfer-pcie-ipc")({})
    impl._torch, impl.workspace = torch, fake_pcie_workspace(log)(group=None, max_numel=256)
    first, side = FakeStream("first"), FakeStream("side")
    current = [first]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: current[0])
    impl.all_reduce(X)
    impl.all_reduce(X)
    assert ("rebind", None) not in log
    current[0] = side
    impl.all_reduce(X)
    assert side.waited_on == ["first"] and log.count(("rebind", None)) == 1
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    current[0] = FakeStream("capture")
    impl.all_reduce(X)  # capture records on a side stream: the binding stays on "side"
    assert log.count(("rebind", None)) == 1 and impl._stream is side


# --- torch symmetric memory -------------------------------------------------------------------------------


def test_symm_mem_calls_bind_against_torch():
    import torch.distributed._symmetric_memory as torch_symm

    args, kwargs = symm_mem.buffer_args(64 * 7168, torch.bfloat16, torch.device("cpu"))
    bind(torch_symm.empty, *args, **kwargs)
    args, kwargs = symm_mem.rendezvous_args(X, "0")
    bind(torch_symm.rendezvous, *args, **kwargs)
    bind(torch_symm.enable_symm_mem_for_group, "0")
    schema_bind(torch.ops.symm_mem.one_shot_all_reduce_copy_out, *symm_mem.one_shot_args(X, X, "0", X))
    schema_bind(torch.ops.symm_mem.two_shot_all_reduce_out, *symm_mem.two_shot_args(X, "0", X))


def test_schema_binding_catches_a_swapped_argument():
    with pytest.raises(AssertionError, match="reduce_op must be str"):
        schema_bind(torch.ops.symm_mem.two_shot_all_reduce_out, X, X, "0", X)


@pytest.mark.parametrize("variant", ["one_shot", "two_shot"])
def test_symm_mem_runs_through_the_harness(monkeypatch, one_rank, variant):
    import torch.distributed._symmetric_memory as torch_symm

    seen = {}
    real_one_shot = torch.ops.symm_mem.one_shot_all_reduce_copy_out
    real_two_shot = torch.ops.symm_mem.two_shot_all_reduce_out

    def empty(*size, dtype=None, device=None):
        seen["buffer"] = torch.empty(*size, dtype=dtype, device=device)
        return seen["buffer"]

    def one_shot(symm_buffer, local_input, reduce_op, group_name, out):
        schema_bind(real_one_shot, symm_buffer, local_input, reduce_op, group_name, out)
        assert symm_buffer.data_ptr() == seen["buffer"].data_ptr()
        symm_buffer.copy_(local_input)
        return out.copy_(symm_buffer)

    def two_shot(symm_input, reduce_op, group_name, output):
        schema_bind(real_two_shot, symm_input, reduce_op, group_name, output)
        assert symm_input.data_ptr() == seen["buffer"].data_ptr()
        return output.copy_(symm_input)

    monkeypatch.setattr(torch_symm, "empty", binding(torch_symm.empty, empty))
    monkeypatch.setattr(torch_symm, "rendezvous", binding(torch_symm.rendezvous, lambda t, g: ("handle", g)))
    monkeypatch.setattr(
        torch_symm,
        "enable_symm_mem_for_group",
        binding(torch_symm.enable_symm_mem_for_group, lambda name: seen.setdefault("group", name)),
    )
    monkeypatch.setattr(torch.ops.symm_mem, "one_shot_all_reduce_copy_out", one_shot)
    monkeypatch.setattr(torch.ops.symm_mem, "two_shot_all_reduce_out", two_shot)
    result = replay_on_one_rank(load_impl("symm-mem")({"variant": variant}), one_rank, tokens=4, hidden=64)
    assert result.status == "ok", result.message
    assert seen["buffer"].numel() == 4 * 64 and seen["group"] == one_rank.group_name


# --- the unfused reference's norm kernel (torch_dist.py) ---------------------------------------------------


def test_unfused_reference_runs_flashinfers_rmsnorm_with_the_fused_kinds_pdl_setting(one_rank):
    """The fused-vs-reference comparison is fair only with one PDL setting for both kernels."""
    import flashinfer

    calls = []

    def norm(input, residual, weight, eps=1e-6, enable_pdl=None):
        calls.append(enable_pdl)
        residual.add_(input)
        input.copy_(rmsnorm_fp32(residual, weight, eps))

    impl = load_impl("nccl+rmsnorm")({})
    impl.setup(one_rank, None, torch.device("cpu"))
    impl._fused_add_rmsnorm = binding(flashinfer.fused_add_rmsnorm, norm)  # what setup() binds on CUDA
    x, residual = X.clone() + 1, X.clone()
    impl.all_reduce_rmsnorm(x, residual, X[0] + 1, 1e-6)
    fused_pdl = flashinfer_fused.allreduce_kwargs(X, object(), 0, True)["launch_with_pdl"]
    assert calls == [fused_pdl] and fused_pdl is False
    assert f"PDL {'on' if fused_pdl else 'off'}" in impl.detail()
    assert "PDL off" in load_impl("flashinfer-fused")({"use_oneshot": True}).detail()


# --- what the sweep builds before its first point (impls/jit_build.py) ---------------------------------


@pytest.mark.parametrize(
    "name, options", [("flashinfer-fused", {"use_oneshot": True}), ("flashinfer-pcie-ipc", {}), ("nccl+rmsnorm", {})]
)
def test_jit_builds_name_zero_argument_callables_that_return_buildables(name, options):
    from flashinfer.jit import core

    builds = load_impl(name).jit_builds("nccl", options)
    assert builds and load_impl(name).jit_builds("gloo", options) == ()  # nothing is built for CPU ranks
    for build in builds:
        module_name, _, attr = build.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        inspect.signature(factory).bind()
        returned = inspect.signature(factory).return_annotation
        if returned is core.JitSpec:  # FlashInfer's own generators: what its kernels build on first use
            assert "name" in {f.name for f in dataclasses.fields(core.JitSpecNvcc)}
            assert isinstance(core.JitSpecNvcc.is_compiled, property)
            assert isinstance(core.JitSpecNvcc.jit_library_path, property)
            inspect.signature(core.JitSpec.build_and_load).bind(None)
        else:
            assert factory.name and callable(factory.build_and_load)
    assert load_impl("nccl+rmsnorm").jit_builds("nccl", {"norm": "torch"}) == ()


def test_flashinfers_modules_are_the_ones_its_kernels_build_on_first_use():
    """get_trtllm_comm_module / get_pcie_ipc_comm_module call exactly the generators the sweep pre-builds."""
    for name, key in [
        ("flashinfer-fused", "comm.trtllm_ar.get_trtllm_comm_module"),
        ("flashinfer-pcie-ipc", "comm.pcie_ipc_ar.get_pcie_ipc_comm_module"),
    ]:
        (build,) = load_impl(name).jit_builds("nccl", {})
        source = inspect.getsource(installed(key)) if INSTALLED else record.FIRST_USE_BUILDS[key]
        assert f"{build.partition(':')[2]}().build_and_load()" in source


def installed(key: str):
    """The installed FlashInfer object a record key names (`comm.trtllm_ar.get_trtllm_comm_module`)."""
    module, _, attribute = f"flashinfer.{key}".rpartition(".")
    return getattr(importlib.import_module(module), attribute)


@pytest.mark.skipif(not INSTALLED, reason="FlashInfer is not installed: its calls are bound against the record")
def test_the_record_is_what_the_installed_flashinfer_declares():
    from importlib.metadata import version

    from flashinfer.jit import core

    assert version("flashinfer-python") == record.VERSION, f"refresh tests/flashinfer_record.py ({record.SOURCE})"
    assert record.installed_signatures() == record.SIGNATURES
    backend = inspect.signature(comm.create_allreduce_fusion_workspace).parameters["backend"].annotation
    assert str(backend) == record.BACKEND_ANNOTATION
    assert {name: int(getattr(comm.AllReduceFusionPattern, name)) for name in record.PATTERNS} == record.PATTERNS
    assert set(record.JIT_SPEC_FIELDS) <= {f.name for f in dataclasses.fields(core.JitSpecNvcc)}
    assert all(isinstance(getattr(core.JitSpecNvcc, name), property) for name in record.JIT_SPEC_PROPERTIES)
    for key, text in record.FIRST_USE_BUILDS.items():
        assert text in inspect.getsource(installed(key))
