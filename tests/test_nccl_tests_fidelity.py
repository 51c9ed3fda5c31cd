"""nccl-tests logs as they come from real launches: other collectives' tables, interleaved MPI processes,
the NCCL version and GPU names they print, and times no measurement can have."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.costmodel.calibration_file import params_from_toml
from commprof.costmodel.latency import arch_of_gpu_name
from commprof.costmodel.nccl_tests import parse_text
from commprof.errors import UsageError

FIXTURES = Path(__file__).parent / "fixtures" / "nccl-tests"
TWO_TABLES = FIXTURES / "h100x4_all_reduce_and_broadcast_mpi.txt"
INTERLEAVED = FIXTURES / "a100_mpirun_np2_without_mpi_build.txt"
TAGGED = FIXTURES / "a100_mpirun_np2_tag_output.txt"


def parse(path: Path):
    return parse_text(path.read_text(), str(path))


def test_a_log_with_all_reduce_and_broadcast_tables():
    log = parse(TWO_TABLES)
    assert log.warnings == []
    assert [(r.collective, r.ranks, len(r.rows)) for r in log.runs] == [("all_reduce", 4, 13), ("broadcast", 4, 13)]
    assert log.runs[1].rows[0].redop == "none" and log.runs[1].rows[0].root == 0
    # "# nccl-tests version ... nccl-library=22907" and NCCL's own "NCCL version 2.29.7+cuda12.9" agree.
    assert log.nccl_versions == ["2.29.7"] and log.gpu_names == ["NVIDIA H100 80GB HBM3"]


def test_calibrate_fits_the_all_reduce_rows_and_says_what_it_skipped(tmp_path, capsys):
    assert main(["import-nccl-tests", str(TWO_TABLES), "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["versions"]["nccl"] == "2.29.7" and meta["gpus"] == [{"name": "NVIDIA H100 80GB HBM3"}] * 4
    assert meta["imported"][0]["nccl_versions"] == ["2.29.7"]
    capsys.readouterr()
    out = tmp_path / "calibration.toml"
    assert main(["calibrate", str(run_dir), "--topology", "nvlink-b200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "skipped 26 record(s): broadcast (the cost model fits all_reduce, all_gather, reduce_scatter)" in printed
    # The records' GPUs decide NCCL's prior, not the preset's B200s.
    assert (
        "prior: the hopper generation of the runs' GPUs (NVIDIA H100 80GB HBM3), not topology nvlink-b200's" in printed
    )
    params = params_from_toml(out.read_text(), str(out))
    # Fitted on every other size of 8 KB-1 MB (two of its four), out of place and in place: the fit that was judged.
    assert params.arch == "hopper" and params.fit["samples"] == 4 and len(params.fit["fitted_sizes"]) == 2


def test_same_generation_says_nothing(tmp_path, capsys):
    assert main(["import-nccl-tests", str(TWO_TABLES), "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    assert main(["calibrate", str(run_dir), "--topology", "nvlink-h100", "--out", str(tmp_path / "m.toml")]) == 0
    assert "prior: the" not in capsys.readouterr().out


@pytest.mark.parametrize("path,how", [(INTERLEAVED, "in order of appearance"), (TAGGED, "by their --tag-output ranks")])
def test_rows_of_several_processes_are_split_and_warned(path, how):
    log = parse(path)
    (warning,) = log.warnings
    assert "rows of 2 processes interleaved in one table" in warning and how in warning
    assert [(r.ranks, [row.bytes for row in r.rows]) for r in log.runs] == [
        (1, [1 << 20, 2 << 20, 4 << 20, 8 << 20])
    ] * 2
    assert log.nccl_versions == ["2.27.3"] and log.gpu_names == ["NVIDIA A100-SXM4-80GB"]


def test_tags_put_each_row_with_its_process():
    lines = TAGGED.read_text().splitlines()
    first_of_1 = next(line for line in lines if line.startswith("[1,1]<stdout>:     1048576"))
    log = parse(TAGGED)
    assert log.runs[1].rows[0].line == lines.index(first_of_1) + 1


def test_one_rank_runs_are_not_calibrated(tmp_path, capsys):
    assert main(["import-nccl-tests", str(INTERLEAVED), "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    assert main(["calibrate", str(run_dir), "--out", str(tmp_path / "m.toml")]) == 2
    captured = capsys.readouterr()
    assert "one rank (no communication)" in captured.out and "no usable records" in captured.err


def test_a_log_without_a_rank_count_is_refused_for_that_reason_and_imports_with_ranks(tmp_path, capsys):
    """A log cut to its table (no nThread / device lines): calibrate names the unknown rank count, and
    `import-nccl-tests --ranks 8` supplies it."""
    text = (FIXTURES / "rtx4090x8_sys_noP2P_charlie0129.txt").read_text()
    cut = tmp_path / "table_only.txt"
    cut.write_text("\n".join(line for line in text.splitlines() if "nThread" not in line and "Rank " not in line))
    assert main(["import-nccl-tests", str(cut), "--out", str(tmp_path / "bare")]) == 0
    (bare,) = (tmp_path / "bare").iterdir()
    capsys.readouterr()
    assert main(["calibrate", str(bare), "--out", str(tmp_path / "m.toml")]) == 2
    err = capsys.readouterr().err
    assert "rank count is unknown" in err and "--ranks N" in err and "over shm" not in err
    assert main(["import-nccl-tests", str(cut), "--ranks", "4", "--out", str(tmp_path / "four")]) == 0
    assert main(["import-nccl-tests", str(cut), "--ranks", "8", "--out", str(tmp_path / "eight")]) == 0
    assert "rank count 8 from --ranks" in capsys.readouterr().err
    (eight,) = (tmp_path / "eight").iterdir()
    assert main(["calibrate", str(eight), "--out", str(tmp_path / "m.toml")]) == 0
    assert params_from_toml((tmp_path / "m.toml").read_text(), "m.toml").fit["ranks"] == 8
    # A log that states its rank count keeps it: --ranks cannot contradict it.
    log = FIXTURES / "rtx4090x8_sys_noP2P_charlie0129.txt"
    assert main(["import-nccl-tests", str(log), "--ranks", "4", "--out", str(tmp_path / "x")]) == 2


def _with_time(token: str) -> str:
    """The 8-GPU-style table of the H100 log with its 2 KB all-reduce row's out-of-place time replaced."""
    lines = TWO_TABLES.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.split()[:1] == ["2048"])
    fields = lines[index].split()
    fields[5] = token
    lines[index] = "  ".join(fields)
    return "\n".join(lines), index + 1


@pytest.mark.parametrize(
    "token,why",
    [("-8.85", "time -8.85 is negative"), ("nan", "time nan is not a latency"), ("inf", "time inf is not a latency")],
)
def test_an_impossible_time_refuses_the_log_with_file_and_line(token, why):
    text, line = _with_time(token)
    with pytest.raises(UsageError, match=re.escape(f"h100.txt:{line}: {why}, which no measurement gives")):
        parse_text(text, "h100.txt")


def test_import_of_an_impossible_time_writes_nothing(tmp_path, capsys):
    text, line = _with_time("-3.1")
    log = tmp_path / "h100.txt"
    log.write_text(text)
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "runs")]) == 2
    assert f"h100.txt:{line}: time -3.1 is negative" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_calibrate_refuses_records_with_impossible_times(tmp_path, capsys):
    assert main(["import-nccl-tests", str(TWO_TABLES), "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    results = run_dir / "results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    records[2]["time_us"] = -4.46
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    capsys.readouterr()
    assert main(["calibrate", str(run_dir), "--topology", "nvlink-h100", "--out", str(tmp_path / "m.toml")]) == 2
    assert f"{results}:3: not a usable record: time_us -4.46 is negative" in capsys.readouterr().err
    assert not (tmp_path / "m.toml").exists()


@pytest.mark.parametrize(
    "name,arch",
    [
        ("NVIDIA H100 80GB HBM3", "hopper"),
        ("NVIDIA GeForce RTX 4090", "ampere"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "blackwell"),
        ("NVIDIA RTX 6000 Ada Generation", "ampere"),
        ("Tesla V100-SXM2-32GB", "volta"),
        ("NVIDIA B200", "blackwell"),
        ("Some Future GPU", None),
    ],
)
def test_gpu_generation_from_its_name(name, arch):
    assert arch_of_gpu_name(name) == arch
