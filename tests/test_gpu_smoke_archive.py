"""What comes back from a GPU box: one archive of at most 16 MiB with summary.json beside it, also when a step
crashes, and the skip from a python that lacks torch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commprof.gpu_smoke import __main__ as smoke_main
from commprof.gpu_smoke import run as smoke_run
from commprof.gpu_smoke.verdicts import PASS, Verdict
from tests.gpu_smoke_records import env

REPO = Path(__file__).resolve().parents[1]


def test_the_archive_holds_everything_and_summary_json_is_also_beside_it(tmp_path, monkeypatch):
    import tarfile

    monkeypatch.setattr(smoke_main, "probe_environment", lambda: env())
    made = [Verdict("a", PASS, "x")]

    def fake_paths(out, *args, **kwargs):
        (out / "runs" / "r1" / "points" / "p000").mkdir(parents=True)
        (out / "runs" / "r1" / "results.jsonl").write_text("{}\n")
        (out / "runs" / "r1" / "points" / "p000" / "nccl.rank0.log").write_text("NCCL INFO\n" * 100)
        return made

    monkeypatch.setattr(smoke_run, "gpu_paths", fake_paths)
    archive = tmp_path / "returned" / "gpu-smoke.tgz"
    assert smoke_main.main(["--out", str(tmp_path / "gs"), "--archive", str(archive)]) == 0
    beside = json.loads((archive.parent / "summary.json").read_text())
    assert sorted(p.name for p in archive.parent.iterdir()) == ["gpu-smoke.tgz", "summary.json"]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        inside = json.loads(tar.extractfile("gs/summary.json").read())
    assert names[0] == "gs/summary.json" and "gs/runs/r1/points/p000/nccl.rank0.log" in names
    assert {"gs/smoke.log", "gs/summary.txt", "gs/runs/r1/results.jsonl"} <= set(names)
    assert inside == beside and inside["archive"]["left_out"] == [] and inside["archive"]["files"] == len(names)


def test_a_crash_inside_the_steps_is_a_verdict_and_the_archive_still_comes_back(tmp_path, monkeypatch):
    import tarfile

    monkeypatch.setattr(smoke_main, "probe_environment", lambda: env())

    def crashing(out, *args, **kwargs):
        (out / "logs").mkdir()
        (out / "logs" / "nccl-sweep.log").write_text("what the first step wrote\n")
        raise KeyError("step_us")

    monkeypatch.setattr(smoke_run, "gpu_paths", crashing)
    archive = tmp_path / "back" / "gs.tgz"
    assert smoke_main.main(["--out", str(tmp_path / "gs"), "--archive", str(archive)]) == 1
    (crash,) = [
        v for v in json.loads((archive.parent / "summary.json").read_text())["verdicts"] if v["status"] == "fail"
    ]
    assert crash["path"] == "the smoke itself" and crash["detail"].startswith("KeyError: 'step_us'")
    assert "gs/logs/nccl-sweep.log" in tarfile.open(archive).getnames()


def test_an_archive_over_16_mib_leaves_the_largest_files_out_and_says_so(tmp_path, monkeypatch):
    import os
    import tarfile

    from commprof.gpu_smoke import archive as packing

    monkeypatch.setattr(packing, "ARCHIVE_LIMIT_BYTES", 3 << 20)
    out = tmp_path / "gs"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "nccl-sweep.log").write_text("NCCL INFO line\n" * 1000)
    (out / "big.json.gz").write_bytes(os.urandom(4 << 20))  # incompressible, like a gzip'd trace
    (out / "trace.json.gz").write_bytes(os.urandom(1 << 20))
    kept, left_out = packing.plan_archive(out)
    assert [p.name for p in kept] == ["nccl-sweep.log", "trace.json.gz"] and left_out == ["big.json.gz (4096 KiB)"]
    size = packing.pack(out, kept, tmp_path / "a.tgz")
    assert size <= 3 << 20 and tarfile.open(tmp_path / "a.tgz").getnames() == [
        "gs/logs/nccl-sweep.log",
        "gs/trace.json.gz",
    ]


@pytest.mark.processes
def test_a_python_without_torch_or_pandas_still_answers_with_the_skip(tmp_path):
    """What `python3 -m commprof.gpu_smoke` does on a box whose python lacks torch (this one's system python3):
    `-S` leaves out every site-packages folder, and only click (which commprof's own modules import) comes back:
    msgspec is missing too, as on a CUDA image that lacks it, and the smoke still answers before it needs it."""
    import click

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "click").symlink_to(Path(click.__file__).parent)
    archive = tmp_path / "back" / "gs.tgz"
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "commprof.gpu_smoke", "--out", str(tmp_path / "gs"), "--archive", str(archive)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{lib}:{REPO}"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpu-smoke: environment") and "torch: not importable by this python" in proc.stdout
    assert "missing: torch, msgspec, rich, jinja2, pandas, matplotlib, pynvml, pytest" in proc.stdout
    assert "no CUDA GPU here (no NVML: nvidia-ml-py is not installed; no torch in this python)" in proc.stdout
    summary = json.loads((archive.parent / "summary.json").read_text())
    assert summary["verdicts"][0]["status"] == "skip" and summary["environment"]["torch_version"] is None


def test_a_summary_json_the_smoke_did_not_write_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: pytest.fail("the smoke ran"))
    returned = tmp_path / "returned"
    returned.mkdir()
    report = '{"runs": []}\n'
    (returned / "summary.json").write_text(report)
    archive = returned / "a.tgz"
    assert smoke_main.main(["--out", str(tmp_path / "gs"), "--archive", str(archive)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(returned / "summary.json") in err and len(err.splitlines()) == 1
    assert (returned / "summary.json").read_text() == report and not (tmp_path / "gs").exists()
    # An earlier smoke's summary.json is replaced.
    monkeypatch.setattr(smoke_main, "probe_environment", lambda: env())
    monkeypatch.setattr(smoke_run, "gpu_paths", lambda out, *a, **k: [Verdict("a", PASS, "x")])
    (returned / "summary.json").write_text(json.dumps({"verdicts": [], "exit_code": 0}))
    assert smoke_main.main(["--out", str(tmp_path / "gs"), "--archive", str(archive)]) == 0
    assert json.loads((returned / "summary.json").read_text())["verdicts"][-1]["path"] == "a"
