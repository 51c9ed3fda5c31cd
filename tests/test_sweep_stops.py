"""A sweep that cannot go on (its disk full, the torchrun agent that hosts its store killed) ends in one line
that says why and names the resume command; what was written stays readable."""

import errno
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from commprof.records.files import read_records
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
    monkeypatch.setattr(runner, "ForkServer", lambda: SimpleNamespace(close=lambda: None))  # no point runs
    status = sweep_command.main(["--tokens", "1", "--out", str(tmp_path / "runs"), "--no-doctor", "--single-rank"])
    err = capsys.readouterr().err.strip().splitlines()
    stopped = [line for line in err if "error:" in line]
    assert status == 1 and len(stopped) == 1 and "Traceback" not in "\n".join(err), err
    assert words in stopped[0] and "continue with: torchrun" in stopped[0] and "--resume" in stopped[0]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert read_records(run_dir / "results.jsonl") == []  # the folder stays a run a --resume takes up
