"""The point budget: a sweep above it is refused from counts alone, fast, and --dry-run says how big it is."""

from __future__ import annotations

import time

import pytest

from commprof.allreduce_sweep import main as sweep_main
from commprof.sweep.planning.config import DEFAULT_MAX_POINTS, SweepTooLarge, parse_sweep


def huge_sweep(values: int = 100, axes: int = 3) -> str:
    """values ** axes stage-0 points (10^6 by default), plus a stage refining the best 4 over 10 more values."""
    listed = ", ".join(f'"{i}"' for i in range(values))
    lines = ['name = "huge"', "[run]", 'model = "llama-3.1-70b"', "tokens = [1, 4]", "[axes.env]"]
    lines += [f"COMMPROF_AXIS_{n} = [{listed}]" for n in range(axes)]
    lines += ["[[stages]]", "top_k = 4", "[stages.axes.env]", "COMMPROF_MORE = [" + listed[: 10 * 5] + "]"]
    return "\n".join(lines) + "\n"


def test_a_million_point_sweep_is_refused_before_it_is_expanded():
    started = time.monotonic()
    with pytest.raises(SweepTooLarge) as refused:
        parse_sweep(huge_sweep(), "huge.toml")
    assert time.monotonic() - started < 2  # counting, not building a million points
    assert refused.value.total == 1 + 100**3 + 4 * 10 and refused.value.stage0 == 1 + 100**3
    message = str(refused.value)
    assert message.startswith("huge.toml: up to 1000041 points") and "--max-points 1000041" in message
    assert f"above the budget of {DEFAULT_MAX_POINTS} points" in message


def test_the_budget_can_be_raised_and_counts_stages():
    text = huge_sweep(values=10, axes=2)  # 1 + 100 points in stage 0, up to 4 * 10 in the stage
    with pytest.raises(SweepTooLarge):
        parse_sweep(text, max_points=100)
    spec = parse_sweep(text, max_points=141)
    assert len(spec.points) == 101 and spec.max_points() == 141


def test_dry_run_of_a_huge_sweep_prints_its_size_and_estimate_fast(tmp_path, capsys):
    sweep = tmp_path / "huge.toml"
    sweep.write_text(huge_sweep())
    started = time.monotonic()
    assert sweep_main(["--sweep", str(sweep), "--dry-run"]) == 0
    assert time.monotonic() - started < 30  # torch's import included
    out = capsys.readouterr().out
    assert "up to 1000041 points (1000001 in stage 0); estimated" in out and " h (assumed, not measured here: " in out
    assert "a run is refused; allow it with --max-points 1000041" in out
    assert "p000" not in out  # nothing listed, nothing expanded


def test_a_run_above_the_budget_is_one_line_exit_2(tmp_path, capsys):
    sweep = tmp_path / "huge.toml"
    sweep.write_text(huge_sweep())
    assert sweep_main(["--sweep", str(sweep), "--out", str(tmp_path / "runs"), "--no-doctor"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "above the budget of 1000 points" in err
    assert not (tmp_path / "runs").exists()


def test_a_sweep_on_one_rank_is_refused_in_one_line_unless_meant(tmp_path, capsys):
    """One rank measures no communication: exit 2 naming the torchrun launch, before any folder is made."""
    assert sweep_main(["--out", str(tmp_path / "runs"), "--no-doctor"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "torchrun --nproc-per-node N" in err and "--single-rank" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "nope"], "known presets"),
        (["--tokens", "0"], "tokens must be >= 1"),
        (["--tp", "0"], "Invalid value for '--tp': 0 is not in the range x>=1"),
        (["--tp", "4"], "TP 4 needs exactly 4 ranks"),
        (["--tp", "4", "--dry-run"], "TP 4 needs exactly 4 ranks"),
        (["--out", "{tmp}/a-file/runs", "--single-rank"], "not writable"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, args, needle):
    """Checked in-process, as `python -m commprof.allreduce_sweep` without torchrun runs it (a world of one)."""
    from commprof.allreduce_sweep import main as sweep_main

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)  # restored afterwards: the command sets its own
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    assert sweep_main([*[a.format(tmp=tmp_path) for a in args], "--no-doctor"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err
