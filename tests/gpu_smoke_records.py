"""A GPU box's environment and the records of the smoke's sweeps as a healthy GPU box writes them, with NCCL summaries parsed by the sweep's own
code from fake logs in NCCL's real formats (shared by the smoke's tests)."""

from commprof.gpu_smoke.environment import SmokeEnvironment
from commprof.gpu_smoke.knobs import Knob
from commprof.gpu_smoke.points import POINTS
from commprof.sweep.running.nccl_summary import summarize_nccl_log

HIDDEN = 7168
# NCCL 2.28's INFO lines as src/init.cc and src/enqueue.cc print them (rank 0; TUNING only with >= 2 ranks).
INIT = """host:100:100 [0] NCCL INFO NCCL version 2.28.3+cuda13.0
host:100:200 [0] NCCL INFO comm 0x5600 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
host:100:200 [0] NCCL INFO {channels} coll channels, {channels} collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer
"""
TUNING = "host:100:100 [0] NCCL INFO {coll}: {bytes} Bytes -> Algo {algo} proto {proto} channel{{Lo..Hi}}={{0..{hi}}}\n"
VOCAB_BYTES = 163840 // 2 * 4 * 2  # the logits all-gather's per-rank input at T=4 over 2 ranks, as NCCL logs it
BASELINE = ("RING", "LL", 2)  # what NCCL picks in these fake logs without a knob


def nccl_summary(tmp_path, algo="RING", proto="LL", channels=2, tuning=True, tokens=(4,)):
    """What the sweep stores for a point: its logs, parsed by the sweep's own code path."""
    sizes = {("all_reduce", t * HIDDEN * 2, t * HIDDEN * 2) for t in tokens} | {
        ("all_gather", VOCAB_BYTES, 2 * VOCAB_BYTES)
    }
    tmp_path = tmp_path / f"{algo}-{proto}-{channels}-{tuning}-{'-'.join(map(str, tokens))}"
    tmp_path.mkdir(parents=True, exist_ok=True)
    init, tune = tmp_path / "nccl.rank0.log", tmp_path / "nccl-tuning.rank0.log"
    init.write_text(INIT.format(channels=channels))
    lines = [TUNING.format(coll="AllReduce", bytes=4, algo="RING", proto="LL", hi=0)]  # the harness's barrier
    if tuning:
        for _ in range(3):
            lines += [
                TUNING.format(coll="AllReduce", bytes=s, algo=algo, proto=proto, hi=channels - 1)
                for coll, s, _ in sorted(sizes)
                if coll == "all_reduce"
            ]
            lines.append(TUNING.format(coll="AllGather", bytes=VOCAB_BYTES, algo="RING", proto="SIMPLE", hi=1))
    tune.write_text(INIT.format(channels=channels) + "".join(lines))
    summary = summarize_nccl_log(init, sizes)
    summary["choices"] = summarize_nccl_log(tune, sizes)["choices"]
    return summary


def record(label, point_id, mode, status="ok", tokens=4, message=None, nccl=None, detail=None, ops=(122, 2)):
    return {
        "kind": "step",
        "source": "measured",
        "run_id": "20260101-000000-nccl-sweep",
        "point_id": point_id,
        "point": {"point_id": point_id, "label": label},
        "mode": mode,
        "status": status,
        "message": message,
        "tokens": tokens,
        "dtype": "bfloat16",
        "plan": {"hidden_size": HIDDEN, "dtype": "bfloat16", "all_reduce": ops[0], "all_gather": ops[1]},
        "step_us": {"median": 812.0} if status == "ok" else None,
        "nccl": nccl,
        "impl_detail": detail,
    }


def knob_nccl(tmp_path, knob: Knob, tokens=(4,)):
    """The NCCL summary of a knob's point where NCCL followed it."""
    algo, proto, channels = BASELINE
    return nccl_summary(tmp_path, knob.algo or algo, knob.proto or proto, knob.channels or channels, tokens=tokens)


def point_rows(label, index, nccl, tokens=(4,), statuses=("ok", "ok")):
    return [
        record(label, f"p{index:03d}", mode, status, tokens=t, nccl=nccl)
        for t in tokens
        for mode, status in zip(("eager", "graph"), statuses)
    ]


def healthy_records(tmp_path, overrides=None, tokens=(4,)):
    """Every point of the smoke's NCCL sweep as a healthy GPU box records it; `overrides`: label -> records."""
    overrides = overrides or {}
    out = []
    for index, label in enumerate(["defaults"] + [p.label for p in POINTS]):
        if label in overrides:
            out += overrides[label]
        elif label.startswith("flashinfer"):
            gated = "needs flashinfer-python >= 0.6.11, which is not installed (pip install 'commprof[flashinfer]')"
            out += [record(label, f"p{index:03d}", m, "unsupported", message=gated) for m in ("eager", "graph")]
        else:
            out += point_rows(label, index, nccl_summary(tmp_path, *BASELINE, tokens=tokens), tokens)
    return out


def knob_records(tmp_path, knobs, overrides=None, tokens=(4,)):
    """The knob sweep's records: the baseline, then each knob's point where NCCL followed it."""
    overrides = overrides or {}
    out = point_rows("defaults", 0, nccl_summary(tmp_path, *BASELINE, tokens=tokens), tokens)
    for index, knob in enumerate(knobs, start=1):
        out += overrides.get(knob.label) or point_rows(knob.label, index, knob_nccl(tmp_path, knob, tokens), tokens)
    return out


def env(**changes) -> SmokeEnvironment:
    base = dict(
        torch_version="2.11.0+cu130",
        torch_cuda="13.0",
        cuda_available=True,
        cuda_error=None,
        gpus=["NVIDIA H200"],
        nvml_gpus=1,
        nvml_detail="driver 580.65.06, CUDA 13.0",
        nccl_version="2.28.3",
        flashinfer_version=None,
    )
    return SmokeEnvironment(**{**base, **changes})
