"""The smoke's process edge: each step a subprocess with its share of one time budget, its output kept under
OUT/logs/, and the sweeps launched by torchrun on a loopback rendezvous.

Runs from a source checkout with the interpreter's own packages (no venv, no install): every subprocess gets
the checkout on PYTHONPATH.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from commprof.gpu_smoke.points import SmokeSweep, SweepOutcome, sweep_toml

REPO = Path(__file__).resolve().parents[2]
POINT_TIMEOUT_S = 150


class Steps:
    """Runs the steps one after another inside one time budget; `minimum_s`: what each step needs at least, in
    the order they run (a step's limit leaves every later step its minimum)."""

    def __init__(self, out: Path, budget_s: float, minimum_s: dict[str, float], echo=print):
        self.out, self.echo, self.budget_s = out, echo, budget_s
        self.deadline = time.monotonic() + budget_s
        self.pending = dict(minimum_s)
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.deadline - time.monotonic()

    def limit(self, name: str, cap: float | None = None) -> float:
        """Seconds step `name` may take: what is left after every later step's minimum, at most `cap`."""
        self.pending.pop(name, None)
        left = self.left() - sum(self.pending.values())
        return left if cap is None else min(cap, left)

    def run(self, name: str, cmd: list[str], cap: float | None = None) -> tuple[int | None, str, str]:
        """(exit code or None on timeout, stdout, stdout and stderr); the process tree is killed at the limit."""
        timeout = self.limit(name, cap)
        if timeout < 10:
            return None, "", f"not run: the {self.budget_s:.0f} s budget was spent before this step"
        self.echo(f"gpu-smoke: {name} (at most {timeout:.0f} s) ...")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        stem = re.sub(r"[^\w]+", "-", name)  # "pytest -m gpu" -> pytest-m-gpu
        log_path, out_path = self.logs / f"{stem}.log", self.logs / f"{stem}.stdout"
        started = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as log, open(out_path, "w", encoding="utf-8") as stdout:
            proc = subprocess.Popen(cmd, stdout=stdout, stderr=log, cwd=REPO, env=env, start_new_session=True)
            try:
                code: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
        stdout_text = out_path.read_text(errors="replace")
        output = stdout_text + log_path.read_text(errors="replace")
        self.echo(
            f"gpu-smoke: {name} {'timed out' if code is None else f'exit {code}'} after {time.monotonic() - started:.0f} s"
        )
        if code is None:
            output += f"\n(killed after {timeout:.0f} s; logs: {log_path})"
        return code, stdout_text, output


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(ranks: int) -> list[str]:
    """torchrun on one node with a static rendezvous at 127.0.0.1: no host-name lookup (`--standalone` stores
    the host's FQDN as the master address, which can stall a VM without DNS)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--node-rank=0",
        "--rdzv-backend=static",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        f"--nproc-per-node={ranks}",
    ]


def _new_run(parent: Path, before: set[str]) -> Path | None:
    made = sorted(p for p in parent.glob("*") if p.is_dir() and p.name not in before) if parent.is_dir() else []
    return made[-1] if made else None


def run_sweep(steps: Steps, sweep: SmokeSweep) -> SweepOutcome:
    """One smoke sweep, run under `steps`, and what it left."""
    from commprof.records.files import RESULTS_FILE, read_records

    sweep_file = steps.out / f"{sweep.name}.toml"
    sweep_file.write_text(sweep_toml(sweep.name, sweep.points, list(sweep.tokens), POINT_TIMEOUT_S))
    runs = steps.out / "runs"
    before = {p.name for p in runs.glob("*")} if runs.is_dir() else set()
    cmd = [
        *torchrun(sweep.ranks),
        "-m",
        "commprof.allreduce_sweep",
        "--sweep",
        str(sweep_file),
        "--out",
        str(runs),
        "--no-doctor",
        *sweep.extra,
    ]
    code, _, output = steps.run(sweep.name, cmd, sweep.cap)
    run_dir = _new_run(runs, before)
    records = read_records(run_dir / RESULTS_FILE) if run_dir and (run_dir / RESULTS_FILE).exists() else []
    return SweepOutcome(run_dir, records, code, output)
