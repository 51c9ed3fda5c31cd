"""`make gpu-smoke` on CPU: the no-CUDA path, the CUDA-but-unusable failure, the exit codes, and the verdicts
assembled from records whose NCCL summaries come from fake logs in NCCL's real formats."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commprof.gpu_smoke import __main__ as smoke_main
from commprof.gpu_smoke.environment import FAIL, RUN, SKIP, SmokeEnvironment, decide
from commprof.gpu_smoke.graph_point import GRAPH_LABEL
from commprof.gpu_smoke.points import ONE_RANK_POINTS, POINTS, sweep_toml, sweep_verdicts
from commprof.gpu_smoke.verdicts import FAIL as V_FAIL
from commprof.gpu_smoke.verdicts import (
    PASS,
    Verdict,
    doctor_verdict,
    exit_code,
    floor_verdict,
    format_verdicts,
    pytest_verdict,
)
from commprof.gpu_smoke.verdicts import SKIP as V_SKIP
from commprof.sweep.config import parse_sweep
from commprof.sweep.measure import summarize_nccl_log

REPO = Path(__file__).resolve().parents[1]
HIDDEN = 7168


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


# --- whether to run at all ---------------------------------------------------------------------------------


def test_a_cuda_machine_runs():
    decision, line = decide(env())
    assert decision == RUN and "1 GPU(s): NVIDIA H200" in line and "commprof[flashinfer]" in line


def test_a_missing_package_fails_before_any_step_runs():
    decision, line = decide(env(missing_modules=["tomli"]))
    assert decision == FAIL and "this interpreter lacks tomli" in line and "PY=" in line


def test_this_interpreter_has_what_the_gpu_paths_import():
    from commprof.gpu_smoke.environment import missing_modules

    assert missing_modules() == []


def test_no_gpu_anywhere_is_a_skip():
    decision, line = decide(env(cuda_available=False, gpus=[], nvml_gpus=None, nvml_detail="no NVIDIA driver"))
    assert decision == SKIP and "no CUDA GPU here (no NVIDIA driver" in line


def test_gpus_that_torch_cannot_use_are_a_failure_with_torchs_reason():
    too_old = "RuntimeError: The NVIDIA driver on your system is too old (found version 12020)."
    decision, line = decide(env(cuda_available=False, gpus=[], nvml_gpus=8, cuda_error=too_old))
    assert decision == FAIL
    assert "NVML sees 8 GPU(s)" in line and "built for CUDA 13.0" in line and "too old (found version 12020)" in line
    decision, line = decide(env(cuda_available=False, gpus=[], nvml_gpus=8, torch_cuda=None))
    assert decision == FAIL and "is a CPU build: install a CUDA build of torch" in line


def test_smoke_without_gpu_says_so_and_creates_nothing(capsys, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: `make gpu-smoke` runs the real paths")
    monkeypatch.setattr("tempfile.mkdtemp", lambda **kw: pytest.fail("the no-CUDA path made an output folder"))
    assert smoke_main.main([]) == 0
    assert "no CUDA GPU here" in capsys.readouterr().out


def test_no_gpu_with_an_out_folder_keeps_the_skip_and_its_reason(tmp_path, monkeypatch, capsys):
    bare = env(cuda_available=False, gpus=[], nvml_gpus=None, nvml_detail="no NVIDIA driver")
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: bare)
    monkeypatch.setattr(smoke_main, "gpu_paths", lambda *a, **k: pytest.fail("no GPU path may run"))
    assert smoke_main.main(["--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["exit_code"] == 0 and [v["status"] for v in summary["verdicts"]] == ["skip"]
    assert "no CUDA GPU here (no NVIDIA driver" in summary["verdicts"][0]["detail"]
    assert summary["environment"]["nvml_detail"] == "no NVIDIA driver"
    assert "[SKIP]" in (tmp_path / "summary.txt").read_text() and "[SKIP]" in capsys.readouterr().out


def test_unusable_gpus_exit_1_with_the_reason_in_the_summary(tmp_path, monkeypatch, capsys):
    broken = env(cuda_available=False, gpus=[], nvml_gpus=2, cuda_error="RuntimeError: driver too old")
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: broken)
    monkeypatch.setattr(smoke_main, "gpu_paths", lambda *a, **k: pytest.fail("no GPU path may run"))
    assert smoke_main.main(["--out", str(tmp_path)]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["exit_code"] == 1 and summary["verdicts"][0]["status"] == "fail"
    assert "driver too old" in summary["verdicts"][0]["detail"] and "[FAIL]" in capsys.readouterr().out


def test_verdicts_decide_the_exit_code(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: env())
    outcomes = {"pass": [Verdict("a", PASS, "x")], "skip": [Verdict("b", V_SKIP, "gated")]}
    outcomes["fail"] = outcomes["pass"] + [Verdict("c", V_FAIL, "broke")]
    for name, verdicts in outcomes.items():
        monkeypatch.setattr(smoke_main, "gpu_paths", lambda *a, v=verdicts, **k: v)
        assert smoke_main.main(["--out", str(tmp_path / name)]) == (1 if name == "fail" else 0)
        assert (tmp_path / name / "summary.txt").read_text().count("\n") == len(verdicts) + 2


@pytest.mark.slow
def test_make_gpu_smoke_with_a_given_python_builds_no_venv(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the target would run the real paths")
    venv = tmp_path / "venv"
    proc = subprocess.run(
        ["make", "-C", str(REPO), "gpu-smoke", f"PY={sys.executable}", f"VENV={venv}", f"OUT={tmp_path / 'out'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA GPU here" in proc.stdout and "--out" in proc.stdout
    assert not venv.exists() and "pip" not in proc.stdout
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["verdicts"][0]["status"] == "skip"


# --- the sweeps it runs ------------------------------------------------------------------------------------


def test_smoke_sweeps_are_valid_sweep_files():
    spec = parse_sweep(sweep_toml("nccl-sweep", POINTS, [4, 16], 150))
    assert [p.label for p in spec.points[1:]] == [p.label for p in POINTS]
    assert any(p.env.get("NCCL_ALGO") == "allreduce:tree" for p in spec.points)
    assert {p.impl for p in spec.points} >= {"default", "nccl+rmsnorm", "symm-mem", "flashinfer-fused"}
    assert not spec.warnings
    assert parse_sweep(sweep_toml("one-rank-sweep", ONE_RANK_POINTS, [4], 60)).points[1].impl == "symm-mem"


# --- verdicts from records ---------------------------------------------------------------------------------

# NCCL 2.28's INFO lines as src/init.cc and src/enqueue.cc print them (rank 0; TUNING only with >= 2 ranks).
INIT = """host:100:100 [0] NCCL INFO NCCL version 2.28.3+cuda13.0
host:100:200 [0] NCCL INFO comm 0x5600 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
host:100:200 [0] NCCL INFO {channels} coll channels, {channels} collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer
"""
TUNING = "host:100:100 [0] NCCL INFO {coll}: {bytes} Bytes -> Algo {algo} proto {proto} channel{{Lo..Hi}}={{0..{hi}}}\n"
VOCAB_BYTES = 163840 // 2 * 4 * 2  # the logits all-gather's per-rank input at T=4 over 2 ranks, as NCCL logs it


def nccl_summary(tmp_path, algo="RING", proto="LL", channels=2, tuning=True, tokens=(4,)):
    """What the sweep stores for a point: its logs, parsed by the sweep's own code path."""
    sizes = {("all_reduce", t * HIDDEN * 2, t * HIDDEN * 2) for t in tokens} | {
        ("all_gather", VOCAB_BYTES, 2 * VOCAB_BYTES)
    }
    tmp_path = tmp_path / f"{algo}-{proto}-{channels}-{tuning}"
    tmp_path.mkdir(exist_ok=True)
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


def record(label, point_id, mode, status="ok", tokens=4, message=None, nccl=None, detail=None):
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
        "plan": {"hidden_size": HIDDEN, "dtype": "bfloat16"},
        "step_us": {"median": 812.0} if status == "ok" else None,
        "nccl": nccl,
        "impl_detail": detail,
    }


def healthy_records(tmp_path, overrides=None):
    """Every point of the smoke's NCCL sweep as a healthy GPU box records it; `overrides`: label -> records."""
    overrides = overrides or {}
    knobs = {"ring/LL": ("RING", "LL"), "tree/Simple": ("TREE", "SIMPLE")}
    out = []
    for index, label in enumerate(["defaults"] + [p.label for p in POINTS]):
        if label in overrides:
            out += overrides[label]
            continue
        folder = tmp_path / label.replace("/", "-").replace(" ", "-")
        folder.mkdir(exist_ok=True)
        algo, proto = knobs.get(label, ("RING", "LL"))
        nccl = nccl_summary(folder, algo, proto)
        if label == GRAPH_LABEL:  # what the sweep adds to a graph point's record
            nccl = {
                **nccl,
                "graph_file": {
                    "path": "/run/nccl-graphs/g.xml",
                    "sha256": "ab" * 32,
                    "loaded": True,
                    "why": "NCCL loaded every graph the file holds",
                },
            }
        for mode in ("eager", "graph"):
            if label.startswith("flashinfer"):
                out.append(
                    record(
                        label,
                        f"p{index:03d}",
                        mode,
                        "unsupported",
                        message="needs flashinfer-python >= 0.6.11, which is not installed (pip install 'commprof[flashinfer]')",
                    )
                )
            else:
                out.append(record(label, f"p{index:03d}", mode, nccl=nccl))
    return out


def by_path(verdicts):
    return {v.path: v for v in verdicts}


def test_a_healthy_box_passes_every_path_and_skips_what_is_not_installed(tmp_path):
    verdicts = sweep_verdicts(healthy_records(tmp_path), POINTS, "2 ranks sharing one GPU", baseline=True)
    statuses = {v.path: v.status for v in verdicts}
    assert [s for p, s in statuses.items() if p.startswith("flashinfer")] == [V_SKIP, V_SKIP]
    assert all(s == PASS for p, s in statuses.items() if not p.startswith("flashinfer")), format_verdicts(verdicts)
    log = by_path(verdicts)["NCCL INFO log parsed: version, channels, a choice per all-reduce size"]
    assert "NCCL 2.28.3+cuda13.0" in log.detail and "AllReduce 57344 B -> RING/LL 2 ch" in log.detail
    assert f"AllGather {VOCAB_BYTES} B -> RING/SIMPLE 2 ch" in log.detail
    skipped = by_path(verdicts)["flashinfer-pcie-ipc, eager + graph (2 ranks sharing one GPU)"]
    assert "pip install 'commprof[flashinfer]'" in skipped.detail
    assert exit_code(verdicts) == 0


def test_a_one_rank_log_has_no_choices_and_fails_the_nccl_verdicts(tmp_path):
    one_rank = nccl_summary(tmp_path, tuning=False)
    rows = [record("defaults", "p000", m, nccl=one_rank) for m in ("eager", "graph")]
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {"defaults": rows}), POINTS, "x", baseline=True))
    log = verdicts["NCCL INFO log parsed: version, channels, a choice per all-reduce size"]
    assert log.status == V_FAIL and "no TUNING choice for all-reduce size(s) [57344]" in log.detail


def test_a_knob_that_did_not_act_fails(tmp_path):
    ignored = nccl_summary(tmp_path, algo="RING", proto="SIMPLE")
    rows = [record("tree/Simple", "p003", m, nccl=ignored) for m in ("eager", "graph")]
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {"tree/Simple": rows}), POINTS, "x", baseline=True))
    knob = verdicts["NCCL_ALGO=allreduce:tree NCCL_PROTO=SIMPLE acts (NCCL's log shows it)"]
    assert knob.status == V_FAIL and "did not follow it: 57344 B -> RING/SIMPLE" in knob.detail


def test_a_failed_capture_under_tree_is_a_verdict_but_a_crash_is_not(tmp_path):
    nccl = nccl_summary(tmp_path, algo="TREE", proto="SIMPLE")
    failed = [
        record("tree/Simple", "p003", "eager", nccl=nccl),
        record(
            "tree/Simple",
            "p003",
            "graph",
            "capture_failed",
            message="RuntimeError: operation not permitted when stream is capturing",
        ),
    ]
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {"tree/Simple": failed}), POINTS, "x", baseline=True))
    capture = verdicts["capture verdict under NCCL_ALGO=allreduce:tree NCCL_PROTO=SIMPLE"]
    assert capture.status == PASS and "T=4 capture_failed (RuntimeError: operation not permitted" in capture.detail
    crashed = [
        record("tree/Simple", "p003", m, "crashed", message="rank 1: worker killed by signal 9")
        for m in ("eager", "graph")
    ]
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {"tree/Simple": crashed}), POINTS, "x", baseline=True))
    assert verdicts["capture verdict under NCCL_ALGO=allreduce:tree NCCL_PROTO=SIMPLE"].status == V_FAIL
    assert verdicts["NCCL_ALGO=allreduce:tree NCCL_PROTO=SIMPLE acts (NCCL's log shows it)"].status == V_FAIL


def test_channels_and_missing_points_are_judged(tmp_path):
    four = nccl_summary(tmp_path, channels=4)
    rows = [record("2 channels", "p004", m, nccl=four) for m in ("eager", "graph")]
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {"2 channels": rows}), POINTS, "x", baseline=True))
    assert "shows 4 coll channels, not 2" in verdicts["NCCL_MIN/MAX_NCHANNELS=2 acts (NCCL's init log shows it)"].detail
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {"nccl+rmsnorm": []}), POINTS, "x", baseline=True))
    missing = verdicts["nccl+rmsnorm, the unfused reference (x)"]
    assert missing.status == V_FAIL and "did not reach this point" in missing.detail


def test_the_baseline_must_run_where_an_implementation_may_be_gated(tmp_path):
    gated = [record("defaults", "p000", m, "unsupported", message="needs the NCCL backend") for m in ("eager", "graph")]
    verdicts = sweep_verdicts(healthy_records(tmp_path, {"defaults": gated}), POINTS, "x", baseline=True)
    assert verdicts[0].status == V_FAIL and exit_code(verdicts) == 1


def test_doctor_verdict_needs_a_loaded_link_reading_and_the_nccl_probe():
    loaded = {
        "status": "fail",
        "counts": {"ok": 9, "fail": 1},
        "checks": [
            {
                "id": "pcie-link",
                "status": "ok",
                "detail": "",
                "evidence": ["GPU 0: Gen5 x16 of Gen5 x16 under load (NVML during a load)"],
            },
            {"id": "nccl", "status": "ok", "detail": "", "evidence": []},
        ],
    }
    assert doctor_verdict("d", 1, loaded, "").status == PASS  # a failing box check is not the smoke's failure
    idle = json.loads(json.dumps(loaded))
    idle["checks"][0]["evidence"] = ["GPU 0: Gen1 x16 of Gen5 x16 idle (nvidia-smi)"]
    assert "no PCIe link reading under load" in doctor_verdict("d", 0, idle, "").detail
    assert doctor_verdict("d", 2, None, "Traceback ...").status == V_FAIL


def test_pytest_verdict():
    assert pytest_verdict("p", 0, "....\n12 passed, 3 skipped in 40.1s\n").detail == "12 passed, 3 skipped in 40.1s"
    assert pytest_verdict("p", 1, "F\n1 failed, 2 passed\n").status == V_FAIL
    assert pytest_verdict("p", 5, "no tests ran").detail == "no GPU test was collected"
    skipped = pytest_verdict("p", 0, "sssss\n15 skipped, 578 deselected in 14.41s\n")
    assert skipped.status == V_FAIL and skipped.detail.startswith("no GPU test ran: 15 skipped")


def test_floor_verdict_needs_measured_figures_and_a_recorded_source():
    good = {"figures": {"pair_write_gbps": 53.0, "all_pairs_gbps": 22.0}, "floor": []}
    meta = {"floor": {"figures": {"source": "measured at the start of this run"}}}
    assert floor_verdict("f", 2, 0, good, "", meta).status == PASS
    assert floor_verdict("f", 2, 2, None, "needs at least 2 CUDA GPUs", meta).status == V_FAIL
    assert floor_verdict("f", 2, 0, {"figures": {"pair_write_gbps": 0}}, "", meta).status == V_FAIL
    assert "no floor entry" in floor_verdict("f", 2, 0, good, "", {}).detail
    assert floor_verdict("f", 1, None, None, "", None).detail.startswith("skipped: one GPU")


# --- the steps on one GPU and on eight ---------------------------------------------------------------------


class FakeSteps:
    """Stands in for the subprocesses: records each step's command and limit, leaves what a healthy box would."""

    def __init__(self, tmp_path, monkeypatch):
        from commprof.gpu_smoke import run
        from commprof.records.files import RESULTS_FILE, append_records
        from commprof.records.schema import SCHEMA_VERSION

        self.calls: list[tuple[str, list[str], float]] = []
        tmp_path.mkdir()
        records = [{**r, "schema": SCHEMA_VERSION} for r in healthy_records(tmp_path)]
        doctor = {"status": "ok", "counts": {"ok": 9}, "checks": [{"id": "nccl", "status": "ok"}]}
        doctor["checks"].append({"id": "pcie-link", "status": "ok", "evidence": ["Gen5 x16 under load of 40.0 GB/s"]})

        def fake_run(steps, name, cmd, cap=None):
            self.calls.append((name, cmd, steps.limit(name, cap)))
            if name.endswith("sweep"):
                run_dir = Path(cmd[cmd.index("--out") + 1]) / f"20260101-000000-{name}"
                run_dir.mkdir(parents=True)
                append_records(run_dir / RESULTS_FILE, records)
                floor = {"status": "measured", "figures": {"source": "measured at the start of this run in 3.0 s"}}
                if "--share-gpus" in cmd:
                    floor = {"status": "not measured", "figures": None, "why": "ranks share GPUs (--share-gpus)"}
                (run_dir / "meta.json").write_text(json.dumps({"floor": floor}))
            elif name == "report":
                report = Path(cmd[cmd.index("--out") + 1])
                report.mkdir(parents=True)
                (report / "index.html").write_text("<html></html>")
            stdout = json.dumps(doctor) if name == "doctor" else ""
            if name == "floor":
                figures = {"pair_write_gbps": 53.0, "all_pairs_gbps": 22.0}
                stdout = json.dumps({"figures": figures, "floor": [{"bytes": 16384, "floor_us": 4.1}]})
            return 0, stdout, stdout + ("3 passed, 2 skipped, 590 deselected in 60.0s\n" if "pytest" in name else "")

        monkeypatch.setattr(run.Steps, "run", fake_run)

    def command(self, name):
        return next(cmd for step, cmd, _ in self.calls if step == name)


def test_one_gpu_runs_two_ranks_sharing_it_then_one_rank_then_the_rest(tmp_path, monkeypatch):
    from commprof.gpu_smoke.run import BUDGET_S, STEP_MINIMUM_S, gpu_paths

    fake = FakeSteps(tmp_path / "records", monkeypatch)
    verdicts = gpu_paths(tmp_path / "out", 1, BUDGET_S, echo=lambda text: None)
    assert [name for name, _, _ in fake.calls] == [n for n in STEP_MINIMUM_S if n != "floor"]
    sweep = fake.command("nccl-sweep")
    assert sweep[:3] == [sys.executable, "-m", "torch.distributed.run"] and "--nproc-per-node=2" in sweep
    assert "--share-gpus" in sweep and sweep[sweep.index("-m", 3) + 1] == "commprof.allreduce_sweep"
    assert "--nproc-per-node=1" in fake.command("one-rank-sweep")
    assert parse_sweep((tmp_path / "out" / "nccl-sweep.toml").read_text()).tokens == (4,)
    report = fake.command("report")
    assert [Path(p).name for p in report[4:6]] == ["20260101-000000-nccl-sweep", "20260101-000000-one-rank-sweep"]
    assert fake.command("pytest -m gpu")[-1] == "tests" and "gpu" in fake.command("pytest -m gpu")
    # Every step's limit leaves every later step its minimum, inside the budget (the fake steps take no time).
    for index, (name, _, limit) in enumerate(fake.calls):
        later = sum(STEP_MINIMUM_S[n] for n, _, _ in fake.calls[index + 1 :])
        assert STEP_MINIMUM_S[name] <= limit <= BUDGET_S - later
    assert "2 ranks sharing one GPU" in verdicts[0].path
    assert [v.status for v in verdicts if v.status != PASS] == [V_SKIP] * 3, format_verdicts(verdicts)
    (floor,) = [v for v in verdicts if v.path.startswith("floor probe")]
    assert floor.status == V_SKIP and floor.detail.startswith("skipped: one GPU") and "share GPUs" in floor.detail


def test_eight_gpus_run_eight_ranks_with_two_sizes_and_no_one_rank_sweep(tmp_path, monkeypatch):
    from commprof.gpu_smoke.run import gpu_paths

    fake = FakeSteps(tmp_path / "records", monkeypatch)
    verdicts = gpu_paths(tmp_path / "out", 8, echo=lambda text: None)
    assert "one-rank-sweep" not in [name for name, _, _ in fake.calls]
    assert "--nproc-per-node=8" in fake.command("nccl-sweep") and "--share-gpus" not in fake.command("nccl-sweep")
    assert parse_sweep((tmp_path / "out" / "nccl-sweep.toml").read_text()).tokens == (4, 16)
    assert "8 ranks on 8 GPUs" in verdicts[0].path
    assert fake.command("floor")[3:6] == ["floor", "--quick", "--json"]
    (floor,) = [v for v in verdicts if v.path.startswith("floor probe")]
    assert floor.status == PASS and "4.1 µs at 16 KiB" in floor.detail and "measured at the start" in floor.detail


def test_the_graph_point_passes_only_on_proof_that_nccl_loaded_the_file(tmp_path):
    path = "NCCL_GRAPH_FILE generated:ring-2ch-same-hop loaded and run, eager (x)"
    unproven = [
        record(GRAPH_LABEL, "p008", m, nccl={"graph_file": {"loaded": None, "why": "no INFO line"}})
        for m in ("eager", "graph")
    ]
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {GRAPH_LABEL: unproven}), POINTS, "x", baseline=True))
    assert verdicts[path].status == V_FAIL and "no INFO line" in verdicts[path].detail
    one_gpu = [
        record(GRAPH_LABEL, "p008", m, "unsupported", message="generated:ring-2ch-same-hop: no candidates were written")
        for m in ("eager", "graph")
    ]
    verdicts = by_path(sweep_verdicts(healthy_records(tmp_path, {GRAPH_LABEL: one_gpu}), POINTS, "x", baseline=True))
    assert verdicts[path].status == V_SKIP
