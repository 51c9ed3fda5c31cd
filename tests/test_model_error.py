"""The uncalibrated cost model's expected error is recorded with its source and recomputed from the real logs."""

from pathlib import Path

import pytest

from commprof.costmodel import model_error

LOGS = Path(__file__).resolve().parent / "fixtures" / "nccl-tests"
REAL = ("rtx4090x8_sys_noP2P_charlie0129.txt", "rtx4090x2_x4_kalavai.txt")


def test_the_recorded_prior_error_is_what_the_real_logs_give_today():
    logs = {name: (LOGS / name).read_text(encoding="utf-8", errors="replace") for name in REAL}
    assert model_error.measure(logs) == model_error.recorded()


def test_the_8_gpu_log_sets_the_error_of_an_8_rank_simulation():
    error = model_error.prior_error(8)
    # docs/cost-model.md: 41.0 % over 8 KB-1 MB on the only real 8-GPU log (46.5 % over every size).
    assert error.pct == pytest.approx(41.0)
    assert "rtx4090x8_sys_noP2P_charlie0129.txt" in error.basis and "8 ranks" in error.basis
    # No log at 16 ranks: the worst run stands for it, and the basis says so.
    wide = model_error.prior_error(16)
    assert wide.pct == max(r["median_abs_pct"] for r in model_error.recorded()) and "no log at 16" in wide.basis
    assert model_error.prior_error(8, rows=[]).pct is None


def test_a_calibration_is_judged_by_its_held_out_error_and_a_missing_one_is_unknown():
    fitted = model_error.expected_error(["calibration.toml"], {"expected_error_pct": 7.0, "error_basis": "held out"}, 8)
    assert fitted.pct == 7.0 and "calibration.toml" in fitted.basis
    # Points on another transport fell back to the prior: the run is judged by the larger error.
    mixed = model_error.expected_error(["calibration.toml", "nccl-prior"], {"expected_error_pct": 7.0}, 8)
    assert mixed.pct == pytest.approx(41.0) and "largest of 2" in mixed.basis
    assert model_error.expected_error(["old.toml"], {}, 8).pct is None
