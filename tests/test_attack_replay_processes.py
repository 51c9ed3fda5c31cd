"""The attack run's cases around a sweep's own processes, replayed as the attacker ran them: the sweep's entry
point resuming a folder with a linked lock, a disk that fills before the first record and mid-sweep (one rank, run
here), and a SIGKILL of the torchrun agent. Each ends in one line naming the resume; what was written stays
readable."""

import errno
from pathlib import Path

import pytest

from commprof.records.files import read_records
from tests.attack_replay import replay_here
from tests.sweeprun import one_rank, tiny_model
from tests.test_attack_replay import VICTIM_TEXT, _interrupted_run, _victim


def test_resume_of_a_folder_with_a_linked_lock_through_the_sweep_entry_point(tmp_path):
    """`ln -sf ~/victim X/writer.lock; python -m commprof.allreduce_sweep --resume X`: the module run as `-m` runs
    it (tests/attack_replay.py), refused before any process starts."""
    victim = _victim(tmp_path)
    run = _interrupted_run(tmp_path)
    (run / "writer.lock").symlink_to(victim)
    (tmp_path / "cwd").mkdir()
    done = replay_here(["commprof.allreduce_sweep", "--resume", str(run), "--no-doctor"], tmp_path / "cwd")
    assert done.status == 2, done.err
    assert done.err.strip().count("\n") == 0 and "writer.lock: a symbolic link" in done.err
    assert victim.read_text() == VICTIM_TEXT and (run / "writer.lock").is_symlink()


@pytest.mark.processes  # the sweep's fork server
@pytest.mark.parametrize("full_at", [1, 2], ids=["full-disk-before-the-first-record", "full-disk-mid-sweep"])
def test_a_full_disk_ends_the_sweep_in_one_line_naming_the_resume_and_the_resume_is_lossless(
    tmp_path, monkeypatch, capsys, full_at
):
    """A one-rank sweep, run here, whose disk fills at its first or second append of records; then its resume."""
    from commprof.records import files, folder
    from commprof.sweep import command

    real, appends = folder.write_nofollow, []

    def full_disk(path, data, append=False, sync=False):
        if str(path).endswith("results.jsonl") and data:
            appends.append(path)
            if len(appends) >= full_at:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data, append, sync)

    model = tiny_model(tmp_path, layers=1)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "disk"\n[run]\nmodel = "{model}"\ntokens = [2]\niterations = 2\nwarmup = 1\npoint_timeout_s = 60\n'
        '[[points]]\nimpl = "tests.plugins.one_shot:OneShotGloo"\nlabel = "one-shot"\n'
    )
    args = ["--sweep", str(sweep), "--out", str(tmp_path / "runs"), "--no-doctor", "--no-nccl-debug", "--single-rank"]
    one_rank(monkeypatch)
    monkeypatch.chdir(tmp_path)
    with monkeypatch.context() as disk:
        disk.setattr(files, "write_nofollow", full_disk)
        disk.setattr(folder, "write_nofollow", full_disk)
        status = command.main(args)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert status == 1 and "Traceback" not in err, err[-3000:]
    assert len(errors) == 1 and "No space left on device" in errors[0], err[-3000:]
    assert "continue with: torchrun" in errors[0] and "--resume" in errors[0]
    (run_dir,) = (tmp_path / "runs").iterdir()
    kept = read_records(run_dir / "results.jsonl")
    assert len(kept) == 2 * (full_at - 1)  # each point's records, fsynced before the disk filled
    if full_at == 1:
        return  # nothing was kept: what a resume does then, any start does
    one_rank(monkeypatch)
    assert command.main(["--resume", str(run_dir), "--no-doctor"]) == 0, capsys.readouterr().err[-3000:]
    records = read_records(run_dir / "results.jsonl")
    assert records[: len(kept)] == kept and len({r["point_id"] for r in records}) == 2 and len(records) == 4
    assert {r["status"] for r in records if r["mode"] == "eager"} == {"ok"}  # the one-shot plug-in measured too


@pytest.mark.processes
def test_a_killed_torchrun_agent_ends_each_rank_in_one_line_naming_the_resume(lost_agent_sweep):
    """SIGKILL of the agent that hosts the rendezvous store, mid-sweep (tests/shared_runs.py): each rank says so in
    one line, no traceback, and what was written stays readable."""
    assert lost_agent_sweep["killed"], lost_agent_sweep["stderr"][-3000:]
    stderr = lost_agent_sweep["stderr"]
    assert "Traceback" not in stderr, stderr[-3000:]
    stopped = [line for line in stderr.splitlines() if "error:" in line]
    assert 1 <= len(stopped) <= 2, stderr[-3000:]  # one line per rank that speaks (rank 0 at least)
    # The rank that loses the store first names the agent; the other may first see that peer end (a race).
    assert any("torchrun agent killed" in line for line in stopped), stopped
    assert all("--resume" in line for line in stopped), stopped
    records = read_records(Path(lost_agent_sweep["run"]) / "results.jsonl")
    assert len(records) >= 2 and all(r["point_id"] for r in records)
