"""`calibrate` per cohort (box, rank count, NCCL version): each earns its error against a latency + bandwidth line
on the same split, or falls back to the line and says so; the file written is the fit that won, and the error it
states is the largest of its bands over the sizes it was judged on; one pooled figure over several cohorts is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.costmodel import calibrate as fitting
from commprof.costmodel.calibration_file import params_from_toml
from commprof.costmodel.cohorts import COSTMODEL, DECISION_BANDS, LINE, cohort_of, judge, tag
from commprof.costmodel.latency import predict
from commprof.costmodel.line_fit import fit_line
from commprof.costmodel.model_error import calibration_error
from commprof.costmodel.nccl_tests import parse_text, run_records
from commprof.costmodel.simulate_command import calibration_name
from commprof.costmodel.topology import link_for, load_topology
from commprof.records.files import read_records
from commprof.records.run_meta import RunMeta

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
        samples += tag(found, cohort_of(record, RunMeta()))
    return samples, topology.prior(link, "ampere")


@pytest.mark.parametrize("log", REAL_LOGS, ids=[p.name for p in REAL_LOGS])
def test_every_cohort_of_every_real_log_earns_its_error_or_falls_back_to_the_line(log):
    samples, prior = _samples(log)
    verdicts = judge(samples, prior)
    assert verdicts
    for v in verdicts:
        assert v.chosen.held_pct == min(c.held_pct for c in v.candidates), v
        assert (v.model == LINE) == (v.held_pct(COSTMODEL) > v.held_pct(LINE))
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
        # The expected error is the largest over the bands it states, and the file says what it is.
        assert fit["expected_error_pct"] == max(fit["band_error_pct"]) and "won the held-out test" in fit["written"]
        assert fit[f"{fit['model']}_held_out_worst_pct"] <= fit["line_held_out_worst_pct"]
        assert calibration_error(str(path), fit).pct == fit["expected_error_pct"]
    assert fits[8].fit["model"] == COSTMODEL and fits[8].line is None
    assert fits[4].fit["model"] == LINE and fits[4].line is not None  # the 4-GPU runs: the line does better
    line = fits[4]
    intercept, slope = line.line
    assert predict(line, "all_reduce", 65536, 4).time_us == pytest.approx(intercept + slope * 65536)
    assert main(["calibrate", *runs, "--out", str(tmp_path / "x.toml"), "--cohort", "9"]) == 2


def _band_of(nbytes: int) -> str | None:
    return next((name for low, high, name in DECISION_BANDS if low <= nbytes < high), None)


def test_the_file_written_is_the_fit_that_won_and_errs_within_its_stated_band_errors(imported, tmp_path):
    """The 4-GPU runs: the line wins held out, so the line is written, fitted on the sizes it was judged on; the
    file's predictions at its own fitted and held-out sizes err no more than it states for their band."""
    path = tmp_path / "c2.toml"
    assert main(["calibrate", *map(str, imported), "--out", str(path), "--cohort", "2"]) == 0
    written = params_from_toml(path.read_text(encoding="utf-8"), str(path))
    fit = written.fit
    assert fit["model"] == LINE and written.line is not None and "the line that won" in path.read_text()
    log = parse_text((LOGS / "rtx4090x2_x4_kalavai.txt").read_text(encoding="utf-8"), "x")
    runs = [r for r in log.runs if r.ranks == 4]
    expected = fit_line(
        *zip(
            *[
                (row.bytes, v["time_us"])
                for r in runs
                for row in r.rows
                if row.bytes in fit["fitted_sizes"]
                for v in row.places.values()
            ]
        )
    )
    assert written.line == pytest.approx((expected.intercept_us, expected.us_per_byte), rel=1e-6)
    stated = dict(zip(fit["band_names"], fit["band_error_pct"]))
    assert set(stated) == {"8-64 KB", "64 KB-1 MB"}
    judged = set(fit["fitted_sizes"]) | set(fit["held_out_sizes"])
    for run in runs:
        for row in run.rows:
            if row.bytes not in judged:
                continue
            for values in row.places.values():
                time_us = predict(written, "all_reduce", row.bytes, 4).time_us
                error = 100 * abs(time_us - values["time_us"]) / values["time_us"]
                assert error <= stated[_band_of(row.bytes)], (row.bytes, error, stated)


def test_the_cost_model_written_for_the_8_gpu_log_errs_within_its_stated_band_errors(imported, tmp_path):
    """The 8-GPU log: the cost model wins and is written as judged; its own predictions at every judged size err
    no more than the band error it states."""
    path = tmp_path / "c3.toml"
    assert main(["calibrate", *map(str, imported), "--out", str(path), "--cohort", "3"]) == 0
    written = params_from_toml(path.read_text(encoding="utf-8"), str(path))
    fit = written.fit
    assert fit["model"] == COSTMODEL and written.line is None and "the cost model that won" in fit["written"]
    stated = dict(zip(fit["band_names"], fit["band_error_pct"]))
    judged = set(fit["fitted_sizes"]) | set(fit["held_out_sizes"])
    (run,) = parse_text((LOGS / "rtx4090x8_sys_noP2P_charlie0129.txt").read_text(encoding="utf-8"), "x").runs
    rows = [row for row in run.rows if row.bytes in judged]
    assert len(rows) == 8
    for row in rows:
        for values in row.places.values():
            error = (
                100 * abs(predict(written, "all_reduce", row.bytes, 8).time_us - values["time_us"]) / values["time_us"]
            )
            assert error <= stated[_band_of(row.bytes)], (row.bytes, error, stated)


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
        calibration = json.loads((run_dir / "meta.json").read_text())["calibration"]
        if used == named:
            assert calibration["applied"] and any("line" in (r["message"] or "") for r in records)
        else:  # fitted at 4 ranks: at 8 it holds for no point, and the run says why
            assert not calibration["applied"] and "differ in ranks" in calibration["why"]
