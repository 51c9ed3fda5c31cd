"""`commprof import-nccl-tests`, `commprof calibrate`, `commprof simulate`: the I/O edges of the cost model."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

import click
from rich.console import Console
from rich.table import Table

from commprof.costmodel import calibrate as fitting
from commprof.costmodel.latency import arch_of, arch_of_gpu_name, out_of_bounds, params_from_toml, params_to_toml
from commprof.costmodel.model_error import expected_error
from commprof.costmodel.nccl_tests import gpu_name, parse_text, run_records
from commprof.costmodel.topology import link_for, load_topology
from commprof.errors import UsageError
from commprof.evidence import ModelError
from commprof.floor.record import not_measured, preset_floor
from commprof.records import point_ids
from commprof.records.files import (
    META_FILE,
    RESULTS_FILE,
    append_records,
    new_run_dir,
    read_meta,
    read_records,
    write_json,
)
from commprof.terminal import plain_console
from commprof.textfiles import LOG_BYTES, read_text
from commprof.units import format_bytes

TARGET_PCT = 15.0  # the accuracy target of the holdout test on 8-GPU logs


def _console(err: bool = False) -> Console:
    return plain_console(stderr=err)


def _base_meta(run_id: str, world_size: int | None, backend: str | None) -> dict:
    from commprof.runmeta import package_version

    return {
        "run_id": run_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": ["commprof", *sys.argv[1:]],
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "world_size": world_size,
        "nnodes": 1,
        "backend": backend,
        "versions": {
            "python": platform.python_version(),
            "torch": None,
            "cuda": None,
            "nccl": None,
            "driver": None,
            "flashinfer": None,
            "commprof": package_version("commprof"),
        },
        "gpus": [],
        "env": {},
    }


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
    err = _console(err=True)
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
    meta = _base_meta(run_dir.name, ranks.pop() if len(ranks) == 1 else None, None)
    # What the logs state about the software and the GPUs (None / empty where they do not say).
    versions = sorted({v for _, _, log in parsed for v in log.nccl_versions})
    meta["versions"]["nccl"] = ", ".join(versions) or None
    # One entry per GPU, as a sweep's meta.json has: the first run that lists its devices.
    devices = next((run.devices for _, _, log in parsed for run in log.runs if run.devices), [])
    meta.update({"source": "nccl-tests", "imported": imported, "gpus": [{"name": gpu_name(d)} for d in devices]})
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
    console = _console()
    console.print(table)
    console.print(f"wrote {run_dir} ({len(records)} records)")


# ------------------------------------------------------------------------------------------- calibrate


def _load_runs(run_dirs: tuple[Path, ...]) -> list[dict]:
    """Every record of the runs (read_records refuses a time no measurement can have, naming file and line)."""
    records = []
    for run_dir in run_dirs:
        results = run_dir / RESULTS_FILE
        if not results.is_file():
            raise UsageError(f"{run_dir}: not a commprof run folder (no {RESULTS_FILE})")
        records += read_records(results)
    return records


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
def calibrate(run_dirs: tuple[Path, ...], topology_name: str, out: Path | None, holdout: bool) -> None:
    """Fit the cost model (overhead, per-hop latency, per-channel bandwidth) to measured or imported records."""
    if out is None and not holdout:
        raise UsageError("calibrate needs --out calibration.toml (or --holdout for the accuracy test)")
    topology = load_topology(topology_name)
    link = link_for(topology, {})
    arch, arch_note = _gpu_generation(run_dirs, topology)
    prior = topology.prior(link, arch)
    records = _load_runs(run_dirs)
    samples, notes = fitting.samples_from_records(records, fitting.nccl_constraints(topology, link))
    console = _console()
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
    if holdout:
        _print_holdout(console, fitting.holdout(samples, prior))
    if out is not None:
        params = fitting.fit(samples, prior)
        wild = out_of_bounds(params)
        if wild:
            raise UsageError(
                f"the fit landed outside what any interconnect does ({wild}): these records are not NCCL latencies "
                "of one transport; nothing written"
            )
        _print_bands(console, params, prior, samples)
        errors = fitting.abs_pct_errors(params, samples)
        held_pct, held_basis = fitting.held_out_error(samples, prior)
        console.print(
            "expected error where not fitted (what a simulation with this file is judged by): "
            + (f"{held_pct:g} % ({held_basis})" if held_pct is not None else f"unknown: {held_basis}"),
            markup=False,
        )
        params = replace(
            params,
            source=f"fit of {', '.join(map(str, run_dirs))}",
            fit={
                **params.fit,
                "median_abs_pct": round(median(errors), 2),
                **({"holdout_median_pct": held_pct} if held_pct is not None else {}),
                "holdout_basis": held_basis,
                "topology": topology.name,
                "link": link,
                "runs": [str(d) for d in run_dirs],
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            },
        )
        header = (
            f"commprof cost-model calibration (docs/cost-model.md)\n"
            f"fitted on {len(samples)} latencies from {', '.join(map(str, run_dirs))}\n"
            f"prior: NCCL's tuning model of topology {topology.name} over {link}"
        )
        try:
            out.write_text(params_to_toml(params, header), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
        console.print(
            f"fitted: overhead {params.overhead_us:.2f} us, per-hop "
            + ", ".join(f"{p} {v:.2f}" for p, v in params.hop_us.items())
            + f" us, {params.channel_bw_gbps:.2f} GB/s per channel; wrote {out}",
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


def _print_holdout(console: Console, results: list) -> None:
    if not results:
        raise UsageError("--holdout needs a log with at least 4 sizes between 8 KB and 1 MB")
    table = Table(title="holdout: fit on every other size in 8 KB-1 MB, median absolute % error")
    for column in (
        "log run",
        "ranks",
        "fit on",
        "held-out 8K-1M",
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
            f"{r.rest_median_pct:.1f}",
            f"{r.prior_median_pct:.1f}",
            verdict,
        )
    console.print(table)


# -------------------------------------------------------------------------------------------- simulate


def _presets_help() -> str:
    """The presets, one line each, for `simulate --help` (\b keeps click from rewrapping them)."""
    from commprof.costmodel.topology import preset_descriptions

    lines = "\n".join(f"  {name}: {description}" for name, description in preset_descriptions())
    return f"\n\n\b\nPresets (sweeps/topologies/):\n{lines}" if lines else ""


@click.command(
    "simulate",
    help=(
        'Predict every point of a sweep on a topology with the cost model (records with source "simulated"). '
        "The box is a preset, a topology .toml file, or the user's own box read from a `commprof doctor --collect` "
        "bundle (--from-bundle), optionally with an NCCL_DEBUG=INFO log of it (--nccl-log)." + _presets_help()
    ),
)
@click.option("--topology", "topology_name", default=None, help="Preset name (sweeps/topologies/) or .toml file.")
@click.option(
    "--from-bundle",
    "bundle_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A `commprof doctor --collect` bundle of the box: its GPUs, pairs, sockets and links make the topology.",
)
@click.option(
    "--nccl-log",
    "nccl_log",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="An NCCL_DEBUG=INFO log of the same box (with --from-bundle): the transports NCCL chose override the rule.",
)
@click.option(
    "--sweep",
    "sweep_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The sweep file to predict.",
)
@click.option(
    "--out",
    "out",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder that receives the new run folder.",
)
@click.option(
    "--calibration",
    "calibration_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="calibration.toml from `commprof calibrate` (default: NCCL's uncalibrated model).",
)
@click.option(
    "--max-points",
    type=click.IntRange(min=1),
    default=None,
    help="Allow a sweep of up to this many points (default: refuse one above 1000).",
)
def simulate(
    topology_name: str | None,
    bundle_dir: Path | None,
    nccl_log: Path | None,
    sweep_file: Path,
    out: Path,
    calibration_file: Path | None,
    max_points: int | None,
) -> None:
    from commprof.costmodel.box_prior import load_bundle_topology
    from commprof.costmodel.sweep_simulation import simulate_sweep
    from commprof.sweep.config import DEFAULT_MAX_POINTS, load_sweep

    if (topology_name is None) == (bundle_dir is None):
        raise UsageError("simulate needs one of --topology PRESET_OR_FILE and --from-bundle DIR")
    if nccl_log is not None and bundle_dir is None:
        raise UsageError("--nccl-log needs --from-bundle DIR (the log's transports refine the bundle's pairs)")
    if bundle_dir is not None:
        topology = load_bundle_topology(bundle_dir, nccl_log)
    else:
        topology = load_topology(topology_name)
    spec = load_sweep(sweep_file, max_points=max_points or DEFAULT_MAX_POINTS)
    calibration = None
    if calibration_file is not None:
        text = read_text(calibration_file, "calibration")
        calibration = params_from_toml(text, str(calibration_file))
    run_dir = new_run_dir(out, f"{spec.name}-sim-{topology.name}".replace("/", "-").replace(":", "-"))
    records = simulate_sweep(spec, topology, calibration, run_dir.name)
    used = {str(r["calibration"]) for r in records if r.get("calibration")}
    error = expected_error(used, calibration.fit if calibration else None, spec.tp or topology.gpus)
    if topology.prior_error is not None and used == {"nccl-prior"}:
        error = topology.prior_error
    append_records(run_dir / RESULTS_FILE, records)
    tp = spec.tp or topology.gpus
    meta = _base_meta(run_dir.name, tp, "nccl")
    meta.update(
        {
            "source": "simulated",
            "simulated": True,
            "plan": {
                "model": spec.model,
                "tp": tp,
                "phase": spec.phase,
                "dtype": spec.dtype,
                "tokens": list(spec.tokens),
            },
            "sweep": {
                "path": str(sweep_file),
                "name": spec.name,
                "content": spec.content,
                "sha256": spec.sha256,
                "report": spec.report,
            },
            "topology": {"simulated": True, **topology.summary()},
            "floor": preset_floor(topology.name, topology.floor)
            if topology.floor
            else not_measured(
                f"topology {topology.name} has no [floor]",
                "add a [floor] table of published figures, each with its source, to the topology file",
            ),
            "calibration": {"file": str(calibration_file), **calibration.to_dict()} if calibration else "nccl-prior",
            "model_error": error.to_dict(),
        }
    )
    write_json(run_dir / META_FILE, meta)
    _print_simulation(records, topology, calibration_file, error)
    _console().print(f"wrote {run_dir} ({len(records)} records, source: simulated)")


def _print_simulation(records: list[dict], topology, calibration_file: Path | None, error: ModelError) -> None:
    console = _console()
    console.print(
        f"SIMULATED on {topology.name} with "
        f"{calibration_file or 'NCCL uncalibrated model (nccl-prior)'}: predictions, not measurements; expected "
        f"error {error.band} ({error.basis}). A predicted difference smaller than that is not a result.",
    )
    searched = {(r["point_id"], r["mode"]) for r in records if r["kind"] == "crossover"}
    records = [r for r in records if r["kind"] == "step"]
    tokens = sorted({r["tokens"] for r in records})
    table = Table(title=f"predicted eager step time, ms, expected error {error.band} (graph mode in the records)")
    table.add_column("point")
    table.add_column("label")
    for t in tokens:
        table.add_column(f"T={t}", justify="right")
    table.add_column("note")
    rows: dict[str, dict] = {}
    for r in records:
        if r["mode"] != "eager":
            continue
        row = rows.setdefault(r["point_id"], {"label": r["point"]["label"], "message": r["message"] or ""})
        row[r["tokens"]] = f"{r['step_us']['median'] / 1000:.2f}" if r["status"] == "ok" else r["status"]
    for point_id, row in rows.items():
        table.add_row(point_id, row["label"], *(row.get(t, "") for t in tokens), row["message"][:120])
    console.print(table)
    if searched:
        console.print(f"{len(searched)} crossover searches predicted (setting x mode): `commprof report` shows them")
