"""`commprof nccl-log FILE`: explain an NCCL_DEBUG=INFO log — what NCCL built, chose and ran, and what is wrong."""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import click

from commprof.errors import UsageError
from commprof.nccl_log.findings import find_problems
from commprof.nccl_log.parse import NcclLogSummary, parse_nccl_log
from commprof.terminal import echo
from commprof.textfiles import LOG_BYTES, read_text


def read_log(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    return read_text(path, "NCCL log", LOG_BYTES, errors="replace")


def _ops_lines(ops: list[dict[str, Any]]) -> list[str]:
    counts = Counter((op["coll"], op["datatype"], op["count"], op["bytes"]) for op in ops)
    return [
        f"  {coll} {count} x {datatype} = {nbytes if nbytes is not None else '?'} B  x{n}"
        for (coll, datatype, count, nbytes), n in counts.items()
    ]


def _table_lines(table: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    lines = []
    for function, cells in table.items():
        enabled = [f"{name} {c['latency_us']:g} us/{c['bw_gbps']:g} GB/s" for name, c in cells.items() if c["bw_gbps"]]
        lines.append(f"  {function}: {', '.join(enabled) or 'nothing enabled'}")
    return lines


def format_explanation(summary: NcclLogSummary, findings: list) -> str:
    """The log as a person reads it: facts first, then findings with their evidence and fix."""
    d = summary.to_dict()
    counts = d["channel_counts"]
    head = [f"NCCL {d['version'] or '(version not in the log)'}"]
    if d["nranks"]:
        head.append(f"{d['nranks']} ranks")
    head.append(
        {
            "nNodes": f"{d['nnodes']} node(s)",
            "host hashes": f"at least {d['nnodes']} node(s) (distinct host hashes)",
        }.get(d["nnodes_basis"], "node count unknown (NCCL printed no nNodes)")
    )
    if counts:
        head.append(
            f"{counts.get('coll')} coll channels, {counts.get('p2p')} p2p ({counts.get('p2p_per_peer')} per peer)"
        )
    lines = [" · ".join(head)]
    if d["transports"]:
        lines.append("transports: " + ", ".join(f"{k} {v} connections" for k, v in d["transports"].items()))
        for pair, vias in d["peer_transports"].items():
            lines.append(f"  {pair}: {', '.join(vias)}")
    for ring in d["rings"]:
        lines.append("ring: " + " -> ".join(map(str, ring)))
    if d["trees"]:
        channels = sorted({t["channel"] for t in d["trees"]})
        ranks = sorted({t["rank"] for t in d["trees"]})
        lines.append(f"trees: {len(channels)} channel(s), seen from {len(ranks)} rank(s)")
        for t in [t for t in d["trees"] if t["rank"] == ranks[0]]:
            children = ", ".join(map(str, t["down"])) or "none"
            lines.append(f"  channel {t['channel']}: rank {t['rank']}, parent {t['up']}, children {children}")
    if d["cpu_vendor"]:
        lines.append(f"CPU (NCCL's topology): {d['cpu_vendor']}")
    for g in d["graphs"]:
        lines.append(
            f"graph: {g['kind']} (pattern {g['pattern']}), {g['channels']} channels, "
            f"bw {g['bw_intra_gbps']:g}/{g['bw_inter_gbps']:g} GB/s, paths {g['type_intra']}/{g['type_inter']}"
        )
        if g.get("gpus"):
            lines.append(f"  channel 0 by bus id: {' -> '.join(g['gpus'][0])}")
    if d["env"]:
        lines.append("set by the environment: " + ", ".join(f"{k}={v}" for k, v in d["env"].items()))
    if d["tuner_plugin"]:
        lines.append(f"tuner plugin: {d['tuner_plugin']}")
    if d["ops"]:
        lines.append(f"ops (COLL lines, one rank): {len(d['ops'])}")
        lines += _ops_lines(d["ops"])
    if d["choices"]:
        lines.append("NCCL's choices (TUNING lines, rank 0):")
        for c in d["choices"]:
            channels = f", {c['channels']} channel(s)" if c.get("channels") else ""
            lines.append(f"  {c['coll'] or '?'} {c['bytes']} B -> {c['algo']}/{c['proto']}{channels}  x{c['count']}")
    if d["tuning_table"]:
        lines.append("enabled algorithm/protocol pairs (TUNING table: latency, bandwidth):")
        lines += _table_lines(d["tuning_table"])
    if findings:
        lines.append("findings:")
        for f in findings:
            lines.append(f"  [{f.severity}] {f.text}")
            lines.append(f"    fix: {f.fix}")
            lines += [f"    | {e}" for e in f.evidence]
    else:
        lines.append("findings: none")
    return "\n".join(lines)


@click.command(help="Explain an NCCL_DEBUG=INFO log: version, ranks, transports, rings, ops, choices, findings.")
@click.argument("log_file", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def nccl_log(log_file, as_json):
    text = read_log(log_file)
    summary = parse_nccl_log(text)
    if not summary.version and not summary.nccl_lines:
        raise UsageError(f"{log_file}: no NCCL INFO or WARN lines (was it written with NCCL_DEBUG=INFO?)")
    findings = find_problems(summary)
    if as_json:
        echo(json.dumps({**summary.to_dict(), "findings": [f.to_dict() for f in findings]}, indent=2))
    else:
        echo(format_explanation(summary, findings))
