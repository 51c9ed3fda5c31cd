"""Sweeps fed what an attacker (or a broken plug-in) would feed them record it and go on; a signal or a lost peer
ends them promptly in one line. One real 2-rank launch holds the faults: points that hang, crash, reduce wrongly,
return NaN, carry markup and newlines in their labels, leave a helper running or need a kernel build that fails,
and a last point that hangs until a SIGTERM to rank 0's controller ends the sweep. A second launch is resumed while
it runs, then loses rank 1's controller."""

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.records.files import read_records
from commprof.records.run_meta import read_meta
from commprof.terminal import one_line
from tests.sweeprun import REPO, run_controllers, sweep_env, tiny_model, torchrun_args

FAULTY = "tests.plugins.faulty"
BUILDS = "tests.plugins.builds"
MARKUP = "markup [/] [bold]x :smile:"
NEWLINES = "x\ntouch PWNED\n#"
POINT_TIMEOUT_S = 30  # the hanging point's limit: the signal must end the sweep well before it
LAST = "hangs until stopped"
HOSTILE = [
    f'impl = "{FAULTY}:Hang"',
    f'impl = "{FAULTY}:Crash"',
    f'impl = "{FAULTY}:WrongOnRank1"',
    'impl = "nccl"',
    f'impl = "{FAULTY}:NaNOnRank0"',
    f'label = {json.dumps(MARKUP)}\nenv = {{ COMMPROF_TEST_KNOB = "a" }}',
    f'label = {json.dumps(NEWLINES)}\nenv = {{ COMMPROF_TEST_KNOB = "b" }}',
    'env = { COMMPROF_TEST_KNOB = "c" }',
    f'impl = "{FAULTY}:LeavesADaemon"',
    f'impl = "{BUILDS}:NeedsBrokenBuild"',
    f'impl = "{BUILDS}:NeedsFineBuild"',
    f'impl = "{FAULTY}:Hang"\nlabel = "{LAST}"\nenv = {{ COMMPROF_TEST_KNOB = "d" }}',
]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _controllers(torchrun_pid: int) -> list[int]:
    """The controllers torchrun started, by rank (started in rank order)."""
    found = subprocess.run(["pgrep", "-P", str(torchrun_pid)], capture_output=True, text=True).stdout.split()
    return sorted(int(pid) for pid in found)


def _wait_for(out: Path, points: int, proc: subprocess.Popen, limit_s: float = 240) -> Path:
    """Until `points` points have records in the run folder under `out` (the sweep's progress, what these tests act
    on), and the next point has started: that run folder."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        for results in out.glob("*/results.jsonl") if out.exists() else []:
            if len({json.loads(line)["point_id"] for line in results.read_text().splitlines() if line}) >= points:
                time.sleep(1)  # the next point has started
                return results.parent
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"the sweep never recorded {points} points")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict:
    """The hostile sweep, stopped by a SIGTERM to rank 0's controller once its last point hangs: what it printed,
    its run folder, the helpers its plug-in left, how long the signal took to end it and the records before it."""
    root = tmp_path_factory.mktemp("hostile")
    sweep = root / "hostile.toml"
    sweep.write_text(
        f'name = "hostile"\n[run]\nmodel = "{tiny_model(root)}"\ntokens = [2]\niterations = 3\nwarmup = 1\n'
        f"point_timeout_s = {POINT_TIMEOUT_S}\n" + "".join(f"[[points]]\n{point}\n" for point in HOSTILE)
    )
    out, pids = root / "runs with spaces", root / "pids"
    env = sweep_env() | {"COMMPROF_TEST_PIDS": str(pids)}
    started = time.monotonic()
    with open(root / "stdout", "w") as stdout, open(root / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            torchrun_args(2, "--sweep", str(sweep), "--out", str(out), "--no-doctor"),
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            cwd=REPO,
        )
        try:
            run = _wait_for(out, len(HOSTILE), proc)  # the baseline and every point but the last
            before = (run / "results.jsonl").read_text()
            os.kill(_controllers(proc.pid)[0], signal.SIGTERM)
            signalled = time.monotonic()
            proc.wait(timeout=120)
            ended = time.monotonic()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    helpers = [int(pid) for pid in pids.read_text().split()] if pids.exists() else []
    left = [pid for pid in helpers if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return {
        "code": proc.returncode,
        "stdout": (root / "stdout").read_text(),
        "stderr": (root / "stderr").read_text(),
        "run": run,
        "helpers": helpers,
        "helpers_left": left,
        "elapsed_s": ended - started,
        "signal_to_end_s": ended - signalled,
        "before_signal": before,
        "root": root,
    }


def _eager(hostile: dict) -> list[dict]:
    return [r for r in read_records(hostile["run"] / "results.jsonl") if r["mode"] == "eager"]


@pytest.mark.processes
def test_faulty_points_are_recorded_and_the_sweep_goes_on(hostile):
    points: dict[str, list[dict]] = {}
    for record in read_records(hostile["run"] / "results.jsonl"):
        points.setdefault(record["point"]["label"], []).append(record)
    assert {r["status"] for r in points["defaults"] if r["mode"] == "eager"} == {"ok"}
    assert {r["status"] for r in points[f"{FAULTY}:Hang"]} == {"timeout"}
    crashed = [r for r in points[f"{FAULTY}:Crash"] if r["mode"] == "eager"]
    assert {r["status"] for r in crashed} == {"crashed"}
    assert "SIGABRT" in crashed[0]["message"] and "rank 1" in crashed[0]["message"]
    wrong = [r for r in points[f"{FAULTY}:WrongOnRank1"] if r["mode"] == "eager"]
    assert wrong[0]["status"] == "wrong" and wrong[0]["check"]["first_bad_site"] == "embed"
    assert {r["status"] for r in points["nccl"]} == {"unsupported"} and "NCCL" in points["nccl"][0]["message"]
    # Every point ran; the hang cost its limit once, not forever.
    assert hostile["elapsed_s"] < POINT_TIMEOUT_S + 180
    assert "timeout" in hostile["stdout"] and "crashed" in hostile["stdout"]


@pytest.mark.processes
def test_nan_results_hostile_labels_and_leftover_helpers_are_dealt_with(hostile, tmp_path):
    """NaNs, labels carrying markup and newlines, and a plug-in that leaves a helper running in a session of its
    own (the point must end it)."""
    assert len(hostile["helpers"]) == 2 and hostile["helpers_left"] == []  # each rank's helper ended with its point
    status = {r["point"]["label"]: r["status"] for r in _eager(hostile)}  # read back printable: "x touch PWNED #"
    assert status[f"{FAULTY}:NaNOnRank0"] == "wrong"
    assert status[MARKUP] == status[one_line(NEWLINES)] == status["COMMPROF_TEST_KNOB=c"] == status["defaults"] == "ok"
    assert status[f"{FAULTY}:LeavesADaemon"] == "ok"
    (nan,) = [r for r in _eager(hostile) if r["status"] == "wrong" and r["point"]["impl"].endswith("NaNOnRank0")]
    assert nan["check"]["non_finite"] > 0 and "NaN/Inf" in nan["message"]
    assert MARKUP in hostile["stdout"]
    points = len(HOSTILE)  # and the baseline, but for the nccl point, which gloo cannot run
    # the A/A control, 3 NCCL environments and 2 route winners (the plug-ins), each beside the baseline
    confirming = (
        "then up to 12 measurements confirming the answers beside the baseline (or a fused kind's unfused reference)"
    )
    assert f"{points} points will run in stage 0, up to {points} in all, {confirming}" in hostile["stderr"]
    report = tmp_path / "report"
    assert main(["report", str(hostile["run"]), "--out", str(report)]) == 0
    shell = subprocess.run(
        ["env", "-i", "bash", "--norc", "-c", f"source {report / 'recommend.env'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert shell.returncode == 0 and shell.stderr == "" and not (tmp_path / "PWNED").exists()


@pytest.mark.processes
def test_a_sweep_builds_before_its_first_point_and_refuses_what_failed(hostile):
    assert "fake_comm: building" in hostile["stderr"] and "fake_comm: failed" in hostile["stderr"]
    records = read_records(hostile["run"] / "results.jsonl")
    broken = [r for r in records if r["point"]["impl"].endswith("NeedsBrokenBuild")]
    assert {r["status"] for r in broken} == {"unsupported"}
    assert 'fake_comm.cu(42): error: identifier "__nv_fp8x4_e4m3" is undefined' in broken[0]["message"]
    fine = [r for r in records if r["point"]["impl"].endswith("NeedsFineBuild") and r["mode"] == "eager"]
    assert fine[0]["status"] == "ok"
    (report,) = read_meta(hostile["run"]).kernel_builds
    assert report.builds[f"{BUILDS}:broken_comm"].status == "failed"
    assert report.builds[f"{BUILDS}:fine_comm"].status == "built"


@pytest.mark.processes
def test_a_signal_to_one_controller_ends_the_sweep_promptly(hostile):
    """SIGTERM to rank 0's controller while its last point hangs (SIGINT takes the same handler in the sweep loop:
    test_an_interrupt_and_a_terminate_take_one_handler)."""
    assert hostile["signal_to_end_s"] < POINT_TIMEOUT_S - 5  # not the hanging point's limit
    assert "Interrupted. Finished points are saved" in hostile["stderr"]
    assert f"--resume {shlex.quote(str(hostile['run']))}" in hostile["stderr"]  # a path with spaces, quoted
    results = (hostile["run"] / "results.jsonl").read_text()
    assert results == hostile["before_signal"]  # every finished point stays; the aborted one is not recorded
    assert not [line for line in results.splitlines() if LAST in line]


def test_an_interrupt_and_a_terminate_take_one_handler():
    """In the sweep loop SIGINT (Ctrl-C) and SIGTERM set the same flag: the real SIGTERM above stands for both."""
    from types import SimpleNamespace

    from commprof.sweep.running.runner import install_interrupt_handlers

    held = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            ctx = SimpleNamespace(interrupted=False)
            install_interrupt_handlers(ctx)
            assert signal.getsignal(signal.SIGINT) is signal.getsignal(signal.SIGTERM)
            os.kill(os.getpid(), signum)
            assert ctx.interrupted
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)


def _start_hanging_sweep(tmp_path, name: str, env: dict[str, str]):
    """A sweep whose second point hangs until released (or for up to 120 s); returns (torchrun process, its results
    file)."""
    model = tiny_model(tmp_path)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "{name}"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 3\nwarmup = 1\n'
        f'point_timeout_s = 120\n[axes]\nimpl = ["default", "{FAULTY}:HangsUntilReleased"]\n'
    )
    out_dir = tmp_path / "runs"
    proc = subprocess.Popen(
        torchrun_args(2, "--sweep", str(sweep), "--out", str(out_dir), "--no-doctor"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return proc, _wait_for(out_dir, 1, proc, 120) / "results.jsonl"


@pytest.mark.processes
def test_a_live_run_refuses_a_resume_then_a_killed_peer_is_one_clear_line_and_a_resume_finishes_it(tmp_path):
    """One live sweep, faults around it: a second sweep resuming it is refused naming the holder and the first goes
    on untouched; then SIGKILL of rank 1's controller ends it with one clear line; released, a resume measures
    what was left and keeps what was done. The live sweep is torchrun's (its agent ends rank 0 once rank 1 is
    gone); the second sweep and the resume are controllers started as torchrun starts them, without its agent."""
    release = tmp_path / "release"
    env = sweep_env() | {"COMMPROF_TEST_RELEASE": str(release)}
    proc, results = _start_hanging_sweep(tmp_path, "live", env)
    try:
        second = run_controllers(2, "--resume", str(results.parent), "--no-doctor", env=env, timeout=100)
        assert second.returncode != 0, second.stderr[-2000:]
        assert f"is being written by pid {proc.pid}" not in second.stderr  # the holder is rank 0, not torchrun
        assert re.search(r"is being written by pid \d+ on host \S+ \(since ", second.stderr), second.stderr[-2000:]
        assert proc.poll() is None  # the first sweep goes on, untouched
        done = results.read_text()
        assert done.count("\n") == 2

        rank1 = _controllers(proc.pid)[1]
        os.kill(rank1, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=100)
        ours = [line for line in stderr.splitlines() if line.startswith(("commprof", "[rank0]"))]
        assert "[rank0]: Traceback" not in stderr, stderr[-3000:]
        assert any("rank 0: another rank's controller is gone" in line and "--resume" in line for line in ours)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert results.read_text() == done  # nothing of the point in flight

    release.touch()
    resumed = run_controllers(2, "--resume", str(results.parent), "--no-doctor", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "done before resume" in resumed.stderr
    records = read_records(results)
    assert results.read_text().startswith(done)
    keys = [(r["point_id"], r["tokens"], r["mode"]) for r in records]
    assert len(keys) == len(set(keys)) == 4, "a point was recorded twice"
    assert {(r["point_id"], r["status"]) for r in records if r["mode"] == "eager"} == {("p000", "ok"), ("p001", "ok")}
