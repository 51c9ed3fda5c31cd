"""b12x and b12x-fused: their gates on fabricated facts (no b12x needed), and every call into b12x bound against
the installed package's signatures (skipped, with the reason, only where b12x is not installed)."""

from dataclasses import replace

import pytest

from commprof.impls import b12x as b
from commprof.impls.base import ImplContext
from commprof.impls.registry import load_impl

SM120 = ImplContext(
    backend="nccl",
    world_size=8,
    dtype="bfloat16",
    tokens=(1, 4, 8, 16),
    hidden_size=7168,
    device_type="cuda",
    compute_capability=(12, 0),
    p2p_all_pairs=True,
    libraries={"b12x": "1.5.1"},
)


def gate(name="b12x", **facts):
    options = facts.pop("options", {})
    return load_impl(name).gate(replace(SM120, options=options, **facts))


def test_both_run_on_an_sm120_pcie_box_with_b12x():
    assert gate() and gate("b12x-fused") and gate(options={"variant": "oneshot"}) and gate(options={"variant": "dma"})


@pytest.mark.parametrize(
    "facts, reason",
    [
        ({"backend": "gloo", "device_type": "cpu"}, "needs CUDA GPUs and the NCCL backend (this run: gloo on cpu)"),
        ({"libraries": {}}, "needs b12x >= 1.5, which is not installed (pip install 'commprof[b12x]')"),
        ({"libraries": {"b12x": "1.2.6"}}, "needs b12x >= 1.5 (installed: 1.2.6"),
        ({"compute_capability": (9, 0)}, "b12x's kernels run on SM120 / SM121 (consumer Blackwell), not SM90"),
        ({"compute_capability": (10, 0)}, "not SM100"),
        ({"world_size": 3}, "b12x oneshot runs at world size 2, 4, 6, 8 or 10, not 3"),
        ({"options": {"variant": "twoshot"}}, "b12x twoshot runs at world size 4, not 8"),
        ({"p2p_all_pairs": False, "p2p_detail": "no peer access GPU0->GPU4"}, "needs peer-to-peer access"),
        ({"dtype": "float16", "world_size": 4, "options": {"variant": "twoshot"}}, "takes bfloat16, not float16"),
        ({"options": {"variant": "nccl"}}, "'nccl' is not a value of b12x's option 'variant'"),
    ],
)
def test_each_gate_says_why(facts, reason):
    support = gate(**facts)
    assert not support and reason in support.reason


def test_on_cpu_both_are_unsupported_with_a_reason():
    cpu = replace(SM120, backend="gloo", device_type="cpu", compute_capability=None, p2p_all_pairs=None)
    for name in ("b12x", "b12x-fused"):
        support = load_impl(name).gate(cpu)
        assert not support and "needs CUDA GPUs" in support.reason


def test_per_t_shapes_and_the_fused_row_limit():
    fused, plain = load_impl("b12x-fused"), load_impl("b12x")
    assert fused.support_tokens(SM120, 36) and not fused.support_tokens(SM120, 37)
    assert "at most 36 rows" in fused.support_tokens(SM120, 64).reason
    four = replace(SM120, world_size=4, options={"variant": "twoshot"})
    assert plain.support_tokens(four, 8) and "T divisible by the world size (4)" in plain.support_tokens(four, 6).reason
    odd = replace(SM120, hidden_size=7)
    assert "multiple of 16 bytes" in plain.support_tokens(odd, 1).reason


def test_auto_is_one_shot_at_eight_gpus_and_switches_by_size_where_two_shot_runs():
    cls = load_impl("b12x")
    assert cls.algorithm({}, 1 << 20, 8) == "one-shot"  # b12x has no two-shot at world size 8
    assert cls.algorithm({}, 14 << 10, 4) == "one-shot" and cls.algorithm({}, 1 << 20, 4) == "two-shot"
    assert b.runtime_variant("auto", 1 << 20, 4) == "twoshot" and b.runtime_variant("dma", 1, 8) == "dma"
    assert load_impl("b12x-fused").fuses_rmsnorm and load_impl("b12x-fused").algorithm({}, 1 << 20, 8) == "one-shot"
