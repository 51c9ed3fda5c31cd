"""Launch real torchrun sweeps on gloo from tests: a tiny model, sweep files written in the test."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import commprof
from tests.distributed import free_port

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def tiny_model(tmp_path: Path, layers: int = 3, hidden: int = 64, vocab: int = 256) -> Path:
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers, "hidden_size": hidden}
    path.write_text(json.dumps(config | {"vocab_size": vocab, "torch_dtype": "bfloat16"}))
    return path


def sweep_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RANK", None)
    return env


def torchrun_args(nproc: int, *args: str, nnodes: int = 1, node_rank: int = 0, port: int | None = None) -> list[str]:
    port = port or free_port()
    launch = [f"--nproc-per-node={nproc}"]
    if nnodes == 1:
        launch += ["--standalone"] if port is None else ["--master-addr=127.0.0.1", f"--master-port={port}"]
    else:
        launch += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--master-addr=127.0.0.1", f"--master-port={port}"]
    return [*TORCHRUN, *launch, "-m", "commprof.allreduce_sweep", *args]


def run_sweep(nproc: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        torchrun_args(nproc, *args), capture_output=True, text=True, timeout=timeout, env=sweep_env(), cwd=REPO
    )


PACKAGE = Path(commprof.__file__).resolve().parent


def own_frames(output: str) -> list[str]:
    """The traceback lines in `output` of frames in commprof's own files: matched by the package's path, never by
    its name (a checkout or a venv under a folder named commprof is no frame of commprof's)."""
    return [line for line in output.splitlines() if line.strip().startswith(f'File "{PACKAGE}{os.sep}')]


def only_run_dir(out: Path) -> Path:
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def shared_sweep(root: Path, name: str, nproc: int, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`run_sweep(nproc, *args, "--out", ...)` of a tiny model (`{model}` in args), run once in `root` for every test
    that only reads it: pytest-xdist workers take a lock, the first runs it, the others read what it left."""
    root.mkdir(parents=True, exist_ok=True)
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        launch = folder / "launch.json"
        if not launch.exists():
            shutil.rmtree(folder, ignore_errors=True)
            model = str(tiny_model(folder))
            done = run_sweep(nproc, *[arg.replace("{model}", model) for arg in args], "--out", str(folder / "runs"))
            fields = {"args": done.args, "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
            launch.write_text(json.dumps(fields))
    return subprocess.CompletedProcess(**json.loads(launch.read_text())), folder / "runs"
