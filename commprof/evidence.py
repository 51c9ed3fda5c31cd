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

import msgspec

from commprof.nccl_tuning import ENV_CHECKS
from commprof.nccl_vocab import value_traps
from commprof.records.run_meta import RunMeta
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
    def from_meta(cls, meta: RunMeta) -> ModelError:
        """A simulated run's expected error: the one figure every verdict, page and file of the run quotes for its
        NCCL model. It is what `commprof simulate` recorded in meta.json: the calibration's held-out error, or
        the prior's measured error; never an in-sample fit figure (a record's own NCCL figure may be one, and
        is not used). Unknown when meta.json holds none (an older simulation)."""
        item = meta.model_error
        if item is None:
            return cls(None, "meta.json records no expected error (simulated by an older commprof: simulate again)")
        basis = item.basis or "recorded by commprof simulate"
        return cls(item.pct, basis, item.boxes or None)


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
        term = self.margin_term()
        return term.pct if term is not None else 0.0

    def margin_term(self) -> ErrorTerm | None:
        """The measured term beyond the faster side's spread: the baseline's drift over the run or the noise floor
        of its interleaved confirmation, the larger (both say how far the baseline moves between two measurements
        of it, so the larger covers the other); None: the run knows neither."""
        drift, floor = self.drift_pct, self.noise_floor_pct
        if floor is not None and (drift is None or floor > drift):
            return ErrorTerm("noise floor", floor, NOISE_FLOOR_SOURCE)
        if drift is not None:
            return ErrorTerm("drift", drift, DRIFT_SOURCE)
        return None

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

    def error_terms(
        self,
        after: tuple[Any, Any],
        before: tuple[Any, Any],
        errors: tuple[float | None, float | None] | None = None,
    ) -> tuple[ErrorTerm, ...] | None:
        """What a difference between `after` and `before` (each (median, p90)) must exceed to count, as terms in %
        of `before`'s median, for the direction the difference points (a faster `after` is held to its own spread,
        a slower one to `before`'s); None where a term is unknown (a missing p90, an unknown model error).

        Measured: the faster side's p90 above its median, and the larger of the baseline's drift over the run and
        the noise floor of its interleaved confirmation (margin_term); simulated: the model's expected error, or
        with two models (`errors`: after's and before's, %) both."""
        try:
            median, p90 = float(after[0]), float(after[1])
            reference, reference_p90 = float(before[0]), float(before[1])
        except (TypeError, ValueError):
            return None
        if not (math.isfinite(median) and math.isfinite(reference)) or reference <= 0:
            return None
        faster = median <= reference
        if not self.simulated:
            top, middle = (p90, median) if faster else (reference_p90, reference)
            if not math.isfinite(top):
                return None
            terms = [ErrorTerm("spread", 100.0 * (top - middle) / reference, SPREAD_SOURCE)]
            margin = self.margin_term()
            if margin is not None:
                scale = 1.0 if faster else median / reference
                terms.append(ErrorTerm(margin.name, margin.pct * scale, margin.source))
            return tuple(terms)
        if errors is not None:
            mine, theirs = errors
            if mine is None or theirs is None:
                return None
            return (
                ErrorTerm("model (this side)", mine * median / reference, "its model's expected error"),
                ErrorTerm("model (the reference)", theirs, "the reference's model's expected error"),
            )
        if self.model_error is None or self.model_error.pct is None:
            return None
        scale = 1.0 if faster else median / reference
        return (ErrorTerm("model", self.model_error.pct * scale, self.model_error.basis),)

    def beats(
        self,
        median_us: Any,
        p90_us: Any,
        reference_median_us: Any,
        errors: tuple[float | None, float | None] | None = None,
    ) -> bool | None:
        """Whether a point (its median and p90) beats a reference (its median) by the one rule (`rule`), each
        difference held to this evidence's error terms (error_terms); None when a number is missing. Unknown model
        error: never.

        `errors`: simulated by two different models (a kernel's against NCCL's), their expected errors (the
        point's, the reference's) in %: the point wins only when its time raised by its error stays below the
        reference's lowered by its own, since the two models can be wrong in opposite directions."""
        gain = gain_pct(reference_median_us, median_us)
        if gain is None:
            return None
        if gain <= 0:
            return False
        terms = self.error_terms((median_us, p90_us), (reference_median_us, math.nan), errors)
        if terms is None:
            return False if self.simulated else None
        return rule(gain, total_pct(terms)) == "beyond error"

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


SPREAD_SOURCE = "the faster side's p90 above its median"
DRIFT_SOURCE = "the baseline's drift over the run"
NOISE_FLOOR_SOURCE = (
    "the noise floor of the interleaved confirmation: the largest spread of consecutive measurements of the "
    "baseline beside the candidates, the A/A control first"
)


class ErrorTerm(msgspec.Struct, frozen=True):
    """One part of what a difference must exceed, in % of the figure's reference, and where it comes from."""

    name: str  # "spread", "drift", "model", ...
    pct: float
    source: str


def total_pct(terms: tuple[ErrorTerm, ...] | None) -> float | None:
    """The error a difference must exceed: its terms summed (None: unknown)."""
    return None if terms is None else sum(term.pct for term in terms)


def gain_pct(before: Any, after: Any) -> float | None:
    """How much less `after` is than `before`, % of `before` (negative: more); None where either is missing."""
    try:
        b, a = float(before), float(after)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(b) and math.isfinite(a)) or b <= 0:
        return None
    return 100.0 * (b - a) / b


def rule(gain: float | None, error: float | None) -> Verdict:
    """The one rule every verdict of commprof follows: a difference of `gain` % (of the figure it is compared with)
    is a result, "beyond error", when it exceeds `error` % (every term its evidence must beat: noise and drift when
    measured, the model's expected error when simulated), else "inside error"; "not judged" where either figure is
    unknown. The sign says which way: a negative gain beyond error is slower beyond error."""
    if gain is None or error is None or not (math.isfinite(gain) and math.isfinite(error)):
        return "not judged"
    return "beyond error" if abs(gain) > error else "inside error"


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


def interconnect_of(gpu_path: str | None) -> str:
    """ "nvlink" where the GPUs' path is NVLink (a topology preset's gpu_path "NV..."), else "pcie"."""
    return "nvlink" if str(gpu_path or "").upper().startswith("NV") else "pcie"


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
