"""Kernels built once before the first point: the builder's outcomes, the gate that skips useless builds, and
on real gloo ranks a failed build turning its points `unsupported` with the compiler's error (in the hostile sweep
of test_sweep_hostile.py)."""

import pytest

from commprof.impls import jit_build
from commprof.sweep.planning.config import parse_sweep
from commprof.sweep.planning.points import sweep_impls
from commprof.sweep.running.prebuild import build_refusal, failures, run_builder
from tests.plugins.builds import NVCC_FAILURE, FakeSpec

BUILDS = "tests.plugins.builds"


def test_a_failed_build_keeps_the_compilers_error():
    events = []
    outcome = jit_build.run_build(f"{BUILDS}:broken_comm", events.append)
    assert outcome["status"] == "failed" and outcome["name"] == "fake_comm"
    assert 'fake_comm.cu(42): error: identifier "__nv_fp8x4_e4m3" is undefined' in outcome["error"]
    assert "1 error detected" in outcome["error"] and "[1/2]" not in outcome["error"]
    assert [e["event"] for e in events] == ["start", "done"]


def test_a_built_or_cached_module_reports_where_it_lies(monkeypatch):
    outcome = jit_build.run_build(f"{BUILDS}:fine_comm", lambda e: None)
    assert outcome["status"] == "built" and outcome["artifact"] == "/cache/cached_ops/fine_comm/fine_comm.so"
    monkeypatch.setattr("tests.plugins.builds.fine_comm", lambda: FakeSpec("fine_comm", compiled=True))
    assert jit_build.run_build(f"{BUILDS}:fine_comm", lambda e: None)["status"] == "cached"


def test_the_error_is_the_lines_that_say_error():
    assert jit_build.compiler_error(NVCC_FAILURE, "") == (
        '/src/fake_comm.cu(42): error: identifier "__nv_fp8x4_e4m3" is undefined\n'
        '1 error detected in the compilation of "/src/fake_comm.cu".'
    )
    assert jit_build.compiler_error("FileNotFoundError: nvcc", "") == "FileNotFoundError: nvcc"
    assert jit_build.compiler_error("", "Traceback\n  a\n  b\nOSError: x") == "  a\n  b\nOSError: x"


def test_gated_implementations_are_not_built():
    request = {
        "backend": "nccl",
        "world_size": 2,
        "dtype": "bfloat16",
        "tokens": [2],
        "hidden_size": 64,
        "impls": [
            ["flashinfer-fused", {"use_oneshot": True}],  # its gate refuses a machine without CUDA: no build
            [f"{BUILDS}:NeedsFineBuild", {}],
            [f"{BUILDS}:NeedsBrokenBuild", {}],
            ["default", {}],
        ],
    }
    assert jit_build.planned_builds(request) == [f"{BUILDS}:fine_comm", f"{BUILDS}:broken_comm"]


def test_the_sweeps_implementations_include_its_stages_axes():
    spec = parse_sweep(
        'name = "x"\n[axes]\nimpl = ["default", { name = "symm-mem", options = { variant = "one_shot" } }]\n'
        '[[stages]]\ntop_k = 1\n[stages.axes]\nimpl = ["nccl+rmsnorm"]\n'
    )
    assert sweep_impls(spec) == [("default", {}), ("symm-mem", {"variant": "one_shot"}), ("nccl+rmsnorm", {})]


def test_a_point_is_refused_when_any_nodes_build_failed():
    reports = [
        {"cache_dir": None, "builds": {f"{BUILDS}:fine_comm": {"status": "built"}}},
        None,  # a rank that did not build
        {"cache_dir": None, "builds": {f"{BUILDS}:broken_comm": {"status": "failed", "error": "x.cu(1): error: y"}}},
    ]
    failed = failures(reports)
    assert failed == {f"{BUILDS}:broken_comm": "x.cu(1): error: y"}

    class Point:
        impl, options = f"{BUILDS}:NeedsBrokenBuild", {}

    assert "x.cu(1): error: y" in build_refusal(Point, "gloo", failed)
    Point.impl = f"{BUILDS}:NeedsFineBuild"
    assert build_refusal(Point, "gloo", failed) is None


@pytest.mark.processes
@pytest.mark.parametrize(
    "impl, timeout_s, why",
    [("NeedsDyingBuild", 120, "the builder exited 3"), ("NeedsEndlessBuild", 10, "no result within 10 s")],
)
def test_a_build_the_builder_never_finished_is_a_failed_build(tmp_path, impl, timeout_s, why):
    request = {"backend": "gloo", "world_size": 1, "dtype": "bfloat16", "tokens": [2], "hidden_size": 64}
    notes = []
    report = run_builder({**request, "impls": [[f"{BUILDS}:{impl}", {}]]}, notes.append, tmp_path / "b.log", timeout_s)
    (outcome,) = report["builds"].values()
    assert outcome["status"] == "failed" and outcome["error"].startswith(why), outcome
    assert any("building (first use" in n for n in notes) and any(why in n for n in notes)
