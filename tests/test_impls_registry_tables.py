"""Adding an implementation is its module plus one registry line: every table built from the registry finds it
(the GPU smoke's points, the engines' switches, the trace matcher), or its explicit "none"."""

from __future__ import annotations

import pytest

from commprof.gpu_smoke.points import impl_points
from commprof.impls import registry
from commprof.report.analysis.engine_switches import routing_variables
from commprof.report.exports.engine_hints import engine_flags
from commprof.trace.kernels import identify, kernel_names, runs_as


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(registry.BUILTINS, "throwaway", "tests.plugins.throwaway:ThrowawayAllReduce")
    monkeypatch.setitem(registry.BUILTINS, "quiet", "tests.plugins.throwaway:QuietAllReduce")
    registry.builtin.cache_clear()
    yield
    registry.builtin.cache_clear()


def test_a_new_implementation_is_in_every_table(registered):
    (point,) = [p for p in impl_points() if p.table["impl"] == "throwaway"]
    assert point.label == "throwaway fast" and point.table["options"] == {"fast": True}
    assert [s.switch for s in routing_variables()["throwaway"]] == ["SGLANG_THROWAWAY_AR=1"]
    assert [f.setting for f in engine_flags()["throwaway"]] == ["--throwaway-fusion"]
    table = kernel_names()
    assert identify("void throwaway_ar_kernel<bf16>(float*)", table).implementation == "throwaway"
    assert identify("void not_throwaway_ar_kernel()", table) is None  # whole names only


def test_its_explicit_none_keeps_it_out_of_each_table(registered):
    assert "quiet" not in {p.table["impl"] for p in impl_points()}
    assert "quiet" not in routing_variables() and "quiet" not in engine_flags()
    assert "quiet" not in {k.implementation for k in kernel_names()} and "quiet" not in runs_as()


def test_the_built_ins_tables_as_their_modules_declare_them():
    assert {p.table["impl"] for p in impl_points()} >= {"symm-mem", "flashinfer-fused", "b12x", "b12x-fused"}
    assert set(routing_variables()) == {"flashinfer-pcie-ipc", "b12x"} and set(engine_flags()) == {"flashinfer-fused"}
    assert runs_as() == {"default": "nccl", "nccl+rmsnorm": "nccl", "b12x-fused": "b12x"}
