"""The real launches several test files read, each run once per pytest run: a torchrun launch costs a dozen CPU
seconds (torch imported by its agent, each rank and each rank's fork server), its points a fraction of that, so one
launch holds many behaviours and each test reads the part it is about.

- `smoke_launch`: the GPU smoke's own 2-rank sweep (its loopback rendezvous, kimi-k2.5's verify step at T = 4,
  --profile): the smoke's launch, the profiled trace against the plan, a plain gloo run's routing and statistics.
- `gloo_launch`: one 2-rank sweep launched as two torchrun "nodes" of one rank each, with the doctor: a tiny
  model at T = 1, 4 with compute spaced between its collectives and rank 1 late, the NCCL settings and graphs gloo
  cannot run, a fused point, and a crossover stage of a one-shot plug-in against gloo; reported as a user would.
- `lost_agent_launch`: a 2-rank sweep whose rank-0 doctor outlasts the controllers' group timeout; once its first
  point is recorded, its torchrun agent (which hosts the rendezvous store) is killed.

pytest-xdist workers share them: the first to ask takes a lock and launches, the others wait and read what it left
(what it printed and its run folder)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.distributed import free_port
from tests.sweeprun import sweep_env, tiny_model, torchrun_args

LaunchOutcome = dict  # what a launch left: JSON-able, with its run folder as "run"


def shared_launch(factory: pytest.TempPathFactory, name: str, launch: Callable[[Path], LaunchOutcome]) -> LaunchOutcome:
    """`launch(folder)` run once for this pytest run (every xdist worker), its outcome read by all."""
    run_uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # one per `pytest -n` run, the same in each of its workers
    base = factory.getbasetemp()
    root = base.parent / f"shared-{run_uid}" if run_uid else base / "shared"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        outcome = root / f"{name}.json"
        if not outcome.exists():
            folder = root / name
            folder.mkdir()
            outcome.write_text(json.dumps(launch(folder)))
    return json.loads(outcome.read_text())


def _new_run(runs: Path) -> str | None:
    made = [p for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
    return str(made[0]) if len(made) == 1 else None


def smoke_launch(folder: Path) -> LaunchOutcome:
    """The smoke's extended sweep as `python -m commprof.gpu_smoke --extended` launches it, with --profile, 3 timed
    steps (a p99 needs more) and one warm-up step; `steps` its log folder."""
    from commprof.gpu_smoke import extended
    from commprof.gpu_smoke.points import SmokeSweep
    from commprof.gpu_smoke.steps import Steps, run_sweep

    steps = Steps(folder, 280, {"extended-sweep": 10}, echo=lambda text: None)
    extra = ("--profile", "--iterations", "3", "--warmup", "1")
    done = run_sweep(steps, SmokeSweep("extended-sweep", 2, (), (extended.TRACE_TOKENS,), extra))
    run = str(done.run_dir) if done.run_dir else None
    return {"code": done.code, "output": done.output, "run": run, "steps": str(folder)}


GLOO_SWEEP = """name = "gloo"
[run]
model = "{model}"
tokens = [1, 4]
iterations = 3
warmup = 1
point_timeout_s = 60
compute = "uniform:300"
skew = {{ rank = 1, us = 200 }}
[axes]
NCCL_ALGO = ["default", "ring"]
[[points]]
impl = "nccl+rmsnorm"
[[points]]
impl = "nccl"
[[points]]
channels = 4
env = {{ OMP_NUM_THREADS = "2" }}
[[points]]
nccl_graph = "generated:ring-2ch-same-hop"
[[points]]
impl = "tests.plugins.one_shot:OneShotGloo"
label = "one-shot"
[[stages]]
kind = "crossover"
min_bytes = 1024
max_bytes = 4096
rounds = 2
warmup = 1
max_rounds = 3
[report]
compute_ms = 5.0
accept_lengths = [1.3, 2.0]
"""


def gloo_launch(folder: Path) -> LaunchOutcome:
    """GLOO_SWEEP on two torchrun agents of one rank each, meeting at a rendezvous on 127.0.0.1: what each agent
    printed (stdout, stderr) and the run folder."""
    model = tiny_model(folder)
    sweep = folder / "gloo.toml"
    sweep.write_text(GLOO_SWEEP.format(model=model))
    args = ["--sweep", str(sweep), "--out", str(folder / "runs")]
    port = free_port()
    nodes = [
        subprocess.Popen(
            torchrun_args(1, *args, nnodes=2, node_rank=rank, port=port),
            env=sweep_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=400) for node in nodes]
    return {
        "codes": [node.returncode for node in nodes],
        "stdout": [out for out, _ in outputs],
        "stderr": [err for _, err in outputs],
        "run": _new_run(folder / "runs"),
    }


SLOW_DOCTOR_S = 16  # rank 0's doctor, past the controllers' group timeout (the sweep's point_timeout_s, no slack)
LOST_AGENT_SWEEP = """name = "agent"
[run]
model = "{model}"
tokens = [2]
iterations = 2
warmup = 1
point_timeout_s = 12
[axes]
impl = ["default", "tests.plugins.one_shot:OneShotGloo"]
[axes.env]
COMMPROF_KNOB = ["a", "b"]
"""


def lost_agent_launch(folder: Path) -> LaunchOutcome:
    """LOST_AGENT_SWEEP through tests.plugins.slow_doctor_sweep (the sweep's entry with a slow doctor and no group
    slack), its agent SIGKILLed once the first point's records are on disk: what the ranks printed, and its run."""
    model = tiny_model(folder, layers=1)
    sweep = folder / "agent.toml"
    sweep.write_text(LOST_AGENT_SWEEP.format(model=model))
    args = ["--sweep", str(sweep), "--out", str(folder / "runs"), "--no-nccl-debug"]
    launch = torchrun_args(2, *args)
    launch[launch.index("commprof.allreduce_sweep")] = "tests.plugins.slow_doctor_sweep"
    agent = subprocess.Popen(
        launch,
        env=sweep_env() | {"SLOW_DOCTOR_S": str(SLOW_DOCTOR_S)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    killed = False
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and agent.poll() is None:
            runs = folder / "runs"
            results = list(runs.glob("*/results.jsonl")) if runs.exists() else []
            if results and results[0].read_text().count("\n") >= 2:
                os.kill(agent.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.1)
        _, stderr = agent.communicate(timeout=180)  # the ranks hold the pipes until they end
    finally:
        try:
            os.killpg(agent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return {"killed": killed, "code": agent.returncode, "stderr": stderr, "run": _new_run(folder / "runs")}
