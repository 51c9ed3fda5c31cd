"""`commprof nccl-graph --from-bundle DIR | --from-run RUN [--out DIR]`: write NCCL_GRAPH_FILE candidates for a box.

Each file is checked as NCCL reads it before it is written; `candidates.json` beside them lists what each holds
and its sha256, which a sweep's `nccl_graph` axis reads.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import click

from commprof.doctor.bundle import read_bundle
from commprof.doctor.facts import Facts, Source
from commprof.errors import UsageError
from commprof.nccl_graph.box import Box, box_from_facts
from commprof.nccl_graph.candidates import Candidate, build_candidates
from commprof.nccl_graph.graph_file import RING_GRAPH_ID
from commprof.nccl_graph.nccl_reader import GraphFileError, read_graph_file
from commprof.records.files import META_FILE, ensure_writable_dir
from commprof.records.folder import write_nofollow
from commprof.records.meta_topology import probe_answer
from commprof.records.point_ids import BASELINE_POINT_ID
from commprof.records.run_meta import as_written, read_meta
from commprof.textfiles import LOG_BYTES, read_text

INDEX_FILE = "candidates.json"


def facts_of_run(run_dir: Path) -> Facts:
    """The facts a run folder's meta.json keeps: the NVML topology probe and the floor."""
    if not run_dir.is_dir():
        raise UsageError(f"--from-run {run_dir}: not a directory")
    if not (run_dir / META_FILE).is_file():
        raise UsageError(f"--from-run {run_dir}: no meta.json (not a run folder)")
    meta = read_meta(run_dir)
    if meta.simulated or meta.source in ("simulated", "nccl-tests"):
        raise UsageError(
            f"--from-run {run_dir}: a {meta.source} run probed no box; give the box itself "
            "(--from-bundle DIR, a `commprof doctor --collect` bundle, or a run measured on it)"
        )
    topology = meta.topology
    if topology is not None and not isinstance(topology.gpus, list):
        raise UsageError(f"--from-run {run_dir}: meta.json's topology lists no GPUs (it is not NVML's probe of a box)")
    # The doctor's facts as its probe gives them (its checks read the probe's answer, not meta.json).
    facts = Facts(
        origin=str(run_dir), topology=probe_answer(topology) if topology else None, floor=as_written(meta.floor)
    )
    # The baseline's untimed probe dumped the graphs NCCL's own search found (commprof.sweep.running.graph_run).
    dump = run_dir / "points" / BASELINE_POINT_ID / "nccl-graphs.xml"
    if dump.is_file():
        text = read_text(dump, "NCCL graph dump", LOG_BYTES, errors="replace")
        facts.sources["nccl_graphs"] = Source(
            "nccl_graphs", f"{run_dir.name}/points/{BASELINE_POINT_ID}/{dump.name}", text
        )
    return facts


def write_candidates(box: Box, candidates: list[Candidate], out: Path) -> list[Path]:
    """Each candidate as <name>.xml and the index, all of them or none: every file is written whole under a
    temporary name first, then each is renamed into place. A write that fails (a full disk) removes the temporary
    files and is one UsageError; what the folder held before is left as it was."""
    ensure_writable_dir(out, "--out")
    ours = {f"{c.name}.xml" for c in candidates} | {INDEX_FILE}
    stray = sorted(p.name for p in out.iterdir() if p.name not in ours)
    if stray:
        raise UsageError(
            f"--out {out}: holds other files ({', '.join(stray[:3])}{', ...' if len(stray) > 3 else ''}); "
            "give a new or empty folder, so it holds one box's candidates only"
        )
    index = {"box": box.to_dict(), "candidates": [c.to_dict() | {"file": f"{c.name}.xml"} for c in candidates]}
    files = {out / f"{c.name}.xml": c.text for c in candidates} | {out / INDEX_FILE: json.dumps(index, indent=2) + "\n"}
    staged: list[Path] = []
    try:
        for path, text in files.items():
            staged.append(path.with_name(path.name + ".tmp"))
            write_nofollow(staged[-1], text.encode("utf-8"))  # a planted link is refused, not followed
    except (OSError, UsageError) as exc:
        for tmp in staged:
            if os.path.lexists(tmp) and not os.path.islink(tmp):  # a planted link stays, named by the refusal
                with contextlib.suppress(OSError):
                    tmp.unlink()
        if isinstance(exc, UsageError):
            raise
        raise UsageError(f"cannot write the candidates to {out}: {exc.strerror or exc}; none was written") from None
    for tmp, path in zip(staged, files):
        os.replace(tmp, path)
    return list(files)


def nccls_own_graph(facts: Facts) -> str:
    """One line on the ring NCCL's own search found (the bundle's NCCL_GRAPH_DUMP_FILE), or how to get it."""
    source = facts.source("nccl_graphs")
    if not source.ok:
        return (
            f"NCCL's own graph: not in {facts.origin} ({source.missing}); `commprof doctor --collect DIR` on the box "
            "dumps it (NCCL_GRAPH_DUMP_FILE)"
        )
    try:
        ring = next((g for g in read_graph_file(source.text).graphs if g.id == RING_GRAPH_ID), None)
    except GraphFileError as exc:
        return f"NCCL's own graph ({source.where}): unreadable ({exc})"
    if ring is None or not ring.channels:
        return f"NCCL's own graph ({source.where}): no ring"
    order = " ".join(map(str, ring.channels[0].gpus))
    return (
        f"NCCL's own graph ({source.where}): ring {order}, {ring.nchannels} channels at {ring.speedintra:g} GB/s, "
        f"type {ring.typeintra}"
    )


@click.command("nccl-graph")
@click.option("--from-bundle", "bundle", type=click.Path(path_type=Path), help="A doctor bundle directory.")
@click.option("--from-run", "run", type=click.Path(path_type=Path), help="A run folder (its meta.json).")
@click.option("--out", type=click.Path(path_type=Path), default=Path("nccl-graphs"), show_default=True)
def nccl_graph(bundle: Path | None, run: Path | None, out: Path) -> None:
    """Write NCCL_GRAPH_FILE candidates for a box, built from its topology instead of NCCL's search."""
    if (bundle is None) == (run is None):
        raise UsageError("give one of --from-bundle DIR or --from-run RUN")
    facts = read_bundle(bundle, "--from-bundle") if bundle is not None else facts_of_run(run)
    box = box_from_facts(facts)
    candidates = build_candidates(box)
    if not candidates:
        raise UsageError(
            f"{facts.origin}: {box.hop_gbps:.1f} GB/s per hop leaves no channel count of 2 or more at NCCL's "
            "slowest search speed: no candidate"
        )
    write_candidates(box, candidates, out)
    click.echo(f"{len(box.gpus)} GPUs from {box.origin}; hop bandwidth: {box.bandwidth_source}")
    click.echo(nccls_own_graph(facts))
    click.echo(f"{'file':<30} {'ch':>3} {'ring':<24} {'sockets':>7} {'switches':>8} {'GB/s/ch':>7}  sha256")
    for c in candidates:
        ring = " ".join(map(str, c.ring))
        click.echo(
            f"{c.name + '.xml':<30} {c.channels:>3} {ring:<24} {c.socket_crossings:>7} {c.switch_crossings:>8} "
            f"{c.speedintra:>7g}  {c.sha256[:12]}"
        )
    click.echo(
        f"wrote {len(candidates)} files and {INDEX_FILE} to {out}; each applies to communicators over exactly "
        f'these {len(box.gpus)} GPUs. Sweep them (`nccl_graph = ["auto", "generated"]`) before exporting one'
    )
