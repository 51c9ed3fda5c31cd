"""One statistic per word: the median is the median (the mean of the two middle values of an even count), p99 is
kept and shown only from 100 samples on ("max of n" below), in the records, the sweep's terminal, the page and
every file of a real gloo run."""

import contextlib
import io
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.report.analysis.ops import op_sites, site_summary
from commprof.report.decision.formatting import tail_header
from commprof.stats import P99_MIN_SAMPLES, median, summarize, summarize_columns, tail, tail_word
from commprof.sweep.running.console import per_collective_table
from commprof.terminal import plain_console


def test_the_median_of_an_even_count_is_the_mean_of_the_two_middle_values():
    assert median([318.0, 317.0, 1.0, 400.0]) == 317.5
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert summarize([1.0, 2.0, 3.0, 4.0])["median"] == 2.5


def test_p99_needs_100_samples_else_the_tail_is_the_max_of_n():
    few = summarize(range(1, 21))
    assert "p99" not in few and few["max"] == 20.0 and tail(few) == ("max of 20", 20.0)
    many = summarize(range(1, P99_MIN_SAMPLES + 1))
    assert tail(many) == ("p99", pytest.approx(99.01)) and many["max"] == 100.0
    columns = summarize_columns([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    assert "p99" not in columns and columns["max"] == [3.0, 30.0] and tail(columns, 3) == ("max of 3", [3.0, 30.0])
    assert tail_word(99) == "max of 99" and tail_word(100) == "p99"
    # a record written before the max was kept: its tail of few samples is unknown, never called p99
    assert tail({"n": 20, "median": 1.0, "p99": 2.0}) == ("max of 20", None)
    assert tail_header(["max of 3", "max of 3", None]) == "max of 3" and tail_header([], False) == "tail"


def test_the_terminal_takes_the_true_median_and_says_which_tail():
    ops = {"sites": ["layer.0.attn", "layer.1.attn"], "bytes": [128, 128], **summarize_columns([[1.0, 2.0]] * 3)}
    ops["median"] = [317.0, 318.0]
    record = {"point_id": "p000", "mode": "eager", "status": "ok", "tokens": 1, "iterations": 3, "op_us": ops}
    console = plain_console(pipe_width=200)
    with console.capture() as captured:
        console.print(per_collective_table([record]))
    text = captured.get()
    assert "317.5 µs" in text and "max of 3" in text and "p99" not in text


def test_the_page_summarizes_sites_by_their_slowest_op():
    sites = op_sites({"sites": ["layer.0.mlp", "layer.1.mlp"], "bytes": [8, 8], "median": [1.0, 3.0]})
    row = site_summary(sites).iloc[0]
    assert row["max_us"] == 3.0 and row["median_us"] == 2.0 and "p99_us" not in site_summary(sites)


@pytest.mark.processes
def test_a_run_of_3_iterations_prints_no_p99_anywhere(tmp_path, smoke_sweep):
    """The GPU smoke's 2-rank gloo launch, of 3 timed steps (tests/shared_runs.py)."""
    assert smoke_sweep["code"] == 0, smoke_sweep["output"][-2000:]
    run, printed = Path(smoke_sweep["run"]), smoke_sweep["output"]
    assert "max of 3" in printed
    out = tmp_path / "report"
    terminal = io.StringIO()
    with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(terminal):
        assert main(["report", str(run), "--out", str(out)]) == 0
    texts = {"sweep terminal": printed, "report terminal": terminal.getvalue()}
    for folder in (run, out):
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix in (".jsonl", ".json", ".html", ".csv", ".txt", ".env", ".conf", ".log"):
                texts[str(path)] = path.read_text(errors="replace")
    assert len(texts) > 6
    assert [name for name, text in texts.items() if "p99" in text] == []
    assert "max of 3" in (out / "index.html").read_text()


def test_the_speculation_chart_draws_the_statistic_its_break_even_is_taken_from():
    import pandas as pd

    from commprof.report.analysis.projection import projection
    from commprof.report.views.figures import projection_svg

    parts = pd.DataFrame(
        [
            {"source": "measured", "setting": "answer", "tokens": t, "point_id": "p001", "verify_ms": v, "comm_ms": v}
            | {"comm_p90_ms": v + spread}
            for t, v, spread in ((1, 10.0, 0.5), (4, 11.5, 5.0))
        ]
    )
    row = projection(parts, 2.0, (1.5,)).iloc[0]
    # the break-even is where the drawn line of the verify median's tokens/s meets plain decode (1.35); its p90 is
    # drawn beside it (a cell's claim is held to that spread), never quoted as the break-even
    assert row["break_even_ratio"] == pytest.approx((2.0 + 11.5) / 10.0)
    svg = projection_svg(parts, 2.0, (1.5,), ())
    assert "T = 4, answer, verify p90" in svg and "(the break-even" not in svg


def test_the_page_says_eager_medians_include_the_host_issue_cost(gloo_report):
    html = (gloo_report / "index.html").read_text()
    assert "eager median (incl. host issue cost)" in html and "(PGNCCL on NCCL)" in html
