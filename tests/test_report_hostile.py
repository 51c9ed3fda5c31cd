"""`commprof report` of run folders an attacker wrote: exports run nothing, paths stay inside --out."""

import csv
import errno
import io
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.report.analysis.tuner_rules import TUNER_ALGORITHMS, TUNER_FIELDS, TUNER_PROTOCOLS
from tests.report_fixtures import base_points, make_meta, make_records, write_run

INJECT = "x\ntouch PWNED\n#"
RULE = "\nallreduce,0,-1,ring,simple,-1,-1,-1,-1,-1\n#"


def hostile_run(parent: Path, run_id: str = "hostile") -> Path:
    """The synthetic NCCL run (it has tuner rules and a recommendation), with newlines wherever text is free."""
    points = base_points()
    for point in points:
        point["label"] = point["label"] + INJECT + RULE
    points[0]["label"] = '=HYPERLINK("http://evil")'
    meta = make_meta(run_id)
    meta["hostname"] = "box" + INJECT
    meta["created"] = "today" + RULE
    meta["env"]["NCCL_SOCKET_IFNAME"] = "eth0" + INJECT + RULE
    meta["gpus"][0]["name"] = "GPU\r\x1b[2J" + INJECT
    return write_run(parent, run_id, records=make_records(run_id, points=points), meta=meta)


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    out = root / "out"
    assert main(["report", str(hostile_run(root / "runs")), "--out", str(out)]) == 0
    return out


@pytest.mark.processes
def test_sourcing_recommend_env_runs_nothing_but_exports(hostile_report, tmp_path):
    env_file = hostile_report / "recommend.env"
    assert subprocess.run(["bash", "-n", str(env_file)]).returncode == 0
    for line in env_file.read_text().splitlines():
        assert re.fullmatch(r"(#[^\n]*|export [A-Za-z_][A-Za-z0-9_]*=\S+|)", line), line
    # the synthetic run's recommendation is its tuner rules: the variables are there, as the commented alternative
    assert any(re.match(r"(# )?export NCCL_", line) for line in env_file.read_text().splitlines())
    shell = subprocess.run(
        ["env", "-i", "bash", "--norc", "--noprofile", "-c", f"source {env_file} && env"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert shell.returncode == 0 and shell.stderr == "", shell.stderr
    assert not (tmp_path / "PWNED").exists() and list(tmp_path.iterdir()) == []
    exported = {line.split("=", 1)[0] for line in shell.stdout.splitlines()}
    assert exported - {"PWD", "SHLVL", "_", "OLDPWD"} <= {n for n in exported if n.startswith("NCCL_")}


def test_tuner_rules_are_exactly_what_commprof_chose(hostile_report):
    lines = (hostile_report / "nccl_tuner.conf").read_text().splitlines()
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules, "the synthetic run has winners beyond noise: some rule is expected"
    for rule in rules:
        fields = rule.split(",")
        assert len(fields) == len(TUNER_FIELDS), rule
        assert fields[0] in ("allreduce", "allgather") and fields[3] in TUNER_ALGORITHMS, rule
        assert fields[4] in TUNER_PROTOCOLS and all(re.fullmatch(r"-?\d+", f) for f in fields[1:3] + fields[5:])
    assert not any(rule.startswith("allreduce,0,-1,ring,simple") for rule in rules)
    for name in ("engine_flags.txt", *(p.name for p in (hostile_report / "nccl-tests").iterdir())):
        path = hostile_report / name if name == "engine_flags.txt" else hostile_report / "nccl-tests" / name
        text = path.read_text()
        assert "touch PWNED" not in {line.strip() for line in text.splitlines()}
        assert "\x1b" not in text and "\r" not in text


def test_csv_cells_cannot_start_a_formula(hostile_report):
    rows = list(csv.DictReader(io.StringIO((hostile_report / "results.csv").read_text())))
    labels = {row["label"] for row in rows}
    assert '\'=HYPERLINK("http://evil")' in labels
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "@")), value
            assert not value.startswith("-") or re.fullmatch(r"-[\d.e+-]+", value), value  # numbers stay numbers


def test_ids_that_are_paths_are_refused_and_nothing_is_written(tmp_path, capsys):
    for field, value in (("point_id", "../../escaped"), ("run_id", "../../escaped")):
        records = make_records("crafted")
        records[3] = json.loads(json.dumps(records[3]))  # its own point dict: records of a point share one
        records[3][field] = value
        records[3]["point"]["point_id"] = value if field == "point_id" else records[3]["point_id"]
        run_dir = write_run(tmp_path / field, "crafted", records=records)
        out = tmp_path / field / "nested" / "out"
        assert main(["report", str(run_dir), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "results.jsonl:4: not a usable record" in err and "Traceback" not in err
        assert not out.exists() and not (tmp_path / "escaped").exists()
        assert sorted(p.name for p in (tmp_path / field).iterdir()) == ["crafted"]


def test_a_meta_run_id_that_is_a_path_is_refused(tmp_path, capsys):
    meta = make_meta("crafted")
    meta["run_id"] = "../../escaped"
    run_dir = write_run(tmp_path, "crafted", meta=meta)
    assert main(["report", str(run_dir)]) == 2
    assert "run_id '../../escaped' is not a run id" in capsys.readouterr().err


def test_rerender_replaces_the_folder_and_follows_no_link(tmp_path):
    run_dir = write_run(tmp_path / "runs", "again")
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "index.html").unlink()
    (out / "index.html").symlink_to(victim)
    (out / "stale-from-an-old-render.txt").write_text("old")
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    assert victim.read_text() == "precious"
    assert not (out / "index.html").is_symlink() and "<html" in (out / "index.html").read_text().lower()
    assert not (out / "stale-from-an-old-render.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging folder left behind


def test_out_that_is_not_a_report_or_is_a_link_is_refused(tmp_path, capsys):
    run_dir = write_run(tmp_path / "runs", "r")
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    assert main(["report", str(run_dir), "--out", str(home)]) == 2
    assert "holds files that are not a commprof report" in capsys.readouterr().err
    assert [p.name for p in home.iterdir()] == ["notes.txt"]
    link = tmp_path / "link"
    link.symlink_to(home)
    assert main(["report", str(run_dir), "--out", str(link)]) == 2
    assert "a symbolic link" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "a-file" / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "--out" in err


def test_two_runs_with_one_id_get_their_own_folders(tmp_path):
    first = write_run(tmp_path / "a", "same-id")
    second = write_run(tmp_path / "b", "same-id", seed=1)
    out = tmp_path / "out"
    assert main(["report", str(first), str(second), "--out", str(out)]) == 0
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert folders == ["same-id", "same-id-2"]
    summary = json.loads((out / "summary.json").read_text())
    assert {run["files"]["recommend.env"] for run in summary["runs"]} == {
        "same-id/recommend.env",
        "same-id-2/recommend.env",
    }
    assert os.path.getsize(out / "same-id" / "recommend.env") > 0


def test_a_read_only_out_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    run_dir = write_run(tmp_path / "runs", "r")
    parent = tmp_path / "read-only"
    parent.mkdir()
    if os.geteuid() == 0:  # root writes through permissions: the file system says no instead

        def read_only(*args, **kwargs):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

        monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    else:
        parent.chmod(0o555)
    try:
        assert main(["report", str(run_dir), "--out", str(parent / "out")]) == 2
    finally:
        parent.chmod(0o755)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"--out {parent / 'out'}: cannot write there" in err
    assert list(parent.iterdir()) == []
