"""Parse NCCL_DEBUG=INFO output (subsystems INIT, GRAPH, TUNING) into what NCCL really did.

Pure text in, `NcclLogSummary` out: version, transport per peer connection, channel counts, the ring /
tree graphs the topology search settled on, and the algorithm / protocol chosen per collective and size.
Formats follow NCCL's source (2.18 to 2.30); the fixture headers in tests/fixtures/nccl_log/ cite the lines.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from commprof.nccl_vocab import ALGO_BY_NUMBER, GRAPH_PATTERNS, PROTO_BY_NUMBER

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_INFO = re.compile(r"NCCL INFO (.*)$")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+[\w.+-]*)")
_PEER = r"(\d+)\[([0-9a-fA-Fx]+)\]"
# "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
# "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"
_CONNECTION = re.compile(
    rf"^Channel (\d+)(?:/(\d+))? : {_PEER} -> {_PEER}(?: \[(send|receive)\])? via (\S+(?: pointer)?\S*)"
)
_RING = re.compile(r"^Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_CHANNELS = re.compile(
    r"^(\d+) coll channels, (?:(\d+) collnet channels, )?(\d+) nvls channels, "
    r"(\d+) p2p channels, (\d+) p2p channels per peer"
)
_GRAPH = re.compile(
    r"^Pattern (\d+), crossNic (\d+), nChannels (\d+), bw ([\d.]+)/([\d.]+), "
    r"type (\w+)/(\w+), sameChannels (\d+)"
)
# >= 2.24: "AllReduce: 14336 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"
_CHOICE = re.compile(
    r"^(?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)"
    r"(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}| time ([\d.]+))?"
)
_COMM = re.compile(r"^comm 0x[0-9a-fA-F]+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_P2P_LEVEL = re.compile(r"^(NCCL_P2P_LEVEL|NCCL_P2P_DISABLE) set by environment to (\w+)")


@dataclass
class NcclLogSummary:
    """What one NCCL INFO log says; every field is None / empty where the log does not tell."""

    version: str | None = None
    connections: list[dict[str, Any]] = field(default_factory=list)
    channel_counts: dict[str, int] = field(default_factory=dict)
    graphs: list[dict[str, Any]] = field(default_factory=list)
    rings: list[list[int]] = field(default_factory=list)
    choices: list[dict[str, Any]] = field(default_factory=list)
    nranks: int | None = None
    nnodes: int | None = None
    p2p_level: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def transports(self) -> dict[str, int]:
        """Distinct connections per transport kind ("P2P", "SHM", "NET", ...)."""
        return dict(Counter(c["transport"] for c in self.connections))

    @property
    def peer_transports(self) -> dict[str, list[str]]:
        """ "src->dst" rank pair -> the distinct transport details NCCL used for it, e.g. ["P2P/CUMEM/read"]."""
        out: dict[str, list[str]] = {}
        for c in self.connections:
            details = out.setdefault(f"{c['src']}->{c['dst']}", [])
            if c["via"] not in details:
                details.append(c["via"])
        return out

    @property
    def channels(self) -> int | None:
        return self.channel_counts.get("coll")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "transports": self.transports,
            "peer_transports": self.peer_transports,
            "channels": self.channels,
            "channel_counts": self.channel_counts,
            "graphs": self.graphs,
            "rings": self.rings,
            "choices": self.choices,
            "nranks": self.nranks,
            "nnodes": self.nnodes,
            "p2p_level": self.p2p_level,
            "warnings": self.warnings,
        }


def parse_nccl_log(text: str) -> NcclLogSummary:
    """Parse interleaved INFO lines of any number of ranks and communicators; unknown lines are ignored."""
    summary = NcclLogSummary()
    seen_connections: set[tuple] = set()
    choice_index: dict[tuple, dict[str, Any]] = {}
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip("\r")
        if summary.version is None and (m := _VERSION.search(line)):
            summary.version = m.group(1)
        if "NCCL WARN" in line:
            summary.warnings.append(line.split("NCCL WARN", 1)[1].strip())
            continue
        m = _INFO.search(line)
        if m:
            _parse_info(m.group(1).strip(), summary, seen_connections, choice_index)
    return summary


def _parse_info(msg: str, summary: NcclLogSummary, seen: set[tuple], choice_index: dict) -> None:
    if m := _CONNECTION.match(msg):
        channel, conn, src, src_dev, dst, dst_dev, direction, via = m.groups()
        key = (int(channel), int(conn or 0), int(src), int(dst), direction or "")
        if key not in seen:
            seen.add(key)
            summary.connections.append(
                {
                    "channel": int(channel),
                    "conn": int(conn or 0),
                    "src": int(src),
                    "dst": int(dst),
                    "src_dev": src_dev,
                    "dst_dev": dst_dev,
                    "direction": direction,
                    "transport": via.split("/", 1)[0],
                    "via": via,
                }
            )
    elif m := _RING.match(msg):
        ring = [int(r) for r in m.group(3).split()]
        if ring not in summary.rings:
            summary.rings.append(ring)
    elif m := _CHANNELS.match(msg):
        coll, collnet, nvls, p2p, per_peer = m.groups()
        summary.channel_counts = {"coll": int(coll), "nvls": int(nvls), "p2p": int(p2p), "p2p_per_peer": int(per_peer)}
        if collnet is not None:
            summary.channel_counts["collnet"] = int(collnet)
    elif m := _GRAPH.match(msg):
        pattern, cross_nic, nch, bw_intra, bw_inter, type_intra, type_inter, same = m.groups()
        summary.graphs.append(
            {
                "pattern": int(pattern),
                "kind": GRAPH_PATTERNS.get(int(pattern), "unknown"),
                "cross_nic": int(cross_nic),
                "channels": int(nch),
                "bw_intra_gbps": float(bw_intra),
                "bw_inter_gbps": float(bw_inter),
                "type_intra": type_intra,
                "type_inter": type_inter,
                "same_channels": int(same),
            }
        )
    elif m := _CHOICE.match(msg):
        _add_choice(m, summary, choice_index)
    elif m := _COMM.match(msg):
        summary.nranks, summary.nnodes = int(m.group(2)), int(m.group(3))
    elif m := _P2P_LEVEL.match(msg):
        if m.group(1) == "NCCL_P2P_LEVEL":
            summary.p2p_level = m.group(2)
        elif m.group(2) not in ("0", ""):  # NCCL_P2P_DISABLE=1 means level LOC; =0 changes nothing
            summary.p2p_level = "LOC"


def _add_choice(m: re.Match, summary: NcclLogSummary, choice_index: dict) -> None:
    coll, nbytes, algo, proto, lo, hi, time_us = m.groups()
    # 2.20-2.23 print NCCL_ALGO_* / NCCL_PROTO_* numbers; 2.24+ print names.
    if algo.isdigit() and int(algo) < len(ALGO_BY_NUMBER):
        algo = ALGO_BY_NUMBER[int(algo)]
    if proto.isdigit() and int(proto) < len(PROTO_BY_NUMBER):
        proto = PROTO_BY_NUMBER[int(proto)]
    choice = {
        "coll": coll,
        "bytes": int(nbytes),
        "algo": algo.upper(),
        "proto": proto.upper(),
        "channels": int(hi) - int(lo) + 1 if lo is not None else None,
    }
    key = tuple(choice.values())
    if key in choice_index:
        choice_index[key]["count"] += 1
        return
    choice["count"] = 1
    if time_us is not None:
        choice["model_time_us"] = float(time_us)
    choice_index[key] = choice
    summary.choices.append(choice)
