"""All-reduce implementations: the registry, plug-in loading, options and every gating rule, on fabricated facts."""

from dataclasses import replace

import pytest

from commprof.errors import UsageError
from commprof.impls import gating, registry
from commprof.impls.base import AllReduceImpl, ImplContext
from commprof.impls.registry import BUILTINS, interface_problem, load_impl
from commprof.impls.symm_mem import SYMM_MEM_VARIANT_OPS, symm_mem_support

# An 8 x H100 NVLink box running Kimi-K2.5 at TP 8 with bf16: every built-in applies here.
GOOD = ImplContext(
    backend="nccl",
    world_size=8,
    dtype="bfloat16",
    tokens=(16, 64),
    hidden_size=7168,
    device_type="cuda",
    compute_capability=(9, 0),
    p2p_all_pairs=True,
    libraries={"flashinfer-python": "0.7.4"},
    torch_version="2.13.0",
)

FUSED = {"use_oneshot": True}
TWO_SHOT = {"use_oneshot": False}


def fused(ctx=GOOD, **changes):
    return load_impl("flashinfer-fused").gate(replace(ctx, **{"options": FUSED, **changes}))


def pcie(ctx=GOOD, **changes):
    return load_impl("flashinfer-pcie-ipc").gate(replace(ctx, **{"options": {}, **changes}))


ALL_SYMM_MEM_OPS = tuple(SYMM_MEM_VARIANT_OPS.values())


def symm(ctx=GOOD, available=ALL_SYMM_MEM_OPS, **changes):
    ctx = replace(ctx, **{"options": {"variant": "one_shot"}, **changes})
    problems = load_impl("symm-mem").option_problems(ctx.options)
    return symm_mem_support(ctx, available) if not problems else gating.unsupported(problems[0][1])


# --- registry and plug-ins ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BUILTINS))
def test_every_builtin_loads_without_a_gpu_and_follows_the_interface(name):
    cls = load_impl(name)
    assert issubclass(cls, AllReduceImpl) and cls.name == name
    assert interface_problem(cls) is None


def test_builtin_flags_match_what_each_kernel_does():
    assert load_impl("flashinfer-fused").fuses_rmsnorm and load_impl("flashinfer-fused").capturable
    assert not load_impl("flashinfer-pcie-ipc").fuses_rmsnorm and load_impl("flashinfer-pcie-ipc").capturable
    assert not load_impl("symm-mem").fuses_rmsnorm and load_impl("symm-mem").capturable
    assert not load_impl("gloo").capturable


def test_the_registry_reads_each_builtins_facts_and_leaves_plug_ins_unimported():
    fused = ["nccl+rmsnorm", "flashinfer-fused", "b12x-fused"]
    assert [n for n in registry.known_names() if registry.fuses_rmsnorm(n)] == fused
    assert [n for n in registry.known_names() if registry.runs_on_nccl(n)] == ["default", "nccl", "nccl+rmsnorm"]
    assert registry.unfused_reference() == "nccl+rmsnorm"
    assert registry.option_kinds("symm-mem") == {"variant": ("auto", "one_shot", "two_shot")}
    assert registry.required_options("flashinfer-fused") == () and registry.required_options("symm-mem") == ()
    assert registry.option_kinds("default") == {} and registry.option_kinds("no_such_pkg.kernels:Fast") is None
    assert not registry.fuses_rmsnorm("no_such_pkg.kernels:Fast") and registry.builtin("gloo", "gloo").name == "gloo"


def test_unknown_name_lists_the_builtins():
    with pytest.raises(UsageError, match="unknown all-reduce implementation 'nvls'.*flashinfer-pcie-ipc"):
        load_impl("nvls")


def test_missing_module_is_one_clear_line():
    with pytest.raises(UsageError, match="cannot import module 'no_such_pkg.kernels'"):
        load_impl("no_such_pkg.kernels:Fast")


def test_missing_attribute_is_one_clear_line():
    with pytest.raises(UsageError, match="module 'tests.plugins.interface_cases' has no attribute 'Nope'"):
        load_impl("tests.plugins.interface_cases:Nope")


def test_module_that_fails_while_importing_is_reported_not_raised():
    with pytest.raises(
        UsageError,
        match="importing 'tests.plugins.broken_import' failed .RuntimeError: plug-in could not find its kernel library",
    ):
        load_impl("tests.plugins.broken_import:Anything")


def test_empty_module_or_class_part_is_refused():
    with pytest.raises(UsageError, match="expected package.module:Class"):
        load_impl("tests.plugins.interface_cases:")


@pytest.mark.parametrize(
    "attr, message",
    [
        ("not_a_class", "not_a_class is not a subclass of commprof.impls.base.AllReduceImpl"),
        ("DefinesNothing", "defines neither all_reduce nor .fuses_rmsnorm and all_reduce_rmsnorm."),
        ("NormWithoutFlag", "defines neither all_reduce"),
        ("FusedWithoutNorm", "sets fuses_rmsnorm but does not define all_reduce_rmsnorm"),
        ("SupportNotClassmethod", "support must be a classmethod"),
        ("RequiredWithoutKind", "required_options names mode, which option_kinds does not describe"),
    ],
)
def test_a_class_that_does_not_follow_the_interface_is_refused(attr, message):
    with pytest.raises(UsageError, match=message) as info:
        load_impl(f"tests.plugins.interface_cases:{attr}")
    assert "docs/implementations.md" in str(info.value) and "\n" not in str(info.value)


def test_the_faulty_fixtures_and_a_fused_only_class_are_accepted():
    assert load_impl("tests.plugins.interface_cases:FusedOnly").fuses_rmsnorm
    assert load_impl("tests.plugins.faulty:SilentNoOp").name == "silent-no-op"


# --- options --------------------------------------------------------------------------------------------------


def test_flashinfer_fused_alone_picks_one_shot_or_two_shot_by_size():
    cls = load_impl("flashinfer-fused")
    assert fused(options={}) and cls({}).use_oneshot is None
    assert fused(options={"use_oneshot": "yes"}).reason == (
        "'yes' is not a value of flashinfer-fused's option 'use_oneshot' (allowed: true, false)"
    )
    assert cls(FUSED).use_oneshot is True and cls(TWO_SHOT).use_oneshot is False
    assert [cls.algorithm({}, n, 8) for n in (14 << 10, 64 << 10, (64 << 10) + 1)] == [
        "one-shot",
        "one-shot",
        "two-shot",
    ]
    assert cls.algorithm({"use_oneshot": True}, 1 << 20, 8) == "one-shot"
    assert cls.algorithm({"use_oneshot": False}, 1024, 8) == "two-shot"


def test_unknown_options_are_refused_by_name():
    assert "flashinfer-fused has no option 'oneshot' (allowed: use_oneshot)" in fused(options={"oneshot": True}).reason
    assert "has no option 'tunes' (allowed: tune)" in pcie(options={"tunes": True}).reason
    with pytest.raises(UsageError, match="symm-mem has no option 'mode'"):
        load_impl("symm-mem")({"variant": "one_shot", "mode": 1})
    with pytest.raises(UsageError, match="nccl has no option 'x' .allowed: none."):
        load_impl("nccl")({"x": 1})


def test_pcie_tune_defaults_off_and_must_be_a_bool():
    cls = load_impl("flashinfer-pcie-ipc")
    assert cls({}).tune is False and cls({"tune": True}).tune is True
    assert "1 is not a value of flashinfer-pcie-ipc's option 'tune'" in pcie(options={"tune": 1}).reason
    with pytest.raises(UsageError, match="'on' is not a value of flashinfer-pcie-ipc's option 'tune'"):
        cls({"tune": "on"})


def test_symm_mem_variant_defaults_to_auto_by_size():
    cls = load_impl("symm-mem")
    assert cls({"variant": "two_shot"}).variant == "two_shot" and cls({}).variant == "auto"
    assert symm(options={})
    with pytest.raises(UsageError, match="'multimem' is not a value of symm-mem's option 'variant' .allowed: auto"):
        cls({"variant": "multimem"})
    assert cls.algorithm({}, 14 << 10, 8) == "one-shot" and cls.algorithm({}, 1 << 20, 8) == "two-shot"
    assert cls.algorithm({"variant": "one_shot"}, 1 << 20, 8) == "one-shot"


def test_plug_ins_check_their_own_options():
    assert load_impl("tests.plugins.interface_cases:FusedOnly")({"anything": 1}).options == {"anything": 1}


# --- gating: every rule, one fabricated fact at a time ----------------------------------------------------------


def test_everything_applies_on_a_hopper_nvlink_box():
    assert fused() and fused(options=TWO_SHOT) and pcie() and symm()
    assert symm(options={"variant": "two_shot"})


@pytest.mark.parametrize("support", [fused, pcie, symm])
def test_cpu_ranks_are_refused_with_the_reason(support):
    result = support(backend="gloo", device_type="cpu")
    assert not result and result.reason == "needs CUDA GPUs and the NCCL backend (this run: gloo on cpu)"


@pytest.mark.parametrize(
    "capability, ok",
    [
        ((9, 0), True),
        ((10, 0), True),
        ((10, 3), True),
        ((12, 0), True),
        ((12, 1), True),
        ((8, 0), False),
        ((8, 9), False),
        ((11, 0), False),
    ],
)
def test_trtllm_kernels_run_on_sm90_sm10x_sm12x_only(capability, ok):
    result = fused(compute_capability=capability)
    assert bool(result) == ok
    if not ok:
        assert f"not SM{capability[0]}{capability[1]}" in result.reason


def test_sm120_needs_flashinfer_0_6_17_for_the_trtllm_kernels():
    old = fused(compute_capability=(12, 0), libraries={"flashinfer-python": "0.6.16"})
    assert not old and "support SM120 from flashinfer-python 0.6.17 (installed: 0.6.16)" in old.reason
    assert not fused(compute_capability=(12, 0), libraries={"flashinfer-python": "0.6.17rc2"})
    assert fused(compute_capability=(12, 0), libraries={"flashinfer-python": "0.6.17"})
    assert fused(compute_capability=(9, 0), libraries={"flashinfer-python": "0.6.16"})


def test_unknown_capability_is_refused_for_the_arch_specific_kernels_only():
    assert "known compute capability" in fused(compute_capability=None).reason
    assert pcie(compute_capability=None) and symm(compute_capability=None)


@pytest.mark.parametrize(
    "world, fused_ok, pcie_ok",
    [(2, True, True), (4, True, True), (6, False, False), (8, True, True), (16, True, False), (3, False, False)],
)
def test_world_sizes(world, fused_ok, pcie_ok):
    assert bool(fused(world_size=world)) == fused_ok
    assert bool(pcie(world_size=world)) == pcie_ok
    if not pcie_ok:
        assert f"world size 2, 4 or 8, not {world}" in pcie(world_size=world).reason
    if not fused_ok:
        assert f"world size 2, 4, 8 or 16, not {world}" in fused(world_size=world).reason


def test_symm_mem_two_shot_has_no_generic_world_size_but_one_shot_does():
    assert symm(world_size=6)
    refused = symm(world_size=6, options={"variant": "two_shot"})
    assert not refused and "two-shot runs at world size 2, 4 or 8, not 6" in refused.reason


@pytest.mark.parametrize(
    "dtype, fused_ok, pcie_ok, symm_ok",
    [("bfloat16", True, True, True), ("float16", True, True, False), ("float32", True, False, True)],
)
def test_dtypes(dtype, fused_ok, pcie_ok, symm_ok):
    assert (bool(fused(dtype=dtype)), bool(pcie(dtype=dtype)), bool(symm(dtype=dtype))) == (fused_ok, pcie_ok, symm_ok)
    if not pcie_ok:
        assert pcie(dtype=dtype).reason == "FlashInfer's PCIe IPC all-reduce takes bfloat16 or float16, not float32"


@pytest.mark.parametrize("support", [fused, pcie, symm])
def test_no_p2p_between_some_pair_is_refused_with_the_probe_detail(support):
    detail = "no peer access GPU0->GPU4 (NVML: read IOH topology not supported)"
    result = support(p2p_all_pairs=False, p2p_detail=detail)
    assert not result
    assert result.reason == (
        "needs peer-to-peer access between every pair of GPUs: no peer access GPU0->GPU4 "
        "(NVML: read IOH topology not supported)"
    )
    assert support(p2p_all_pairs=None)  # not probed: the correctness check still guards the run


@pytest.mark.parametrize(
    "installed, fused_ok, pcie_ok",
    [
        (None, False, False),
        ("0.5.3", False, False),
        ("0.6.10", False, False),
        ("0.6.11", True, False),
        ("0.6.18", True, False),
        ("0.6.18.post1", True, False),
        ("0.7.0rc1", True, False),
        ("0.7.0", True, True),
        ("0.7.4", True, True),
    ],
)
def test_flashinfer_versions(installed, fused_ok, pcie_ok):
    assert bool(fused(libraries={"flashinfer-python": installed})) == fused_ok
    assert bool(pcie(libraries={"flashinfer-python": installed})) == pcie_ok
    if installed is None:
        assert (
            "not installed (pip install 'commprof[flashinfer]')" in pcie(libraries={"flashinfer-python": None}).reason
        )
    elif not pcie_ok:
        assert "pip install -U 'flashinfer-python>=0.7.0'" in pcie(libraries={"flashinfer-python": installed}).reason


def test_trtllm_needs_16_byte_rows():
    assert fused(hidden_size=7168) and fused(hidden_size=4100, dtype="float32")
    refused = fused(hidden_size=4100)
    assert not refused and "hidden size divisible by 8 (16-byte accesses), not 4100" in refused.reason


def test_symm_mem_needs_its_op_in_this_torch():
    refused = symm(available=frozenset(), torch_version="2.4.0")
    assert not refused and refused.reason == "this torch (2.4.0) has no torch.ops.symm_mem.one_shot_all_reduce_copy_out"


def test_installed_torch_provides_both_symm_mem_ops():
    from commprof.impls.symm_mem import installed_symm_mem_ops

    assert installed_symm_mem_ops() == frozenset(SYMM_MEM_VARIANT_OPS.values())


# --- per-T gating -------------------------------------------------------------------------------------------


def test_two_shot_needs_more_tokens_than_ranks():
    cls = load_impl("flashinfer-fused")
    ctx = replace(GOOD, options=TWO_SHOT)
    assert not cls.support_tokens(ctx, 8) and cls.support_tokens(ctx, 9)
    assert cls.support_tokens(ctx, 1).reason == "FlashInfer two-shot needs T > world size (8), not T = 1"
    assert cls.support_tokens(replace(ctx, options=FUSED), 1)  # one-shot takes any T


def test_one_shot_refuses_a_t_that_flashinfer_would_silently_run_two_shot():
    cls = load_impl("flashinfer-fused")
    ctx = replace(GOOD, options=FUSED)
    # 2 bytes x 7168 x 8 ranks = 114,688 bytes per token; the buffer holds 2046 MiB.
    assert cls.support_tokens(ctx, 18_700) and not cls.support_tokens(ctx, 18_710)
    assert "runs two-shot" in cls.support_tokens(ctx, 18_710).reason


def test_pcie_ipc_admits_whole_packs_with_one_per_rank():
    cls = load_impl("flashinfer-pcie-ipc")
    tiny = replace(GOOD, hidden_size=4, options={})
    assert cls.support_tokens(tiny, 16)  # 64 elements = 8 packs of 8
    assert "at least 64 elements; T = 8 gives 32" in cls.support_tokens(tiny, 8).reason
    assert not cls.support_tokens(tiny, 3)  # 12 elements: not whole packs
    assert cls.support_tokens(replace(GOOD, options={}), 1)


def test_symm_mem_needs_4_byte_aligned_sizes():
    cls = load_impl("symm-mem")
    odd = replace(GOOD, hidden_size=3, options={"variant": "one_shot"})
    assert not cls.support_tokens(odd, 1) and cls.support_tokens(odd, 2)


def test_builtins_without_per_t_rules_admit_every_t():
    assert load_impl("nccl").support_tokens(GOOD, 1)


# --- versions -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "installed, minimum, ok",
    [
        ("0.6.17", "0.6.17", True),
        ("0.6.17rc5", "0.6.17", False),
        ("0.6.16.post4", "0.6.17", False),
        ("0.7.0", "0.6.18", True),
        ("0.6.18.post1", "0.6.18", True),
        ("1.0", "0.6.18", True),
        ("0.6.2", "0.6.17", False),
        ("v0.6.17", "0.6.17", True),
    ],
)
def test_version_comparison(installed, minimum, ok):
    assert gating.version_at_least(installed, minimum) == ok


def test_symm_mem_needs_native_p2p_atomics_where_nvml_says_there_are_none():
    none = "NVML reports no P2P atomics for GPU0->GPU1 (not supported)"
    refused = symm(p2p_atomics=False, p2p_atomics_detail=none)
    assert not refused and "system-scope atomics" in refused.reason and none in refused.reason
    assert not symm(p2p_atomics=False, options={"variant": "two_shot"})
    assert symm(p2p_atomics=True) and symm(p2p_atomics=None)  # unknown is let through, as for P2P itself
    assert fused(p2p_atomics=False) and pcie(p2p_atomics=False)  # their kernels use plain loads and stores
