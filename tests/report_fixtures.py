"""SYNTHETIC run folders for the report's tests and benchmark: made-up numbers, never a result.

The shape is real (Kimi-K2.5 at TP 8, T = 1, 4, 8, 16, the step plan's 123 all-reduces + 1 all-gather, records
as docs/results-schema.md defines them); the latencies come from a toy formula chosen to look like an 8-GPU PCIe
box. Includes the cases the report must show: NCCL_ALGO=Tree failing CUDA-graph capture, a timeout, an
unsupported implementation, a fused all-reduce + RMSNorm kind and its unfused reference.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from commprof.planner.models import load_model
from commprof.planner.plan import PlanOptions, build_step_plan
from commprof.records import point_ids
from commprof.records.files import META_FILE, RESULTS_FILE
from commprof.records.schema import step_record

TOKENS = (1, 4, 8, 16)
WORLD_SIZE = 8
MODEL = "Kimi-K2.5"

# Toy per-op cost: (latency µs, bandwidth GB/s) per (algo, proto); "default" is what NCCL picks unasked.
_COST = {
    ("default", "default"): (52.0, 3.0),
    ("Ring", "LL"): (38.0, 3.2),
    ("Ring", "LL128"): (50.0, 7.0),
    ("Ring", "Simple"): (61.0, 11.0),
    ("Tree", "LL"): (29.0, 2.2),
    ("Tree", "LL128"): (44.0, 5.0),
    ("Tree", "Simple"): (57.0, 8.0),
}
_LAUNCH_US = 7.5  # per op, eager only
_NORM_US = 4.0  # residual add + RMSNorm after an unfused layer all-reduce
_FUSED = (11.0, 4.5)  # one-shot fused all-reduce + RMSNorm


def base_points() -> list[dict]:
    """The realistic sweep: baseline, ALGO × PROTO, a fused kind and its reference, one unsupported impl."""
    points = [{"label": "NCCL defaults", "impl": "nccl", "env": {}, "options": {}}]
    for algo, proto in itertools.product(("Ring", "Tree"), ("LL", "LL128", "Simple")):
        points.append(
            {"label": f"{algo}/{proto}", "impl": "nccl", "env": {"NCCL_ALGO": algo, "NCCL_PROTO": proto}, "options": {}}
        )
    points.append({"label": "unfused reference", "impl": "nccl+rmsnorm", "env": {}, "options": {}})
    points.append({"label": "FlashInfer fused AR+RMSNorm", "impl": "flashinfer_fused", "env": {}, "options": {}})
    points.append({"label": "custom one-shot", "impl": "custom_oneshot", "env": {}, "options": {}})
    return points


def many_points(count: int) -> list[dict]:
    """`count` points: the realistic ones, then ALGO × PROTO × channel and thread settings until there are enough."""
    points = base_points()
    extra = itertools.product(
        (None, "1", "2", "4", "8", "16", "32", "64"),  # NCCL_LL128_BUFFSIZE, past 1,728 points only
        ("Ring", "Tree"),
        ("LL", "LL128", "Simple"),
        (1, 2, 4, 8, 16, 32),
        (64, 128, 256, 512),
        ("1048576", "4194304", "8388608"),
        ("PXB", "SYS"),
        ("0", "1"),
    )
    for ll128, algo, proto, channels, threads, buffsize, level, cumem in extra:
        if len(points) >= count:
            break
        more = {"NCCL_LL128_BUFFSIZE": ll128} if ll128 else {}
        points.append(
            {
                "label": f"{algo}/{proto} {channels}ch {threads}t" + (f" ll128 {ll128}" if ll128 else ""),
                "impl": "nccl",
                "options": {},
                "env": {
                    "NCCL_ALGO": algo,
                    "NCCL_PROTO": proto,
                    "NCCL_MIN_NCHANNELS": str(channels),
                    "NCCL_NTHREADS": str(threads),
                    "NCCL_BUFFSIZE": buffsize,
                    "NCCL_P2P_LEVEL": level,
                    "NCCL_CUMEM_ENABLE": cumem,
                    **more,
                },
            }
        )
    return points[:count]


def make_records(
    run_id: str,
    points: list[dict] | None = None,
    tokens=TOKENS,
    source: str = "measured",
    seed: int = 0,
    options: PlanOptions | None = None,
    model_name: str = MODEL,
) -> list[dict]:
    """One record per (point, T, mode), as the sweep would write them (the step `options` holds, if any)."""
    rng = np.random.default_rng(seed)
    model = load_model(model_name)
    points = points if points is not None else base_points()
    records = []
    for index, point in enumerate(points):
        this_id = point_ids.point_id(index)
        for t in tokens:
            plan = build_step_plan(model, WORLD_SIZE, t, "verify", options=options)
            for mode in ("eager", "graph"):
                records.append(_record(run_id, this_id, point, plan, mode, source, rng))
    return records


def _record(run_id, point_id, point, plan, mode, source, rng) -> dict:
    env, impl, t = point["env"], point["impl"], plan.tokens
    fused = impl in ("flashinfer_fused", "nccl+rmsnorm")
    record = step_record(
        source=source,
        run_id=run_id,
        point_id=point_id,
        point=point,
        backend="nccl",
        world_size=WORLD_SIZE,
        status="ok",
        time="2026-03-01T12:00:00Z",
        calibration="nccl-prior" if source == "simulated" else None,
        model=MODEL,
        phase="verify",
        tp=WORLD_SIZE,
        tokens=t,
        dtype="bfloat16",
        plan=plan.summary(),
        mode=mode,
        timing="simulated" if source == "simulated" else "cuda_events",
        fused_rmsnorm=fused,
        iterations=200,
        warmup=20,
    )
    algo, proto = env.get("NCCL_ALGO", "default"), env.get("NCCL_PROTO", "default")
    if impl == "custom_oneshot":
        return {
            **record,
            "status": "unsupported",
            "message": "needs peer-to-peer access between every GPU pair; GPU0-GPU4 is SYS without P2P",
        }
    if algo == "Tree" and mode == "graph":
        return {
            **record,
            "status": "capture_failed",
            "message": "CUDA graph capture failed: NCCL WARN Error : no algorithm/protocol available for "
            "function Broadcast with datatype ncclInt8. NCCL_ALGO was set to Tree.",
        }
    if algo == "Ring" and proto == "LL128" and t == 16 and mode == "graph" and not env.get("NCCL_MIN_NCHANNELS"):
        return {**record, "status": "timeout", "message": "killed after 120 s on every rank (no progress)"}

    latency, bandwidth = _FUSED if impl == "flashinfer_fused" else _COST[(algo, proto)]
    channels = int(env.get("NCCL_MIN_NCHANNELS", "2"))
    latency *= 1.0 + 0.03 * abs(np.log2(channels) - 1.5)
    sizes = np.array([op.bytes for op in plan.ops], dtype=float)
    is_gather = np.array([op.collective != "all_reduce" for op in plan.ops])
    op_median = latency + sizes / (bandwidth * 1e3)
    op_median[is_gather] = 60.0 + sizes[is_gather] / 9e3
    if impl == "nccl+rmsnorm":
        op_median[1:-1] += _NORM_US
    if mode == "eager":
        op_median = op_median + _LAUNCH_US
    op_median = op_median * rng.normal(1.0, 0.02, size=op_median.size)
    step = float(op_median.sum()) * (0.97 if mode == "graph" else 1.0) + (20.0 if mode == "graph" else 0.0)
    cv = float(rng.uniform(0.01, 0.06))
    record["step_us"] = {
        "n": 200,
        "min": step * 0.96,
        "median": step,
        "mean": step * 1.01,
        "p90": step * 1.04,
        "p99": step * 1.09,
        "max": step * 1.15,
        "cv": cv,
    }
    record["rank_step_median_us"] = [round(step * f, 2) for f in rng.normal(1.0, 0.004, size=WORLD_SIZE)]
    record["check"] = {
        "ok": True,
        "max_abs_err": 0.0039,
        "tolerance": 0.0156,
        "bad_ops": 0,
        "first_bad_op": None,
        "first_bad_site": None,
    }
    chosen_algo = "Ring" if algo == "default" else algo
    chosen_proto = "LL" if proto == "default" else proto
    record["nccl"] = {
        "version": "2.27.5",
        "transports": {"P2P/CUMEM": 24, "SHM/direct/direct": 32},
        "channels": channels,
        "choices": [
            # As NCCL 2.27.5 logs them: count x type size, one rank's piece of the all-gather.
            {
                "coll": "AllReduce",
                "bytes": int(sizes[0]),
                "algo": chosen_algo,
                "proto": chosen_proto,
                "channels": channels,
                "bytes_scope": "per_rank",
            },
            {
                "coll": "AllGather",
                "bytes": int(sizes[-1]) // WORLD_SIZE,
                "algo": "Ring",
                "proto": "Simple",
                "channels": channels,
                "bytes_scope": "per_rank",
            },
        ],
    }
    # Both modes: the graph-mode per-op pass times the captured step (commprof/replay/captured_ops.py).
    record["op_us"] = {
        "sites": [op.site for op in plan.ops],
        "collectives": [op.collective for op in plan.ops],
        "draft": [op.draft for op in plan.ops],
        "bytes": [op.bytes for op in plan.ops],
        "min": np.round(op_median * 0.95, 2).tolist(),
        "median": np.round(op_median, 2).tolist(),
        "mean": np.round(op_median * 1.01, 2).tolist(),
        "p90": np.round(op_median * 1.05, 2).tolist(),
        "p99": np.round(op_median * 1.12, 2).tolist(),
        "max": np.round(op_median * 1.2, 2).tolist(),
        "cv": [round(cv, 4)] * op_median.size,
    }
    return record


# The real 8 x RTX PRO 6000 box's PCIe tree (tests/fixtures/doctor/asus-esc8000a-8x-rtxpro6000/nvidia_topo.log):
# GPU pairs behind one switch port (PIX), two switches per socket (NODE), sockets apart (SYS).
BUS_IDS = (
    "0000:06:00.0",
    "0000:07:00.0",
    "0000:75:00.0",
    "0000:76:00.0",
    "0000:84:00.0",
    "0000:85:00.0",
    "0000:f4:00.0",
    "0000:f5:00.0",
)


def _level(a: int, b: int) -> str:
    if a // 4 != b // 4:
        return "SYS"
    return "PIX" if a // 2 == b // 2 else "NODE"


def probe_meta(gpus: int = WORLD_SIZE) -> dict:
    """meta["topology"] as commprof.doctor.topology_probe.probe_topology() writes it, for the box above (idle links at
    Gen1); P2P across sockets is SYNTHETIC: "chipset_not_supported", as on boards whose root complex blocks it."""
    p2p_ok = {"read": "ok", "write": "ok", "nvlink": "not_supported", "atomics": "ok"}
    p2p_no = {
        "read": "chipset_not_supported",
        "write": "chipset_not_supported",
        "nvlink": "not_supported",
        "atomics": "chipset_not_supported",
    }
    return {
        "source": "nvml",
        "reason": None,
        "driver_version": "595.58.03",
        "cuda_driver_version": "13.2",
        "host": {
            "hostname": "synthetic-box",
            "logical_cpus": 256,
            "cpu_model": "AMD EPYC 9575F 64-Core Processor",
            "cpu_vendor": "AuthenticAMD",
            "sockets": 2,
            "numa_nodes": [{"node": 0, "cpus": "0-63,128-191"}, {"node": 1, "cpus": "64-127,192-255"}],
        },
        "gpus": [
            {
                "index": i,
                "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "uuid": f"GPU-synthetic-{i}",
                "pci_bus_id": BUS_IDS[i],
                "compute_capability": "12.0",
                "memory_total_mib": 97887,
                "pcie": {"gen_current": 1, "gen_max": 5, "gen_gpu_max": 5, "width_current": 16, "width_max": 16},
                "numa_node": i // 4,
                "cpu_affinity": "0-63,128-191" if i < 4 else "64-127,192-255",
                "nvlink_active": 0,
            }
            for i in range(gpus)
        ],
        "pairs": [
            {"gpus": [a, b], "level": _level(a, b), "nvlink": False, "p2p": p2p_ok if a // 4 == b // 4 else p2p_no}
            for a in range(gpus)
            for b in range(a + 1, gpus)
        ],
    }


def doctor_meta(with_fail: bool = False) -> dict:
    """meta["doctor"] as the sweep writes it: commprof.doctor.doctor_summary() plus the "failed" ids."""
    from commprof.doctor import doctor_summary
    from commprof.doctor.result import CheckResult

    results = [
        CheckResult(
            "p2p",
            "GPU peer-to-peer works between every pair",
            "warn",
            "no P2P between the sockets: 16 GPU pairs go through host memory",
            ["NVML: no P2P between GPU0-GPU4 (read chipset_not_supported, write chipset_not_supported)"],
            "keep tensor-parallel groups within a socket, or enable P2P in the BIOS if the board allows it",
        ),
        CheckResult(
            "pcie-link",
            "PCIe links at full generation and width",
            "ok",
            "every GPU at Gen5 x16 under load",
            ["GPU0..7: Gen5 x16 (NVML, under load)"],
        ),
        CheckResult(
            "acs",
            "ACS redirect off above the GPUs",
            "ok",
            "no bridge above a GPU redirects requests",
            ["ACSCtl: ReqRedir- CmpltRedir- on 4 switch ports (lspci -vvv)"],
        ),
        CheckResult(
            "clocks",
            "Clocks, power and thermals steady for benchmarking",
            "skipped",
            "not root: clock reasons not readable",
        ),
    ]
    if with_fail:
        results.append(
            CheckResult(
                "iommu",
                "IOMMU off or passthrough",
                "fail",
                "the IOMMU translates DMA: P2P traffic takes a detour through it",
                ["iommu=on (/proc/cmdline)", "41 IOMMU group(s) (/sys/kernel/iommu_groups)"],
                "add iommu=pt to the kernel command line and reboot",
            )
        )
    summary = doctor_summary(results)
    summary["failed"] = [r.id for r in results if r.status == "fail"]
    return summary


def make_meta(run_id: str, with_topology: bool = True) -> dict:
    """meta.json of the synthetic 8 × RTX PRO 6000 box (two sockets, GPUs 0-3 and 4-7)."""
    meta = {
        "run_id": run_id,
        "created": "2026-03-01T11:58:00Z",
        "command": ["commprof", "sweep", "SYNTHETIC"],
        "cwd": "/srv/commprof",
        "hostname": "synthetic-box",
        "world_size": WORLD_SIZE,
        "nnodes": 1,
        "backend": "nccl",
        "versions": {
            "python": "3.12.3",
            "torch": "2.13.0",
            "cuda": "13.0",
            "nccl": "2.27.5",
            "driver": "595.58.03",
            "flashinfer": "0.7.4",
            "commprof": "0.1.0",
        },
        "gpus": [
            {
                "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "compute_capability": "12.0",
                "pci_bus_id": BUS_IDS[i],
            }
            for i in range(WORLD_SIZE)
        ],
        "env": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING"},
        "plan": {"model": MODEL, "tp": WORLD_SIZE, "phase": "verify", "dtype": "bfloat16", "tokens": list(TOKENS)},
    }
    if with_topology:
        meta["topology"] = probe_meta()
        meta["doctor"] = doctor_meta()
    return meta


def simulated_meta(run_id: str, calibration: str = "nccl-prior") -> dict:
    """meta.json of a simulation of the synthetic box, with the expected error `commprof simulate` records."""
    from commprof.costmodel.model_error import expected_error

    return {
        **make_meta(run_id, with_topology=False),
        "source": "simulated",
        "simulated": True,
        "calibration": calibration,
        "model_error": expected_error([calibration], None, WORLD_SIZE).to_dict(),
    }


def write_run(
    parent: Path,
    run_id: str = "synthetic-run",
    records: list[dict] | None = None,
    meta: dict | None = None,
    **make_kwargs,
) -> Path:
    """A run folder under `parent` with results.jsonl and meta.json; returns its path."""
    run_dir = Path(parent) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    records = records if records is not None else make_records(run_id, **make_kwargs)
    with open(run_dir / RESULTS_FILE, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
    if meta is None:
        meta = simulated_meta(run_id) if make_kwargs.get("source") == "simulated" else make_meta(run_id)
    (run_dir / META_FILE).write_text(json.dumps(meta, indent=2))
    return run_dir


def measured_twin(
    model_records: list[dict], run_id: str, seed: int = 0, bias: float = 1.1, spread: float = 0.08
) -> list[dict]:
    """SYNTHETIC measured records of the same sweep as `model_records` (source "simulated"): every ok step time is
    the model's × `bias` × a per-configuration factor around 1 (± `spread`), p90 2 % above the median, as if the
    box ran `bias` slower than the model predicts. Failed predictions stay failed."""
    rng = np.random.default_rng(seed)
    factors: dict[str, float] = {}
    twins = []
    for record in model_records:
        twin = json.loads(json.dumps(record))
        twin.update(source="measured", run_id=run_id, calibration=None, timing="cuda_events")
        stats = twin.get("step_us")
        if stats:
            config = json.dumps([twin["point"]["impl"], twin["point"]["env"], twin["point"]["options"]], sort_keys=True)
            factor = bias * factors.setdefault(config, float(rng.uniform(1 - spread, 1 + spread)))
            median = stats["median"] * factor
            twin["step_us"] = {
                "n": 20,
                "min": median * 0.98,
                "median": median,
                "mean": median * 1.005,
                "p90": median * 1.02,
                "max": median * 1.05,  # 20 samples: no p99
                "cv": 0.01,
            }
            if twin.get("op_us"):
                twin["op_us"] = {
                    key: values
                    if key in ("sites", "collectives", "draft", "bytes", "cv")
                    else [v * factor for v in values]
                    for key, values in twin["op_us"].items()
                }
        twins.append(twin)
    return twins
