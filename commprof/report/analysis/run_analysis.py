"""The report's front door: a run's records (one source of them) analysed once into a RunAnalysis (runs set side by
side: compared.py).

`analyze_run` calls the pure analyses (frame, ranking, choices, heatmap) and keeps what they return under full
names. It chooses nothing: the answer (the NCCL environment, the routing per size, every verdict) is the Decision's
(decide.py), and every output renders that Decision alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pandas as pd

from commprof.evidence import (
    IMPORTED,
    LEVEL_OF_SOURCE,
    MEASURED,
    SIMULATED,
    Evidence,
    ModelError,
    interconnect_of,
    not_proposable,
)
from commprof.records.plan_file import Plan
from commprof.records.point_ids import BASELINE_POINT_ID
from commprof.records.run_meta import RunMeta
from commprof.report.analysis import choices as ch
from commprof.report.analysis import frame as fr
from commprof.report.analysis import heatmap as hm
from commprof.report.analysis import ranking as rk
from commprof.report.analysis.completeness import Completeness, completeness
from commprof.report.analysis.crossovers import crossovers
from commprof.report.analysis.doctor_verdicts import doctor_view
from commprof.report.analysis.drift import BaselineDrift, baseline_drift
from commprof.report.analysis.interleaved import Interleaved, interleaved
from commprof.report.analysis.observed import observed_view
from commprof.report.analysis.ops import PointSites, point_sites
from commprof.report.analysis.projection import ComputeTimes
from commprof.report.analysis.spacing import spacing_summary

if TYPE_CHECKING:
    from commprof.explain.run_box import RunBox

DEFAULT_ACCEPTS = (1.3, 2.0, 3.0)


@dataclass(frozen=True)
class ReportOptions:
    """What the user tells the report beyond the records (`--compute-ms`, `--draft-ms`, `--accept`, `--baseline`)."""

    compute: ComputeTimes = field(default_factory=ComputeTimes)
    draft_ms: float | None = None  # draft time per speculative step; None: not given (projected as 0)
    accepts: tuple[float, ...] = DEFAULT_ACCEPTS  # accept lengths to project tokens/s at
    baseline: str | None = None  # the baseline point id; None: the sweep's baseline ("p000")
    compute_source: str = ""  # where the compute times come from ("--compute-ms", "the sweep file's [report]")
    allow_partial: bool = False  # recommend from an incomplete run (--allow-partial)
    # The engine's measured communication per verify step, ms per T (None: T not said), and where it comes from
    # (`--observed-step-ms`, `--observed TRACE_DIR`); empty: nothing observed.
    observed: dict[int | None, float] = field(default_factory=dict)
    observed_source: str = ""
    # The box the run was simulated on, read again at the edge (commprof.explain.run_box), against which an
    # observation the model does not explain is explained; None: not readable here, and `observed_box_note` why.
    observed_box: RunBox | None = None
    observed_box_note: str = ""
    # The engines whose dispatch the report reproduces (--engine); () : those installed where the run ran, else
    # here, else commprof's defaults (engine_dispatch.engines_for).
    engines: tuple[str, ...] = ()


@dataclass
class RunAnalysis:
    """Everything the report says about one run (one source of it), each DataFrame from one pure analysis."""

    run_id: str
    name: str  # the run id, with the source when a run mixes sources
    source: str  # "measured", "simulated" or "nccl-tests" (records.schema.SOURCES)
    meta: RunMeta  # the run's meta.json, as read (records.run_meta.read_meta)
    frame: pd.DataFrame  # every record (frame.records_frame)
    steps: pd.DataFrame  # each configuration's latest, longest measurement: what is ranked
    all_steps: pd.DataFrame  # every step record, re-measured configurations' earlier ones included
    collectives: pd.DataFrame  # single-collective records (imported or simulated)
    options: ReportOptions
    evidence: Evidence  # where these numbers come from, and the rule their verdicts follow
    mode: str = "graph"  # the headline mode (ranking.headline_mode)
    mode_reason: str = ""
    baseline: str | None = None  # the baseline's point id, as its configuration's latest measurement
    baseline_requested: str | None = None  # the id asked for (--baseline, else "p000")
    baseline_family: tuple[str, ...] = ()  # impl names of the baseline's all-reduce (ranking.implementation_family)
    superseded: dict[str, str] = field(default_factory=dict)  # re-measured: old point id -> the id that counts
    completeness: Completeness | None = None  # planned vs done (None: no sweep to compare with)
    untested: dict[str, str] = field(default_factory=dict)  # simulated: point id -> why it is not ranked
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)  # frame.failures
    speedups: pd.DataFrame = field(default_factory=pd.DataFrame)  # ranking.speedups of every step record
    without_result: pd.DataFrame = field(default_factory=pd.DataFrame)  # implementations that never gave a number
    fusion: pd.DataFrame = field(default_factory=pd.DataFrame)  # choices.fusion_comparison: answer (c)
    heatmap_axes: list[str] = field(default_factory=list)  # heatmap.strongest_axes
    records: list[dict] = field(default_factory=list, repr=False)  # the records analysed (the decision routes them)
    ranks: int = 0  # the run's world size
    crossovers: list[dict[str, Any]] = field(default_factory=list)  # crossovers.crossovers: what each search found
    drift: BaselineDrift | None = None  # the baseline's measurements over the run and their band (drift.py)
    # the baseline measured again beside the candidates, and the noise floor (interleaved.py); None: not made
    interleaved: Interleaved | None = None
    spacing: dict[str, Any] | None = None  # compute and late ranks between the collectives (spacing.py)

    @property
    def simulated(self) -> bool:
        return self.source == "simulated"

    @property
    def shared_gpus(self) -> bool:
        """Ranks shared GPUs (the sweep's --share-gpus): a functional check, never a tuning result."""
        return bool(self.meta.shared_gpus)

    @cached_property
    def observed(self) -> dict[str, Any] | None:
        """The engine's observation beside the prediction with today's settings (commprof.report.analysis.observed),
        or None: none given."""
        return observed_view(self, self.options.observed, self.options.observed_source)

    @property
    def unfinished(self) -> str | None:
        """Why no result of this run may be acted on: it is incomplete (and --allow-partial was not given)."""
        progress = self.completeness
        if progress is not None and not progress.complete and not self.options.allow_partial:
            return f"the run is incomplete ({progress.summary()})"
        return None

    @cached_property
    def doctor(self) -> dict[str, Any] | None:
        """The doctor's checks as the page shows them (doctor_verdicts.doctor_view); None: the run has none."""
        return doctor_view(self.meta.doctor)

    @property
    def doctor_failed(self) -> list[str]:
        return self.doctor["failed"] if self.doctor else []

    @cached_property
    def tokens(self) -> list[int]:
        """Every T the ranked step records hold."""
        return fr.distinct_tokens(self.steps)

    @cached_property
    def status_counts(self) -> dict[str, int]:
        return fr.status_counts(self.frame)

    @cached_property
    def status_matrix(self) -> pd.DataFrame:
        """Every point (re-measured ones included) x (T, mode) -> status: the CUDA-graph compatibility matrix."""
        return fr.status_matrix(self.all_steps)

    @cached_property
    def ok_steps(self) -> pd.DataFrame:
        """The ranked step records that are a tuning result, every mode."""
        return fr.ok_rows(self.steps)

    @cached_property
    def ok_mode_steps(self) -> pd.DataFrame:
        """The ranked step records that are a tuning result, of the headline mode."""
        return fr.ok_rows(self.steps, self.mode)

    @cached_property
    def ok_ranked(self) -> pd.DataFrame:
        """The rankable step records that are a tuning result, of the headline mode: what (a) and the per-T answers
        are judged on."""
        return fr.ok_rows(self.rankable, self.mode)

    @cached_property
    def heatmaps(self) -> list[tuple[int, pd.DataFrame, pd.DataFrame]]:
        """Per T: the heatmap pivot of every point of the baseline's implementation, and of the ranked ones."""
        if not self.heatmap_axes or self.ok_mode_steps.empty:
            return []
        return hm.heatmaps(self.family_steps, list(self.untested), self.tokens, self.mode, self.heatmap_axes)

    @cached_property
    def _eager_ops(self) -> dict[tuple[str, Any], Any]:
        """(point id, T) -> the op_us of the point's first ok eager record at T."""
        eager = fr.first_rows(fr.ok_rows(self.steps, "eager"), ["point_id", "tokens"])
        return dict(zip(zip(eager["point_id"], eager["tokens"]), eager["op_us"]))

    @cached_property
    def _sites(self) -> dict[tuple[str, Any], PointSites | None]:
        """sites_at's answers so far: the baseline's and the answer's sites at one T are asked for again."""
        return {}

    def sites_at(self, point_id: str | None, tokens: int) -> PointSites | None:
        """A point's eager ops at T by site (ops.point_sites); None where it has no eager record with ops."""
        key = (point_id, tokens)
        if point_id is None or key not in self._eager_ops:
            return None
        if key not in self._sites:
            self._sites[key] = point_sites(self._eager_ops[key])
        return self._sites[key]

    @cached_property
    def backend(self) -> str | None:
        backends = self.frame["backend"].dropna().unique() if "backend" in self.frame else []
        return str(backends[0]) if len(backends) == 1 else self.meta.backend

    @property
    def rankable(self) -> pd.DataFrame:
        """The step records a verdict may rest on: all but simulated points with an untested correctness risk."""
        if not self.untested or self.steps.empty:
            return self.steps
        return self.steps[~self.steps["point_id"].isin(list(self.untested))]

    @property
    def family_steps(self) -> pd.DataFrame:
        """Step records of the baseline's implementation (NCCL's own, or gloo's): what the heatmap and the tuner
        read; other implementations are answer (b)."""
        if self.steps.empty or not self.baseline_family:
            return self.steps
        return self.steps[self.steps["impl"].isin(list(self.baseline_family))]

    @property
    def failed_count(self) -> int:
        return int(self.failures["failed"].sum()) if not self.failures.empty else 0

    @cached_property
    def all_failed(self) -> bool:
        return not self.steps.empty and not fr.ok_mask(self.steps).any()

    def tuner_winners(self, chosen: str | None) -> pd.DataFrame:
        """Per T, the fastest setting of the baseline's implementation, as nccl_tuner.conf's rules use it (ties go to
        the baseline, then to `chosen`, the point (a) exports: as table 1's "fastest setting")."""
        if self.steps.empty or self.baseline is None:
            return self.steps.iloc[0:0]
        prefer = [p for p in (self.baseline, chosen) if p]
        return rk.tuner_winners(self.rankable, self.baseline, self.mode, self.evidence, prefer, self.baseline_family)


def split_by_source(records: list[dict]) -> dict[str, list[dict]]:
    """A run's records per source, so measured and simulated numbers are never mixed in one table."""
    by_source: dict[str, list[dict]] = {}
    for record in records:
        by_source.setdefault(str(record.get("source")), []).append(record)
    return by_source


@dataclass(frozen=True)
class RunExtras:
    """A run folder's files beside results.jsonl and meta.json, as read (records.files)."""

    repeats: list[dict] | None = None  # baseline-repeats.jsonl: the drift every measured verdict must exceed
    plan: Plan | None = None  # plan.jsonl: what the sweep planned (None: not recorded)
    # interleaved.jsonl: the confirmation beside the baseline that alone decides a measured answer; None: the run
    # has no such file (made by a commprof before it), and its first-pass numbers decide as they did then
    interleaved: list[dict] | None = None


def analyze_run(
    run_id: str,
    records: list[dict],
    meta: RunMeta,
    options: ReportOptions,
    run_dir: str | None = None,
    extras: RunExtras = RunExtras(),
) -> list[RunAnalysis]:
    """One RunAnalysis per source present in the run."""
    repeats = extras.repeats
    by_source = split_by_source(records)
    progress = completeness(meta, records, run_dir or f"runs/{run_id}", extras.plan)
    results = []
    for source, rows in by_source.items():
        name = run_id if len(by_source) == 1 else f"{run_id} · {LEVEL_OF_SOURCE.get(source, source)}"
        again = repeats if source == "measured" else None
        confirmed = extras.interleaved if source == "measured" else None
        part = RunSource(run_id, name, source, rows)
        results.append(analyze_source(part, meta, options, progress, again, confirmed))
    return results


@dataclass(frozen=True)
class RunSource:
    """One source's records of a run, and the name its analysis goes by."""

    run_id: str  # the run folder's id
    name: str  # the run id, or "<run id> · <level>" when the run holds more than one source
    source: str  # the records' "source": "measured", "simulated", ...
    records: list[dict]  # that source's records only


def analyze_source(
    part: RunSource,
    meta: RunMeta,
    options: ReportOptions,
    progress: Completeness | None = None,
    repeats: list[dict] | None = None,
    confirmation: list[dict] | None = None,
) -> RunAnalysis:
    """The analysis of one source's records of a run (`progress`: the run's, when known; `repeats`: the
    baseline's re-measurements; `confirmation`: the interleaved confirmation's records, None: the run has none)."""
    run_id, name, source, records = part.run_id, part.name, part.source, part.records
    if LEVEL_OF_SOURCE.get(source) == SIMULATED:
        records = with_run_error(records, ModelError.from_meta(meta))
    frame = fr.records_frame(records)
    evidence = run_evidence(source, frame, meta)
    all_steps = fr.step_frame(frame)
    latest = fr.latest_point_ids(all_steps)
    steps = fr.latest_measurements(all_steps, latest)
    run = RunAnalysis(
        run_id=run_id,
        name=name,
        source=source,
        meta=meta,
        frame=frame,
        steps=steps,
        all_steps=all_steps,
        collectives=fr.collective_frame(frame),
        options=options,
        evidence=evidence,
        completeness=progress,
        failures=fr.failures(frame),
        records=records,
    )
    if steps.empty:
        return run
    run.mode, run.mode_reason = rk.headline_mode(steps)
    if repeats:
        repeated = str((repeats[0].get("point") or {}).get("point_id", repeats[0].get("point_id")))
        first = [r for r in records if r.get("kind") == "step" and r.get("point_id") == repeated]
        run.drift = baseline_drift(first, repeats, run.mode, {int(t) for t in steps["tokens"].dropna().unique()})
        if run.drift is not None and run.drift.band_pct is not None:
            evidence = run.evidence = replace(evidence, drift_pct=round(run.drift.band_pct, 2))
    if evidence.simulated and run.mode == "graph":
        run.mode_reason = (
            "graph mode as the cost model predicts it (eager minus the preset's launch overhead): whether each "
            "setting captures into a CUDA graph is not tested"
        )
    run.baseline_requested = options.baseline or BASELINE_POINT_ID
    run.baseline = rk.baseline_id(all_steps, options.baseline, latest)
    run.superseded = fr.superseded_by(latest)
    if confirmation is not None:  # the baseline's measurements there name the sweep's baseline, re-measured or not
        ids = {run.baseline, *(old for old, new in run.superseded.items() if new == run.baseline)}
        tokens = {int(t) for t in steps["tokens"].dropna().unique()}
        run.interleaved = interleaved(confirmation, run.mode, tokens, {str(i) for i in ids if i is not None})
        if run.interleaved.noise_floor_pct is not None:
            evidence = run.evidence = replace(evidence, noise_floor_pct=round(run.interleaved.noise_floor_pct, 2))
    run.speedups = rk.speedups(all_steps, run.baseline)
    run.spacing = spacing_summary(records, run.baseline, run.mode)
    run.baseline_family = rk.implementation_family(steps.loc[steps["point_id"] == run.baseline, "impl"].iloc[0])
    family = run.baseline_family
    run.untested = untested_settings(steps, meta) if evidence.simulated else {}
    current = run.speedups[run.speedups["point_id"].isin(set(latest))] if run.superseded else run.speedups
    current = current[~current["point_id"].isin(list(run.untested))] if run.untested else current
    run.fusion = ch.fusion_comparison(run.rankable, run.baseline, run.mode, evidence, rated=current)
    run.without_result = ch.implementations_without_result(steps, run.mode, family)
    run.heatmap_axes = hm.strongest_axes(run.family_steps, run.mode)
    ranks = all_steps["world_size"].dropna()
    run.ranks = int(ranks.iloc[0]) if not ranks.empty else int(meta.world_size or 0)
    run.crossovers = crossovers(records)
    return run


def with_run_error(records: list[dict], error: ModelError) -> list[dict]:
    """A simulation's records with the run's expected error (ModelError.from_meta: the calibration's held-out
    error or the prior's) as every NCCL prediction's figure, replacing a record's own (which may be an in-sample
    fit): the one place the report sets it, so every verdict, page and file quotes one number per source."""
    out = []
    for record in records:
        nccl, searched = record.get("nccl"), record.get("model_error")
        if isinstance(nccl, dict) and "expected_error_pct" in nccl:
            record = {**record, "nccl": {**nccl, "expected_error_pct": error.pct, "error_basis": error.basis}}
        if record.get("kind") == "crossover" and isinstance(searched, dict):
            # A size outside the calibrated sizes keeps the prior's error it was priced with, where larger.
            own = searched.get("baseline_pct") if searched.get("outside_calibration") else None
            pct = None if error.pct is None else max(error.pct, own) if isinstance(own, (int, float)) else error.pct
            record = {**record, "model_error": {**searched, "baseline_pct": pct}}
        out.append(record)
    return out


def untested_settings(steps: pd.DataFrame, meta: RunMeta) -> dict[str, str]:
    """Simulated points no verdict may rest on, point id -> why (evidence.not_proposable, the rule the staged search
    follows too): a known trap on the simulated interconnect, or a kernel predicted with an unknown error."""
    interconnect = interconnect_of(meta.topology.gpu_path if meta.topology else None)
    out = {}
    columns = [c for c in ("point_id", "env", "kernel_model", "source") if c in steps]
    for row in steps.drop_duplicates("point_id")[columns].to_dict("records"):
        record = {
            "source": row.get("source"),
            "kernel_model": row.get("kernel_model") if isinstance(row.get("kernel_model"), dict) else None,
            "point": {"env": row.get("env") or {}},
        }
        why = not_proposable(record, interconnect)
        if why:
            out[str(row["point_id"])] = why
    return out


def run_evidence(source: str, frame: pd.DataFrame, meta: RunMeta) -> Evidence:
    """The evidence of one source's records: measured on which backend, simulated with which calibration and
    what expected error (as `commprof simulate` recorded it in meta.json), or imported from which files."""
    level = LEVEL_OF_SOURCE.get(source, source)

    def values(column: str) -> list[str]:
        return sorted({str(v) for v in frame[column].dropna().unique()}) if column in frame else []

    if level == MEASURED:
        backends = values("backend")
        return Evidence(MEASURED, backend=backends[0] if len(backends) == 1 else meta.backend)
    if level == SIMULATED:
        calibrations = values("calibration") or ["nccl-prior"]
        return Evidence(
            SIMULATED,
            backend=values("backend")[0] if values("backend") else None,
            calibration=", ".join(calibrations),
            model_error=ModelError.from_meta(meta),
        )
    files = meta.imported_files
    return Evidence(IMPORTED if level == IMPORTED else str(level), origin=tuple(files))
