"""Every verdict is as strong as its evidence: incomplete runs, minimal exports, runnable engine flags, runs that
cannot be compared, and the report's --out (the real gloo run of cpu-smoke.toml and SYNTHETIC runs)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.records.files import META_FILE, RESULTS_FILE, append_plan
from commprof.records.plan_file import PLAN_FILE, points_line, stages_line
from tests.report_fixtures import make_meta, write_run

pytestmark = pytest.mark.usefixtures("figures_not_drawn")  # what these reports say is in their words

GLOO_RUN = Path(__file__).parent / "fixtures" / "report" / "cpu-smoke-gloo"


def gloo_run_with(tmp_path: Path, keep, faster: float = 1.0) -> Path:
    """A copy of the real gloo run keeping the records `keep(record)` accepts, OMP_NUM_THREADS=2 `faster` x."""
    run = tmp_path / "gloo"
    run.mkdir()
    shutil.copy(GLOO_RUN / META_FILE, run / META_FILE)
    shutil.copy(GLOO_RUN / PLAN_FILE, run / PLAN_FILE)
    lines = []
    for line in (GLOO_RUN / RESULTS_FILE).read_text().splitlines():
        record = json.loads(line)
        if not keep(record):
            continue
        if record["point"]["env"].get("OMP_NUM_THREADS") == "2" and record.get("step_us"):
            record["step_us"] = {k: v / faster if k not in ("n", "cv") else v for k, v in record["step_us"].items()}
        lines.append(json.dumps(record))
    (run / RESULTS_FILE).write_text("\n".join(lines) + "\n")
    return run


def test_an_interrupted_run_says_so_and_recommends_nothing_unless_asked(tmp_path, capsys):
    # Stage 1 ("confirm") never ran; OMP_NUM_THREADS=2 was made 3x faster, a gain beyond any noise.
    run = gloo_run_with(tmp_path, lambda r: not r["point_id"].startswith("s1-"), faster=3.0)
    out = tmp_path / "out"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert "INCOMPLETE RUN" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())["runs"][0]
    assert summary["run"]["complete"] is False and "stages not run: confirm" in summary["run"]["progress"]
    claim = {c["id"]: c for c in summary["claims"]}[summary["nccl"]["claim"]]
    assert claim["verdict"] == "beyond error" and summary["nccl"]["keeps_baseline"] is True
    assert summary["nccl"]["withheld"].startswith("the run is incomplete")
    env = (out / "recommend.env").read_text()
    assert (
        'INCOMPLETE RUN: 5 of 7 points done (stage 0: 5 of 5; stage 1 "confirm": 0 of 2)' in env
        and "export " not in env
        and "--allow-partial" in env
    )
    assert "INCOMPLETE RUN" in (out / "index.html").read_text()
    assert main(["report", str(run), "--out", str(out), "--allow-partial"]) == 0
    env = (out / "recommend.env").read_text()
    assert "\nexport OMP_NUM_THREADS=2\n" in env and "Recommended from what finished (--allow-partial)" in env


def test_a_finished_run_is_complete(tmp_path):
    out = tmp_path / "out"
    assert main(["report", str(GLOO_RUN), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())["runs"][0]["run"]
    assert summary["complete"] is True and summary["progress"].startswith("7 of 7 points done")


def test_a_run_folder_without_a_plan_renders_with_its_planned_count_unknown(tmp_path):
    run = gloo_run_with(tmp_path, lambda r: True)
    (run / PLAN_FILE).unlink()  # as a sweep wrote it before plans were recorded
    out = tmp_path / "out"
    assert main(["report", str(run), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())["runs"][0]
    assert summary["run"]["complete"] is None and summary["run"]["progress"].startswith(
        "7 points recorded of a planned count unknown"
    )
    assert any("planned count unknown" in note for note in summary["environment"]["not_a_result"])


@pytest.mark.processes
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_engine_flags_is_a_script_bash_runs(tmp_path):
    run_dir = write_run(tmp_path / "runs", "synth")
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    script = out / "engine_flags.txt"
    done = subprocess.run(
        ["bash", "-c", f'set -eu; source {script}; printf "%s\\n" "${{COMMPROF_VLLM_ARGS[@]}}"; env'],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and not done.stderr.strip()


def test_runs_of_different_steps_are_not_compared(tmp_path, capsys):
    a = write_run(tmp_path, "tp8")
    records = [json.loads(line) for line in (a / RESULTS_FILE).read_text().splitlines()]
    other = [{**r, "run_id": "tp4", "tp": 4, "source": "simulated", "calibration": "nccl-prior"} for r in records]
    b = write_run(tmp_path, "tp4", records=other, meta=make_meta("tp4"))
    out = tmp_path / "out"
    assert main(["report", str(a), str(b), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "these runs replay different steps (TP 8 in tp8, TP 4 in tp4)" in err  # the field that differs, each value
    html = (out / "index.html").read_text()
    assert "Not comparable: these runs replay different steps" in html and "Measured vs simulated" not in html
    assert json.loads((out / "summary.json").read_text())["costmodel_checks"] == []


def test_report_out_is_validated_like_every_out(tmp_path, capsys):
    run_dir = write_run(tmp_path, "good")
    (tmp_path / "a-file").write_text("")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "a-file" / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--out" in err and "not writable" in err and "Traceback" not in err


def test_the_heatmap_holds_the_baselines_implementation_only(tmp_path):
    run_dir = write_run(tmp_path, "synth")
    out = tmp_path / "out"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    heat = html.split('<div class="heatmaps">', 1)[1].split("</div>", 1)[0]
    assert "custom_oneshot" not in heat and "flashinfer" not in heat and "nccl+rmsnorm" not in heat
    assert "<td" in heat


def test_a_run_of_the_baseline_alone_says_there_was_nothing_to_compare(tmp_path):
    # The default sweep (no --sweep) runs the baseline only: "nothing beat it" would overstate what was tried.
    run = gloo_run_with(tmp_path, lambda r: r["point_id"] == "p000")
    meta = json.loads((run / META_FILE).read_text())
    meta.pop("sweep", None)
    (run / META_FILE).write_text(json.dumps(meta))
    (run / PLAN_FILE).unlink()
    append_plan(run, [stages_line([]), points_line(0, ["p000"], 4)])  # what the default sweep plans
    out = tmp_path / "out"
    assert main(["report", str(run), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "No change: only the baseline ran: nothing to compare it with (sweep settings with --sweep FILE" in html
    assert "Nothing to export: only the baseline ran" in (out / "recommend.env").read_text()
    # Card (A) says the reason once, with its capitals as written ("GPUs", "CPU ranks"), then only what follows.
    card = html.split("<h4>(a)", 1)[1].split("<h4>(b)", 1)[0]
    assert card.lower().count("only the baseline ran") == 1, card
    assert "on GPUs" in card and "on gpus" not in card
    assert "Nothing to apply." in card


def test_a_run_of_only_t_1_has_one_verify_step_per_t(tmp_path, capsys):
    """Where only T = 1 ran, the verify steps are every T, each once (the baseline's and the answer's rows of one T
    were counted as two Ts, and the terminal said the T = 1 step twice)."""
    run = write_run(tmp_path, "t1-only", tokens=(1,))
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    steps = json.loads((tmp_path / "out" / "summary.json").read_text())["runs"][0]["steps"]
    assert [step["tokens"] for step in steps] == [1]
    printed = capsys.readouterr().out
    assert printed.count("verify step T = 1:") == 1, printed
