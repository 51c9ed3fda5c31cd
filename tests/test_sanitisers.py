"""One sanitiser per medium: every CSV text cell is quoted, on its row, never a formula; every string printed to a
terminal loses its escape sequences and control characters, whichever printer prints it."""

import csv
import io
from pathlib import Path

import pandas as pd
import pytest

from commprof.cli import main
from commprof.report.exports.export_text import spreadsheet_cell
from commprof.report.exports.files import results_csv
from commprof.terminal import one_line, plain_console, printable, styled

CR_FORMULA = "label\r=cmd|' /C calc'!A0"
ESCAPES = [
    "\x1b]0;owned\x07",
    "\x1b]52;c;ZWNobyBwd25lZA==\x1b\\",
    "\x1b[2J\x1b[H",
    "\r",
    "\x00",
    "\x9b31m",
    "\x9d0;t\x9c",
]


def test_a_bare_cr_in_a_label_stays_in_its_cell_and_the_next_line_is_no_formula():
    frame = pd.DataFrame(
        {"label": [CR_FORMULA, "@SUM(1)", " =1+2", "\uff1dcmd", "plain"], "step_us": [1.0, 2.0, 3.0, 4.0, 5.0]}
    )
    text = results_csv(frame)
    assert "\r" not in text
    for line in text.splitlines():  # a reader that splits rows on any line break
        assert line.startswith('"') or line[0].isdigit(), line
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["label", "step_us"] and all(len(row) == 2 for row in rows)
    assert [row[0] for row in rows[1:]] == ["label =cmd|' /C calc'!A0", "'@SUM(1)", "' =1+2", "'\uff1dcmd", "plain"]
    assert [float(row[1]) for row in rows[1:]] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_results_csv_is_what_pandas_writes_of_its_table_byte_for_byte():
    from commprof.report.analysis.frame import records_frame
    from commprof.report.decision.formatting import whole_counts
    from commprof.report.exports.files import csv_columns
    from tests.report_fixtures import base_points, make_records

    records = make_records("r", points=base_points()[:3], tokens=(1,))
    records[0] = {**records[0], "kernel_model": {"impl": "k", "basis": "published"}, "rank_step_median_us": None}
    records[1] = {**records[1], "message": CR_FORMULA, "point": {**records[1]["point"], "label": '"q", ü, -1'}}
    records[2] = {**records[2], "tp": None}  # a count column with a missing value: nullable integers
    frame = records_frame(records)
    frame["tiny"] = [1e-7, float("nan"), 123456789.125, *[2.5] * (len(frame) - 3)]
    frame["flag"] = pd.array([True, None, False, *[True] * (len(frame) - 3)], dtype=object)
    frame["text"] = pd.array(["=1", None, "plain", *["x"] * (len(frame) - 3)], dtype="str")
    table = whole_counts(csv_columns(frame).drop(columns=["rank_step_median_us"]))
    assert "Int64" in set(map(str, table.dtypes))  # a count column with a missing value
    for column in table.columns:
        if not pd.api.types.is_numeric_dtype(table[column]):
            table[column] = table[column].map(spreadsheet_cell)
    table["rank_step_median_us"] = [
        ";".join(f"{v:g}" for v in ranks) if isinstance(ranks, list) else "" for ranks in frame["rank_step_median_us"]
    ]
    assert results_csv(frame) == table.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC)


@pytest.mark.parametrize("value", ["=1", "+1", "-1", "@x", "\t=1", "\r=1", "  =1"])
def test_formula_led_cells_are_neutralised(value):
    cell = spreadsheet_cell(value)
    assert cell.startswith("'") and "\r" not in cell and "\t" not in cell


@pytest.mark.parametrize("escape", ESCAPES)
def test_escape_sequences_and_controls_never_reach_a_terminal(escape):
    text = f"before{escape}after"
    for cleaned in (printable(text), one_line(text), styled(text, (text, "red")).plain):
        assert "before" in cleaned and "after" in cleaned
        assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in cleaned), repr(cleaned)
        assert "owned" not in cleaned and "ZWNo" not in cleaned
    assert printable("two\nlines") == "two\nlines" and one_line("two\nlines") == "two lines"


def test_a_plain_console_cleans_every_string_it_renders_table_cells_included():
    from rich.table import Table

    console = plain_console()
    console.file = io.StringIO()
    table = Table("name")
    table.add_row("topo" + "".join(ESCAPES))
    table.title = "title\x1b]0;x\x07"
    console.print(table)
    console.print("note" + "".join(ESCAPES))
    out = console.file.getvalue()
    assert "topo" in out and "note" in out
    assert not any(ord(c) < 32 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in out), repr(out)


# ------------------------------------------------------------------------------- every printer, end to end

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"
SIM_SWEEP = """
name = "sim"
[run]
model = "kimi-k2.5"
tokens = [1]
phase = "verify"
[[points]]
env = { NCCL_ALGO = "Tree" }
label = "tree\\u001b]0;owned\\u0007\\r\\u0000"
"""


def _clean(text: str) -> None:
    assert "0;owned" not in text
    assert not any(ord(c) < 32 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in text), repr(text[:2000])


def test_nccl_log_explains_a_warn_line_holding_escapes_without_them(capsys):
    assert main(["nccl-log", str(HOSTILE / "nccl-warn-escapes.log")]) == 0
    out = capsys.readouterr().out
    assert "bootstrap" in out
    _clean(out)


def test_trace_of_an_inspector_dump_with_an_escaping_coll_prints_it_clean(capsys):
    assert main(["trace", str(HOSTILE / "inspector")]) == 0
    _clean(capsys.readouterr().out)


def test_simulate_prints_a_topology_name_without_its_escapes(tmp_path, capsys):
    sweep = tmp_path / "sim.toml"
    sweep.write_text(SIM_SWEEP)
    topology = HOSTILE / "topology-escapes.toml"
    assert main(["simulate", "--topology", str(topology), "--sweep", str(sweep), "--out", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    assert "pcie-4gpu" in captured.out
    _clean(captured.out + captured.err)


def test_the_dry_run_listing_prints_labels_and_values_clean(tmp_path, capsys, monkeypatch):
    from commprof.sweep import command
    from commprof.sweep.planning.config import parse_sweep
    from commprof.sweep.planning.dryrun import ASSUMED
    from commprof.sweep.running import probe

    monkeypatch.setattr(probe, "probe_step_cost", lambda *args: ASSUMED)
    monkeypatch.setenv("WORLD_SIZE", "1")
    spec = parse_sweep(
        'name = "x"\n[run]\nmodel = "kimi-k2.5"\ntp = 1\ntokens = [1]\n[[points]]\n'
        'label = "p\\u001b]0;owned\\u0007\\r\\u0000x"\nenv = { COMMPROF_KNOB = "v\\u001b[2J\\r" }\n',
        "x.toml",
    )
    command._dry_run(spec, 0, None, False)
    out = capsys.readouterr().out
    assert "COMMPROF_KNOB" in out
    _clean(out)
