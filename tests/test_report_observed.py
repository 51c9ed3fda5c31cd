"""`report --observed-step-ms` / `--observed`: the engine's number beside the prediction, and whether the model
explains the box."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.errors import UsageError
from commprof.report.analysis.observed import parse_observed_ms

pytestmark = pytest.mark.usefixtures("figures_not_drawn")  # what these reports say is in their words

FIXTURES = Path(__file__).parent / "fixtures"
ASUS = FIXTURES / "doctor" / "asus-esc8000a-8x-rtxpro6000"
SWEEP = """
name = "observed-test"
[run]
model = "kimi-k2.5"
tokens = [1, 4]
phase = "verify"
dtype = "bfloat16"
iterations = 5
warmup = 1
[axes]
NCCL_P2P_LEVEL = ["default", "SYS"]
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("observed")
    sweep = folder / "sweep.toml"
    sweep.write_text(SWEEP, encoding="utf-8")
    out = folder / "runs"
    assert main(["simulate", "--from-bundle", str(ASUS), "--sweep", str(sweep), "--out", str(out)]) == 0
    (run,) = out.iterdir()
    return run


def _report(run_dir: Path, out: Path, *options: str) -> dict:
    assert main(["report", str(run_dir), "--out", str(out), *options]) == 0
    (run,) = json.loads((out / "summary.json").read_text(encoding="utf-8"))["runs"]
    return {**run, "observed": run["environment"]["observed"], "box": run["environment"]["box"]}


def test_the_field_reports_25_ms_is_not_explained_and_the_page_says_what_to_check(run_dir, tmp_path, capsys):
    run = _report(run_dir, tmp_path / "r", "--observed-step-ms", "25")
    observed = run["observed"]
    assert observed["explained"] is False and [r["tokens"] for r in observed["rows"]] == [1, 4]
    assert all(r["observed_ms"] == 25.0 and not r["band_ms"][0] <= 25.0 <= r["band_ms"][1] for r in observed["rows"])
    assert any("nccl-log" in c for c in observed["checks"]) and any("doctor" in c for c in observed["checks"])
    html = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "the model does not explain this box" in html and "25.00 ms" in html
    assert "Not confirmed on your box" in html
    assert "does not explain this box" in capsys.readouterr().out
    # Every exported file says so at its head, as the page does.
    env = (tmp_path / "r" / "recommend.env").read_text(encoding="utf-8")
    assert "# NOT CONFIRMED ON YOUR BOX: the model does not explain this box" in env
    assert "read from doctor bundle asus-esc8000a-8x-rtxpro6000," in env and "topology preset" not in env
    # summary.json says, per GPU pair, where its transport comes from.
    # The decision does not recommend what the box contradicts: no live export, the headline says measure first.
    assert run["nccl"]["file"] is None and run["nccl"]["withdrawn_env"] == {"NCCL_P2P_LEVEL": "SYS"}
    assert run["unconfirmed"].startswith("not confirmed on your box: measure first")
    assert "# export NCCL_P2P_LEVEL=SYS" in env and "\nexport " not in env
    assert "Not recommended for this run, so commented out: not confirmed on your box: measure first" in env
    assert "commprof recommends this file" not in env
    headline = html.split("How much faster is my verify step?", 1)[1].split("</p>", 1)[0]
    assert "Not confirmed on your box: measure first" in headline
    pairs = run["box"]["pairs"]
    assert len(pairs) == 28 and all("nvidia_topo.log:" in p["transport"]["defaults"]["source"] for p in pairs)
    # The ranked explanations follow the warning (commprof explain on the run's box, judged within its error).
    explained = observed["explanations"]
    assert explained["explained"] is False and explained["verdict"].startswith("nothing explains it within error")
    assert [len(e["observed_us"]) for e in explained["explanations"]] == [2] * len(explained["explanations"])
    by_name = {e["condition"]: e for e in explained["explanations"]}
    assert by_name["iommu-translation"]["evidence"] == "ruled out"  # the doctor on the run's bundle: iommu=off
    assert "What explains the gap" in html and explained["explanations"][0]["condition"] in html


def test_an_observation_inside_the_band_is_explained(run_dir, tmp_path):
    first = _report(run_dir, tmp_path / "a", "--observed-step-ms", "4=1")
    today = next(r for r in first["observed"]["rows"] if r["tokens"] == 4)["today_ms"]
    run = _report(run_dir, tmp_path / "b", "--observed-step-ms", f"4={today:.3f}")
    assert run["observed"]["explained"] is True and run["observed"]["checks"] == []
    assert [r["tokens"] for r in run["observed"]["rows"]] == [4]
    assert "Not confirmed" not in (tmp_path / "b" / "index.html").read_text(encoding="utf-8")


def test_an_engine_trace_is_read_as_commprof_trace_reads_it(tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP.replace("tokens = [1, 4]", "tokens = [1]\ntp = 2"), encoding="utf-8")
    assert main(["simulate", "--from-bundle", str(ASUS), "--sweep", str(sweep), "--out", str(tmp_path / "runs")]) == 0
    (tp2_run,) = (tmp_path / "runs").iterdir()
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(FIXTURES / "traces" / "hta-nccl-allreduce-a100-2rank.trimmed.json.gz", traces)
    run = _report(tp2_run, tmp_path / "r", "--observed", str(traces))
    assert run["observed"]["source"].startswith(f"engine trace {traces}")
    assert run["observed"]["rows"][0]["observed_ms"] > 0


def test_an_observation_of_another_run_is_refused(run_dir, tmp_path, capsys):
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(FIXTURES / "traces" / "hta-nccl-allreduce-a100-2rank.trimmed.json.gz", traces)
    assert main(["report", str(run_dir), "--out", str(tmp_path / "r"), "--observed", str(traces)]) == 2
    err = capsys.readouterr().err.strip()
    assert "world size 2" in err and "TP 8" in err and len(err.splitlines()) == 1
    assert main(["report", str(run_dir), "--out", str(tmp_path / "r"), "--observed-step-ms", "3=25"]) == 2
    err = capsys.readouterr().err.strip()
    assert "T=3" in err and "1, 4" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_bad_observations_are_one_line_errors(run_dir, tmp_path, capsys):
    for value in ("abc", "0", "x=3", "4=-1"):
        with pytest.raises(UsageError):
            parse_observed_ms(value)
    assert main(["report", str(run_dir), "--out", str(tmp_path / "r"), "--observed-step-ms", "fast"]) == 2
    assert "--observed-step-ms" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "r"), "--observed", str(empty)]) == 2
