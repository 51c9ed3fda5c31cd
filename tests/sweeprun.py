"""Launch real torchrun sweeps on gloo from tests: a tiny model, sweep files written in the test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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


def run_controllers(
    nproc: int, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node nproc -m commprof.allreduce_sweep *args` without torchrun's agent process (its
    torch import, ~2 CPU-seconds): each controller gets the environment the agent gives it, and the rendezvous store
    the agent would host is hosted here, as long as they run, and once one fails the others are stopped (SIGTERM),
    as the agent stops them. For a launch where torchrun itself is not under test. Returns the exit code (the first
    that is not 0) and what the ranks printed, rank 0's first."""
    import tempfile
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=300))
    agent = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "TORCHELASTIC_USE_AGENT_STORE": "True"}
    agent |= {"WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc)}
    outputs = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in range(nproc)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "commprof.allreduce_sweep", *args],
            env=(env or sweep_env()) | agent | {"RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=out,
            stderr=err,
            text=True,
            cwd=REPO,
            start_new_session=True,
        )
        for rank, (out, err) in enumerate(outputs)
    ]
    try:
        deadline = time.monotonic() + timeout
        while any(proc.poll() is None for proc in procs) and time.monotonic() < deadline:
            if any(proc.returncode for proc in procs):  # as the agent does: one failed, the others are stopped
                for proc in procs:
                    if proc.poll() is None:
                        proc.terminate()
            time.sleep(0.05)
        codes = [proc.wait(timeout=max(deadline - time.monotonic(), 0.1)) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    printed = []
    for out, err in outputs:
        out.seek(0), err.seek(0)
        printed.append((out.read(), err.read()))
        out.close(), err.close()
    code = next((c for c in codes if c != 0), 0)
    stdout, stderr = ("".join(texts) for texts in zip(*printed))
    return subprocess.CompletedProcess(args, code, stdout, stderr)


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
