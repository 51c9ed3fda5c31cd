"""What commprof prints to a terminal: user text (labels, paths, messages) is printed as given."""

import io
import json

from rich.console import Console

from commprof.cli import main
from commprof.records.files import append_records
from commprof.records.schema import step_record
from commprof.sweep.running.console import SweepConsole
from commprof.terminal import plain_console

HOSTILE = "x [/] [bold]y[/bold] :smile: [red]"


def _captured(console: Console) -> io.StringIO:
    buffer = io.StringIO()
    console.file = buffer
    return buffer


def test_plain_console_prints_markup_and_emoji_codes_literally():
    console = plain_console()
    out = _captured(console)
    console.print(HOSTILE)
    assert out.getvalue().strip() == HOSTILE


def test_progress_and_notes_take_labels_with_markup(tmp_path):
    console = SweepConsole()
    out = _captured(console.console)
    console.start(2, tmp_path / "run [/]")
    console.point_started(HOSTILE)
    console.point_done(HOSTILE, "ok")
    console.note(HOSTILE, style="red")
    console.stop()
    text = out.getvalue()
    assert "run [/]" in text and text.count(HOSTILE) >= 2


def test_summary_table_shows_labels_with_markup_as_written(tmp_path, capsys):
    record = step_record(
        source="measured",
        run_id="r",
        point_id="p000",
        point={"point_id": "p000", "label": HOSTILE, "impl": "default", "env": {}, "options": {}},
        status="ok",
        backend="gloo",
        tokens=1,
        mode="eager",
        step_us={"n": 3, "min": 9.0, "median": 10.0, "mean": 10.0, "p90": 11.0, "p99": 11.0, "cv": 0.1},
    )
    append_records(tmp_path / "results.jsonl", [record])
    SweepConsole().print_summary(tmp_path, None)
    assert HOSTILE in capsys.readouterr().out


def test_simulate_prints_a_label_with_markup_as_written(tmp_path, capsys):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        '[run]\nmodel = "llama-3.1-70b"\ntokens = [1]\n'
        f'[[points]]\nlabel = {json.dumps(HOSTILE)}\nenv = {{ NCCL_PROTO = "Simple" }}\n'
    )
    args = ["simulate", "--topology", "pcie-4gpu", "--sweep", str(sweep), "--out", str(tmp_path / "runs")]
    assert main(args) == 0
    assert HOSTILE in capsys.readouterr().out


def test_a_label_with_newlines_or_escapes_prints_on_one_line(tmp_path):
    hostile = "x\ntouch PWNED\n#\x1b[2J"
    console = SweepConsole()
    out = _captured(console.console)
    console.start(1, tmp_path)
    console.point_started(hostile)
    console.point_done(hostile, "ok")
    console.stop()
    text = out.getvalue()
    assert "\x1b[2J" not in text and "x touch PWNED #" in text
