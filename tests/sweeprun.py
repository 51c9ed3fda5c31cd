"""Launch real torchrun sweeps on gloo from tests: a tiny model, sweep files written in the test."""

from __future__ import annotations

import json
import os
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


def one_rank(monkeypatch) -> None:
    """The environment torchrun gives the rank of a one-rank launch (its store on a free port) from the checkout
    (sweep_env: the tests' plug-ins importable in the points' workers): a sweep run in the test's own process."""
    env = dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    for name, value in {**env, "MASTER_PORT": str(free_port()), "PYTHONPATH": sweep_env()["PYTHONPATH"]}.items():
        monkeypatch.setenv(name, value)


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
