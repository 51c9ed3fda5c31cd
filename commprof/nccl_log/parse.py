"""Parse NCCL_DEBUG=INFO output into what NCCL really did; one parser for the doctor, the sweep and `nccl-log`.

Pure text in, `NcclLogSummary` out: version, ranks and nodes, transport per peer connection, rings, channel
counts, the graphs the topology search settled on, the op sequence of COLL lines, the algorithm / protocol
chosen per collective and size, the latency / bandwidth table of TUNING, the variables NCCL reports set,
and WARN lines. Formats follow NCCL's source from 2.4 to 2.30 (cited per pattern below; 2.31.2 and 2.32.3 keep
the format strings); a line prefix (mpirun's "[1,0]<stdout>:", Ray's, timestamps) is tolerated, unknown lines ignored.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from commprof.nccl_vocab import (
    ALGO_BY_NUMBER,
    COLLECTIVES,
    DATATYPES,
    GRAPH_PATTERNS,
    PROTO_BY_NUMBER,
    named,
    nccl_user_p2p_level,
)

EVIDENCE_LINES = 3  # raw lines kept per kind of fact, to quote as evidence

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# src/debug.cc: "host:pid:tid [cudaDev] NCCL INFO msg"; the last "NCCL INFO" wins when two ranks' lines interleave.
# WARN lines carry the source position: "host:pid:tid [cudaDev] enqueue.cc:1828 NCCL WARN msg".
_LINE = re.compile(
    r"(?:(?<![^\s:\[\]()])(?P<host>[^\s:\[\]()]{1,255}):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:\S+:\d+ )?)?NCCL (?P<kind>INFO|WARN) "
)
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+[\w.+-]*)")
_PEER = r"(\d+)(?:\[([0-9a-fA-Fx]+)\])?"
# >= 2.7 "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
# "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"; <= 2.6 "Ring 00 : 12[41000] -> 11[2d000] via P2P/IPC",
# "Ring 00 : 0[0] -> 1[1] via P2P/common device", 2.4 "Ring 00 : 34 -> 33 [send] via NET/Socket/0".
_CONNECTION = re.compile(
    rf"^(?:Channel|Ring) (\d+)(?:/(\d+))? : {_PEER} -> {_PEER}(?: \[(send|receive)\])? via (\S.*?)\s*$"
)
_RING = re.compile(r"^Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")  # rank 0 prints each ring (src/graph/rings.cc)
_RING_HOP = re.compile(r"^Ring (\d+) : (\d+) -> (\d+) -> (\d+)\s*$")  # each rank: "Ring %02d : prev -> rank -> next"
# >= 2.19 with collnet, 2.18 with nvls, <= 2.17 "%d coll channels, %d p2p channels, %d p2p channels per peer".
_CHANNELS = re.compile(
    r"^(\d+) coll channels, (?:(\d+) collnet channels, )?(?:(\d+) nvls channels, )?"
    r"(\d+) p2p channels, (\d+) p2p channels per peer"
)
# src/graph/search.cc ncclTopoPrintGraph; <= 2.7 printed "speed" where later versions print "bw".
_GRAPH = re.compile(
    r"^Pattern (\d+), crossNic (\d+), nChannels (\d+), (?:bw|speed) ([\d.]+)/([\d.]+), type (\w+)/(\w+), "
    r"sameChannels (\d+)"
)
# ncclTopoPrintGraph's line per channel after it: "%2d :" then " GPU/%lx-%lx" per GPU (system id, then the topology
# id, the PCI bus id as one number) and " NET/..." across nodes.
_GRAPH_CHANNEL = re.compile(r"^(\d+) :((?: (?:GPU|NET)/[0-9a-fA-F]+-[0-9a-fA-F]+)+)$")
# >= 2.24: "AllReduce: 14336 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}" (count x type size);
# 2.23: "AllReduce: 1048576 Bytes -> Algo 0 proto 2 time 45.25"; 2.20-2.22 without the collective.
_CHOICE = re.compile(
    r"^(?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}| time ([\d.]+))?"
)
# "comm %p rank %d nRanks %d nNodes %d localRanks %d ..." (>= 2.9); "ncclCommInitRank comm %p rank %d nranks %d
# cudaDev %d ..." and "comm %p rank %d nranks %d cudaDev %d busId %lx ... - Init COMPLETE" (every version).
# WARN "Failed to determine local ranks rank %d hostHash %lx ..." (src/init.cc, 2.21-2.30): one hash per host.
_HOST_HASH = re.compile(r"\bhostHash (?:0x)?([0-9a-fA-F]+)\b")
_COMM = re.compile(r"\bcomm (0x[0-9a-fA-F]+) rank (\d+) n[Rr]anks (\d+)(?: nNodes (\d+))?(?: cudaDev (\d+))?")
_SET_BY_ENV = re.compile(r"^(NCCL_\w+) set by environment to (.*?)\.?\s*$")
# src/enqueue.cc: "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d]"
_OP = re.compile(
    r"^(\w+): opCount ([0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ count (\d+) datatype (\d+) op (\d+) root (-?\d+) "
    r"comm (\S+)(?: \[nranks=(\d+)\])?"
)
_TUNER = re.compile(r"^TUNER/Plugin: Using tuner plugin (.+)$")
# src/init.cc (2.4-2.30), after the rings: "Trees [0] 1/-1/-1->0->-1 [1] ..." ("%d/%d/%d->%d->%d" per channel: the
# three children, the rank, its parent; -1 none).
_TREES = re.compile(r"^Trees((?: \[\d+\] -?\d+/-?\d+/-?\d+->\d+->-?\d+)+)\s*$")
_TREE = re.compile(r"\[(\d+)\] (-?\d+)/(-?\d+)/(-?\d+)->(\d+)->(-?\d+)")
# src/graph/topo.cc ncclTopoPrintRec: "CPU/%lx-%lx (%d/%d/%d)" (>= 2.19; "CPU/%lx (...)" before): arch, vendor, model.
_CPU = re.compile(r"^CPU/[0-9a-fA-F]+(?:-[0-9a-fA-F]+)? \((-?\d+)/(-?\d+)/(-?\d+)\)")
# src/include/graph.h NCCL_TOPO_CPU_VENDOR_* (x86 only).
CPU_VENDORS = {1: "Intel", 2: "AMD", 3: "Zhaoxin", 4: "mixed"}
# TUNING table, src/graph/tuning.cc: >= 2.24 "  Algorithm   |  ... RING ... |" then "  Protocol    | LL | ..." then
# "%13s |%8.1f/%6.1f |..." per function; <= 2.23 "Latency/AlgBw |    Tree/    LL | ..." then the same rows.
_TABLE_ROW = re.compile(r"^\s*(\w+) \|((?:\s*-?[\d.]+/\s*-?[\d.]+ \|)+)\s*$")


@dataclass
class NcclLogSummary:
    """What one NCCL INFO log says; every field is None / empty where the log does not tell."""

    version: str | None = None
    connections: list[dict[str, Any]] = field(default_factory=list)
    channel_counts: dict[str, int] = field(default_factory=dict)
    graphs: list[dict[str, Any]] = field(default_factory=list)
    rings: list[list[int]] = field(default_factory=list)
    choices: list[dict[str, Any]] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    tuning_table: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    communicators: dict[str, dict[str, int | None]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    host_hashes: list[str] = field(default_factory=list)  # the distinct "hostHash %lx" values NCCL printed
    env: dict[str, str] = field(default_factory=dict)  # variables NCCL says were set by the environment
    tuner_plugin: str | None = None
    trees: list[dict[str, Any]] = field(default_factory=list)  # per rank and channel: {rank, channel, down, up}
    cpus: list[dict[str, int]] = field(default_factory=list)  # the topology's CPU nodes: {arch, vendor, model}
    warnings: list[str] = field(default_factory=list)
    evidence: dict[str, list[str]] = field(default_factory=dict)  # kind of fact -> the first raw lines
    nccl_lines: int = 0  # lines with "NCCL INFO" or "NCCL WARN"

    @property
    def nranks(self) -> int | None:
        """Ranks of the largest communicator the log shows (init lines, else the COLL lines' [nranks=N])."""
        counts = [c["nranks"] for c in self.communicators.values() if c.get("nranks")]
        counts = counts or [op["nranks"] for op in self.ops if op.get("nranks")]
        return max(counts) if counts else None

    @property
    def nnodes(self) -> int | None:
        """NCCL's "nNodes" (>= 2.9), else the distinct host hashes it printed (at least that many nodes; see
        _HOST_HASH), else None: host names are no node count (containers of several nodes may share one)."""
        counts = [c["nnodes"] for c in self.communicators.values() if c.get("nnodes")]
        if counts:
            return max(counts)
        return len(self.host_hashes) or None

    @property
    def nnodes_basis(self) -> str:
        """Where nnodes comes from: "nNodes", "host hashes" (at least that many) or "unknown"."""
        if any(c.get("nnodes") for c in self.communicators.values()):
            return "nNodes"
        return "host hashes" if self.host_hashes else "unknown"

    @property
    def p2p_level(self) -> str | None:
        """The P2P level NCCL read from NCCL_P2P_DISABLE / NCCL_P2P_LEVEL as the log reports them (paths.cc
        ncclGetLevel: disabled only when the value is 1); None: NCCL's default."""
        user = nccl_user_p2p_level(self.env)
        return user.level if user is not None else None

    @property
    def cpu_vendor(self) -> str | None:
        """The CPU vendor NCCL's topology shows ("CPU/0-0 (1/2/-1)": arch/vendor/model, NCCL_DEBUG_SUBSYS=GRAPH);
        None where the log does not print it."""
        vendors = {CPU_VENDORS.get(c["vendor"], f"vendor {c['vendor']}") for c in self.cpus if c["arch"] == 1}
        return vendors.pop() if len(vendors) == 1 else None

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
            "nranks": self.nranks,
            "nnodes": self.nnodes,
            "nnodes_basis": self.nnodes_basis,
            "transports": self.transports,
            "peer_transports": self.peer_transports,
            "channels": self.channels,
            "channel_counts": self.channel_counts,
            "graphs": self.graphs,
            "rings": self.rings,
            "choices": self.choices,
            "ops": self.ops,
            "tuning_table": self.tuning_table,
            "p2p_level": self.p2p_level,
            "env": self.env,
            "tuner_plugin": self.tuner_plugin,
            "trees": self.trees,
            "cpu_vendor": self.cpu_vendor,
            "warnings": self.warnings,
        }


@dataclass
class _State:
    """What the line loop carries between lines."""

    seen_connections: set = field(default_factory=set)
    seen_hosts: set = field(default_factory=set)  # summary.hosts, for a lookup that stays O(1) with 10^5 ranks
    seen_rings: set = field(default_factory=set)  # summary.rings as tuples, likewise
    choice_index: dict = field(default_factory=dict)
    ring_hops: dict = field(default_factory=dict)  # channel -> {rank: next}
    op_source: tuple | None = None  # (host, pid, dev) whose COLL lines make the op sequence
    table_columns: list = field(default_factory=list)  # [(algo, proto)] of the TUNING table block being read
    table_algos: list = field(default_factory=list)
    last_graph: dict = field(default_factory=dict)  # (host, pid, dev) -> the graph its channel lines belong to


def parse_nccl_log(text: str) -> NcclLogSummary:
    """Parse interleaved lines of any number of ranks and communicators; unknown lines are ignored."""
    summary = NcclLogSummary()
    state = _State()
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip("\r")
        if line.lstrip().startswith("#"):  # nccl-tests' tables and annotations, never NCCL's own lines
            continue
        if summary.version is None and (m := _VERSION.search(line)):
            summary.version = m.group(1)
        if "NCCL " not in line:  # most lines of a mixed log: skipped without running the line grammar
            continue
        matches = list(_LINE.finditer(line))
        if not matches:
            continue
        head = matches[-1]
        summary.nccl_lines += 1
        if head.group("host") and head.group("host") not in state.seen_hosts:
            state.seen_hosts.add(head.group("host"))
            summary.hosts.append(head.group("host"))
        msg = line[head.end() :].strip()
        for host_hash in _HOST_HASH.findall(msg):
            if host_hash not in summary.host_hashes:
                summary.host_hashes.append(host_hash)
        if "exceeds device/fn maxSharedMem" in msg:  # INFO in 2.25.1, WARN from 2.26 (commprof.nccl_log.findings)
            _keep(summary, "shared_mem", line)
        if head.group("kind") == "WARN":
            summary.warnings.append(msg)
            _keep(summary, "warn", line)
            continue
        source = (head.group("host"), head.group("pid"), head.group("dev"))
        _parse_info(msg, line, source, summary, state)
    _close_rings(summary, state)
    return summary


def _keep(summary: NcclLogSummary, kind: str, line: str) -> None:
    lines = summary.evidence.setdefault(kind, [])
    if len(lines) < EVIDENCE_LINES and line.strip() not in lines:
        lines.append(line.strip())


def _parse_info(msg: str, line: str, source: tuple, summary: NcclLogSummary, state: _State) -> None:
    if m := _CONNECTION.match(msg):
        _add_connection(m, line, summary, state)
    elif m := _RING.match(msg):
        _add_ring([int(r) for r in m.group(3).split()], summary, state)
    elif m := _RING_HOP.match(msg):
        channel, prev, rank, nxt = (int(g) for g in m.groups())
        state.ring_hops.setdefault(channel, {})[rank] = nxt
        state.ring_hops[channel].setdefault(prev, rank)
    elif m := _CHANNELS.match(msg):
        coll, collnet, nvls, p2p, per_peer = m.groups()
        summary.channel_counts = {"coll": int(coll), "p2p": int(p2p), "p2p_per_peer": int(per_peer)}
        for name, value in (("collnet", collnet), ("nvls", nvls)):
            if value is not None:
                summary.channel_counts[name] = int(value)
    elif m := _GRAPH.match(msg):
        _add_graph(m, line, summary)
        state.last_graph[source] = summary.graphs[-1]
    elif (m := _GRAPH_CHANNEL.match(msg)) and source in state.last_graph:
        graph = state.last_graph[source]
        if len(graph["gpus"]) < graph["channels"]:
            graph["gpus"].append([tok.split("-", 1)[1] for tok in m.group(2).split() if tok.startswith("GPU/")])
    elif m := _CHOICE.match(msg):
        _add_choice(m, summary, state.choice_index)
    elif m := _OP.match(msg):
        _add_op(m, source, summary, state)
    elif m := _SET_BY_ENV.match(msg):
        summary.env.setdefault(m.group(1), m.group(2).strip())
        _keep(summary, m.group(1), line)
    elif m := _TREES.match(msg):
        rank = None
        for t in _TREE.finditer(m.group(1)):
            channel, d0, d1, d2, rank, up = (int(g) for g in t.groups())
            tree = {"rank": rank, "channel": channel, "down": [d for d in (d0, d1, d2) if d >= 0], "up": up}
            if tree not in summary.trees:
                summary.trees.append(tree)
        _keep(summary, "trees", line)
    elif m := _CPU.match(msg):
        cpu = {"arch": int(m.group(1)), "vendor": int(m.group(2)), "model": int(m.group(3))}
        if cpu not in summary.cpus:
            summary.cpus.append(cpu)
        _keep(summary, "cpu", line)
    elif m := _TUNER.match(msg):
        summary.tuner_plugin = m.group(1).strip()
        _keep(summary, "tuner", line)
    elif msg.startswith(("Algorithm", "Latency/AlgBw", "Protocol")) and "|" in msg:
        _table_header(msg, state)
    elif m := _TABLE_ROW.match(msg):
        _table_row(m, summary, state)
    elif m := _COMM.search(msg):
        comm, _rank, nranks, nnodes, _dev = m.groups()
        entry = summary.communicators.setdefault(comm, {"nranks": int(nranks), "nnodes": None})
        if nnodes is not None:
            entry["nnodes"] = int(nnodes)
        _keep(summary, "comm", line)


def _add_connection(m: re.Match, line: str, summary: NcclLogSummary, state: _State) -> None:
    channel, conn, src, src_dev, dst, dst_dev, direction, via = m.groups()
    key = (int(channel), int(conn or 0), int(src), int(dst), direction or "")
    if key in state.seen_connections:
        return
    state.seen_connections.add(key)
    transport = via.split("/", 1)[0]
    summary.connections.append(
        {
            "channel": int(channel),
            "conn": int(conn or 0),
            "src": int(src),
            "dst": int(dst),
            "src_dev": src_dev,
            "dst_dev": dst_dev,
            "direction": direction,
            "transport": transport,
            "via": via,
        }
    )
    _keep(summary, f"transport:{transport}", line)


def _add_graph(m: re.Match, line: str, summary: NcclLogSummary) -> None:
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
            "line": line.strip(),
            "gpus": [],  # per channel, its GPUs' topology ids (hex PCI bus ids) in ring / chain order
        }
    )


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
        # >= 2.24 log count x type size: one rank's piece of an all-gather / reduce-scatter; <= 2.23 log the
        # larger of the send and receive buffers (the gathered output). Equal for all-reduce.
        "bytes_scope": "per_rank" if lo is not None else "largest_buffer",
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


def _add_op(m: re.Match, source: tuple, summary: NcclLogSummary, state: _State) -> None:
    """COLL lines of one process (the first that logs them): every rank logs the same sequence."""
    if state.op_source is None:
        state.op_source = source
    if source != state.op_source:
        return
    coll, op_count, count, datatype, _op, _root, comm, nranks = m.groups()
    name, size = DATATYPES.get(int(datatype), (f"datatype {datatype}", None))
    summary.ops.append(
        {
            "coll": coll,
            "op_count": int(op_count, 16),
            "count": int(count),
            "datatype": name,
            # count is per rank for all-gather (send) and reduce-scatter (receive), as NCCL's API takes it
            "bytes": int(count) * size if size else None,
            "comm": comm,
            "nranks": int(nranks) if nranks else None,
        }
    )


def _table_header(msg: str, state: _State) -> None:
    cells = [c.strip() for c in msg.split("|")[1:] if c.strip()]
    if msg.startswith("Algorithm"):
        state.table_algos = cells
    elif msg.startswith("Protocol"):
        state.table_columns = [
            (state.table_algos[i // 3] if i // 3 < len(state.table_algos) else "?", proto)
            for i, proto in enumerate(cells)
        ]
    else:  # "Latency/AlgBw |    Tree/    LL |    Tree/ LL128 | ..."
        state.table_columns = [tuple(part.strip() for part in c.split("/", 1)) for c in cells if "/" in c]


def _table_row(m: re.Match, summary: NcclLogSummary, state: _State) -> None:
    function, body = m.group(1), m.group(2)
    if not state.table_columns or function == "NThreads":
        return
    row = summary.tuning_table.setdefault(function, {})
    for (algo, proto), cell in zip(state.table_columns, [c for c in body.split("|") if c.strip()]):
        latency, bandwidth = (float(x) for x in cell.split("/"))
        row.setdefault(f"{algo.upper()}/{proto.upper()}", {"latency_us": latency, "bw_gbps": bandwidth})


def _close_rings(summary: NcclLogSummary, state: _State) -> None:
    """Rings rebuilt from every rank's "Ring c : prev -> rank -> next" line, where the log holds them all."""
    for _channel, nxt in sorted(state.ring_hops.items()):
        ring, on_ring, rank = [], set(), min(nxt)
        while rank in nxt and rank not in on_ring:
            ring.append(rank)
            on_ring.add(rank)
            rank = nxt[rank]
        if rank == ring[0] and len(ring) == len(nxt):
            _add_ring(ring, summary, state)


def _add_ring(ring: list[int], summary: NcclLogSummary, state: _State) -> None:
    if tuple(ring) not in state.seen_rings:
        state.seen_rings.add(tuple(ring))
        summary.rings.append(ring)


def choice_matches(choice: dict[str, Any], collective: str, input_bytes: int, output_bytes: int) -> bool:
    """Whether a TUNING choice is NCCL's decision for a step-plan op of `collective` ("all_reduce", ...).

    NCCL >= 2.24 logs task->count x type size (src/enqueue.cc, the TUNING line of scheduleCollTasksToPlan): one
    rank's piece, the smaller buffer (an all-gather's input, a reduce-scatter's output); <= 2.23 the larger one
    (nBytes of getAlgoInfo); lines without a collective (2.20-2.22) match on size alone.
    """
    logged = named(COLLECTIVES, choice.get("coll")) if choice.get("coll") else None
    if choice.get("coll") and (logged is None or logged.model != collective):
        return False
    per_rank = choice.get("bytes_scope") == "per_rank"
    size = min(input_bytes, output_bytes) if per_rank else max(input_bytes, output_bytes)
    return choice.get("bytes") == size
