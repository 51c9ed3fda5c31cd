"""Calibration cohorts: records of one box at one rank count and NCCL version, fitted and judged apart.

A calibration describes one box at one rank count under one NCCL; pooling cohorts would give one error figure
that holds for none of them. Per cohort, the cost model's held-out error is set against a latency + bandwidth line
fitted on the same split (commprof.costmodel.line_fit); where the line does better, the calibration falls back to
it and says so. A calibration's expected error is its held-out error, never below its own in-sample error. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import median

from commprof.costmodel import calibrate as fitting
from commprof.costmodel.latency import CostParams
from commprof.costmodel.line_fit import Line, fit_line, median_abs_pct

COSTMODEL, LINE = "costmodel", "line"


def cohort_of(record: dict, meta: dict) -> str:
    """ "<box> · <n> ranks · NCCL <version>": the box is the imported log's file (nccl-tests) or the host and its
    GPUs (a sweep); the version is the log's or the run's (? where neither says)."""
    imported = {run["point_id"]: run for item in meta.get("imported") or [] for run in item.get("runs") or []}
    run = imported.get(record.get("point_id"), {})
    if record.get("file"):
        box = str(record["file"]).rsplit("/", 1)[-1]
    else:
        names = sorted({str(g.get("name", "?")) for g in meta.get("gpus") or [] if isinstance(g, dict)})
        box = f"{meta.get('hostname') or '?'} ({' / '.join(names) or 'GPUs not recorded'})"
    version = run.get("nccl_version") or (meta.get("versions") or {}).get("nccl") or "?"
    return f"{box} · {record.get('world_size') or '?'} ranks · NCCL {version}"


def tag(samples: list[fitting.Sample], cohort: str) -> list[fitting.Sample]:
    return [replace(s, cohort=cohort) for s in samples]


@dataclass(frozen=True)
class CohortVerdict:
    """One cohort's held-out errors (cost model and line, same split) and the model its calibration uses; `runs`:
    the holdout test of each log run apart (what `calibrate --holdout` prints)."""

    cohort: str
    samples: int
    runs: tuple[fitting.Holdout, ...]
    costmodel_held_pct: float | None
    line_held_pct: float | None
    model: str
    note: str


def judge(samples: list[fitting.Sample], prior: CostParams) -> list[CohortVerdict]:
    """Per cohort: both models fitted on every other size of the cohort in 8 KB-1 MB (its runs pooled, as the
    calibration file is) and judged on the other sizes; the model with the smaller held-out error is written."""
    low, high = fitting.HOLDOUT_RANGE
    verdicts = []
    for cohort in sorted({s.cohort for s in samples}):
        members = [s for s in samples if s.cohort == cohort]
        runs = tuple(fitting.holdout(members, prior))
        sizes = sorted({s.bytes for s in members if low <= s.bytes <= high})
        if len(sizes) < 4:
            note = f"{len(sizes)} size(s) in 8 KB-1 MB: too few to hold any out, nor to judge the cost model by a line"
            verdicts.append(CohortVerdict(cohort, len(members), runs, None, None, COSTMODEL, note))
            continue
        fit_sizes, held_sizes = set(sizes[0::2]), set(sizes[1::2])
        fitted = [s for s in members if s.bytes in fit_sizes]
        held = [s for s in members if s.bytes in held_sizes]
        mine = round(median(fitting.abs_pct_errors(fitting.fit(fitted, prior), held)), 1)
        line_model = fit_line([s.bytes for s in fitted], [s.time_us for s in fitted])
        line = round(median_abs_pct(line_model, [s.bytes for s in held], [s.time_us for s in held]), 1)
        if mine <= line:
            model, note = COSTMODEL, f"the cost model ({mine:g} %) does at least as well as a line ({line:g} %)"
        else:
            model = LINE
            note = (
                f"fallback: a latency + bandwidth line errs {line:g} % held out where the cost model errs {mine:g} %, "
                "so this calibration is the line (it predicts every NCCL setting on this transport alike)"
            )
        verdicts.append(CohortVerdict(cohort, len(members), runs, mine, line, model, note))
    return verdicts


def line_in_range(samples: list[fitting.Sample]) -> Line:
    """The line of a cohort over the sizes of a decode / verify step's collectives (HOLDOUT_RANGE)."""
    low, high = fitting.HOLDOUT_RANGE
    chosen = [s for s in samples if low <= s.bytes <= high] or samples
    return fit_line([s.bytes for s in chosen], [s.time_us for s in chosen])


def claimed_error(held_pct: float | None, in_sample_pct: float) -> float | None:
    """What a calibration may claim: its held-out error, never below its own in-sample error."""
    return None if held_pct is None else round(max(held_pct, in_sample_pct), 1)


def line_in_sample_pct(line: Line, samples: list[fitting.Sample]) -> float:
    low, high = fitting.HOLDOUT_RANGE
    chosen = [s for s in samples if low <= s.bytes <= high] or samples
    return median_abs_pct(line, [s.bytes for s in chosen], [s.time_us for s in chosen])
