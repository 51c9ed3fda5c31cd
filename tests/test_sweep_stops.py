"""A sweep that cannot go on (its disk full, the torchrun agent that hosts its store killed) ends in one line
that says why and names the resume command; what was written stays readable."""

import contextlib
import errno

import pytest
import torch.distributed as dist

from commprof.records.files import read_records
from commprof.replay.forkserver import ForkServer
from commprof.sweep import command as sweep_command
from commprof.sweep.running import runner
from tests.sweeprun import one_rank


@pytest.mark.parametrize(
    "error, words",
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "runs/x/results.jsonl"),
            "cannot write the run folder (No space left on device: runs/x/results.jsonl)",
        ),
        (dist.DistNetworkError("failed to recv, got 0 bytes"), "rendezvous store is gone, was the torchrun agent"),
    ],
)
def test_a_full_disk_or_a_lost_agent_is_one_line_naming_the_resume_command(tmp_path, monkeypatch, capsys, error, words):
    one_rank(monkeypatch)

    def stops(*args, **kwargs):
        raise error

    monkeypatch.setattr(runner, "_sweep_loop", stops)
    status = sweep_command.main(["--tokens", "1", "--out", str(tmp_path / "runs"), "--no-doctor", "--single-rank"])
    err = capsys.readouterr().err.strip().splitlines()
    stopped = [line for line in err if "error:" in line]
    assert status == 1 and len(stopped) == 1 and "Traceback" not in "\n".join(err), err
    assert words in stopped[0] and "continue with: torchrun" in stopped[0] and "--resume" in stopped[0]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert read_records(run_dir / "results.jsonl") == []  # the folder stays a run a --resume takes up


@pytest.mark.parametrize("dry_run", [False, True], ids=["sweep", "dry run"])
def test_the_fork_server_is_started_before_anything_queries_cuda(tmp_path, monkeypatch, dry_run):
    """A server forked after torch counted GPUs could not use CUDA (torch poisons the fork): the controller forks
    it first, then loads the implementations, counts GPUs and checks memory."""
    import torch

    one_rank(monkeypatch)
    happened = []

    def record(what, result=None):
        def called(*args, **kwargs):
            happened.append(what)
            return result

        return called

    def stop(*args, **kwargs):
        raise RuntimeError("stopped where points would run")

    for name, result in {"is_available": False, "device_count": 0, "mem_get_info": (0, 0)}.items():
        monkeypatch.setattr(torch.cuda, name, record(f"torch.cuda.{name}", result))
    monkeypatch.setattr(ForkServer, "start", classmethod(record("fork server", contextlib.nullcontext())))
    monkeypatch.setattr(sweep_command, "_check_impls", record("implementations loaded"))
    monkeypatch.setattr(sweep_command, "_dry_run", stop)
    monkeypatch.setattr(runner, "run_sweep", stop)
    args = ["--tokens", "1", "--out", str(tmp_path / "runs"), "--no-doctor", "--single-rank"]
    with pytest.raises(RuntimeError, match="stopped where points would run"):
        sweep_command.main([*args, "--dry-run"] if dry_run else args)
    assert happened[0] == "fork server" and "implementations loaded" in happened, happened
    assert any(what.startswith("torch.cuda.") for what in happened), happened  # the checks did query CUDA
