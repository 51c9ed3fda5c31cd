"""The README's worked example is the shape of what the code prints today: its tables' columns and rows, its
captions, the answer and the report's file list, regenerated from the run it shows (tests/fixtures/readme-demo, the
`make demo` run the README quotes; numbers aside). Every option of `report --help` is in docs/report.md.

To refresh the example: `make demo`, paste its output into the README, and copy that run's meta.json, plan.jsonl and
results.jsonl into tests/fixtures/readme-demo."""

import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from commprof.cli import cli, main
from commprof.report.command import answer_lines
from commprof.sweep.running.console import SweepConsole

ROOT = Path(__file__).resolve().parents[1]
DEMO_RUN = Path(__file__).parent / "fixtures" / "readme-demo"


def shape(line: str) -> str:
    """A printed line without its numbers, its padding and its rules' lengths."""
    line = re.sub(r"\d+(\.\d+)?", "#", line)
    line = re.sub(r"([─━])\1+", r"\1", line)
    return re.sub(r"\s+", " ", line).strip()


def readme_example() -> list[str]:
    """The README's worked example from the sweep's first table to the report's file list."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## A worked example", 1)[1].split("```", 2)[1]
    lines = block.splitlines()
    first = next(i for i, line in enumerate(lines) if "commprof sweep, measured on" in line)
    return [shape(line) for line in lines[first:] if line.strip() and not line.startswith(".venv/bin/")]


def test_the_worked_example_has_the_shape_of_todays_output(tmp_path, monkeypatch, capsys):
    run = Path("runs") / readme_run_id()
    shutil.copytree(DEMO_RUN, tmp_path / run)
    monkeypatch.chdir(tmp_path)
    console = SweepConsole(enabled=True)
    console.print_summary(run, spec=None)
    printed = capsys.readouterr().out
    for line in answer_lines(run):
        console.note(line)
    printed += capsys.readouterr().err
    assert main(["report", "--latest", "runs"]) == 0
    printed += capsys.readouterr().out
    generated = [shape(line) for line in printed.splitlines() if line.strip()]
    assert generated == readme_example()


def readme_run_id() -> str:
    """The run folder the README shows: tests/fixtures/readme-demo is that run."""
    text = (ROOT / "README.md").read_text().split("## A worked example", 1)[1]
    return re.search(r"runs/(\d{8}-\d{6}-[\w.-]+)", text).group(1)


def test_every_report_option_is_documented():
    options = re.findall(r"^\s+(--[\w-]+)", CliRunner().invoke(cli, ["report", "--help"]).output, re.M)
    table = (ROOT / "docs" / "report.md").read_text().split("| option |", 1)[1].split("\n\n", 1)[0]
    assert {o for o in options if o != "--help"} == set(re.findall(r"^\| `(--[\w-]+)`", table, re.M))


def test_report_help_names_every_file_it_writes():
    text = CliRunner().invoke(cli, ["report", "--help"]).output
    for name in ["recommend.env", "nccl_tuner.conf", "engine_flags.txt", "routing.txt", "summary.json", "results.csv"]:
        assert name in text
