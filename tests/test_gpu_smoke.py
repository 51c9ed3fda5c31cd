"""`python -m commprof.gpu_smoke` on CPU: the environment it prints first, the no-CUDA skip, the CUDA-but-unusable
failure, compute modes, the exit codes, and the steps it would run on one GPU and on eight (their verdicts:
test_gpu_smoke_verdicts.py; the archive and a python without torch: test_gpu_smoke_archive.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commprof.gpu_smoke import __main__ as smoke_main
from commprof.gpu_smoke import run as smoke_run
from commprof.gpu_smoke.environment import FAIL, RUN, SKIP, decide
from commprof.gpu_smoke.points import ONE_RANK_POINTS, POINTS, knob_point, sweep_toml
from commprof.gpu_smoke.verdicts import FAIL as V_FAIL
from commprof.gpu_smoke.verdicts import PASS, Verdict, format_verdicts
from commprof.gpu_smoke.verdicts import SKIP as V_SKIP
from commprof.sweep.planning.config import parse_sweep
from tests.gpu_smoke_records import env, healthy_records, knob_records
from tests.nvml_fake import FakeNvml

REPO = Path(__file__).resolve().parents[1]


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
    """Without --out, nothing is made. (The environment's real probe, a fresh process, runs in `make gpu-smoke`'s
    test below.)"""
    bare = env(cuda_available=False, gpus=[], nvml_gpus=None, nvml_detail="no NVIDIA driver")
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: bare)
    monkeypatch.setattr("tempfile.mkdtemp", lambda **kw: pytest.fail("the no-CUDA path made an output folder"))
    assert smoke_main.main([]) == 0
    assert "no CUDA GPU here" in capsys.readouterr().out


def test_no_gpu_with_an_out_folder_keeps_the_skip_and_its_reason(tmp_path, monkeypatch, capsys):
    bare = env(cuda_available=False, gpus=[], nvml_gpus=None, nvml_detail="no NVIDIA driver")
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: bare)
    monkeypatch.setattr(smoke_run, "gpu_paths", lambda *a, **k: pytest.fail("no GPU path may run"))
    assert smoke_main.main(["--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["exit_code"] == 0 and [v["status"] for v in summary["verdicts"]] == ["skip"]
    assert "no CUDA GPU here (no NVIDIA driver" in summary["verdicts"][0]["detail"]
    assert summary["environment"]["nvml_detail"] == "no NVIDIA driver"
    assert "[SKIP]" in (tmp_path / "summary.txt").read_text() and "[SKIP]" in capsys.readouterr().out


def test_unusable_gpus_exit_1_with_the_reason_in_the_summary(tmp_path, monkeypatch, capsys):
    broken = env(cuda_available=False, gpus=[], nvml_gpus=2, cuda_error="RuntimeError: driver too old")
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: broken)
    monkeypatch.setattr(smoke_run, "gpu_paths", lambda *a, **k: pytest.fail("no GPU path may run"))
    assert smoke_main.main(["--out", str(tmp_path)]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["exit_code"] == 1 and summary["verdicts"][0]["status"] == "fail"
    assert "driver too old" in summary["verdicts"][0]["detail"] and "[FAIL]" in capsys.readouterr().out


def test_verdicts_decide_the_exit_code(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: env())
    outcomes = {"pass": [Verdict("a", PASS, "x")], "skip": [Verdict("b", V_SKIP, "gated")]}
    outcomes["fail"] = outcomes["pass"] + [Verdict("c", V_FAIL, "broke")]
    for name, verdicts in outcomes.items():
        monkeypatch.setattr(smoke_run, "gpu_paths", lambda *a, v=verdicts, **k: v)
        assert smoke_main.main(["--out", str(tmp_path / name)]) == (1 if name == "fail" else 0)
        assert (tmp_path / name / "summary.txt").read_text().count("\n") == len(verdicts) + 2


@pytest.mark.processes
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
    assert not venv.exists() and "-m pip" not in proc.stdout  # (a missing extra's line may name `pip install`)
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["verdicts"][0]["status"] == "skip"


# --- the sweeps it runs ------------------------------------------------------------------------------------


def test_smoke_sweeps_are_valid_sweep_files():
    from commprof.gpu_smoke import extended
    from commprof.gpu_smoke.knobs import pick_knobs

    spec = parse_sweep(sweep_toml("nccl-sweep", POINTS, [4, 16], 150))
    assert [p.label for p in spec.points[1:]] == [p.label for p in POINTS]
    assert {p.impl for p in spec.points} >= {"default", "nccl+rmsnorm", "symm-mem", "flashinfer-fused"}
    assert not spec.warnings
    knobs = parse_sweep(sweep_toml("knob-sweep", tuple(map(knob_point, pick_knobs([]))), [4], 150))
    assert knobs.points[1].env == {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "Simple"}
    assert knobs.points[2].env == {"NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4"} and not knobs.warnings
    second = parse_sweep(sweep_toml("extended-sweep", extended.POINTS, extended.TOKENS, 150))
    assert [p.label for p in second.points] == ["defaults", "tree/LL", "ring/SIMPLE", "4 channels"]
    assert second.tokens == (1, 4, 8) and not second.warnings
    assert parse_sweep(sweep_toml("one-rank-sweep", ONE_RANK_POINTS, [4], 60)).points[1].impl == "symm-mem"


class FakeSteps:
    """Stands in for the subprocesses: records each step's command and limit, leaves what a healthy box would."""

    def __init__(self, tmp_path, monkeypatch, floor_code=2):
        from commprof.gpu_smoke import extended, steps
        from commprof.gpu_smoke.knobs import pick_knobs
        from commprof.records.files import RESULTS_FILE, append_records
        from commprof.records.schema import SCHEMA_VERSION

        self.calls: list[tuple[str, list[str], float]] = []
        tmp_path.mkdir()
        base = healthy_records(tmp_path)
        sweeps = {
            "nccl-sweep": base,
            "one-rank-sweep": base,
            "knob-sweep": knob_records(tmp_path, pick_knobs([r for r in base if r["point_id"] == "p000"])),
            "extended-sweep": knob_records(tmp_path, extended.KNOBS, tokens=tuple(extended.TOKENS)),
        }
        doctor = {"status": "ok", "counts": {"ok": 9}, "checks": [{"id": "nccl", "status": "ok"}]}
        doctor["checks"].append({"id": "pcie-link", "status": "ok", "evidence": ["Gen5 x16 under load of 40.0 GB/s"]})
        account = {"plan_match": True, "plan": {"model": "Kimi-K2.5", "tp": 2, "tokens": 4, "ops": 124}, "steps": {}}

        def fake_run(steps, name, cmd, cap=None):
            self.calls.append((name, cmd, steps.limit(name, cap)))
            code, stdout, output = 0, "", ""
            if name.endswith("sweep"):
                run_dir = Path(cmd[cmd.index("--out") + 1]) / f"20260101-000000-{name}"
                run_dir.mkdir(parents=True)
                append_records(run_dir / RESULTS_FILE, [{**r, "schema": SCHEMA_VERSION} for r in sweeps[name]])
                floor = {"status": "measured", "figures": {"source": "measured at the start of this run in 3.0 s"}}
                if "--share-gpus" in cmd:
                    floor = {"status": "not measured", "figures": None, "why": "ranks share GPUs (--share-gpus)"}
                (run_dir / "meta.json").write_text(json.dumps({"floor": floor}))
                if "--profile" in cmd:
                    (run_dir / "points" / "p000" / "profile" / "T4").mkdir(parents=True)
                    (run_dir / "points" / "p000" / "profile" / "T4" / "rank0.json.gz").write_bytes(b"")
            elif name == "report":
                report = Path(cmd[cmd.index("--out") + 1])
                report.mkdir(parents=True)
                (report / "index.html").write_text("<html></html>")
            elif name == "doctor":
                stdout = json.dumps(doctor)
            elif name == "floor":
                figures = {"pair_write_gbps": 53.0, "all_pairs_gbps": 22.0}
                stdout = json.dumps({"figures": figures, "floor": [{"bytes": 16384, "floor_us": 4.1}]})
            elif name == "floor refusal":
                code, output = floor_code, "commprof: error: the floor probe needs at least 2 CUDA GPUs, found 1\n"
            elif name == "trace":
                stdout = json.dumps(account)
            elif name == "pytest -m gpu":
                stdout = "3 passed, 2 skipped, 590 deselected in 60.0s\n"
                output = stdout + "UserWarning: a warning on stderr\n"
            return code, stdout, stdout + output

        monkeypatch.setattr(steps.Steps, "run", fake_run)

    def names(self):
        return [name for name, _, _ in self.calls]

    def command(self, name):
        return next(cmd for step, cmd, _ in self.calls if step == name)


def test_one_gpu_runs_two_ranks_sharing_it_then_one_rank_then_the_rest(tmp_path, monkeypatch):
    from commprof.gpu_smoke.budget import BUDGET_S
    from commprof.gpu_smoke.run import STEP_MINIMUM_S, gpu_paths

    fake = FakeSteps(tmp_path / "records", monkeypatch)
    verdicts = gpu_paths(tmp_path / "out", 1, BUDGET_S, echo=lambda text: None)
    assert fake.names() == [n for n in STEP_MINIMUM_S if n != "floor"]
    sweep = fake.command("nccl-sweep")
    assert sweep[:3] == [sys.executable, "-m", "torch.distributed.run"] and "--nproc-per-node=2" in sweep
    assert "--rdzv-backend=static" in sweep and "--master-addr=127.0.0.1" in sweep and "--standalone" not in sweep
    assert "--share-gpus" in sweep and sweep[sweep.index("-m", 3) + 1] == "commprof.allreduce_sweep"
    assert "--nproc-per-node=1" in fake.command("one-rank-sweep") and "--single-rank" in fake.command("one-rank-sweep")
    assert parse_sweep((tmp_path / "out" / "nccl-sweep.toml").read_text()).tokens == (4,)
    knobs = parse_sweep((tmp_path / "out" / "knob-sweep.toml").read_text())
    assert [p.label for p in knobs.points] == ["defaults", "tree/SIMPLE", "4 channels"]  # against RING/LL on 2
    report = fake.command("report")
    assert [Path(p).name for p in report[4:7]] == [f"20260101-000000-{n}" for n in STEP_MINIMUM_S if "sweep" in n]
    assert fake.command("pytest -m gpu")[-1] == "tests" and "gpu" in fake.command("pytest -m gpu")
    # Every step's limit leaves every later step its minimum, inside the budget (the fake steps take no time).
    for index, (name, _, limit) in enumerate(fake.calls):
        later = sum(STEP_MINIMUM_S[n] for n, _, _ in fake.calls[index + 1 :])
        assert STEP_MINIMUM_S[name] <= limit <= BUDGET_S - later
    assert "2 ranks sharing one GPU" in verdicts[0].path
    assert [v.status for v in verdicts if v.status != PASS] == [V_SKIP] * 3, format_verdicts(verdicts)
    (floor,) = [v for v in verdicts if v.path.startswith("floor probe")]
    assert floor.status == V_SKIP and floor.detail.startswith("skipped: one GPU") and "share GPUs" in floor.detail
    assert next(v for v in verdicts if v.path == "pytest -m gpu").detail.startswith("3 passed")


def test_the_first_step_fits_six_minutes_on_one_gpu_or_eight_by_its_own_budget():
    from commprof.gpu_smoke.budget import BUDGET_S, SMOKE_WALL_S
    from commprof.gpu_smoke.run import STEP_MINIMUM_S

    assert SMOKE_WALL_S <= 360 and BUDGET_S + 30 <= SMOKE_WALL_S  # start-up, summary and archive in 30 s
    for skipped in ("floor", "one-rank-sweep"):  # one GPU; two or more
        assert sum(s for name, s in STEP_MINIMUM_S.items() if name != skipped) <= BUDGET_S


def test_eight_gpus_run_eight_ranks_with_two_sizes_and_no_one_rank_sweep(tmp_path, monkeypatch):
    from commprof.gpu_smoke.run import gpu_paths

    fake = FakeSteps(tmp_path / "records", monkeypatch)
    verdicts = gpu_paths(tmp_path / "out", 8, echo=lambda text: None)
    assert "one-rank-sweep" not in fake.names()
    assert "--nproc-per-node=8" in fake.command("nccl-sweep") and "--share-gpus" not in fake.command("nccl-sweep")
    assert parse_sweep((tmp_path / "out" / "nccl-sweep.toml").read_text()).tokens == (4, 16)
    assert "8 ranks on 8 GPUs" in verdicts[0].path
    assert fake.command("floor")[3:6] == ["floor", "--quick", "--json"]
    (floor,) = [v for v in verdicts if v.path.startswith("floor probe")]
    assert floor.status == PASS and "4.1 µs at 16 KiB" in floor.detail and "measured at the start" in floor.detail


def test_exclusive_compute_mode_skips_the_two_rank_paths_with_the_reason(tmp_path, monkeypatch):
    from commprof.gpu_smoke.run import gpu_paths

    fake = FakeSteps(tmp_path / "records", monkeypatch)
    mode = env(compute_modes=["Exclusive_Process"]).exclusive
    verdicts = gpu_paths(tmp_path / "out", 1, echo=lambda text: None, exclusive=mode, extended=True)
    assert fake.names() == ["one-rank-sweep", "doctor", "report", "pytest -m gpu", "floor refusal"]
    two_rank = [
        v for v in verdicts if "2 ranks sharing one GPU" in v.path or "acts" in v.path or "extended: " in v.path
    ]
    two_rank = [v for v in two_rank if "floor" not in v.path]
    assert len(two_rank) >= 10 and {v.status for v in two_rank} == {V_SKIP}
    assert all("compute mode Exclusive_Process" in v.detail for v in two_rank), format_verdicts(two_rank)
    assert [v.status for v in verdicts if v.status == V_FAIL] == []


def test_extended_runs_after_the_first_step_inside_the_budget(tmp_path, monkeypatch):
    from commprof.gpu_smoke import extended
    from commprof.gpu_smoke.budget import EXTENDED_BUDGET_S
    from commprof.gpu_smoke.run import STEP_MINIMUM_S, gpu_paths

    fake = FakeSteps(tmp_path / "records", monkeypatch)
    verdicts = gpu_paths(tmp_path / "out", 1, EXTENDED_BUDGET_S, echo=lambda text: None, extended=True)
    second = list(extended.minimum_s(1, True))
    assert fake.names() == [n for n in STEP_MINIMUM_S if n != "floor"] + second
    sweep = fake.command("extended-sweep")
    assert "--nproc-per-node=2" in sweep and "--profile" in sweep and "--share-gpus" in sweep
    trace = fake.command("trace")
    assert trace[3] == "trace" and Path(trace[4]).parts[-3:] == ("p000", "profile", "T4") and "--json" in trace
    ext = by_path_of(v for v in verdicts if v.path.startswith("extended: "))
    assert ext[extended.GRAPHS].status == PASS and ext[extended.TRACE].status == PASS, format_verdicts(ext.values())
    assert ext[extended.FLOOR_REFUSAL].status == PASS
    assert all(v.status == PASS for v in ext.values()), format_verdicts(ext.values())
    # The first step leaves the second its minimum, and every step starts with at least its own minimum.
    minimum = {**STEP_MINIMUM_S, **extended.minimum_s(1, True)}
    assert all(limit >= minimum[name] for name, _, limit in fake.calls), fake.calls
    assert sum(minimum[n] for n in fake.names()) <= EXTENDED_BUDGET_S


def test_the_time_guard_skips_the_second_step_when_the_first_left_too_little(tmp_path, monkeypatch):
    from commprof.gpu_smoke import extended
    from commprof.gpu_smoke.run import gpu_paths
    from commprof.gpu_smoke.steps import Steps

    fake = FakeSteps(tmp_path / "records", monkeypatch)
    monkeypatch.setattr(Steps, "left", lambda self: 100.0)  # the first step ran long
    verdicts = gpu_paths(tmp_path / "out", 1, 600, echo=lambda text: None, extended=True)
    assert not set(fake.names()) & set(extended.minimum_s(1, True))
    ext = [v for v in verdicts if v.path.startswith("extended: ")]
    assert ext and {v.status for v in ext} == {V_SKIP} and "100 s of the 600 s budget left" in ext[0].detail


def by_path_of(verdicts):
    return {v.path: v for v in verdicts}


# --- the environment, printed first ------------------------------------------------------------------------


def test_nvml_is_asked_for_sm_and_compute_mode_and_tolerates_an_older_nvidia_ml_py():
    from commprof.gpu_smoke.environment import probe_nvml

    class H200(FakeNvml):
        def _nvmlDeviceGetComputeMode(self, h):
            return 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS

    found = probe_nvml(H200(gpus=1, missing=frozenset({"nvmlSystemGetCudaDriverVersion_v2"})))
    assert found["sm"] == ["12.0"] and found["compute_modes"] == ["Exclusive_Process"] and found["nvml_gpus"] == 1
    assert found["nvml_detail"] == "driver 595.58.03, CUDA ?"
    assert "not in this nvidia-ml-py" in found["nvml_unanswered"]["nvmlSystemGetCudaDriverVersion_v2"]
    refused = probe_nvml(FakeNvml(gpus=2, refused=frozenset({"nvmlDeviceGetComputeMode"})))
    assert (
        refused["compute_modes"] == [None, None]
        and "NoPermission" in refused["nvml_unanswered"]["nvmlDeviceGetComputeMode"]
    )


def test_compute_modes_decide_what_may_run():
    assert env(compute_modes=["Exclusive_Process"]).exclusive.startswith("compute mode Exclusive_Process")
    assert env(compute_modes=["Default"]).exclusive is None
    decision, line = decide(env(compute_modes=["Prohibited"]))
    assert decision == FAIL and "Prohibited" in line


def test_the_environment_is_printed_before_anything_else_and_the_verdicts_last(tmp_path, monkeypatch):
    bare = env(
        cuda_available=False,
        gpus=[],
        nvml_gpus=None,
        nvml_detail="no NVIDIA driver",
        torch_version=None,
        torch_cuda=None,
        missing_modules=["torch", "pandas"],
        python="3.12.3 (/usr/bin/python3)",
    )
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: bare)
    printed: list[str] = []
    assert smoke_main.smoke(tmp_path / "out", tmp_path / "a.tgz", False, None, echo=printed.append) == 0
    text = "\n".join(printed)
    assert text.startswith("gpu-smoke: environment\n  python 3.12.3 (/usr/bin/python3)")
    assert "torch: not importable by this python" in text and "missing: torch, pandas" in text
    assert text.index("missing: torch") < text.index("no CUDA GPU here")
    assert printed[-1].strip().splitlines()[-1].startswith("gpu-smoke: 0 passed, 0 failed, 1 skipped")
