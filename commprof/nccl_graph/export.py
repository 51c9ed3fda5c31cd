"""What recommend.env says of a recommended NCCL_GRAPH_FILE: the file it ran with (by sha256), which communicators it
applies to, the NCCL version it was measured with, and a refusal where the run's plan has communicators the file
cannot describe. Pure: the writer copies the file."""

from __future__ import annotations

from dataclasses import dataclass, field

from commprof.nccl_graph.graph_file import graph_hash
from commprof.nccl_graph.nccl_reader import GraphFileError, read_graph_file
from commprof.records.run_meta import RunMeta

GRAPH_VARIABLE = "NCCL_GRAPH_FILE"
EXPORTED_NAME = "nccl_graph.xml"  # the copy beside recommend.env


@dataclass(frozen=True)
class GraphExport:
    env: dict[str, str]  # the exported variables: NCCL_GRAPH_FILE at the file measured, or left out
    notes: list[str] = field(default_factory=list)  # recommend.env's comment lines about it
    text: str | None = None  # the file to copy beside recommend.env; None: nothing to copy


def graph_export(env: dict[str, str], ran_with: dict | None, text: str | None, meta: RunMeta) -> GraphExport:
    """`ran_with`: the record's nccl.graph_file (path, sha256, loaded); `text`: that file's text now, if readable."""
    if GRAPH_VARIABLE not in env:
        return GraphExport(env)
    rest = {k: v for k, v in env.items() if k != GRAPH_VARIABLE}
    if not ran_with or ran_with.get("loaded") is not True:
        why = (ran_with or {}).get("why") or "no record says NCCL loaded it"
        return GraphExport(
            rest, [f"{GRAPH_VARIABLE} NOT exported: no proof NCCL loaded the file this point ran ({why})."]
        )
    if text is None or graph_hash(text) != ran_with.get("sha256"):
        return GraphExport(
            rest,
            [
                f"{GRAPH_VARIABLE} NOT exported: {ran_with['path']} is gone or changed since it was measured "
                f"(sha256 {str(ran_with.get('sha256'))[:12]}); re-run the sweep to export it."
            ],
        )
    try:
        gpus = sorted({d for g in read_graph_file(text).graphs for c in g.channels for d in c.gpus})
    except GraphFileError as exc:
        return GraphExport(rest, [f"{GRAPH_VARIABLE} NOT exported: the file no longer reads as NCCL reads it ({exc})."])
    tp, world = meta.plan.tp if meta.plan else None, meta.world_size
    sub = []
    if tp is not None and tp != len(gpus):
        sub.append(f"TP groups of {tp} GPUs")
    if meta.plan and meta.plan.dp_attention:
        sub.append("DP-attention groups")
    if sub:
        return GraphExport(
            rest,
            [
                f"{GRAPH_VARIABLE} NOT exported: this run's plan has {' and '.join(sub)}, sub-communicators the file "
                f"(rings over GPUs {gpus}) cannot describe: NCCL would fail their init (XML Import Channel : dev not found)."
            ],
        )
    version = meta.nccl or "an NCCL version meta.json does not name"
    notes = [
        f"{GRAPH_VARIABLE}: the graph this point ran with, sha256 {ran_with['sha256'][:12]} (a copy is {EXPORTED_NAME} "
        "beside this file; the path below is the run folder's, where NCCL loaded it).",
        f"It applies to every communicator over exactly GPUs {gpus} (world size {world or len(gpus)}); any other group "
        "fails its init. Keep it out of /etc/nccl.conf: there it applies to every job on the box.",
        f"Measured with NCCL {version}: re-measure after any NCCL upgrade (a newer NCCL changes its own graph too).",
    ]
    return GraphExport({**rest, GRAPH_VARIABLE: ran_with["path"]}, notes, text)
