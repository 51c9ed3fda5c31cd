"""`commprof doctor`: print the verdicts, write or read a diagnostic bundle, exit 1 on a failure; and
`commprof topo`: print the topology probe."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from commprof.doctor.result import FAIL, OK, SKIPPED, WARN, CheckResult
from commprof.doctor.runner import doctor_summary, gather, has_failures, run_checks
from commprof.doctor.topology_probe import format_topology, probe_topology
from commprof.errors import UsageError
from commprof.records.files import ensure_writable_dir
from commprof.terminal import echo

COLORS = {OK: "green", WARN: "yellow", FAIL: "red", SKIPPED: "bright_black"}
EVIDENCE_SHOWN = 3


def format_result(result: CheckResult) -> str:
    """A check as a person reads it: status, id, finding; then the evidence and, for warn / fail, the fix."""
    head = (
        f"{click.style(f'{result.status:<8}', fg=COLORS[result.status], bold=True)}{result.id:<12} "
        f"{result.title}: {result.detail}"
    )
    lines = [head]
    shown = result.evidence[:EVIDENCE_SHOWN]
    if shown:
        more = (
            f" (+{len(result.evidence) - EVIDENCE_SHOWN} more with --json)"
            if len(result.evidence) > EVIDENCE_SHOWN
            else ""
        )
        lines.append(f"{'':20}read: " + "; ".join(shown) + more)
    if result.fix and result.status in (WARN, FAIL):
        lines.append(f"{'':20}fix:  {result.fix}")
    return "\n".join(lines)


@click.command(
    name="doctor",
    help="Check the box before trusting any number: P2P, ACS, IOMMU, PCIe links, "
    "NUMA, NCCL's view, settings, clocks. Exit 1 when a check fails.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
@click.option(
    "--collect",
    "collect_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write a diagnostic bundle (the raw outputs the checks read) to this directory.",
)
@click.option(
    "--from",
    "from_dir",
    type=click.Path(path_type=Path),
    help="Run the checks offline on a bundle directory instead of this machine.",
)
@click.option("--all-pairs", is_flag=True, help="All-reduce on every GPU pair (default: one pair per path type).")
@click.option("--tp", type=click.IntRange(min=1), help="Tensor-parallel group size to judge (default: all GPUs).")
@click.option("--no-gpu-tests", is_flag=True, help="Skip the NCCL subprocess tests (NVML and files only).")
def doctor(
    as_json: bool, collect_dir: Path | None, from_dir: Path | None, all_pairs: bool, tp: int | None, no_gpu_tests: bool
) -> None:
    if collect_dir and from_dir:
        raise UsageError("--collect writes a bundle of this machine and --from reads one: use one of them")
    if collect_dir:
        from commprof.doctor.bundle import check_bundle_target

        check_bundle_target(collect_dir)  # before minutes of gathering, not after
        ensure_writable_dir(collect_dir, "--collect")
    facts = gather(from_dir, quick=not all_pairs, tp=tp, run_tests=not no_gpu_tests)
    results = run_checks(facts)
    written = []
    if collect_dir:
        from commprof.doctor.bundle import write_bundle

        try:
            written = write_bundle(facts, collect_dir)
        except OSError as exc:
            raise UsageError(f"--collect {collect_dir}: cannot write the bundle ({exc.strerror or exc})") from None
    if as_json:
        echo(json.dumps({"origin": facts.origin, **doctor_summary(results)}, indent=2))
    else:
        n_gpus = len((facts.topology or {}).get("gpus") or [])
        echo(
            f"commprof doctor: {'this machine' if facts.origin == 'live' else 'bundle ' + facts.origin}"
            + (f", {n_gpus} GPU(s) (NVML)" if n_gpus else "")
        )
        for result in results:
            echo(format_result(result))
        echo(_verdict(results, facts))
        if written:
            echo(
                f"bundle: {len(written)} files in {collect_dir} (attach it to an issue; "
                f"`commprof doctor --from {shlex.quote(str(collect_dir))}` replays these checks)"
            )
    if has_failures(results):
        raise SystemExit(1)


def _verdict(results: list[CheckResult], facts) -> str:
    failed = [r.id for r in results if r.status == FAIL]
    warned = [r.id for r in results if r.status == WARN]
    if facts.origin == "live" and not (facts.topology or {}).get("gpus"):
        return (
            "no NVIDIA GPU here: the GPU checks are skipped and there is nothing to tune on this machine "
            f"({(facts.topology or {}).get('reason')})"
        )
    if failed:
        return (
            f"{len(failed)} check(s) failed ({', '.join(failed)}): numbers measured on this box are not "
            "tuning results until fixed"
        )
    return "no check failed" + (f"; {len(warned)} warning(s): {', '.join(warned)}" if warned else "")


@click.command(name="topo", help="Probe GPUs, PCIe links and peer-to-peer topology (NVML).")
@click.option("--json", "as_json", is_flag=True, help="Print the probe as JSON.")
def topo(as_json: bool) -> None:
    topology = probe_topology()
    echo(json.dumps(topology, indent=2) if as_json else format_topology(topology))
