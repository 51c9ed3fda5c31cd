"""A run folder is opened, never followed: links planted where commprof's own files belong are refused, in one
line naming them, and the file they point to is left as it was."""

import json
import os
from types import SimpleNamespace

import pytest

from commprof.errors import UsageError
from commprof.records.files import append_records, write_json
from commprof.records.folder import make_folders, open_nofollow, refuse_links
from commprof.sweep.running.resume import repair_results
from commprof.sweep.running.run_lock import RunLock
from commprof.sweep.running.runner import _open_run_dir
from tests.report_fixtures import make_records

VICTIM_TEXT = "export KEEP=1\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "outside" / "victim"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def _refused(call, link):
    with pytest.raises(UsageError) as refused:
        call()
    message = str(refused.value)
    assert str(link) in message and "symbolic link" in message and "\n" not in message
    return message


def _run_folder(tmp_path, torn=False):
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text("{}\n")
    lines = "".join(json.dumps(r) + "\n" for r in make_records("run"))
    (run / "results.jsonl").write_text(lines + ('{"schema": 3, "ki' if torn else ""))
    return run


def test_a_lock_file_linked_to_a_user_file_is_refused_and_the_file_kept(tmp_path, victim):
    run = _run_folder(tmp_path)
    (run / "writer.lock").symlink_to(victim)
    _refused(RunLock(run).acquire, run / "writer.lock")
    assert victim.read_text() == VICTIM_TEXT


def test_a_repair_file_linked_to_a_user_file_is_refused_and_results_stay_a_file(tmp_path, victim):
    run = _run_folder(tmp_path, torn=True)
    (run / "results.repair").symlink_to(victim)
    _refused(lambda: repair_results(run / "results.jsonl", 2), run / "results.repair")
    assert victim.read_text() == VICTIM_TEXT
    assert not (run / "results.jsonl").is_symlink()


def test_results_linked_outside_are_never_appended_to(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").symlink_to(victim)
    _refused(lambda: append_records(run / "results.jsonl", [{"kind": "step"}]), run / "results.jsonl")
    assert victim.read_text() == VICTIM_TEXT


def test_meta_written_atomically_never_through_a_planted_temporary_link(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json.tmp").symlink_to(victim)
    _refused(lambda: write_json(run / "meta.json", {"a": 1}), run / "meta.json.tmp")
    assert victim.read_text() == VICTIM_TEXT
    (run / "meta.json.tmp").unlink()
    (run / "meta.json").symlink_to(victim)  # a link at the file itself is replaced, not written through
    write_json(run / "meta.json", {"a": 1})
    assert victim.read_text() == VICTIM_TEXT and not (run / "meta.json").is_symlink()


def test_a_point_folder_linked_outside_is_refused(tmp_path, victim):
    run = tmp_path / "run"
    (run / "points").mkdir(parents=True)
    (run / "points" / "p1").symlink_to(victim.parent, target_is_directory=True)
    _refused(lambda: make_folders(run, "points", "p1"), run / "points" / "p1")
    assert make_folders(run, "points", "p2") == run / "points" / "p2"
    assert (run / "points" / "p2").is_dir()
    (run / "points" / "p3").write_text("")
    with pytest.raises(UsageError, match="a file where commprof's own folder belongs"):
        make_folders(run, "points", "p3")


def test_worker_logs_and_results_are_opened_without_following(tmp_path, victim):
    log = tmp_path / "rank0.log"
    log.symlink_to(victim)
    _refused(lambda: open_nofollow(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND), log)
    assert victim.read_text() == VICTIM_TEXT


def test_a_resumed_folder_holding_a_link_is_refused_before_anything_is_written(tmp_path, victim):
    run = _run_folder(tmp_path, torn=True)
    (run / "points" / "p1").mkdir(parents=True)
    (run / "points" / "p1" / "nccl.rank0.log").symlink_to(victim)
    before = (run / "results.jsonl").read_text()
    spec = SimpleNamespace(tokens=[2])
    options = SimpleNamespace(resume=str(run), out=str(tmp_path))
    setup, lock = _open_run_dir(spec, options, "gloo", 2, None)
    assert lock is None and str(run / "points" / "p1" / "nccl.rank0.log") in setup["error"]
    assert (run / "results.jsonl").read_text() == before and not (run / "writer.lock").exists()
    assert victim.read_text() == VICTIM_TEXT
    (run / "points" / "p1" / "nccl.rank0.log").unlink()
    refuse_links(run)  # nothing left to refuse
