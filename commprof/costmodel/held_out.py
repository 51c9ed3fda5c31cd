"""A calibration's expected error: the one rule that says a run's error is its calibration's held-out error (the
figure `commprof calibrate` records), never its in-sample fit. Imports nothing of the cost model, so the simulator
and the model-error module can both read it."""

from __future__ import annotations

from commprof.evidence import ModelError


def calibration_error(name: str, fit: dict | None) -> ModelError:
    """A calibration file's expected error: its held-out error as `commprof calibrate` recorded it."""
    fit = fit or {}
    pct = fit.get("holdout_median_pct")
    if isinstance(pct, (int, float)) and not isinstance(pct, bool):
        return ModelError(float(pct), f"held-out error of calibration {name} ({fit.get('holdout_basis', 'holdout')})")
    return ModelError(
        None,
        f"calibration {name} records no held-out error ({fit.get('holdout_basis', 'calibrated by an older commprof')};"
        " re-run commprof calibrate)",
    )
