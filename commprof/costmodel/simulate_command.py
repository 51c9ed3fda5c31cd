"""`commprof simulate`: predict a sweep on a topology preset, a topology file or the user's own box (a doctor
bundle), and write the predictions as a run folder of records labelled simulated."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import click
from rich.table import Table

from commprof.costmodel.calibration_file import params_from_toml
from commprof.costmodel.command import console_for, file_run_meta
from commprof.costmodel.fitted_box import applied_to, holds, older_layout, over_plan_sizes, topology_facts, whole
from commprof.costmodel.model_error import covering_outside, expected_error, prior_error
from commprof.errors import UsageError
from commprof.evidence import ModelError
from commprof.floor.record import not_measured, preset_floor
from commprof.planner.plan import build_step_plan
from commprof.records.files import (
    META_FILE,
    RESULTS_FILE,
    append_plan,
    append_records,
    new_run_dir,
    whole_or_removed,
)
from commprof.records.run_meta import write_meta
from commprof.shipped_files import sweep_file, sweep_option_help
from commprof.textfiles import read_text


def _presets_help() -> str:
    """The presets, one line each, for `simulate --help` (\b keeps click from rewrapping them)."""
    from commprof.costmodel.topology import preset_descriptions

    lines = "\n".join(f"  {name}: {description}" for name, description in preset_descriptions())
    return f"\n\n\b\nTopology presets shipped (--topology NAME):\n{lines}" if lines else ""


@click.command(
    "simulate",
    help=(
        'Predict every point of a sweep on a topology with the cost model (records with source "simulated"). '
        "The box is a preset, a topology .toml file, or the user's own box read from a `commprof doctor --collect` "
        "bundle (--from-bundle), optionally with an NCCL_DEBUG=INFO log of it (--nccl-log)." + _presets_help()
    ),
)
@click.option(
    "--topology", "topology_name", default=None, help="A shipped preset's name (listed below) or a .toml file."
)
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
    callback=lambda ctx, param, value: Path(sweep_file(value)),
    help=sweep_option_help("The sweep file to predict"),
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
@click.option(
    "--graph-box",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A doctor bundle or run folder: the box whose generated NCCL graph candidates the sweep's "
    '`nccl_graph = ["generated"]` points run [the --from-bundle bundle].',
)
def simulate(
    topology_name: str | None,
    bundle_dir: Path | None,
    nccl_log: Path | None,
    sweep_file: Path,
    out: Path,
    calibration_file: Path | None,
    max_points: int | None,
    graph_box: Path | None,
) -> None:
    from commprof.costmodel.box_prior import one_box
    from commprof.costmodel.simulate import SimulatedRun
    from commprof.costmodel.sweep_simulation import simulate_run
    from commprof.sweep.planning.config import DEFAULT_MAX_POINTS, load_sweep

    if nccl_log is not None and bundle_dir is None and topology_name is not None:
        raise UsageError("--nccl-log needs --from-bundle DIR (the log's transports refine the bundle's pairs)")
    topology = one_box("simulate", topology_name, bundle_dir, nccl_log)
    spec = load_sweep(sweep_file, max_points=max_points or DEFAULT_MAX_POINTS)
    tp = spec.tp or topology.gpus
    # every T's plan builds on this box's TP before a run folder is made
    plans = [build_step_plan(spec.model_shape, tp, t, spec.phase, spec.dtype, spec.plan_options) for t in spec.tokens]
    calibration, refused = None, ""
    prior = topology.prior_error or prior_error(tp)
    if calibration_file is not None:
        text = read_text(calibration_file, "calibration")
        calibration = params_from_toml(text, str(calibration_file))
        calibration = replace(
            calibration, source=calibration_name(calibration_file, text), fit=older_layout(calibration.fit)
        )
        sizes = {op.bytes for plan in plans for op in plan.ops}
        calibration = applied_to(over_plan_sizes(calibration, sizes), topology_facts(topology, tp), prior)
        refused = holds(calibration)
    graphs = _graph_models(spec, graph_box or bundle_dir, "--graph-box" if graph_box else "--from-bundle")
    run_dir = new_run_dir(out, f"{spec.name}-sim-{topology.name}".replace("/", "-").replace(":", "-"))
    # An op outside the calibration's judged sizes carries the prior's error over every size (the logs' all sizes).
    outside = topology.prior_error or prior_error(tp, all_sizes=True)
    with whole_or_removed(run_dir):  # a full disk leaves nothing half-written
        priced = SimulatedRun(topology, None if refused else calibration, run_dir.name, graphs=graphs, prior=outside)
        simulation = simulate_run(spec, priced)
        if calibration is not None and not refused:  # applied whole or not at all
            refused = whole(simulation.records, calibration.source, calibration.link)
            if refused:
                simulation = simulate_run(spec, replace(priced, calibration=None))
        records = simulation.records
        used = {str(r["calibration"]) for r in records if r.get("calibration")}
        error = expected_error(
            used,
            calibration.fit if calibration and not refused else None,
            spec.tp or topology.gpus,
            topology.prior_error,
        )
        error = covering_outside(error, outside, records)  # ops outside the calibrated sizes carry the prior's error
        append_records(run_dir / RESULTS_FILE, records)
        append_plan(run_dir, simulation.plan)
        meta = file_run_meta(
            run_dir.name,
            "simulated",
            tp,
            "nccl",
            simulated=True,
            plan={"model": spec.model, "tp": tp, "phase": spec.phase, "dtype": spec.dtype, "tokens": list(spec.tokens)},
            sweep={
                "path": str(sweep_file),
                "name": spec.name,
                "content": spec.content,
                "sha256": spec.sha256,
                "report": spec.report,
            },
            topology={"simulated": True, **topology.summary()},
            floor=preset_floor(topology.name, topology.floor)
            if topology.floor
            else not_measured(
                f"topology {topology.name} has no [floor]",
                "add a [floor] table of published figures, each with its source, to the topology file",
            ),
            calibration={
                **calibration.to_dict(),
                "file": calibration.source,
                "applied": not refused,
                "why": refused or str(calibration.fit.get("applied") or ""),
            }
            if calibration
            else "nccl-prior",
            model_error=error.to_dict(),
        )
        write_meta(run_dir, meta)  # what `report` reads
    _print_simulation(records, topology, (calibration_file, refused), error)
    if topology.box is not None:
        from commprof.costmodel.box import transport_lines

        console_for().print("\n".join(transport_lines(topology.box, tp)), markup=False)
    console_for().print(f"wrote {run_dir} ({len(records)} records, source: simulated)")
    from commprof.report.command import answer_lines

    for line in answer_lines(run_dir):  # the same answer lines the sweep and `report` end with
        console_for().print(line, markup=False, highlight=False, soft_wrap=True)


def _graph_models(spec, graph_box: Path | None, flag: str = "--graph-box") -> dict:
    """NCCL_GRAPH_FILE value -> the graph each point names (generated for --graph-box, or read from its path),
    or why it cannot be simulated."""
    from commprof.costmodel.graph_sim import file_model, generated_models
    from commprof.nccl_graph.candidates import GENERATED_PREFIX
    from commprof.nccl_graph.nccl_reader import GraphFileError, read_graph_file

    values = {p.env["NCCL_GRAPH_FILE"] for p in spec.points if "NCCL_GRAPH_FILE" in p.env}
    if not values:
        return {}
    models: dict = {}
    if graph_box is not None:
        from commprof.doctor.bundle import read_bundle
        from commprof.nccl_graph.box import box_from_facts
        from commprof.nccl_graph.command import facts_of_run

        facts = facts_of_run(graph_box) if (graph_box / META_FILE).is_file() else read_bundle(graph_box, flag)
        models = generated_models(box_from_facts(facts))
    for value in sorted(values):
        if value.startswith(GENERATED_PREFIX) and value not in models:
            models[value] = (
                f"{value}: not a candidate of {graph_box} (its hop bandwidth or path types give other ones)"
                if graph_box is not None
                else f"{value}: no box to build the candidate for (pass --graph-box BUNDLE_OR_RUN)"
            )
        elif not value.startswith(GENERATED_PREFIX):
            try:
                text = read_text(value, "NCCL graph file")
            except UsageError as exc:
                models[value] = str(exc)
                continue
            try:  # a file NCCL would refuse or misread is refused before anything is simulated or written
                read_graph_file(text)
            except GraphFileError as exc:
                raise UsageError(f"NCCL_GRAPH_FILE={value}: NCCL would refuse it ({exc})") from None
            models[value] = file_model(value, text)
    return models


def calibration_name(path: Path, text: str) -> str:
    """A calibration as records and exports name it: its file name and content hash, never where it lay."""
    return f"{path.name} (sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})"


def _print_simulation(records: list[dict], topology, calibration: tuple[Path | None, str], error: ModelError) -> None:
    """The first screen of a simulation: what priced it (a calibration not applied says so, and why, first), its
    expected error, then each point's predicted step."""
    console = console_for()
    file, refused = calibration
    if file is not None and refused:
        console.print(f"CALIBRATION NOT APPLIED: {file}: {refused}.", markup=False)
    priced = file if file is not None and not refused else "NCCL uncalibrated model (nccl-prior)"
    console.print(
        f"SIMULATED on {topology.name} with {priced}: predictions, not measurements; expected error {error.band} "
        f"({error.basis}). A predicted difference smaller than that is not a result: a simulation proposes what to "
        "measure.",
        markup=False,
    )
    searched = {(r["point_id"], r["mode"]) for r in records if r["kind"] == "crossover"}
    records = [r for r in records if r["kind"] == "step"]
    tokens = sorted({r["tokens"] for r in records})
    table = Table(title=f"predicted eager step time, ms, expected error {error.band} (graph mode in the records)")
    table.add_column("point")
    table.add_column("label")
    for t in tokens:
        table.add_column(f"T={t}", justify="right")
    table.add_column("error", justify="right")
    table.add_column("note")
    rows: dict[str, dict] = {}
    bases: dict[str, str] = {}
    for r in records:
        if r["mode"] != "eager":
            continue
        nccl = r.get("nccl") or {}
        kernel = r.get("kernel_model") or {}
        # A kernel's step is predicted with the kernel's model: its error is the kernel's, as the records and page
        # say (unknown where the kernel has no published figure), never NCCL's smaller one.
        pct = kernel.get("expected_error_pct") if kernel else nccl.get("expected_error_pct")
        shown = f"±{pct:g} %" if pct is not None else ("unknown" if kernel else "?" if nccl else "")
        row = rows.setdefault(r["point_id"], {"label": r["point"]["label"], "message": r["message"] or "", "pct": pct})
        # A point's error over its T is the largest (a T with ops outside the calibrated sizes carries more).
        if "error" not in row or (pct is not None and row["pct"] is not None and pct > row["pct"]):
            row["error"], row["pct"] = shown, pct
        elif pct is None and nccl and not kernel:
            row["error"], row["pct"] = shown, None
        row[r["tokens"]] = f"{r['step_us']['median'] / 1000:.2f}" if r["status"] == "ok" else r["status"]
        if nccl.get("error_basis"):
            bases.setdefault(nccl["error_basis"], row["error"])
    for point_id, row in rows.items():
        table.add_row(point_id, row["label"], *(row.get(t, "") for t in tokens), row["error"], row["message"][:120])
    console.print(table)
    if len(bases) > 1:  # NCCL's own graph and graph files are predicted with different errors
        for basis, band in bases.items():
            console.print(f"error {band}: {basis}")
    if searched:
        console.print(f"{len(searched)} crossover searches predicted (setting x mode): `commprof report` shows them")
