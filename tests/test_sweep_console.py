"""The sweep's console keeps every word of a label, a path or a note: rich markup never eats bracketed text."""

from rich.console import Console

from commprof.sweep.running.console import SweepConsole, summary_table

LABEL = "symm-mem [one_shot] [bold]x[/bold]"


def step(point_id: str, label: str, status: str = "ok", median: float = 1500.0) -> dict:
    return {
        "kind": "step",
        "point_id": point_id,
        "point": {"label": label},
        "tokens": 4,
        "mode": "eager",
        "status": status,
        "backend": "gloo",
        "step_us": {"median": median} if status == "ok" else None,
    }


def test_bracketed_labels_and_notes_are_printed_as_written(tmp_path, capsys):
    console = SweepConsole(enabled=True)
    console.console = Console(stderr=True, width=200, force_terminal=False)
    console.start(2, tmp_path / "runs" / "[x]")
    console.point_started(LABEL)
    console.point_done(LABEL, "unsupported")
    console.note("build [flashinfer] failed: error: [Errno 2]")
    console.stop()
    err = capsys.readouterr().err
    assert LABEL in err and "build [flashinfer] failed: error: [Errno 2]" in err and "runs/[x]" in err


def test_the_summary_table_keeps_bracketed_labels_and_says_why_points_never_ran():
    refused = {**step("p002", "ALGO=ring", status="unsupported"), "message": "NCCL_ALGO has no effect [gloo]"}
    out = Console(width=250, record=True, force_terminal=False)
    out.print(summary_table([step("p000", "baseline"), step("p001", LABEL, median=1000.0), refused]))
    text = out.export_text()
    assert LABEL in text and "measured on gloo" in text
    assert "n/a, never timed: NCCL_ALGO has no effect [gloo] (p002)" in text


def test_eager_step_columns_say_they_include_the_host_issue_cost():
    out = Console(width=250, record=True, force_terminal=False)
    out.print(summary_table([step("p000", "baseline"), {**step("p000", "baseline"), "mode": "graph"}]))
    text = out.export_text()
    assert "T=4 eager (incl. host issue cost)" in text and "T=4 graph" in text
    words = " ".join(text.split())
    assert "eager: includes each collective's host issue cost: its launch from Python by the process group" in words
    assert "(PGNCCL on NCCL)" in words
