"""`commprof explain`: read the box (a preset, a topology file or a doctor bundle, optionally an NCCL log) and what
it measured, and print which condition explains the observation, ranked (commprof.explain.ranking)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import click

from commprof.errors import UsageError
from commprof.planner.speculative import PHASES
from commprof.terminal import echo

OBSERVED_HELP = (
    "What was observed (one or more): --observed-op-us BYTES=US, --observed-step-ms T=MS (with --model), "
    "--nccl-tests LOG, --run DIR."
)


@click.command(
    "explain",
    help="Turn an observed all-reduce time into the box condition that causes it, and the fix: each condition "
    "(P2P off, ACS redirect, IOMMU translation, a downtrained link, few channels, a forced protocol, a late rank) "
    "is priced with the cost model on the box and ranked by how well it explains the observation, within the "
    "model's error. " + OBSERVED_HELP,
)
@click.option("--topology", "topology_name", default=None, help="The box: a topology preset's name or a .toml file.")
@click.option(
    "--from-bundle",
    "bundle_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The box: a `commprof doctor --collect` bundle (its checks confirm or rule out each condition).",
)
@click.option(
    "--nccl-log",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="An NCCL_DEBUG=INFO log of the box: its transports, channels and settings confirm or rule out conditions.",
)
@click.option(
    "--observed-op-us",
    "op_us",
    multiple=True,
    help="BYTES=US: one all-reduce of BYTES (per rank) over all the box's GPUs took US microseconds (repeatable).",
)
@click.option(
    "--observed-step-ms",
    "step_ms",
    multiple=True,
    help="T=MS: the engine's communication in one step of T tokens took MS ms (repeatable; the step's collectives "
    "come from --model's step plan).",
)
@click.option("--model", default="kimi-k2.5", show_default=True, help="With --observed-step-ms: preset or config.")
@click.option(
    "--phase", type=click.Choice(PHASES), default="verify", show_default=True, help="With --observed-step-ms."
)
@click.option(
    "--nccl-tests",
    "nccl_tests",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="An nccl-tests log (text or -J JSON) of the box (repeatable).",
)
@click.option(
    "--run",
    "run_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A measured commprof run folder of the box: its NCCL-defaults baseline per op size.",
)
@click.option(
    "--graph",
    is_flag=True,
    help="The --observed-op-us / --observed-step-ms times were taken inside a CUDA graph (no CPU launch per op).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the ranked explanations as JSON.")
def explain(
    topology_name: str | None,
    bundle_dir: Path | None,
    nccl_log: Path | None,
    op_us: tuple[str, ...],
    step_ms: tuple[str, ...],
    model: str,
    phase: str,
    nccl_tests: tuple[Path, ...],
    run_dir: Path | None,
    graph: bool,
    as_json: bool,
) -> None:
    from commprof.costmodel.box_prior import one_box
    from commprof.explain.ranking import explain as explain_observations
    from commprof.explain.words import explained_lines

    topology = one_box("explain", topology_name, bundle_dir, nccl_log)
    if not (op_us or step_ms or nccl_tests or run_dir):
        raise UsageError(f"explain needs what the box measured: {OBSERVED_HELP}")
    records = _records(bundle_dir, nccl_log)
    wanted = Wanted(op_us, step_ms, model, phase, nccl_tests, run_dir, graph)
    observations, names, sources = _observations(topology, wanted)
    records = replace(records, gpu_names=names)
    result = explain_observations(topology, observations, records)
    if as_json:
        echo(json.dumps({"observed_from": sources, **result.to_dict()}, indent=2))
        return
    for line in explained_lines(result, sources):
        echo(line)


def _records(bundle_dir: Path | None, nccl_log: Path | None):
    """What the box's records say: the doctor's checks on the bundle, the NCCL log."""
    from commprof.explain.evidence import BoxRecords
    from commprof.nccl_log.parse import parse_nccl_log
    from commprof.textfiles import LOG_BYTES, read_text

    checks, where = (), ""
    if bundle_dir is not None:
        from commprof.doctor.bundle import read_bundle
        from commprof.doctor.runner import run_checks

        checks = tuple(run_checks(read_bundle(bundle_dir, "--from-bundle")))
        where = f"doctor on bundle {bundle_dir}"
    summary = None
    if nccl_log is not None:
        summary = parse_nccl_log(read_text(nccl_log, "NCCL log", LOG_BYTES, errors="replace"))
        if not summary.nccl_lines:
            raise UsageError(f"--nccl-log {nccl_log}: no 'NCCL INFO' or 'NCCL WARN' line (run with NCCL_DEBUG=INFO)")
    return BoxRecords(checks, where, summary, str(nccl_log) if nccl_log else "")


@dataclass(frozen=True)
class Wanted:
    """What the command line says was observed."""

    op_us: tuple[str, ...]  # --observed-op-us BYTES=US
    step_ms: tuple[str, ...]  # --observed-step-ms T=MS
    model: str  # the step plan's model, for step_ms
    phase: str  # the step plan's phase
    nccl_tests: tuple[Path, ...]  # nccl-tests logs
    run_dir: Path | None  # a measured run folder
    graph: bool  # op_us / step_ms timed inside a CUDA graph


def _observations(topology, wanted: Wanted):
    """Every observation, the GPU names their files print, and where they come from in words."""
    from commprof.costmodel.nccl_tests import parse_text
    from commprof.explain.observations import log_observations, op_observations, step_observations
    from commprof.textfiles import LOG_BYTES, read_text

    observations, names, sources = [], [], []
    if wanted.op_us:
        observations += op_observations(wanted.op_us, topology.gpus, wanted.graph)
        sources.append("--observed-op-us")
    if wanted.step_ms:
        plans = _plans(wanted.step_ms, wanted.model, topology.gpus, wanted.phase)
        observations += step_observations(wanted.step_ms, plans, wanted.graph)
        sources.append(f"--observed-step-ms ({wanted.model})")
    for path in wanted.nccl_tests:
        parsed = parse_text(read_text(path, "nccl-tests log", LOG_BYTES, errors="replace"), str(path))
        found = log_observations(parsed)
        if not found:
            raise UsageError(
                f"--nccl-tests {path}: no run the model can price (it prices all_reduce, all_gather and "
                "reduce_scatter rows of 2 or more ranks, as the log states them)"
                + (f"; {parsed.warnings[0]}" if parsed.warnings else "")
            )
        observations += found
        names += [(name, path.name) for name in parsed.gpu_names]
        sources.append(path.name)
    if wanted.run_dir is not None:
        observations += _run(wanted.run_dir)
        sources.append(str(wanted.run_dir))
    return observations, tuple(names), ", ".join(sources)


def _plans(step_ms: tuple[str, ...], model: str, tp: int, phase: str) -> dict:
    from commprof.explain.observations import MAX_TOKENS
    from commprof.planner.models import load_model
    from commprof.planner.plan import build_step_plan

    shape = load_model(model)
    plans = {}
    for value in step_ms:
        for part in value.split(","):
            key = part.partition("=")[0].strip()
            if key.isdigit() and 1 <= int(key) <= MAX_TOKENS:
                plans[int(key)] = build_step_plan(shape, tp, int(key), phase)
    return plans


def _run(run_dir: Path) -> list:
    from commprof.explain.observations import run_observations
    from commprof.records.files import RESULTS_FILE, read_records
    from commprof.records.run_meta import read_meta

    if not (run_dir / RESULTS_FILE).is_file():
        raise UsageError(f"--run {run_dir}: no {RESULTS_FILE} (a run folder of a sweep on the box)")
    source = read_meta(run_dir).source
    if source not in (None, "measured"):
        raise UsageError(f"--run {run_dir}: a {source} run is no observation of the box (give a measured run)")
    found = run_observations(read_records(run_dir / RESULTS_FILE), str(run_dir))
    if not found:
        raise UsageError(
            f"--run {run_dir}: no measured eager step of NCCL with its defaults (point p000) to read op times from"
        )
    return found
