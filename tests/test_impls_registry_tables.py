"""Adding an implementation is its module plus one registry line: every table built from the registry finds it
(the GPU smoke's points, the engines' switches, the trace matcher), or its explicit "none"."""

from __future__ import annotations

import pytest

from commprof.gpu_smoke.points import impl_points
from commprof.impls import registry
from commprof.impls.registry import engine_flag_table, engine_switch_table
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
    assert [s.switch for s in engine_switch_table()["throwaway"]] == ["SGLANG_THROWAWAY_AR=1"]
    assert [f.setting for f in engine_flag_table()["throwaway"]] == ["--throwaway-fusion"]
    table = kernel_names()
    assert identify("void throwaway_ar_kernel<bf16>(float*)", table).implementation == "throwaway"
    assert identify("void not_throwaway_ar_kernel()", table) is None  # whole names only


def test_a_new_implementation_is_in_the_engine_dispatch_the_trace_matcher_and_the_context(registered):
    from commprof.impls.context import build_impl_context
    from commprof.report.analysis.engine_dispatch import TABLES, Box, Op, dispatch

    table = TABLES[("sglang", "0.5.23")]
    box, small, large = (
        Box(9.0, 8, True, True),
        Op("x", 1, 14336, "bfloat16", 7168),
        Op("x", 64, 917504, "bfloat16", 7168),
    )
    on = {"SGLANG_THROWAWAY_AR": "1", "SGLANG_THROWAWAY_MAX_BYTES": "65536"}
    assert dispatch(table, box, small, {})[0].path == "custom all-reduce"
    assert dispatch(table, box, small, on)[0].path == "throwaway"  # before custom all-reduce, as it declares
    rule, skipped = dispatch(table, box, large, on)
    assert rule.path == "custom all-reduce" and any("SGLANG_THROWAWAY_MAX_BYTES" in why for why in skipped)
    vllm = [t for t in TABLES.values() if t.engine == "vLLM"]
    assert vllm and all(dispatch(t, box, small, on)[0].path != "throwaway" for t in vllm)  # an SGLang switch
    assert identify("void throwaway_ar_kernel<bf16>(float*)").implementation == "throwaway"  # the default table
    assert build_impl_context("gloo", 2, "bfloat16", [1], 7168).libraries["throwaway-lib"] is None


def test_its_explicit_none_keeps_it_out_of_each_table(registered):
    assert "quiet" not in {p.table["impl"] for p in impl_points()}
    assert "quiet" not in engine_switch_table() and "quiet" not in engine_flag_table()
    assert "quiet" not in {k.implementation for k in kernel_names()} and "quiet" not in runs_as()


def test_the_built_ins_tables_as_their_modules_declare_them():
    """Properties, not the current list: each table holds exactly the built-ins whose class declares that fact."""
    classes = registry.builtin_classes()
    assert {p.table["impl"] for p in impl_points()} == {n for n, c in classes.items() if not isinstance(c.smoke, str)}
    assert set(engine_switch_table()) == {n for n, c in classes.items() if c.engine_switches}
    assert set(engine_flag_table()) == {n for n, c in classes.items() if c.engine_flags}
    assert {"flashinfer-pcie-ipc", "b12x"} <= set(engine_switch_table()) and "flashinfer-fused" in engine_flag_table()
    assert runs_as()["default"] == "nccl" and runs_as()["b12x-fused"] == "b12x"
