"""`commprof import-nccl-tests`, `commprof calibrate`, `commprof simulate`: the I/O edges of the cost model."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

import click
from rich.console import Console
from rich.table import Table

from commprof.costmodel import calibrate as fitting
from commprof.costmodel.calibration_file import out_of_bounds, params_to_toml
from commprof.costmodel.cohorts import (
    LINE,
    CohortVerdict,
    claimed_error,
    cohort_of,
    judge,
    line_in_range,
    line_in_sample_pct,
    tag,
)
from commprof.costmodel.latency import CostParams, arch_of, arch_of_gpu_name
from commprof.costmodel.nccl_tests import gpu_name, parse_text, run_records
from commprof.costmodel.topology import link_for, load_topology
from commprof.errors import UsageError
from commprof.records import point_ids
from commprof.records.files import (
    META_FILE,
    RESULTS_FILE,
    append_records,
    new_run_dir,
    read_records,
    write_json,
)
from commprof.records.run_meta import RunMeta, launch_facts, read_meta, run_meta
from commprof.records.schema import Source
from commprof.terminal import plain_console
from commprof.textfiles import LOG_BYTES, read_text
from commprof.units import format_bytes

TARGET_PCT = 15.0  # the accuracy target of the holdout test on 8-GPU logs


def console_for(err: bool = False) -> Console:
    """The commands' console: plain text, no colour or escapes."""
    return plain_console(stderr=err)


def file_run_meta(
    run_id: str, source: Source, world_size: int | None, backend: str | None, nccl: str | None = None, **sections
) -> RunMeta:
    """meta.json for a run this module or `simulate` writes from files (no GPU, no process group); `nccl`: the
    NCCL version the files name."""
    facts = launch_facts(["commprof", *sys.argv[1:]], measuring=False)
    facts["versions"]["nccl"] = nccl
    return run_meta(**{**facts, **sections}, run_id=run_id, source=source, world_size=world_size, backend=backend)


# ---------------------------------------------------------------------------------------------- import


@click.command("import-nccl-tests")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder that receives the new run folder.",
)
def import_nccl_tests(logs: tuple[Path, ...], out: Path) -> None:
    """Turn nccl-tests (*_perf) logs, text or -J JSON, into one run folder of "nccl-tests" records."""
    parsed = []
    for log in logs:
        text = read_text(log, "nccl-tests log", LOG_BYTES, errors="replace")
        parsed.append((log, text, parse_text(text, str(log))))
    err = console_for(err=True)
    for _, _, log in parsed:
        for warning in log.warnings:
            err.print(f"warning: {warning}")

    run_dir = new_run_dir(out, "nccl-tests")
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    records, imported, point = [], [], 0
    for path, text, log in parsed:
        records.extend(run_records(log, run_dir.name, point, now))
        imported.append(
            {
                "file": str(path),
                "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "warnings": log.warnings,
                "nccl_versions": log.nccl_versions,
                "gpus": log.gpu_names,
                "runs": [dict(run.summary(), point_id=point_ids.point_id(point + i)) for i, run in enumerate(log.runs)],
            }
        )
        point += len(log.runs)
    append_records(run_dir / RESULTS_FILE, records)
    ranks = {run["ranks"] for item in imported for run in item["runs"]}
    # What the logs state about the software and the GPUs (None / empty where they do not say).
    versions = sorted({v for _, _, log in parsed for v in log.nccl_versions})
    # One entry per GPU, as a sweep's meta.json has: the first run that lists its devices.
    devices = next((run.devices for _, _, log in parsed for run in log.runs if run.devices), [])
    meta = file_run_meta(
        run_dir.name,
        "nccl-tests",
        ranks.pop() if len(ranks) == 1 else None,
        None,
        nccl=", ".join(versions) or None,
        imported=imported,
        gpus=[{"name": gpu_name(d)} for d in devices],
    )
    write_json(run_dir / META_FILE, meta)

    table = Table(title="imported nccl-tests runs (source: nccl-tests)")
    for column in ("point", "file:line", "collective", "ranks", "rows", "sizes", "graph", "avg busbw GB/s"):
        table.add_column(column)
    for item in imported:
        log = next(p for _, _, p in parsed if p.path == item["file"])
        for run, summary in zip(log.runs, item["runs"]):
            sizes = f"{format_bytes(run.rows[0].bytes)}-{format_bytes(run.rows[-1].bytes)}"
            table.add_row(
                summary["point_id"],
                f"{Path(item['file']).name}:{run.line}",
                run.collective,
                str(run.ranks or "?"),
                str(len(run.rows)),
                sizes,
                "yes" if run.graph else "no",
                "" if run.avg_busbw_gbps is None else f"{run.avg_busbw_gbps:g}",
            )
    console = console_for()
    console.print(table)
    console.print(f"wrote {run_dir} ({len(records)} records)")


# ------------------------------------------------------------------------------------------- calibrate


def _load_runs(run_dirs: tuple[Path, ...]) -> list[tuple[list[dict], dict]]:
    """Every run's records and meta.json (read_records refuses a time no measurement can have, naming file and line;
    a run without a readable meta.json has {})."""
    runs = []
    for run_dir in run_dirs:
        results = run_dir / RESULTS_FILE
        if not results.is_file():
            raise UsageError(f"{run_dir}: not a commprof run folder (no {RESULTS_FILE})")
        try:
            meta = read_meta(run_dir)
        except UsageError:
            meta = {}
        runs.append((read_records(results), meta))
    return runs


def _cohort_samples(runs, constraints) -> tuple[list, list[str]]:
    """The samples of every run, each tagged with its cohort (box, rank count, NCCL version)."""
    samples, notes = [], []
    for records, meta in runs:
        by_cohort: dict[str, list[dict]] = {}
        for record in records:
            by_cohort.setdefault(cohort_of(record, meta), []).append(record)
        for cohort, members in by_cohort.items():
            found, skipped = fitting.samples_from_records(members, constraints)
            samples += tag(found, cohort)
            notes += [n for n in skipped if n not in notes]
    return samples, notes


def _gpu_generation(run_dirs: tuple[Path, ...], topology) -> tuple[str, str | None]:
    """The GPU generation for NCCL's prior: the one the runs' GPUs have, else the topology's; and a note."""
    found: dict[str, set[str]] = {}
    for run_dir in run_dirs:
        try:
            gpus = read_meta(run_dir).get("gpus") or []
        except UsageError:
            continue
        for gpu in gpus if isinstance(gpus, list) else []:
            name = str(gpu.get("name", "")) if isinstance(gpu, dict) else str(gpu)
            capability = gpu.get("compute_capability") if isinstance(gpu, dict) else None
            try:
                arch = arch_of(float(capability)) if capability else arch_of_gpu_name(name)
            except ValueError:
                arch = arch_of_gpu_name(name)
            if arch:
                found.setdefault(arch, set()).add(name)
    if len(found) > 1:
        kinds = "; ".join(f"{arch}: {', '.join(sorted(names))}" for arch, names in sorted(found.items()))
        raise UsageError(f"the runs hold GPUs of several generations ({kinds}): calibrate one generation at a time")
    if not found:
        return topology.arch, None
    arch, names = next(iter(found.items()))
    if arch == topology.arch:
        return arch, None
    return arch, (
        f"prior: the {arch} generation of the runs' GPUs ({', '.join(sorted(names))}), "
        f"not topology {topology.name}'s {topology.arch}"
    )


@click.command("calibrate")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--topology",
    "topology_name",
    default="pcie-dual-socket-shm",
    show_default=True,
    help="Preset name or .toml file: the box the records come from (NCCL's prior, its transport).",
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
    run_dirs: tuple[Path, ...], topology_name: str, out: Path | None, holdout: bool, cohort: str | None
) -> None:
    """Fit the cost model (overhead, per-hop latency, per-channel bandwidth) to measured or imported records."""
    if out is None and not holdout:
        raise UsageError("calibrate needs --out calibration.toml (or --holdout for the accuracy test)")
    topology = load_topology(topology_name)
    link = link_for(topology, {})
    arch, arch_note = _gpu_generation(run_dirs, topology)
    prior = topology.prior(link, arch)
    samples, notes = _cohort_samples(_load_runs(run_dirs), fitting.nccl_constraints(topology, link))
    console = console_for()
    for note in notes + ([arch_note] if arch_note else []):
        console.print(f"note: {note}")
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
        _write_calibration(console, out, _CohortFit(chosen, prior, verdict, run_dirs, topology.name))


def _one_cohort(verdicts: list, chosen: str | None):
    """The cohort to write: the only one, or the one --cohort names (its number or its name)."""
    listing = "; ".join(
        f"{i}) {v.cohort}: held out, cost model {v.costmodel_held_pct}, line {v.line_held_pct} %"
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


def _write_calibration(console: Console, out: Path, cohort: _CohortFit) -> None:
    samples, prior, verdict, run_dirs = cohort.samples, cohort.prior, cohort.verdict, cohort.run_dirs
    params = fitting.fit(samples, prior)
    wild = out_of_bounds(params)
    if wild:
        raise UsageError(
            f"the fit landed outside what any interconnect does ({wild}): these records are not NCCL latencies "
            "of one transport; nothing written"
        )
    _print_bands(console, params, prior, samples)
    in_sample = median(fitting.abs_pct_errors(params, samples))
    if verdict.model == LINE:
        line = line_in_range(samples)
        params = replace(params, line=(line.intercept_us, line.us_per_byte))
        in_sample = line_in_sample_pct(line, samples)
        held, basis = (
            verdict.line_held_pct,
            "held-out sizes in 8 KB-1 MB, fitted on every other size (the cohort's runs pooled)",
        )
        console.print(f"note: {verdict.note}", markup=False)
    elif verdict.costmodel_held_pct is not None:
        held = verdict.costmodel_held_pct
        basis = "held-out sizes in 8 KB-1 MB, fitted on every other size (the cohort's runs pooled)"
        console.print(f"note: {verdict.note}", markup=False)
    else:
        held, basis = fitting.held_out_error(samples, prior)
    claimed = claimed_error(held, in_sample)
    if claimed is not None:
        basis = f"{basis}; held out {held:g} %, in-sample {in_sample:.1f} %: the larger"
    console.print(
        "expected error where not fitted (what a simulation with this file is judged by): "
        + (f"{claimed:g} % ({basis})" if claimed is not None else f"unknown: {basis}"),
        markup=False,
    )
    ranks = sorted({s.ranks for s in samples})
    params = replace(
        params,
        source=f"fit of {', '.join(map(str, run_dirs))}",
        fit={
            **params.fit,
            "median_abs_pct": round(in_sample, 2),
            **({"holdout_median_pct": claimed} if claimed is not None else {}),
            "holdout_basis": basis,
            "model": verdict.model,
            "model_note": verdict.note,
            "cohort": verdict.cohort,
            **({"ranks": ranks[0]} if len(ranks) == 1 else {}),
            **({"costmodel_holdout_median_pct": verdict.costmodel_held_pct} if verdict.line_held_pct else {}),
            **({"line_holdout_median_pct": verdict.line_held_pct} if verdict.line_held_pct else {}),
            **(
                {"line_intercept_us": params.line[0], "line_us_per_byte": params.line[1]}
                if params.line is not None
                else {}
            ),
            "topology": cohort.topology,
            "link": prior.link,
            "runs": [str(d) for d in run_dirs],
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    )
    header = (
        f"commprof cost-model calibration (docs/cost-model.md)\n"
        f"fitted on {len(samples)} latencies from {', '.join(map(str, run_dirs))}, cohort {verdict.cohort}\n"
        f"model: {verdict.model} ({verdict.note})"
    )
    try:
        out.write_text(params_to_toml(params, header), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
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
