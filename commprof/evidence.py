"""Where a number comes from, and how far it can be trusted: the one vocabulary every number, verdict and exported
line of commprof uses.

Three levels: *measured* (timed by commprof, on which backend), *simulated* (predicted by the cost model, with
which calibration and what expected error) and *imported* (read from which nccl-tests file). Each level brings
its own rule for when a difference is a result: beyond measurement noise for measured numbers, beyond the model's
expected error for simulated ones. A difference inside that uncertainty is not a result and is never recommended.
Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from commprof.nccl_vocab import ENV_CHECKS, value_traps
from commprof.records.run_meta import meta_view
from commprof.records.schema import SOURCES, Source

MEASURED = "measured"
SIMULATED = "simulated"
IMPORTED = "imported"
# The records' `source` field -> its evidence level, in SOURCES' order (timed here, predicted, imported).
LEVEL_OF_SOURCE: dict[Source, str] = dict(zip(SOURCES, (MEASURED, SIMULATED, IMPORTED), strict=True))

NOISE_RULE = (
    "a point beats the baseline beyond noise when its p90 step time is below the baseline's median "
    "(nine in ten of its steps were faster than the baseline's typical step); over several T, the "
    "sums over T"
)


# What the one rule says of a figure: better by more than its error; not (inside error); no figure to compare on
# one side, or an unknown error, or an observation withdrew it (not judged); nothing to judge (no answer).
Verdict = Literal["beyond error", "inside error", "not judged", "no answer"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)


def error_band(pct: float | None) -> str:
    """An expected error as every page and file writes it ("±41 %"), or "unknown"."""
    return f"±{pct:.0f} %" if pct is not None else "unknown"


@dataclass(frozen=True)
class ModelError:
    """The expected error of a simulation (median |model - measured| / measured, %) and where that figure comes
    from; `pct` None: unknown, and then no predicted difference counts."""

    pct: float | None
    basis: str
    boxes: str | None = None  # a calibration's "fitted on <box>, applied to <box>" (None: the prior, or not said)

    @property
    def band(self) -> str:
        return error_band(self.pct)

    def to_dict(self) -> dict[str, Any]:
        """As a simulated run's meta.json holds it ("model_error")."""
        return {"pct": self.pct, "basis": self.basis, **({"boxes": self.boxes} if self.boxes else {})}

    @classmethod
    def from_meta(cls, meta: dict) -> ModelError:
        """A simulated run's expected error: the one figure every verdict, page and file of the run quotes for its
        NCCL model. It is what `commprof simulate` recorded in meta.json: the calibration's held-out error, or
        the prior's measured error; never an in-sample fit figure (a record's own NCCL figure may be one, and
        is not used). Unknown when meta.json holds none (an older simulation)."""
        item = meta_view(meta).model_error
        if not isinstance(item, dict):
            return cls(None, "meta.json records no expected error (simulated by an older commprof: simulate again)")
        pct, basis = item.get("pct"), str(item.get("basis") or "recorded by commprof simulate")
        boxes = str(item["boxes"]) if item.get("boxes") else None
        if isinstance(pct, (int, float)) and not isinstance(pct, bool) and math.isfinite(pct) and pct >= 0:
            return cls(float(pct), basis, boxes)
        return cls(None, basis, boxes)


@dataclass(frozen=True)
class Evidence:
    """One run's (one source's) evidence: its level and what qualifies it."""

    level: str  # MEASURED, SIMULATED or IMPORTED
    backend: str | None = None  # measured: the backend the steps ran on ("nccl", "gloo")
    calibration: str | None = None  # simulated: "nccl-prior" (uncalibrated) or the calibration file
    model_error: ModelError | None = None  # simulated: the expected error the verdicts use
    origin: tuple[str, ...] = field(default_factory=tuple)  # imported: the files
    # measured: how far the baseline moved between its measurements over the run (its drift band, % of its
    # fastest); None: measured once, no drift known. A gain must exceed it as well as noise.
    drift_pct: float | None = None
    # measured: the noise floor of the run's interleaved confirmation (the largest spread of consecutive
    # measurements of the baseline, the A/A control first, % of the faster); None: the run made none. A gain
    # must exceed it as well.
    noise_floor_pct: float | None = None

    @property
    def margin_pct(self) -> float:
        """How far below the baseline's median a measured p90 must lie: the larger of drift and noise floor."""
        return max(self.drift_pct or 0.0, self.noise_floor_pct or 0.0)

    @property
    def simulated(self) -> bool:
        return self.level == SIMULATED

    @property
    def uncalibrated(self) -> bool:
        return self.simulated and self.calibration in (None, "nccl-prior")

    @property
    def measured(self) -> str:
        """The word for how a number of this evidence came to be: "measured", "predicted" or "imported"."""
        return {MEASURED: "measured", SIMULATED: "predicted"}.get(self.level, "imported")

    @property
    def measurement(self) -> str:
        """The noun for one such number: "measurement", "prediction" or "import"."""
        return {MEASURED: "measurement", SIMULATED: "prediction"}.get(self.level, "import")

    @property
    def label(self) -> str:
        """ "measured on gloo", "simulated with nccl-prior (expected error ±41 %)", "imported from a.txt"."""
        if self.level == MEASURED:
            return f"measured on {self.backend}" if self.backend else "measured"
        if self.level == SIMULATED:
            error = self.model_error.band if self.model_error else "unknown"
            return f"simulated with {self.calibration or 'unknown calibration'} (expected error {error})"
        return "imported from " + (", ".join(self.origin) if self.origin else "nccl-tests logs")

    @property
    def uncertainty(self) -> str:
        """What a difference must exceed to count: "measurement noise" or "the model's expected error"."""
        if self.simulated:
            return "the model's expected error"
        return "measurement noise" if self.drift_pct is None else "measurement noise and the baseline's drift"

    @property
    def beyond(self) -> str:
        if self.simulated:
            return "beyond model error"
        return "beyond noise" if self.drift_pct is None else "beyond noise and drift"

    @property
    def within(self) -> str:
        if self.simulated and (self.model_error is None or self.model_error.pct is None):
            return "not judged: the model's error is unknown"
        if self.simulated:
            return "within model error"
        return "within noise" if self.drift_pct is None else "within noise or drift"

    @property
    def rule(self) -> str:
        """The rule the verdicts follow, with this run's figures."""
        if not self.simulated:
            rule = NOISE_RULE
            if self.drift_pct is not None:
                rule += (
                    f"; and by more than the baseline's drift over the run (±{self.drift_pct:.1f} %: the "
                    "point's p90 below the baseline's median lowered by the drift)"
                )
            if self.noise_floor_pct is not None:
                rule += (
                    f"; and by more than the noise floor of the baseline measured again beside the answer "
                    f"(±{self.noise_floor_pct:.1f} %, the A/A control: the point's p90 below the baseline's "
                    "median lowered by it)"
                )
            return rule
        error = self.model_error
        if error is None or error.pct is None:
            return (
                "a predicted difference counts only beyond the model's expected error, which is unknown for this "
                f"calibration ({error.basis if error else 'no figure'}): no predicted difference counts"
            )
        return (
            f"a predicted gain counts when it exceeds the model's expected error ({error.band}: {error.basis}); "
            "a smaller one is within model error; over several T, the sums over T"
        )

    def beats(
        self,
        median_us: Any,
        p90_us: Any,
        reference_median_us: Any,
        errors: tuple[float | None, float | None] | None = None,
    ) -> bool | None:
        """Whether a point (its median and p90) beats a reference (its median) by more than this evidence's
        uncertainty; None when a number is missing. Unknown model error: never.

        `errors`: simulated by two different models (a kernel's against NCCL's), their expected errors (the
        point's, the reference's) in %: the point wins only when its time raised by its error stays below the
        reference's lowered by its own, since the two models can be wrong in opposite directions."""
        try:
            median, p90, reference = float(median_us), float(p90_us), float(reference_median_us)
        except (TypeError, ValueError):
            return None
        if not self.simulated:
            if not (math.isfinite(p90) and math.isfinite(reference)):
                return None
            return p90 < reference * (1.0 - self.margin_pct / 100.0)
        if not (math.isfinite(median) and math.isfinite(reference)):
            return None
        if errors is not None:
            mine, theirs = errors
            if mine is None or theirs is None:
                return False
            return median * (1.0 + mine / 100.0) < reference * (1.0 - theirs / 100.0)
        if self.model_error is None or self.model_error.pct is None:
            return False
        return median < reference * (1.0 - self.model_error.pct / 100.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "label": self.label,
            "backend": self.backend,
            "calibration": self.calibration,
            "expected_error_pct": self.model_error.pct if self.model_error else None,
            "expected_error_basis": self.model_error.basis if self.model_error else None,
            "calibration_boxes": self.model_error.boxes if self.model_error else None,
            "origin": list(self.origin),
            "drift_pct": self.drift_pct,
            "noise_floor_pct": self.noise_floor_pct,
            "rule": self.rule,
        }

    def figure_error_pct(self, uncertain_ms: float, total_ms: float) -> float | None:
        """The expected error of a figure of which only `uncertain_ms` is predicted (a verify step: predicted
        communication plus the compute the user gave), in % of the figure; None: measured, or unknown."""
        if not self.simulated or self.model_error is None or self.model_error.pct is None:
            return None
        if not (math.isfinite(uncertain_ms) and math.isfinite(total_ms)) or total_ms <= 0:
            return None
        return self.model_error.pct * min(max(uncertain_ms / total_ms, 0.0), 1.0)

    def judge(
        self, after: tuple[float, float], before: float, errors: tuple[float | None, float | None] | None = None
    ) -> Verdict:
        """The one rule applied to a figure a user reads: `after` (median, p90) against `before` (median), each side
        with its own error where simulated (`errors`: the after's and the before's, % of each figure)."""
        if self.simulated and errors is not None and None in errors:
            return "not judged"
        beats = self.beats(after[0], after[1], before, errors if self.simulated else None)
        if beats is None or (self.simulated and (self.model_error is None or self.model_error.pct is None)):
            return "not judged"
        return "beyond error" if beats else "inside error"


# ------------------------------------------------------------- rules two stages share (search and report, simulate)

# How measurements of one point become one figure and a margin: the sweep (which points it confirms) and the report
# (the drift band, the noise floor) read a point measured again the same way.


def measurement_total(records: list[dict], mode: str, tokens: set[int]) -> tuple[float, float | None] | None:
    """(step median, p90) of one measurement of a point summed over `tokens`, as every verdict sums T; None unless
    every T is ok in `mode` (p90 None where a record lacks it)."""
    rows = {
        r.get("tokens"): r for r in records if r.get("mode") == mode and r.get("status") == "ok" and r.get("step_us")
    }
    if not tokens or set(rows) != tokens or any(rows[t]["step_us"].get("median") is None for t in tokens):
        return None
    stats = [rows[t]["step_us"] for t in sorted(tokens)]
    p90s = [s.get("p90") for s in stats]
    return sum(float(s["median"]) for s in stats), None if None in p90s else sum(float(p) for p in p90s)


def spread_pct(totals: list[float]) -> float | None:
    """(largest - smallest) / smallest of measurements of one thing, %: their drift band over a run, or, for two
    consecutive ones, the noise between them; None: fewer than two, or one not positive."""
    if len(totals) < 2 or min(totals) <= 0:
        return None
    return 100.0 * (max(totals) - min(totals)) / min(totals)


# What makes a crossover: a sustained run of wins, at least SUSTAINED consecutive measured sizes, so one lucky
# size does not move it. The search that finds it and the report that reads it back both use these.
SUSTAINED = 2  # consecutive wins that make a crossover


def sustained_runs(wins: dict[int, bool], length: int = SUSTAINED) -> list[tuple[int, int]]:
    """(first, last) size of each run of at least `length` consecutive wins, in size order."""
    runs, start, count, last = [], None, 0, None
    for size, won in sorted(wins.items()):
        if won:
            start = size if count == 0 else start
            count += 1
            last = size
        else:
            if count >= length:
                runs.append((start, last))
            count = 0
    if count >= length:
        runs.append((start, last))
    return runs


def sustained_start(wins: dict[int, bool], length: int = SUSTAINED) -> int | None:
    """The first size of the first sustained run of wins, or None."""
    runs = sustained_runs(wins, length)
    return runs[0][0] if runs else None


# What may be proposed from a result: the staged search (which points to refine) and the report (which points to
# rank and recommend) share this rule, so the search never spends a point on what the report must refuse. A
# simulation checks no result and times nothing: a simulated point whose settings carry a known correctness trap on
# the interconnect (LL128 off NVLink), or a kernel predicted with an unknown error (only the floor of its
# algorithm), may not be proposed. Measured points are judged by their own checks (a corrupt one is "wrong").


def interconnect_of(topology: dict | None) -> str:
    """ "nvlink" where the GPUs' path is NVLink (a topology preset's or probe's gpu_path "NV..."), else "pcie"."""
    path = str((topology or {}).get("gpu_path", "")).upper() if isinstance(topology, dict) else ""
    return "nvlink" if path.startswith("NV") else "pcie"


def not_proposable(record: dict, interconnect: str) -> str | None:
    """Why a step record's point may not be proposed (searched further, ranked, recommended), or None."""
    if record.get("source") != "simulated":
        return None
    kernel = record.get("kernel_model")
    if isinstance(kernel, dict) and kernel.get("expected_error_pct") is None:
        basis = "only as the floor of its algorithm" if kernel.get("basis") == "floor" else "from figures"
        return (
            f"{kernel.get('impl')} is predicted {basis} ({kernel.get('source')}) with an unknown error, so it is "
            "not ranked: measure it"
        )
    env = (record.get("point") or {}).get("env") or {}
    traps = [
        trap
        for name, value in sorted(env.items())
        if name in ENV_CHECKS
        for trap in value_traps(str(name), str(value), interconnect)
    ]
    if traps:
        return f"{traps[0].split(';')[0]}; a simulation checks no result, so it is not ranked: measure it"
    return None


# A calibration's expected error is its held-out error (the figure `commprof calibrate` records), never its
# in-sample fit: the simulator and the model-error module both read it here.


def calibration_error(name: str, fit: dict | None) -> ModelError:
    """A calibration file's expected error as `commprof calibrate` recorded it (the largest over the bands of decode /
    verify sizes it was judged on), or the prior's where it is applied to another box (costmodel.fitted_box)."""
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
