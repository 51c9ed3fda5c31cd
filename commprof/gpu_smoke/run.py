"""The smoke's steps: sweeps at >= 2 NCCL ranks, the doctor, the report and `pytest -m gpu`, each a subprocess
with its share of the time budget, everything kept under --out.

Runs from a source checkout with the interpreter's own packages (no venv, no install): every subprocess gets
the checkout on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from commprof.gpu_smoke.points import ONE_RANK_POINTS, POINTS, sweep_toml, sweep_verdicts
from commprof.gpu_smoke.verdicts import (
    FAIL,
    Verdict,
    doctor_verdict,
    file_verdict,
    floor_verdict,
    pytest_verdict,
)

REPO = Path(__file__).resolve().parents[2]
BUDGET_S = 470  # under 8 minutes on one GPU, with room for start-up and the summary
POINT_TIMEOUT_S = 150
# What each step needs at least, in the order they run; a step's limit leaves this much to every later one.
STEP_MINIMUM_S = {
    "nccl-sweep": 120,
    "one-rank-sweep": 45,
    "floor": 30,
    "doctor": 60,
    "report": 45,
    "pytest -m gpu": 90,
}


class Steps:
    """Runs the steps one after another inside one time budget; each step's output goes to OUT/logs/."""

    def __init__(self, out: Path, budget_s: float, skipped: tuple[str, ...] = (), echo=print):
        self.out, self.echo = out, echo
        self.deadline = time.monotonic() + budget_s
        self.pending = {name: s for name, s in STEP_MINIMUM_S.items() if name not in skipped}
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def limit(self, name: str, cap: float | None = None) -> float:
        """Seconds step `name` may take: what is left after every later step's minimum, at most `cap`."""
        self.pending.pop(name, None)
        left = self.deadline - time.monotonic() - sum(self.pending.values())
        return left if cap is None else min(cap, left)

    def run(self, name: str, cmd: list[str], cap: float | None = None) -> tuple[int | None, str, str]:
        """(exit code or None on timeout, stdout, stdout and stderr); the process tree is killed at the limit."""
        timeout = self.limit(name, cap)
        if timeout < 10:
            return None, "", f"not run: the {BUDGET_S} s budget was spent before this step"
        self.echo(f"gpu-smoke: {name} (at most {timeout:.0f} s) ...")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        log_path = self.logs / f"{name.replace(' ', '-')}.log"
        out_path = self.logs / f"{name.replace(' ', '-')}.stdout"
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


def _new_run(parent: Path, before: set[str]) -> Path | None:
    made = sorted(p for p in parent.glob("*") if p.is_dir() and p.name not in before) if parent.is_dir() else []
    return made[-1] if made else None


def run_sweep(
    steps: Steps, name: str, ranks: int, points, tokens: list[int], extra: list[str], cap: float | None = None
):
    """One smoke sweep; (its run folder or None, its records, exit code, output)."""
    from commprof.records.files import RESULTS_FILE, read_records

    sweep_file = steps.out / f"{name}.toml"
    sweep_file.write_text(sweep_toml(name, points, tokens, POINT_TIMEOUT_S))
    runs = steps.out / "runs"
    before = {p.name for p in runs.glob("*")} if runs.is_dir() else set()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ranks}",
        "-m",
        "commprof.allreduce_sweep",
        "--sweep",
        str(sweep_file),
        "--out",
        str(runs),
        "--no-doctor",
        *extra,
    ]
    code, _, output = steps.run(name, cmd, cap)
    run_dir = _new_run(runs, before)
    records = read_records(run_dir / RESULTS_FILE) if run_dir and (run_dir / RESULTS_FILE).exists() else []
    return run_dir, records, code, output


def sweep_step_verdicts(title: str, code, output: str, records, points, where: str, baseline: bool):
    verdicts = sweep_verdicts(records, points, where, baseline)
    if code != 0:
        tail = "\n".join(output.strip().splitlines()[-8:])
        verdicts.insert(0, Verdict(title, FAIL, f"exit {code}: {tail}"))
    return verdicts


def gpu_paths(out: Path, gpus: int, budget_s: float = BUDGET_S, echo=print) -> list[Verdict]:
    """Every GPU step on this machine's `gpus` GPUs; the verdicts in the order the steps ran."""
    ranks = next(n for n in (8, 4, 2) if n <= max(gpus, 2))
    shared = gpus < ranks
    skipped = (() if shared else ("one-rank-sweep",)) + (("floor",) if gpus < 2 else ())
    steps = Steps(out, budget_s, skipped, echo)
    where = f"{ranks} ranks sharing one GPU" if shared else f"{ranks} ranks on {ranks} GPUs"
    # Ranks that share a GPU take turns on it: one T and fewer steps keep the sweep inside the budget.
    extra = ["--share-gpus", "--iterations", "3", "--warmup", "1"] if shared else []
    run_dir, records, code, output = run_sweep(
        steps, "nccl-sweep", ranks, POINTS, [4] if shared else [4, 16], extra, cap=360
    )
    run_dirs = [run_dir] if run_dir else []
    verdicts = sweep_step_verdicts(f"NCCL sweep ({where})", code, output, records, POINTS, where, baseline=True)
    if shared:
        run_dir, records, code, output = run_sweep(steps, "one-rank-sweep", 1, ONE_RANK_POINTS, [4], [])
        run_dirs += [run_dir] if run_dir else []
        verdicts += sweep_step_verdicts("one-rank sweep", code, output, records, ONE_RANK_POINTS, "1 rank", False)

    meta_path = run_dirs[0] / "meta.json" if run_dirs else None
    meta = _json_object(meta_path.read_text()) if meta_path and meta_path.exists() else None
    title = "floor probe (peer copies) and the sweep's meta.json floor"
    if gpus >= 2:
        floor_out = ["--out", str(out / "floor.json")]
        code, stdout, output = steps.run(
            "floor", [sys.executable, "-m", "commprof", "floor", "--quick", "--json", *floor_out]
        )
        verdicts.append(floor_verdict(title, gpus, code, _json_object(stdout), output, meta))
    else:
        verdicts.append(floor_verdict(title, gpus, None, None, "", meta))

    code, stdout, output = steps.run(
        "doctor", [sys.executable, "-m", "commprof", "doctor", "--json", "--collect", str(out / "doctor")]
    )
    summary = _json_object(stdout)
    if summary is not None:
        (out / "doctor.json").write_text(json.dumps(summary, indent=1))
    verdicts.append(
        doctor_verdict("doctor's GPU checks: NCCL probe, PCIe links read under load", code, summary, output)
    )

    report_dir = out / "report"
    title = "report rendered from the smoke's records"
    if run_dirs:
        code, _, output = steps.run(
            "report", [sys.executable, "-m", "commprof", "report", *map(str, run_dirs), "--out", str(report_dir)]
        )
        made = [str(p.relative_to(out)) for p in (report_dir / "index.html", report_dir / "summary.json") if p.exists()]
        verdicts.append(file_verdict(title, code, made, output))
    else:
        steps.limit("report")
        verdicts.append(Verdict(title, FAIL, "no run folder to render"))

    pytest = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
    code, _, output = steps.run("pytest -m gpu", [*pytest, "--junitxml", str(out / "pytest.xml"), "tests"])
    verdicts.append(pytest_verdict("pytest -m gpu", code, output))
    return verdicts


def _json_object(text: str) -> dict | None:
    """The JSON object a command printed on stdout, or None."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
