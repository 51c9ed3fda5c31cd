"""The engines' all-reduce dispatch, table by table (SGLang 0.5.23, vLLM 0.33 and 0.34, read from their released
wheels), asserted as properties on the boxes each rule matters for. Pure."""

import pytest

from commprof.errors import UsageError
from commprof.report.analysis.decide_engines import fusion_refusals
from commprof.report.analysis.engine_dispatch import (
    TABLES,
    Box,
    Op,
    dispatch,
    engine_paths,
    fusion_flag_fails,
    known_versions,
    parse_engine,
)
from commprof.report.analysis.engine_switch_rules import switch_disagreement, with_switch_rules
from tests.decisions import fused_hints_at

PCIE8 = Box(sm=12.0, tp=8, nvlink=False, p2p=True)
H100X8 = Box(sm=9.0, tp=8, nvlink=True, p2p=True, multicast=True)
HIDDEN = 7168
VLLM = ("vllm==0.33", "vllm==0.34")
SIZES = (1, 2, 4, 8, 16, 32, 34, 35, 64, 128, 256, 512, 1024, 4096)


def ops(*tokens, dtype="bfloat16", hidden=HIDDEN, **extra):
    size = 4 if dtype == "float32" else 2
    return [Op("layer all-reduce", t, t * hidden * size, dtype, hidden, **extra) for t in tokens]


def route(engine, box, switches, op):
    return dispatch(TABLES[parse_engine(engine)], box, op, switches)


def paths(engine, box, switches, *tokens):
    return [route(engine, box, switches, op)[0].path for op in ops(*tokens)]


@pytest.mark.parametrize("engine", VLLM)
@pytest.mark.parametrize("multicast", [True, None])
def test_vllm_defaults_send_small_ops_to_flashinfer_on_a_hopper_nvlink_box(engine, multicast):
    box = Box(9.0, 8, True, True, multicast=multicast)
    for op in ops(*SIZES):
        path = route(engine, box, {}, op)[0].path
        assert (path == "FlashInfer all-reduce") == (op.nbytes <= 512 * 1024), (op.tokens, path)


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_custom_ar_cap_shrinks_only_when_symm_mem_is_live(engine):
    no_fi = {"VLLM_ALLREDUCE_USE_FLASHINFER": "0"}
    small, middle = Op("x", 1, 200 * 1024, "bfloat16", HIDDEN), Op("x", 1, 300 * 1024, "bfloat16", HIDDEN)
    assert route(engine, H100X8, no_fi, small)[0].path == "custom all-reduce"
    assert route(engine, H100X8, no_fi, middle)[0].path == "torch symm-mem"  # min(8 MiB, 256 KB at SM90 TP 8)
    bridge = Box(9.0, 8, True, True, multicast=False)
    assert route(engine, bridge, no_fi, middle)[0].path == "custom all-reduce"  # no symm-mem: the 8 MiB buffer


@pytest.mark.parametrize("engine", [*VLLM, "sglang==0.5.23"])
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_hopper_pcie_box_never_routes_torch_symm_mem(engine, tp):
    switches = {"VLLM_ALLREDUCE_USE_SYMM_MEM": "1", "--enable-torch-symm-mem": "1", "--disable-custom-all-reduce": "1"}
    for box in (Box(9.0, tp, False, True, multicast=False), Box(9.0, tp, False, True)):
        for op in ops(*SIZES):
            rule, skipped = route(engine, box, switches, op)
            assert rule.path != "torch symm-mem"
            if rule.path == "NCCL":
                assert any(why.startswith("torch symm-mem") and "multicast" in why for why in skipped)


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_pcie_ipc_takes_only_2d_ops_of_the_models_dtype_and_width(engine):
    on = {"VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC": "1"}
    box = Box(12.0, 4, False, True)
    for op in ops(1, 16, 512, dtype="float32", model_dtype="bfloat16"):  # Nemotron-H's mamba_norm
        assert route(engine, box, on, op)[0].path != "FlashInfer PCIe IPC"
    assert {route(engine, box, on, op)[0].path for op in ops(1, 16, 512)} == {"FlashInfer PCIe IPC"}
    narrow = ops(1, hidden=1024, model_hidden=HIDDEN) + ops(1, model_hidden=HIDDEN, dims=3)
    assert all(route(engine, box, on, op)[0].path != "FlashInfer PCIe IPC" for op in narrow)
    assert paths(engine, PCIE8, {}, 1, 16) == ["NCCL", "NCCL"]  # off by default


def test_sglang_runs_mscclpp_first_at_its_world_sizes_only():
    on = {"--enable-mscclpp": "1"}
    for op in ops(*SIZES):
        assert route("sglang==0.5.23", H100X8, on, op)[0].path == "MSCCL++"  # before custom all-reduce
    two = Box(9.0, 2, True, True, multicast=True)
    for op in ops(*SIZES):
        rule, skipped = route("sglang==0.5.23", two, on, op)
        assert rule.path != "MSCCL++" and any(why.startswith("MSCCL++: world size 2") for why in skipped)


def test_sglang_nccl_symm_mem_and_flashinfer_all_reduce_come_before_the_resolver():
    symm = {"--enable-symm-mem": "1"}
    small, large = ops(1, 4096)
    assert route("sglang==0.5.23", H100X8, symm, small)[0].path == "custom all-reduce"  # custom AR takes it first
    assert route("sglang==0.5.23", H100X8, symm, large)[0].path == "NCCL symmetric memory"
    fi = {"--flashinfer-allreduce-fusion-backend": "auto"}
    assert route("sglang==0.5.23", H100X8, fi, small)[0].path == "FlashInfer all-reduce"
    rule, skipped = route("sglang==0.5.23", PCIE8, fi, small)
    assert rule.path == "NCCL" and any("FlashInfer all-reduce: not on this box" in why for why in skipped)


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_on_sm120_writes_no_fusion_flag_and_says_why_flashinfer_is_off(engine):
    assert fusion_flag_fails("vLLM", 12.0) and fusion_flag_fails("vLLM", 9.0) is None
    assert fusion_flag_fails("vLLM", 10.3) is None
    for sm, written in ((12.0, False), (9.0, True)):
        hints = fused_hints_at(60.0, fusion_refusals(sm))  # the fused kind won beyond noise
        assert any("fuse_allreduce_rms" in h.setting for h in hints if h.engine == "vLLM") is written
    rule, skipped = route(engine, PCIE8, {}, ops(1)[0])
    assert rule.path == "NCCL" and not any("not set" in why for why in skipped)
    assert any("FI_ALLREDUCE_FUSION_MAX_SIZE_MB" in why for why in skipped)
    assert any(why.startswith("AITER custom all-reduce: not on this box") for why in skipped)


def test_sglang_pcie_ipc_up_to_its_cap_and_custom_ar_at_two_gpus_or_nvlink():
    assert paths("sglang==0.5.23", PCIE8, {}, 1, 4, 16) == ["NCCL"] * 3  # custom AR refuses > 2 PCIe-only GPUs
    capped = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1", "SGLANG_PCIE_IPC_MAX_NUMEL": str(4 * HIDDEN)}
    assert paths("sglang==0.5.23", PCIE8, capped, 1, 4, 8) == ["FlashInfer PCIe IPC"] * 2 + ["NCCL"]
    rule, skipped = route("sglang==0.5.23", PCIE8, capped, ops(8)[0])
    assert rule.path == "NCCL" and any("SGLANG_PCIE_IPC_MAX_NUMEL" in why for why in skipped)
    assert "pcie_ipc_ar.py" in next(r for r in TABLES[("sglang", "0.5.23")].rules if r.path == rule_path()).source
    two = Box(sm=12.0, tp=2, nvlink=False, p2p=True)
    for engine in ("sglang==0.5.23", *VLLM):
        assert paths(engine, two, {}, 1) == ["custom all-reduce"]
        assert paths(engine, Box(12.0, 2, False, False), {}, 1) == ["NCCL"]  # no P2P
    assert paths("sglang==0.5.23", H100X8, {}, 1) == ["custom all-reduce"]
    # Over NVLink SGLang runs custom all-reduce v2 (its CUDA default) up to 16 MiB; two PCIe GPUs the legacy 8 MiB.
    assert paths("sglang==0.5.23", H100X8, {}, 700, 1200) == ["custom all-reduce", "NCCL"]
    assert paths("sglang==0.5.23", two, {}, 500, 700) == ["custom all-reduce", "NCCL"]
    legacy = {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "0"}
    assert paths("sglang==0.5.23", H100X8, legacy, 700) == ["NCCL"]


def rule_path():
    return "FlashInfer PCIe IPC"


def test_settings_inert_or_failing_are_flagged_against_the_defaults():
    (vllm,) = engine_paths(("vllm==0.34",), PCIE8, ops(1, 4), {"vLLM": {"VLLM_ALLREDUCE_USE_SYMM_MEM": "1"}})
    assert vllm["inert"] == ["VLLM_ALLREDUCE_USE_SYMM_MEM=1: moves no op of this plan on this box"]
    assert vllm["version"].startswith("vllm==0.34")
    (sglang,) = engine_paths(("sglang==0.5.23",), PCIE8, ops(1), {})
    assert any("--flashinfer-allreduce-fusion-backend" in line and "SM 12" in line for line in sglang["fails_here"])
    (hopper,) = engine_paths(("sglang==0.5.23",), H100X8, ops(1), {})
    assert hopper["fails_here"] == []
    symm = {"SGLang": {"--enable-torch-symm-mem": "1"}}
    (small,) = engine_paths(("sglang==0.5.23",), H100X8, ops(1), symm)
    (large,) = engine_paths(("sglang==0.5.23",), H100X8, ops(1, 2048), symm)  # 28 MiB: above custom AR v2
    assert small["inert"] and large["inert"] == [] and large["rows"][1]["with_answer"] == "torch symm-mem"


def test_an_engine_version_without_a_table_names_the_nearest_as_not_verified():
    (unknown,) = engine_paths(("vllm==0.35.1",), PCIE8, ops(1), {})
    assert unknown["table"] is None and "no dispatch table for vllm==0.35.1" in unknown["why"]
    assert "vllm==0.34, is not verified" in unknown["why"]
    with pytest.raises(UsageError, match="sglang==VERSION"):
        parse_engine("tensorrt-llm==1.0")
    assert set(known_versions()) == {"sglang", "vllm", "flashinfer-python"} and "0.34" in known_versions()["vllm"]


@pytest.mark.parametrize("key", sorted(TABLES))
def test_every_table_cites_each_rule_ends_on_nccl_and_agrees_with_the_declared_switches(key):
    table = TABLES[key]
    assert all(rule.cites and all(c.file for c in rule.cites) for rule in table.rules)
    assert table.rules[-1].path == "NCCL" and len({r.path for r in table.rules}) == len(table.rules)
    assert table.dispatch.order and switch_disagreement(table) == []
    derived = [r for r in with_switch_rules(table) if r not in table.rules]
    assert all(r.impl and r.switch for r in derived)  # a declared switch the release does not read


def test_the_engine_versions_come_from_the_flag_then_the_run_then_this_machine(monkeypatch):
    from commprof.report.analysis import engine_dispatch

    assert engine_dispatch.engines_for(("vllm==0.34",), {"vllm": "0.33.1"})[0] == ("vllm==0.34",)
    engines, chosen = engine_dispatch.engines_for((), {"vllm": "0.34.0", "sglang": None})
    assert engines == ("vllm==0.34.0",) and "where the run ran" in chosen
    monkeypatch.setattr(engine_dispatch, "installed_version", {"sglang": "0.5.24"}.get)
    engines, chosen = engine_dispatch.engines_for((), {})
    assert engines == ("sglang==0.5.24",) and "installed here" in chosen
    (entry,) = engine_paths(engines, H100X8, ops(1), {}, chosen)
    assert entry["table"] is None and "sglang==0.5.23, is not verified for 0.5.24" in entry["why"]
    monkeypatch.setattr(engine_dispatch, "installed_version", lambda name: None)
    assert engine_dispatch.engines_for((), {})[0] == engine_dispatch.DEFAULT_ENGINES
    (known,) = engine_paths(("vllm==0.33.1",), H100X8, ops(1), {}, "given with --engine")
    assert "vllm==0.33.1: the vllm 0.33 table, checked on the 0.33.0 wheel" in known["version"]
    assert "verified" in engine_dispatch.library_note("flashinfer-python", "0.7.4")
    assert "0.7.4, is not verified" in engine_dispatch.library_note("flashinfer-python", "0.7.5")


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_flashinfer_all_reduce_falls_back_to_trtllm_ipc_on_a_hopper_pcie_box(engine):
    pcie = Box(9.0, 4, False, True, multicast=False)  # H100 PCIe: no multicast, so no MNNVL; trtllm over IPC
    assert [route(engine, pcie, {}, op)[0].path for op in ops(1, 147)] == ["FlashInfer all-reduce", "NCCL"]  # 2 MiB cap
    assert route(engine, Box(9.0, 4, False, False), {}, ops(1)[0])[0].path == "NCCL"  # no P2P: no IPC workspace


# --- Facts read in the second round: each case is one gate of the released source --------------------------------

KIMI = "KimiK25ForConditionalGeneration"
SG = "sglang==0.5.23"


@pytest.mark.parametrize(
    "box,switches,today,why",
    [
        # overrides.py _flashinfer_allreduce_fusion_auto_enable: the backend "auto" for a listed architecture
        (Box(9.0, 8, True, True, architecture=KIMI), {}, "FlashInfer all-reduce", None),
        (
            Box(10.0, 8, True, True, multicast=True, architecture="Qwen3MoeForCausalLM"),
            {},
            "FlashInfer all-reduce",
            None,
        ),
        (Box(9.0, 8, True, True, architecture="LlamaForCausalLM"), {}, "custom all-reduce", "not one SGLang"),
        (Box(9.0, 8, True, True), {}, "custom all-reduce", "not assumed"),  # architecture unknown
        (Box(9.0, 8, True, True, architecture=KIMI, dp_attention=True), {}, "custom all-reduce", "DP attention"),
        (Box(12.0, 8, True, True, architecture=KIMI), {}, "custom all-reduce", "SM90 or SM10x"),
        (Box(9.0, 8, True, True, architecture=KIMI, nodes=2), {}, "NCCL", "only SM10x"),
        (Box(9.0, 8, True, True, architecture=KIMI), {"--moe-a2a-backend": "deepep"}, "custom all-reduce", "deepep"),
        (
            Box(9.0, 8, True, True, architecture=KIMI),
            {"--enforce-disable-flashinfer-allreduce-fusion": "1"},
            "custom all-reduce",
            "--enforce-disable",
        ),
        # MiMo gets cutedsl, which has no workspace for the standalone all-reduce
        (
            Box(10.0, 8, True, True, multicast=True, architecture="MiMoV2ForCausalLM"),
            {},
            "custom all-reduce",
            "cutedsl",
        ),
        # SM10x resolves auto to mnnvl, which needs NVLink multicast for its workspace
        (Box(10.0, 8, True, True, multicast=None, architecture=KIMI), {}, "custom all-reduce", "multicast"),
    ],
)
def test_sglang_turns_flashinfer_all_reduce_on_by_itself_for_its_architectures(box, switches, today, why):
    rule, skipped = route(SG, box, switches, ops(4)[0])
    assert rule.path == today
    if why:
        assert any(line.startswith("FlashInfer all-reduce") and why in line for line in skipped), skipped
    (entry,) = engine_paths((SG,), box, ops(4), {"SGLang": switches} if switches else {})
    assert entry["rows"][0]["today" if not switches else "with_answer"] == today
    if today == "FlashInfer all-reduce" and not switches:
        assert any(
            "=auto" in line and "_flashinfer_allreduce_fusion_auto_enable" in line for line in entry["engine_sets"]
        )
        assert "overrides.py: _flashinfer_allreduce_fusion_auto_enable" in entry["rows"][0]["today_source"]


def test_sglang_flashinfer_all_reduce_workspace_limits_per_backend():
    hopper = Box(9.0, 8, True, True, architecture=KIMI)  # auto -> trtllm
    assert route(SG, hopper, {}, ops(2048)[0])[0].path == "FlashInfer all-reduce"
    rule, skipped = route(SG, hopper, {}, ops(2049)[0])
    assert rule.path != "FlashInfer all-reduce" and any("2048-token workspace" in w for w in skipped)
    # trtllm's workspace is built without use_fp32_lamport: an fp32 op goes elsewhere (flashinfer_comm_fusion L1006)
    fp32 = ops(4, dtype="float32", hidden=2, model_dtype="bfloat16", model_hidden=HIDDEN)[0]
    rule, skipped = route(SG, hopper, {}, fp32)
    assert rule.path != "FlashInfer all-reduce" and any("fp32 on the trtllm workspace" in w for w in skipped)
    blackwell = Box(10.0, 8, True, True, multicast=True, architecture=KIMI)  # auto -> mnnvl, sized in bytes
    assert route(SG, blackwell, {}, ops(2048)[0])[0].path == "FlashInfer all-reduce"
    assert (
        route(SG, blackwell, {}, ops(4, dtype="float32", model_dtype="bfloat16")[0])[0].path == "FlashInfer all-reduce"
    )
    rule, skipped = route(SG, blackwell, {}, ops(2049)[0])
    assert rule.path != "FlashInfer all-reduce" and any("MNNVL buffer" in w for w in skipped)
    odd = ops(4, hidden=7172, model_hidden=HIDDEN)[0]  # 7172 x 2 B is not whole 16-byte vectors
    assert route(SG, blackwell, {}, odd)[0].path != "FlashInfer all-reduce"


def test_sglang_pcie_ipc_without_a_cap_takes_only_the_decode_width():
    on = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
    # pcie_ipc_ar.py _ensure_workspace: max_numel = the widest decode (max_bs x tokens per request) x hidden
    assert paths(SG, PCIE8, on, 1, 512, 513) == ["FlashInfer PCIe IPC"] * 2 + ["NCCL"]  # max_bs 512 at TP 8
    rule, skipped = route(SG, PCIE8, on, ops(513)[0])
    assert any("decode-width workspace (512 rows" in w for w in skipped)
    verify = Box(12.0, 8, False, True, tokens_per_request=4)
    assert paths(SG, verify, on, 2048, 2049) == ["FlashInfer PCIe IPC", "NCCL"]
    small = Box(12.0, 8, False, True, gpu_mem_gib=32.0)  # below 35 GiB at TP >= 4: max_bs 160
    assert paths(SG, small, on, 160, 161) == ["FlashInfer PCIe IPC", "NCCL"]
    capped = on | {"SGLANG_PCIE_IPC_MAX_NUMEL": str(1024 * HIDDEN)}  # the variable overrides the derivation
    assert paths(SG, PCIE8, capped, 1024, 1025) == ["FlashInfer PCIe IPC", "NCCL"]


@pytest.mark.parametrize(
    "sm,tp,v2",
    [(9.0, 8, True), (9.0, 16, False), (10.0, 16, True), (10.7, 12, False), (10.7, 16, True), (10.3, 6, True)],
)
def test_sglang_custom_all_reduce_v2_takes_its_tuned_world_sizes(sm, tp, v2):
    box = Box(sm, tp, True, True)
    rule, skipped = route(SG, box, {}, ops(1)[0])
    # v2 takes [1, 7168] bf16; outside its tuned sizes, the legacy class knows only 2 / 4 / 6 / 8
    assert (rule.path == "custom all-reduce") == (v2 or tp in (2, 4, 6, 8))
    if not v2 and tp not in (2, 4, 6, 8):
        assert any("not 2 / 4 / 6 / 8" in w for w in skipped)


def test_vllm_034_refuses_flashinfer_rows_of_partial_16_byte_vectors():
    box = Box(9.0, 8, True, True, multicast=True)
    odd = ops(4, hidden=2052)[0]  # 2052 x 2 B = 4104 B: not whole 16-byte vectors
    assert route("vllm==0.33", box, {}, odd)[0].path == "FlashInfer all-reduce"
    rule, skipped = route("vllm==0.34", box, {}, odd)
    assert rule.path != "FlashInfer all-reduce" and any("16-byte vectors" in w for w in skipped)


def test_vllm_034_hisparse_runs_flashinfer_on_trtllm_and_never_across_nodes():
    sparse = {"attention_config.hisparse_config": "1"}
    b200 = Box(10.0, 8, True, True, multicast=True)
    big = Op("x", 1, 16 * 1024 * 1024, "bfloat16", HIDDEN)  # 16 MiB: within MNNVL's 128 MiB, above trtllm's 1 MiB
    assert route("vllm==0.34", b200, {}, big)[0].path == "FlashInfer all-reduce"
    assert route("vllm==0.34", b200, sparse, big)[0].path != "FlashInfer all-reduce"
    assert route("vllm==0.33", b200, sparse, big)[0].path == "FlashInfer all-reduce"  # 0.33 has no such switch
    nodes = Box(10.0, 8, True, True, multicast=True, nodes=2)
    rule, skipped = route("vllm==0.34", nodes, sparse, ops(1)[0])
    assert rule.path != "FlashInfer all-reduce" and any("HiSparse across nodes" in w for w in skipped)


def test_vllm_034_custom_all_reduce_refuses_a_group_across_nodes():
    two = Box(10.0, 2, True, True, multicast=True, nodes=2)
    off = {"VLLM_ALLREDUCE_USE_FLASHINFER": "0", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}
    assert route("vllm==0.33", two, off, ops(1)[0])[0].path == "custom all-reduce"  # MNNVL, two ranks
    rule, skipped = route("vllm==0.34", two, off, ops(1)[0])
    assert rule.path == "NCCL" and any("mnnvl_only" in w for w in skipped)
    eight = Box(10.0, 8, True, True, multicast=True, nodes=2)
    assert route("vllm==0.33", eight, off, ops(1)[0])[0].path == "NCCL"  # not fully connected across nodes


def test_flashinfer_facts_name_the_sm120_copy_engine_wait_kernel():
    from commprof.impls.flashinfer_pcie import COPY_ENGINE_KERNELS
    from commprof.report.analysis.engine_flashinfer import FLASHINFER_0_7_4

    assert "kernel_pcie_ipc_ce_sm120_binary_wait_clear" in COPY_ENGINE_KERNELS
    cite = next(c for c in FLASHINFER_0_7_4.facts if "binary_wait_clear" in c.pattern)
    assert cite.file.endswith("pcie_ipc_ce_sm120.cuh")


def test_vllm_034_sm100_pcie_ipc_follows_its_wide_capture_grid():
    on = {"VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC": "1", "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}
    box = Box(10.0, 4, False, True)
    assert paths("vllm==0.33", box, on, 1024, 1025) == ["FlashInfer PCIe IPC", "NCCL"]
    assert paths("vllm==0.34", box, on, 8192, 8193) == ["FlashInfer PCIe IPC", "NCCL"]
    assert paths("vllm==0.34", PCIE8, on, 512, 513) == ["FlashInfer PCIe IPC", "NCCL"]  # elsewhere: unchanged
