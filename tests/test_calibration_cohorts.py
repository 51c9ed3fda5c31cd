"""`calibrate` per cohort (box, rank count, NCCL version): each earns its error against a latency + bandwidth line
on the same split, or falls back to the line and says so; the expected error it writes is its held-out error, never
below its in-sample error, and one pooled figure over several cohorts is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from commprof.cli import main
from commprof.costmodel import calibrate as fitting
from commprof.costmodel.calibration_file import params_from_toml
from commprof.costmodel.cohorts import COSTMODEL, LINE, cohort_of, judge, tag
from commprof.costmodel.latency import predict
from commprof.costmodel.model_error import calibration_error
from commprof.costmodel.nccl_tests import parse_text, run_records
from commprof.costmodel.simulate_command import calibration_name
from commprof.costmodel.topology import link_for, load_topology
from commprof.records.files import read_records

LOGS = Path(__file__).parent / "fixtures" / "nccl-tests"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "nccl-tests"
REAL_LOGS = sorted({p.name: p for p in [*LOGS.glob("rtx4090*.txt"), *SHARED.glob("*.txt")]}.values())


def _samples(path: Path):
    topology = load_topology("pcie-dual-socket-shm")
    link = link_for(topology, {})
    records = run_records(parse_text(path.read_text(encoding="utf-8"), str(path)), "r", 0, "2026-01-01T00:00:00+00:00")
    samples = []
    for record in records:
        found, _ = fitting.samples_from_records([record], fitting.nccl_constraints(topology, link))
        samples += tag(found, cohort_of(record, {}))
    return samples, topology.prior(link, "ampere")


@pytest.mark.parametrize("log", REAL_LOGS, ids=[p.name for p in REAL_LOGS])
def test_every_cohort_of_every_real_log_earns_its_error_or_falls_back_to_the_line(log):
    samples, prior = _samples(log)
    verdicts = judge(samples, prior)
    assert verdicts
    for v in verdicts:
        written = v.costmodel_held_pct if v.model == COSTMODEL else v.line_held_pct
        assert written <= v.line_held_pct, v
        assert (v.model == LINE) == (v.costmodel_held_pct > v.line_held_pct)
        if v.model == LINE:
            assert v.note.startswith("fallback:")


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> list[Path]:
    out = tmp_path_factory.mktemp("imports")
    for name in ("rtx4090x2_x4_kalavai.txt", "rtx4090x8_sys_noP2P_charlie0129.txt"):
        assert main(["import-nccl-tests", str(LOGS / name), "--out", str(out / name)]) == 0
    return [
        next((out / name).iterdir()) for name in ("rtx4090x2_x4_kalavai.txt", "rtx4090x8_sys_noP2P_charlie0129.txt")
    ]


def test_calibrate_refuses_one_figure_over_several_cohorts_and_writes_each_apart(imported, tmp_path, capsys):
    runs = [str(r) for r in imported]
    assert main(["calibrate", *runs, "--out", str(tmp_path / "all.toml")]) == 2
    err = capsys.readouterr().err
    assert "3 cohorts" in err and "--cohort" in err and not (tmp_path / "all.toml").exists()
    assert main(["calibrate", *runs, "--holdout"]) == 0
    assert "line, same split" in capsys.readouterr().out
    fits = {}
    for number in ("1", "2", "3"):
        path = tmp_path / f"c{number}.toml"
        assert main(["calibrate", *runs, "--out", str(path), "--cohort", number]) == 0
        params = params_from_toml(path.read_text(encoding="utf-8"), str(path))
        fits[params.fit["ranks"]] = params
        fit = params.fit
        # The expected error is the held-out error of the model written, never below its in-sample error.
        held = fit["line_holdout_median_pct"] if fit["model"] == LINE else fit["costmodel_holdout_median_pct"]
        assert fit["holdout_median_pct"] == round(max(held, fit["median_abs_pct"]), 1)
        assert held <= fit["line_holdout_median_pct"]
        assert calibration_error(str(path), fit).pct == fit["holdout_median_pct"]
    assert fits[8].fit["model"] == COSTMODEL and fits[8].line is None
    assert fits[4].fit["model"] == LINE and fits[4].line is not None  # the 4-GPU runs: the line does better
    line = fits[4]
    intercept, slope = line.line
    assert predict(line, "all_reduce", 65536, 4).time_us == pytest.approx(intercept + slope * 65536)
    assert main(["calibrate", *runs, "--out", str(tmp_path / "x.toml"), "--cohort", "9"]) == 2


def test_a_line_calibration_applies_at_its_rank_count_only(imported, tmp_path, capsys):
    runs = [str(r) for r in imported]
    path = tmp_path / "line.toml"
    assert main(["calibrate", *runs, "--out", str(path), "--cohort", "2"]) == 0
    sweep = tmp_path / "s.toml"
    named = calibration_name(path, path.read_text(encoding="utf-8"))  # its file name and hash, never its path
    for tp, used in ((4, named), (8, "nccl-prior")):
        sweep.write_text(
            f'name = "t"\n[run]\nmodel = "kimi-k2.5"\ntokens = [4]\nphase = "verify"\ndtype = "bfloat16"\n'
            f"tp = {tp}\niterations = 5\nwarmup = 1\n",
            encoding="utf-8",
        )
        out = tmp_path / f"runs{tp}"
        args = ["simulate", "--topology", "pcie-dual-socket-shm", "--sweep", str(sweep), "--out", str(out)]
        assert main([*args, "--calibration", str(path)]) == 0
        (run_dir,) = out.iterdir()
        records = [r for r in read_records(run_dir / "results.jsonl") if r["status"] == "ok"]
        assert {r["calibration"] for r in records} == {used}
        assert any("line" in (r["message"] or "") for r in records)
