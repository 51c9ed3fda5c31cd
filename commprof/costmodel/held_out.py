"""A calibration's expected error: the one rule that says a run's error is the one its calibration file states
(`commprof calibrate` writes the largest error over the bands of decode / verify sizes it was judged on), never
its in-sample fit, and the prior's where it is applied to another box (commprof.costmodel.fitted_box). Imports
nothing of the cost model, so the simulator and the model-error module can both read it."""

from __future__ import annotations

from commprof.evidence import ModelError


def calibration_error(name: str, fit: dict | None) -> ModelError:
    """A calibration file's expected error as `commprof calibrate` recorded it (or as applied to another box)."""
    fit = fit or {}
    pct = fit.get("expected_error_pct")
    boxes = fit.get("applied")
    if fit.get("applied_differs"):
        return ModelError(pct, f"calibration {name} applied to another box ({fit.get('error_basis')})", boxes)
    if isinstance(pct, (int, float)) and not isinstance(pct, bool):
        return ModelError(
            float(pct), f"held-out error of calibration {name} ({fit.get('error_basis', 'held out')})", boxes
        )
    return ModelError(
        None,
        f"calibration {name} states no error over the sizes it was judged on ("
        f"{fit.get('error_basis', 'calibrated by an older commprof')}; re-run commprof calibrate)",
        boxes,
    )
