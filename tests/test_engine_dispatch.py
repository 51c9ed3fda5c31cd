"""The engines' all-reduce dispatch, reproduced from SGLang 0.5.23 and vLLM 0.33's released source, on the
field report's box (8 PCIe-only SM120 GPUs) and others. Pure."""

import pytest

from commprof.errors import UsageError
from commprof.report.analysis.engine_dispatch import TABLES, Box, Op, dispatch, engine_paths, parse_engine

PCIE8 = Box(sm=12.0, tp=8, nvlink=False, p2p=True)
H200X8 = Box(sm=9.0, tp=8, nvlink=True, p2p=True)
HIDDEN = 7168


def ops(*tokens):
    return [Op("layer all-reduce", t, t * HIDDEN * 2, "bfloat16", HIDDEN) for t in tokens]


def paths(engine, box, switches, *tokens):
    table = TABLES[parse_engine(engine)]
    return [dispatch(table, box, op, switches)[0].path for op in ops(*tokens)]


def test_sglang_on_eight_pcie_gpus_runs_nccl_today_and_pcie_ipc_up_to_its_cap():
    assert paths("sglang==0.5.23", PCIE8, {}, 1, 4, 16) == ["NCCL"] * 3  # custom AR refuses > 2 PCIe-only GPUs
    capped = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1", "SGLANG_PCIE_IPC_MAX_NUMEL": str(4 * HIDDEN)}
    assert paths("sglang==0.5.23", PCIE8, capped, 1, 4, 8) == ["FlashInfer PCIe IPC"] * 2 + ["NCCL"]
    rule, skipped = dispatch(TABLES[("sglang", "0.5.23")], PCIE8, ops(8)[0], capped)
    assert rule.path == "NCCL" and any("SGLANG_PCIE_IPC_MAX_NUMEL" in why for why in skipped)
    assert "pcie_ipc_ar.py" in TABLES[("sglang", "0.5.23")].rules[1].source


def test_vllm_has_no_cap_its_pcie_ipc_switch_takes_every_size():
    switch = {"VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC": "1"}
    assert paths("vllm==0.33.0", PCIE8, {}, 1, 16) == ["NCCL", "NCCL"]
    assert paths("vllm==0.33", PCIE8, switch, 1, 16, 512) == ["FlashInfer PCIe IPC"] * 3


def test_custom_all_reduce_runs_at_two_gpus_or_over_nvlink_in_both_engines():
    two = Box(sm=12.0, tp=2, nvlink=False, p2p=True)
    for engine in ("sglang==0.5.23", "vllm==0.33"):
        assert paths(engine, two, {}, 1) == ["custom all-reduce"]
        assert paths(engine, H200X8, {}, 1) == ["custom all-reduce"]
        assert paths(engine, Box(12.0, 2, False, False), {}, 1) == ["NCCL"]  # no P2P


def test_settings_inert_or_failing_on_sm120_are_flagged():
    (vllm,) = engine_paths(("vllm==0.33",), PCIE8, ops(1, 4), {"vLLM": {"VLLM_ALLREDUCE_USE_SYMM_MEM": "1"}})
    assert vllm["inert"] == ["VLLM_ALLREDUCE_USE_SYMM_MEM=1: moves no op of this plan on this box"]
    (sglang,) = engine_paths(("sglang==0.5.23",), PCIE8, ops(1), {})
    assert any("--flashinfer-allreduce-fusion-backend" in line and "SM 12" in line for line in sglang["fails_here"])
    (hopper,) = engine_paths(("sglang==0.5.23",), H200X8, ops(1), {})
    assert hopper["fails_here"] == []
    symm = {"SGLang": {"--enable-torch-symm-mem": "1"}}
    # On Hopper over NVLink custom all-reduce takes decode sizes first; a 14 MiB prefill op is above its buffer.
    (small,) = engine_paths(("sglang==0.5.23",), H200X8, ops(1), symm)
    (large,) = engine_paths(("sglang==0.5.23",), H200X8, ops(1, 1024), symm)
    assert small["inert"] and large["inert"] == [] and large["rows"][1]["with_answer"] == "torch symm-mem"
    (pcie,) = engine_paths(("sglang==0.5.23",), PCIE8, ops(1, 1024), symm)
    assert pcie["inert"] and pcie["rows"][1]["with_answer"] == "NCCL"  # SM120: no symm-mem table entry


def test_an_engine_version_without_a_table_is_said_so_and_a_bad_one_is_refused():
    (unknown,) = engine_paths(("sglang==0.5.9",), PCIE8, ops(1), {})
    assert unknown["table"] is None and "no dispatch table for sglang==0.5.9" in unknown["why"]
    with pytest.raises(UsageError, match="sglang==VERSION"):
        parse_engine("tensorrt-llm==1.0")
