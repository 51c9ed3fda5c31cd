"""`commprof trace` names the implementation behind each communication kernel, and `--answer` checks the engine
ran what a run's answer routes there. The traces are built here from kernel names as each library's source
declares them (the file is beside each name), demangled the way Kineto records them."""

import json

import pytest

from commprof.cli import main
from commprof.trace.analysis import TraceAnalysis
from commprof.trace.answer import check_answer
from commprof.trace.events import trace_from_dict
from commprof.trace.kernels import identify, kernel_names

# (demangled kernel name, the implementation, where the name is declared)
LIBRARY_KERNELS = [
    (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "nccl",
        "NCCL src/device/generate.py",
    ),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "nccl", "NCCL < 2.19"),
    (
        "void flashinfer::comm::push_oneshot_param_kernel<__nv_bfloat16, 8, false>(flashinfer::comm::"
        "PushOneshotParamData<__nv_bfloat16>)",
        "flashinfer-pcie-ipc",
        "FlashInfer 0.7.2 include/flashinfer/comm/pcie_ipc_all_reduce.cuh:1971",
    ),
    (
        "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>("
        "flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)",
        "flashinfer-fused",
        "FlashInfer 0.7.2 include/flashinfer/comm/trtllm_allreduce_fusion.cuh:1516",
    ),
    (
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
        "vllm::Signal*, __nv_bfloat16*, int, int)",
        "custom-ar",
        "vLLM 0.33 csrc/custom_all_reduce.cuh (symbol in vllm/_C_stable_libtorch.abi3.so)",
    ),
    (
        "void device::all_reduce_1shot_push_kernel<8, __nv_bfloat16>(device::AllReducePushParams<8>)",
        "custom-ar",
        "SGLang 0.5.23 sglang/kernels/jit/csrc/distributed/custom_all_reduce.cuh:140",
    ),
    (
        "void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>(c10::BFloat16**, "
        "c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)",
        "symm-mem",
        "PyTorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu",
    ),
    # CuTe DSL kernels: "kernel_cutlass_" + "kernel" (the method) + str(self) without ".<>", address dropped + the
    # kernel's count (nvidia-cutlass-dsl 4.8.0 base_dsl/dsl.py kernel_launcher, mangle_name); every other argument
    # of these kernels is a pointer or a dynamic integer, IR values the name leaves out.
    (
        "kernel_cutlass_kernel_b12xcommpcie_oneshot_cute_OneshotLaunch_object_at__0",
        "b12x",
        "b12x 1.5.1 b12x/comm/pcie/_oneshot_cute.py (_OneshotLaunch.kernel)",
    ),
    (
        "kernel_cutlass_kernel_b12xcommpcie_twoshot_bf16_cute_TwoShotPullAllReduceLaunch_object_at__1",
        "b12x",
        "b12x 1.5.1 b12x/comm/pcie/_twoshot_bf16_cute.py (_TwoShotPullAllReduceLaunch.kernel)",
    ),
    (
        "kernel_cutlass_kernel_b12xcommpcie_dma_kernels_AddLaunch_object_at__0",
        "b12x",
        "b12x 1.5.1 b12x/comm/pcie/_dma_kernels.py (_AddLaunch.kernel, the DMA all-reduce's reduction)",
    ),
]


def test_every_librarys_kernel_names_its_implementation():
    for name, implementation, _ in LIBRARY_KERNELS:
        found = identify(name)
        assert found is not None and found.implementation == implementation, name
    assert identify("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>") is None
    assert identify("void flashinfer::comm::multimem_one_shot_all_reduce_kernel_x()") is None  # whole names only
    assert identify("multimem_one_shot_all_reduce_kernel<float, 16>").implementation == "symm-mem"
    # Another library's CuTe DSL kernel is not b12x's (FlashAttention 4's forward kernel, named the same way).
    assert (
        identify("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__0") is None
    )
    assert all(k.source for k in kernel_names())


def _engine_trace(kernel: str, layers: int, nbytes: int, rank: int = 0) -> dict:
    """A decode step: per layer a GEMM, then one all-reduce kernel launched under an op holding its size."""
    events, ts = [], 0.0
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10_000, "tid": 1})
    for i in range(layers):
        events.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "ts": ts, "dur": 30, "tid": 7})
        ts += 40
        op = {"Input Dims": [[nbytes // 2]], "Input type": ["c10::BFloat16"]}
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "vllm::all_reduce", "ts": ts, "dur": 8, "tid": 1, "args": op}
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": ts + 2,
                "dur": 3,
                "tid": 1,
                "args": {"correlation": 100 + i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "ts": ts + 10,
                "dur": 12,
                "tid": 7,
                "args": {"correlation": 100 + i},
            }
        )
        ts += 30
    return {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 8, "backend": "nccl"}}


def _summary(impl: str, lo: int, hi: int) -> dict:
    """A summary.json in the Decision's layout, only the parts an answer check reads: one route, no NCCL point."""
    route = {
        "collective": "all_reduce",
        "mode": "graph",
        "min_bytes": lo,
        "max_bytes": hi,
        "impl": impl,
        "kept": impl == "nccl",
        "label": impl,
    }
    nccl = {"env": {}, "point": None, "keeps_baseline": True}
    return {"runs": [{"run": {"source": "measured", "tp": 8}, "routes": [route], "nccl": nccl}]}


@pytest.mark.parametrize("name, implementation, source", LIBRARY_KERNELS[2:])
def test_the_answer_matches_when_the_engine_runs_its_choice(name, implementation, source):
    trace = trace_from_dict(_engine_trace(name, 4, 14336), "engine.json", 0)
    groups = TraceAnalysis([trace]).account()["kernels"]
    assert groups == [
        {
            "kind": groups[0]["kind"],
            "bytes": 14336,
            "count": 4,
            "implementations": {implementation: 4},
            "kernels": [name.split("(")[0]],
        }
    ], source
    (check,) = check_answer(groups, _summary(implementation, 8192, 32768)["runs"][0])
    assert check["match"], check["sentence"]


def test_an_answer_whose_switch_did_not_take_effect_is_a_mismatch(tmp_path, capsys):
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    path = tmp_path / "engine.json"
    path.write_text(json.dumps(_engine_trace(nccl, 6, 14336)))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(_summary("flashinfer-pcie-ipc", 14336, 28672)))
    assert main(["trace", str(path), "--answer", str(summary)]) == 0
    out = capsys.readouterr().out
    assert "MISMATCH: 6 of 6 all-reduces of 14 KiB ran nccl" in out
    assert "routes 14 KiB–28 KiB (graph mode) to flashinfer-pcie-ipc: its switch did not take effect" in out
    assert main(["trace", str(path), "--answer", str(summary), "--json"]) == 0
    (check,) = json.loads(capsys.readouterr().out)["answer_check"]
    assert (check["ran"], check["expected"], check["match"]) == ("nccl", "flashinfer-pcie-ipc", False)
    summary.write_text("{}")
    assert main(["trace", str(path), "--answer", str(summary)]) == 2
    assert "not a commprof report's summary.json" in capsys.readouterr().err
    summary.write_text(json.dumps({"runs": [{"source": "measured", "routing": []}]}))
    assert main(["trace", str(path), "--answer", str(summary)]) == 2
    assert "an older summary.json layout" in capsys.readouterr().err


def test_an_answer_of_another_run_or_size_is_no_match(tmp_path, capsys):
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    groups = TraceAnalysis([trace_from_dict(_engine_trace(nccl, 3, 25 << 20), "engine.json", 0)]).account()["kernels"]
    run = _summary("nccl", 14336, 229376)["runs"][0]
    point = {"impl": "default", "label": "P2P=SYS", "env": {"NCCL_P2P_LEVEL": "SYS"}}
    run["nccl"] = {"env": point["env"], "point": point, "keeps_baseline": False}
    (check,) = check_answer(groups, run)
    assert (check["status"], check["match"]) == ("not covered", None), check["sentence"]
    assert "not covered by the answer: its bands cover 14 KiB–224 KiB" in check["sentence"]
    (check,) = check_answer(groups, {**run, "run": {"source": "measured", "tp": 2}}, world_size=8)
    assert check["status"] == "not comparable" and "world size 8 is not the answer's TP 2" in check["sentence"]
    # Inside a band of NCCL with variables: the kernels match, and the sentence says a trace cannot show the env.
    inside = TraceAnalysis([trace_from_dict(_engine_trace(nccl, 3, 57344), "e.json", 0)]).account()["kernels"]
    (check,) = check_answer(inside, run)
    assert check["match"] and "as recommends" not in check["sentence"]
    assert "a trace cannot show whether NCCL_P2P_LEVEL=SYS was set" in check["sentence"]


def test_traces_of_different_world_sizes_are_refused(tmp_path, capsys):
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    two = _engine_trace(nccl, 3, 14336, rank=0)
    two["distributedInfo"]["world_size"] = 2
    (tmp_path / "a.json").write_text(json.dumps(two))
    (tmp_path / "b.json").write_text(json.dumps(_engine_trace(nccl, 3, 14336, rank=3)))
    assert main(["trace", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "world size 2: rank(s) 0; world size 8: rank(s) 3" in err and len(err.splitlines()) == 1


def test_a_c10d_tensor_list_op_takes_its_size_from_the_nccl_annotation_inside_it():
    # torch's c10d::allreduce_ records a TensorList ([] dims); the "nccl:all_reduce" annotation in it has the shape.
    nccl = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    data = _engine_trace(nccl, 3, 14336)
    for event in data["traceEvents"]:
        if event["name"] == "vllm::all_reduce":
            event.update(name="c10d::allreduce_", args={"Input Dims": [[], []], "Input type": ["TensorList", ""]})
            inner = {"Input Dims": [[1000]], "Input type": ["float"]}
            data["traceEvents"].append({**event, "cat": "user_annotation", "name": "nccl:all_reduce", "args": inner})
    (group,) = TraceAnalysis([trace_from_dict(data, "e.json", 0)]).account()["kernels"]
    assert (group["bytes"], group["count"]) == (4000, 3)
