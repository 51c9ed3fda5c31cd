"""`commprof calibrate`: the I/O edge of the fit (commprof.costmodel.calibrate, cohorts, calibration_prior)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from commprof.costmodel import calibrate as fitting
from commprof.costmodel.calibration_file import out_of_bounds, params_to_toml
from commprof.costmodel.calibration_prior import choose_prior_topology, records_p2p_env
from commprof.costmodel.cohorts import COSTMODEL, LINE, CohortVerdict, judge, record_cohorts, tag
from commprof.costmodel.command import console_for
from commprof.costmodel.fitted_box import BoxFacts, records_facts
from commprof.costmodel.latency import CostParams, arch_of, arch_of_gpu_name
from commprof.costmodel.topology import link_for, load_topology
from commprof.errors import UsageError
from commprof.records.files import RESULTS_FILE, read_records
from commprof.records.folder import write_atomic
from commprof.records.run_meta import RunMeta, read_meta
from commprof.units import format_bytes

TARGET_PCT = 15.0  # the accuracy target of the holdout test on 8-GPU logs


def _load_runs(run_dirs: tuple[Path, ...]) -> list[tuple[list[dict], RunMeta]]:
    """Every run's records and meta.json (read_records refuses a time no measurement can have, naming file and line;
    a run without meta.json has an empty one, one whose meta.json cannot be used is refused as the report refuses
    it)."""
    runs = []
    for run_dir in run_dirs:
        results = run_dir / RESULTS_FILE
        if not results.is_file():
            raise UsageError(f"{run_dir}: not a commprof run folder (no {RESULTS_FILE})")
        runs.append((read_records(results), read_meta(run_dir)))
    return runs


def _cohort_samples(runs, constraints) -> tuple[list, list[str]]:
    """The samples of every run, each tagged with its cohort (box, rank count, NCCL version)."""
    samples, notes = [], []
    for records, meta in runs:
        by_cohort: dict[str, list[dict]] = {}
        for record, cohort in zip(records, record_cohorts(records, meta)):
            by_cohort.setdefault(cohort, []).append(record)
        for cohort, members in by_cohort.items():
            found, skipped = fitting.samples_from_records(members, constraints)
            samples += tag(found, cohort)
            notes += [n for n in skipped if n not in notes]
    return samples, notes


def _gpu_generation(metas: list[RunMeta]) -> tuple[str | None, set[str]]:
    """The GPU generation the runs' GPUs have (None: not stated) and their names; several are refused."""
    found: dict[str, set[str]] = {}
    for meta in metas:
        for gpu in meta.gpus or []:
            name, capability = gpu.name or "", gpu.compute_capability
            try:
                arch = arch_of(float(capability)) if capability else arch_of_gpu_name(name)
            except ValueError:
                arch = arch_of_gpu_name(name)
            if arch:
                found.setdefault(arch, set()).add(name)
    if len(found) > 1:
        kinds = "; ".join(f"{arch} {', '.join(sorted(names))}" for arch, names in sorted(found.items()))
        raise UsageError(f"the runs hold GPUs of several generations ({kinds}): calibrate one generation at a time")
    return next(iter(found.items()), (None, set()))


def _prior_box(runs, topology_name: str | None):
    """The topology (the one named, else the one the records single out), the GPU generation, the records' P2P
    settings and notes."""
    arch, names = _gpu_generation([meta for _, meta in runs])
    env = records_p2p_env([r for records, _ in runs for r in records])
    ranks = {r.get("world_size") for records, _ in runs for r in records if isinstance(r.get("world_size"), int)}
    if topology_name is None:
        topology, note = choose_prior_topology(names, arch, max(ranks) if ranks else None, env)
        notes = [note]
    else:
        topology, notes = load_topology(topology_name), []
    if arch is not None and arch != topology.arch:
        notes.append(
            f"prior: the {arch} generation of the runs' GPUs ({', '.join(sorted(names))}), "
            f"not topology {topology.name}'s {topology.arch}"
        )
    return topology, arch or topology.arch, env, notes


@click.command("calibrate")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--topology",
    "topology_name",
    default=None,
    help="Preset name or .toml file: the box the records come from (NCCL's prior, its transport). Default: the "
    "preset the records' GPUs, rank count and P2P settings single out.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the fitted parameters here (calibration.toml).",
)
@click.option(
    "--holdout", is_flag=True, help="Accuracy test: per log, fit every other size in 8 KB-1 MB and predict the rest."
)
@click.option(
    "--cohort",
    default=None,
    help="With runs of several cohorts (box, rank count, NCCL version): the one to write, by number or name.",
)
def calibrate(
    run_dirs: tuple[Path, ...], topology_name: str | None, out: Path | None, holdout: bool, cohort: str | None
) -> None:
    """Fit the cost model (overhead, per-hop latency, per-channel bandwidth) to measured or imported records."""
    if out is None and not holdout:
        raise UsageError("calibrate needs --out calibration.toml (or --holdout for the accuracy test)")
    runs = _load_runs(run_dirs)
    topology, arch, env, box_notes = _prior_box(runs, topology_name)
    link = link_for(topology, env)
    prior = topology.prior(link, arch)
    samples, notes = _cohort_samples(runs, fitting.nccl_constraints(topology, link))
    console = console_for()
    for note in notes + box_notes:
        console.print(f"note: {note}", markup=False)
    if not samples and any("rank count unknown" in note for note in notes):
        raise UsageError(
            "no usable records: the records' rank count is unknown (the log prints no '# nThread ... nGpus' or "
            "'Using devices' lines), and NCCL's cost depends on it: re-import with "
            "`commprof import-nccl-tests LOG --ranks N`"
        )
    if not samples:
        raise UsageError(
            "no usable records: calibrate needs ok all-reduce / all-gather latencies of plain NCCL "
            f"over {link} (nccl-tests imports or eager sweep records)"
        )
    console.print(
        f"prior: NCCL's model of {topology.name} over {link} ({prior.channels} channels x "
        f"{prior.channel_bw_gbps:g} GB/s, {prior.arch})",
    )
    verdicts = judge(samples, prior)
    if holdout:
        _print_holdout(console, verdicts)
    if out is not None:
        verdict = _one_cohort(verdicts, cohort)
        chosen = [s for s in samples if s.cohort == verdict.cohort]
        metas = [meta for records, meta in runs if verdict.cohort in record_cohorts(records, meta)]
        ranks = sorted({s.ranks for s in chosen})
        version = verdict.cohort.rsplit("NCCL ", 1)[-1]
        box = records_facts(metas, ranks[0] if len(ranks) == 1 else None, prior.link, version)
        _write_calibration(console, out, _CohortFit(chosen, prior, verdict, run_dirs, topology.name, box))


def _one_cohort(verdicts: list, chosen: str | None):
    """The cohort to write: the only one, or the one --cohort names (its number or its name)."""
    listing = "; ".join(
        f"{i}) {v.cohort}: worst held out, cost model {v.held_pct(COSTMODEL)}, line {v.held_pct(LINE)} %"
        for i, v in enumerate(verdicts, 1)
    )
    if chosen is not None:
        for i, v in enumerate(verdicts, 1):
            if chosen in (str(i), v.cohort):
                return v
        raise UsageError(f"--cohort {chosen!r}: not one of these runs' cohorts ({listing})")
    if len(verdicts) > 1:
        raise UsageError(
            f"these runs hold {len(verdicts)} cohorts (box, rank count, NCCL version), and one calibration with one "
            f"expected error cannot describe them all: {listing}. Write one per cohort with --cohort N"
        )
    return verdicts[0]


@dataclass(frozen=True)
class _CohortFit:
    """One cohort's records to fit into a calibration file, and where they came from."""

    samples: list[fitting.Sample]
    """The cohort's latencies."""
    prior: CostParams
    """NCCL's model of the box over the records' link: the fit's start and NCCL's choice."""
    verdict: CohortVerdict
    """The cohort's held-out judgement: which model to write and its error."""
    run_dirs: tuple[Path, ...]
    """The run folders the records were read from."""
    topology: str
    """The topology's name."""
    box: BoxFacts
    """The box the records were measured on."""


def _write_calibration(console: Console, out: Path, cohort: _CohortFit) -> None:
    samples, prior, verdict, run_dirs = cohort.samples, cohort.prior, cohort.verdict, cohort.run_dirs
    chosen = verdict.chosen
    params = chosen.params if chosen is not None else fitting.fit(samples, prior)
    wild = out_of_bounds(params)
    if wild:
        raise UsageError(
            f"the fit landed outside what any interconnect does ({wild}): these records are not NCCL latencies "
            "of one transport; nothing written"
        )
    _print_bands(console, params, prior, samples)
    console.print(f"note: {verdict.note}", markup=False)
    if chosen is not None:
        sizes = ", ".join(format_bytes(b) for b in verdict.fit_sizes)
        written = (
            f"the {'line' if verdict.model == LINE else 'cost model'} that won the held-out test, as judged: fitted on "
            f"{sizes}, judged on the other sizes in 8 KB-1 MB; not judged outside 8 KB-1 MB"
        )
        basis = (
            "largest absolute error at any size of each band of decode / verify sizes "
            f"({'; '.join(f'{band} {pct:g} %' for band, pct in chosen.bands)}), fitted or held out: the largest band"
        )
        error = {"expected_error_pct": chosen.expected_pct, "band_names": [b for b, _ in chosen.bands]}
        error["band_error_pct"] = [pct for _, pct in chosen.bands]
    else:
        written, basis, error = f"the cost model fitted on all {len(samples)} latencies, not judged", verdict.note, {}
    console.print(f"written: {written}", markup=False)
    console.print(f"fitted on: {cohort.box.describe()}", markup=False)
    console.print(
        "expected error (what a simulation with this file is judged by): "
        + (f"{chosen.expected_pct:g} % ({basis})" if chosen is not None else f"unknown: {basis}"),
        markup=False,
    )
    ranks = sorted({s.ranks for s in samples})
    params = replace(
        params,
        source=f"fit of {', '.join(map(str, run_dirs))}",
        fit={
            **params.fit,
            "written": written,
            **error,
            "error_basis": basis,
            "model": verdict.model,
            "model_note": verdict.note,
            "cohort": verdict.cohort,
            **({"ranks": ranks[0]} if len(ranks) == 1 else {}),
            **({"fitted_sizes": list(verdict.fit_sizes), "held_out_sizes": list(verdict.held_sizes)} if chosen else {}),
            **{f"{c.model}_held_out_worst_pct": c.held_pct for c in verdict.candidates},
            **(
                {"line_intercept_us": params.line[0], "line_us_per_byte": params.line[1]}
                if params.line is not None
                else {}
            ),
            "topology": cohort.topology,
            "link": prior.link,
            "box": cohort.box.to_dict(),
            "runs": [str(d) for d in run_dirs],
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    )
    header = (
        f"commprof cost-model calibration (docs/cost-model.md)\n"
        f"cohort {verdict.cohort}, from {', '.join(map(str, run_dirs))}\n"
        f"written: {written}\n"
        f"model: {verdict.model} ({verdict.note})"
    )
    write_atomic(out, params_to_toml(params, header).encode("utf-8"))  # whole or not at all, never through a link
    console.print(
        f"fitted: overhead {params.overhead_us:.2f} us, per-hop "
        + ", ".join(f"{p} {v:.2f}" for p, v in params.hop_us.items())
        + f" us, {params.channel_bw_gbps:.2f} GB/s per channel"
        + (f"; line {params.line[0]:.2f} us + {params.line[1] * 1e3:.4f} us/KB" if params.line else "")
        + f"; wrote {out}",
    )


def _print_bands(console: Console, params, prior, samples) -> None:
    fitted = {row["band"]: row for row in fitting.band_errors(params, samples)}
    table = Table(title="fit error per size band (median / max absolute %)")
    for column in ("size band", "n", "fitted", "NCCL prior"):
        table.add_column(column, justify="right")
    for row in fitting.band_errors(prior, samples):
        mine = fitted[row["band"]]
        table.add_row(
            row["band"],
            str(row["n"]),
            f"{mine['median_pct']:.1f} / {mine['max_pct']:.1f}",
            f"{row['median_pct']:.1f} / {row['max_pct']:.1f}",
        )
    console.print(table)


def _print_holdout(console: Console, verdicts: list) -> None:
    results = [r for v in verdicts for r in v.runs]
    if not results:
        raise UsageError("--holdout needs a log with at least 4 sizes between 8 KB and 1 MB")
    table = Table(title="holdout: fit on every other size in 8 KB-1 MB, median absolute % error")
    for column in (
        "log run",
        "ranks",
        "fit on",
        "held-out 8K-1M",
        "line, same split",
        "all unfitted sizes",
        "NCCL prior (all)",
        f"target <= {TARGET_PCT:g} %",
    ):
        table.add_column(column)
    for r in results:
        verdict = ("pass" if r.held_median_pct <= TARGET_PCT else "FAIL") if r.ranks == 8 else "(8-GPU only)"
        table.add_row(
            r.group,
            str(r.ranks),
            ", ".join(format_bytes(b) for b in r.fit_sizes),
            f"{r.held_median_pct:.1f}",
            f"{r.line_held_median_pct:.1f}",
            f"{r.rest_median_pct:.1f}",
            f"{r.prior_median_pct:.1f}",
            verdict,
        )
    console.print(table)
    for v in verdicts:
        console.print(f"cohort {v.cohort}: {v.note}", markup=False)
