"""`commprof floor`: measure this box's peer-to-peer figures and print the all-reduce floor per size."""

from __future__ import annotations

import json
from pathlib import Path

import click

from commprof.errors import UsageError
from commprof.floor.measure import figures, floor_table
from commprof.terminal import echo


@click.command(help="Measure peer copies between this node's GPUs and print the all-reduce floor per size.")
@click.option("--json", "as_json", is_flag=True, help="Print the probe, the figures and the floor as JSON.")
@click.option("--out", type=click.Path(path_type=Path), help="Also write floor.json (the sweep's meta.json takes it).")
@click.option("--ranks", type=int, default=None, help="GPUs the all-reduce spans (default: every GPU probed).")
@click.option("--quick", is_flag=True, help="Smaller copies, fewer repeats: the few seconds a sweep spends first.")
def floor(as_json: bool, out: Path | None, ranks: int | None, quick: bool) -> None:
    from commprof.floor.probe import QUICK_COPY_BYTES, QUICK_REPEATS, probe_floor

    try:
        probe = probe_floor(QUICK_COPY_BYTES, QUICK_REPEATS) if quick else probe_floor()
    except RuntimeError as exc:
        raise UsageError(
            f"{exc}; without GPUs, the topology presets carry published floor figures "
            "(sweeps/topologies/*.toml, [floor])"
        ) from None
    try:
        figs = figures(probe)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ranks = ranks or len(probe.gpus)
    result = {"probe": probe.to_dict(), "figures": figs.to_dict(), "ranks": ranks, "floor": floor_table(figs, ranks)}
    if out is not None:
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if as_json:
        echo(json.dumps(result, indent=2))
        return
    echo(f"floor figures ({figs.source}):")
    echo(
        f"  best pair copy {figs.pair_write_gbps:.1f} GB/s, every GPU at once {figs.all_pairs_gbps:.1f} GB/s per GPU, "
        f"peer write {figs.write_latency_us:.2f} µs, launch + flags {figs.sync_us:.2f} µs"
    )
    for line in probe.not_measured:
        echo(f"  not measured: {line}")
    echo(f"all-reduce floor on {ranks} GPUs:")
    for row in result["floor"]:
        echo(f"  {row['bytes']:>9} B  {row['floor_us']:8.2f} µs  ({row['algorithm']})")
