"""Calibration cohorts: records of one box at one rank count and NCCL version, fitted and judged apart.

A calibration describes one box at one rank count under one NCCL; pooling cohorts would give one error figure
that holds for none of them. Per cohort, the cost model and a latency + bandwidth line (commprof.costmodel.line_fit)
are fitted on every other size of the sizes a decode / verify step's collectives have and judged on the others;
the fit that wins is the one written, as it was judged. Its expected error is the largest absolute error at any
size of any band it was judged on, fitted or held out. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from commprof.costmodel import calibrate as fitting
from commprof.costmodel.calibrated_sizes import DECISION_BANDS
from commprof.costmodel.latency import CostParams
from commprof.costmodel.line_fit import fit_line
from commprof.records.run_meta import RunMeta

COSTMODEL, LINE = "costmodel", "line"
# The sizes a decode / verify step's collectives have (fitting.HOLDOUT_RANGE), cut where SIZE_BANDS are.


def cohort_of(record: dict, meta: RunMeta) -> str:
    """ "<box> · <n> ranks · NCCL <version>": the box is the imported log's file (nccl-tests) or the host and its
    GPUs (a sweep); the version is the log's or the run's (? where neither says)."""
    return record_cohorts([record], meta)[0]


def record_cohorts(records: list[dict], meta: RunMeta) -> list[str]:
    """cohort_of each record of one run, its meta.json read once (20,000 imported runs made a read per record
    minutes of work)."""
    imported = meta.imported_runs
    host = f"{meta.hostname or '?'} ({' / '.join(meta.gpu_names) or 'GPUs not recorded'})"
    version = (meta.versions or {}).get("nccl") or "?"
    cohorts = []
    for record in records:
        box = str(record["file"]).rsplit("/", 1)[-1] if record.get("file") else host
        run = imported.get(record.get("point_id"))
        run_version = (run.nccl_version if run else None) or version
        cohorts.append(f"{box} · {record.get('world_size') or '?'} ranks · NCCL {run_version}")
    return cohorts


def tag(samples: list[fitting.Sample], cohort: str) -> list[fitting.Sample]:
    return [replace(s, cohort=cohort) for s in samples]


def band_errors(params: CostParams, samples: list[fitting.Sample]) -> tuple[tuple[str, float], ...]:
    """Per decision band holding samples: the largest absolute % error of `params` there."""
    errors = list(zip(samples, fitting.abs_pct_errors(params, samples)))
    rows = []
    for low, high, name in DECISION_BANDS:
        band = [e for s, e in errors if low <= s.bytes < high]
        if band:
            rows.append((name, math.ceil(max(band) * 10) / 10))  # rounded up: never below an error seen
    return tuple(rows)


@dataclass(frozen=True)
class Candidate:
    """One model fitted on a cohort's fit sizes, with its errors on the sizes it was judged on."""

    model: str
    """COSTMODEL or LINE."""
    params: CostParams
    """The fit (a line rides on the cost model's parameters as `line`)."""
    held_pct: float
    """The largest absolute % error on the held-out sizes: what the two models are judged by."""
    bands: tuple[tuple[str, float], ...]
    """Per decision band: the largest absolute % error over its fitted and held-out sizes."""

    @property
    def expected_pct(self) -> float:
        """The error this fit claims: the largest over its bands."""
        return max(pct for _, pct in self.bands)


@dataclass(frozen=True)
class CohortVerdict:
    """One cohort's judgement: both fits on the same split, the one written (`model`) and why; `runs`: the holdout
    test of each log run apart (what `calibrate --holdout` prints)."""

    cohort: str
    samples: int
    runs: tuple[fitting.Holdout, ...]
    fit_sizes: tuple[int, ...]
    held_sizes: tuple[int, ...]
    candidates: tuple[Candidate, ...]
    model: str
    note: str

    def held_pct(self, model: str) -> float | None:
        return next((c.held_pct for c in self.candidates if c.model == model), None)

    @property
    def chosen(self) -> Candidate | None:
        return next((c for c in self.candidates if c.model == self.model), None)


def judge(samples: list[fitting.Sample], prior: CostParams) -> list[CohortVerdict]:
    """Per cohort: both models fitted on every other size of the cohort in 8 KB-1 MB (its runs pooled) and judged
    on the other sizes by their largest error there; the one with the smaller is written."""
    low, high = fitting.HOLDOUT_RANGE
    verdicts = []
    for cohort in sorted({s.cohort for s in samples}):
        members = [s for s in samples if s.cohort == cohort]
        runs = tuple(fitting.holdout(members, prior))
        sizes = sorted({s.bytes for s in members if low <= s.bytes <= high})
        if len(sizes) < 4:
            note = f"{len(sizes)} size(s) in 8 KB-1 MB: too few to hold any out, nor to judge the cost model by a line"
            verdicts.append(CohortVerdict(cohort, len(members), runs, (), (), (), COSTMODEL, note))
            continue
        fit_sizes, held_sizes = tuple(sizes[0::2]), tuple(sizes[1::2])
        fitted = [s for s in members if s.bytes in fit_sizes]
        held = [s for s in members if s.bytes in held_sizes]
        judged = fitted + held
        params = fitting.fit(fitted, prior)
        line = fit_line([s.bytes for s in fitted], [s.time_us for s in fitted])
        candidates = tuple(
            Candidate(model, fit, round(max(fitting.abs_pct_errors(fit, held)), 1), band_errors(fit, judged))
            for model, fit in (
                (COSTMODEL, params),
                (LINE, replace(params, line=(line.intercept_us, line.us_per_byte))),
            )
        )
        mine, line_pct = candidates[0].held_pct, candidates[1].held_pct
        if mine <= line_pct:
            model = COSTMODEL
            note = f"the cost model (worst held out {mine:g} %) does at least as well as a line ({line_pct:g} %)"
        else:
            model = LINE
            note = (
                f"fallback: a latency + bandwidth line errs at worst {line_pct:g} % held out where the cost model errs "
                f"{mine:g} %, so this calibration is the line (it predicts every NCCL setting on this transport alike)"
            )
        verdicts.append(CohortVerdict(cohort, len(members), runs, fit_sizes, held_sizes, candidates, model, note))
    return verdicts
