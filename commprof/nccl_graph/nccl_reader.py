"""Read an NCCL_GRAPH_FILE by NCCL's own rules, so a file is judged as NCCL will load it, not as XML would.

The rules, from NCCL 2.27.3-2.30.7 src/graph/xml.cc (xmlGetNode, xmlGetToken, xmlGetValue, xmlSkipComment,
xmlLoadSub, ncclTopoGetXmlGraphFromFile and its ncclTopoXmlGraphLoad* handlers), src/graph/xml.h (xmlGetAttr*,
kvConvertToInt) and src/graph/search.cc (ncclTopoGetGraphFromXmlSub, ncclTopoGetChannelFromXml):
only spaces and line ends separate elements (a tab is a parse error); values must be quoted (' or ");
names and values hold at most 254 characters; `<!-- ... -->` comments are skipped; elements other than
graphs > graph > channel > gpu | net are ignored with all they hold; a closing tag must name its element;
<graphs version> must be 1; every <graph> attribute but latencyinter is required; ints parse as C strtol base 0,
floats as strtof, a <gpu>/<net> `dev` as strtol base 16, a <gpu> `rank` (read since 2.30) as strtol base 0;
typeintra / typeinter match a kvDictLinkType prefix, else NCCL silently uses LOC (an error here). Pure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from commprof.nccl_graph.graph_file import GRAPH_ATTRIBUTES, GRAPH_XML_VERSION, OPTIONAL_GRAPH_ATTRIBUTES, PATH_TYPES

MAX_STR_LEN = 255  # xml.h: a name or value holds MAX_STR_LEN - 1 characters
MAX_ATTR_COUNT = 16  # xml.h: later attributes are read and dropped
MAX_SUBS = 640  # xml.h: sub-elements per element
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1  # C long on the 64-bit Linux NCCL runs on
MAX_CHANNELS = 64  # src/include/device.h MAXCHANNELS (2.27-2.30): graph->intra holds this many channels
MAX_GPU_DEV = 255  # src/graph/topo.h NCCL_TOPO_MAX_NODES 256: a GPU's dev indexes the node's GPUs
# xmlLoadSub handlers of ncclTopoGetXmlGraphFromFile: element -> the sub-elements it keeps.
HANDLERS = {None: ("graphs",), "graphs": ("graph",), "graph": ("channel",), "channel": ("net", "gpu")}
_SPACE, _END_OF_NAME = " \n\r", " >/\n\r"
_FLOAT = re.compile(r"\s*[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.I)


class GraphFileError(ValueError):
    """The file NCCL would refuse (or misread), with where and why."""


@dataclass
class Node:
    name: str
    attrs: dict[str, str] = field(default_factory=dict)
    subs: list[Node] = field(default_factory=list)


@dataclass(frozen=True)
class ReadChannel:
    gpus: tuple[int, ...]  # `dev` of each <gpu>, in order
    ranks: tuple[int | None, ...]  # `rank` of each <gpu> where given (NCCL >= 2.30 uses it instead of dev)
    nets: tuple[int, ...]


@dataclass(frozen=True)
class ReadGraph:
    id: int
    pattern: int
    crossnic: int
    nchannels: int  # the attribute; NCCL also counts the <channel> elements and uses the attribute's channels
    speedintra: float
    speedinter: float
    latencyinter: float
    typeintra: str
    typeinter: str
    samechannels: int
    channels: tuple[ReadChannel, ...]


@dataclass(frozen=True)
class ReadFile:
    version: int
    graphs: tuple[ReadGraph, ...]
    ignored: tuple[str, ...]  # elements NCCL skips ("Ignoring element ..."): usually a typo


class _Reader:
    def __init__(self, text: str):
        self.text, self.pos = text, 0
        self.roots: list[Node] = []  # the top-level elements kept

    def char(self) -> str:
        if self.pos >= len(self.text):
            raise GraphFileError("unexpected end of file (XML Parse : Unexpected EOF)")
        c = self.text[self.pos]
        self.pos += 1
        return c

    def token(self, want_value: bool) -> tuple[str, str | None, str]:
        """xmlGetToken: (name, value or None, the character that ended it)."""
        name = ""
        while True:
            c = self.char()
            if c == "=":
                if not want_value:
                    raise GraphFileError(f"unexpected value after {name!r}")
                value, last = self.value()
                return name, value, last
            name += c
            if len(name) >= MAX_STR_LEN:
                raise GraphFileError(f"name {name[:20]!r}... too long (max {MAX_STR_LEN - 2})")
            if c in _END_OF_NAME:
                return name[:-1], None, c

    def value(self) -> tuple[str, str]:
        quote = self.char()
        if quote not in "\"'":
            raise GraphFileError(f"expected a quoted value, got {quote!r} (XML Parse : Expected (double) quote)")
        end = self.text.find(quote, self.pos)
        if end < 0:
            raise GraphFileError("unterminated value (XML Parse : Unexpected EOF)")
        value = self.text[self.pos : end]
        if len(value) > MAX_STR_LEN - 2:
            raise GraphFileError(f"value {value[:20]!r}... too long (max {MAX_STR_LEN - 2})")
        self.pos = end + 1
        return value, self.char()

    def node(self) -> tuple[str, Node | None]:
        """xmlGetNode: ("none", None) at the end, ("close", Node), ("open", Node) or ("single", Node); comments
        skipped in a loop (a file of many comments needs no stack)."""
        while True:
            c = " "
            while c in _SPACE:
                if self.pos >= len(self.text):
                    return "none", None
                c = self.char()
            if c != "<":
                raise GraphFileError(f"expecting '<', got {c!r} at character {self.pos}")
            start = self.pos
            name, _, c = self.token(False)
            if not name.startswith("!--"):
                break
            end = self.text.find("-->", start + 3)
            if end < 0:
                raise GraphFileError("unterminated comment")
            self.pos = end + 3
        if name == "" and c == "/":
            name, _, c = self.token(False)
            if c != ">":
                raise GraphFileError(f"unexpected trailing {c!r} in closing tag {name}")
            return "close", Node(name)
        node = Node(name)
        count = 0
        while c == " ":
            key, value, c = self.token(True)
            if count < MAX_ATTR_COUNT:
                node.attrs.setdefault(key, value or "")
            count += 1
        kind = "open"
        if c == "/":
            kind = "single"
            _, _, c = self.token(False)
        if c != ">":
            raise GraphFileError(f"expected '>' in <{name}>, got {c!r}")
        return kind, node

    def load(self, ignored: list[str]) -> None:
        """xmlLoadSub from the top, with a stack of open elements instead of NCCL's recursion (a file nested
        thousands deep needs no Python stack): each open element's sub-elements until its closing tag."""
        stack: list[tuple[Node | None, tuple[str, ...]]] = [(None, HANDLERS[None])]  # an element, what it keeps
        while stack:
            head, keep = stack[-1]
            kind, node = self.node()
            if kind == "none":
                if head is not None:
                    raise GraphFileError(f"unterminated <{head.name}>")
                return
            if kind == "close":
                if head is None or node.name != head.name:
                    raise GraphFileError(f"mismatched closing tag: </{node.name}> in <{head.name if head else ''}>")
                stack.pop()
                continue
            kept = node.name in keep
            if kept and head is not None:
                if len(head.subs) == MAX_SUBS:
                    raise GraphFileError(f"<{head.name}> has more than {MAX_SUBS} sub-elements")
                head.subs.append(node)
            if kept and head is None:
                self.roots.append(node)
            if not kept and keep:
                ignored.append(node.name)
            if kind == "open":
                stack.append((node, HANDLERS.get(node.name, ()) if kept else ()))


def c_strtol(text: str, base: int) -> int:
    """C strtol: leading spaces, a sign, 0x (base 16 or 0), a leading 0 octal (base 0); stops at the first
    character that is no digit; 0 when there is none."""
    s = text.lstrip()
    sign = -1 if s.startswith("-") else 1
    s = s[1:] if s[:1] in "+-" else s
    if base in (0, 16) and s[:2].lower() == "0x" and len(s) > 2 and s[2] in "0123456789abcdefABCDEF":
        s, base = s[2:], 16
    elif base == 0:
        base = 8 if s.startswith("0") and len(s) > 1 else 10
    digits = ""
    for ch in s:
        if ch in "0123456789"[:base] or base > 10 and ch.lower() in "abcdef"[: base - 10]:
            digits += ch
        else:
            break
    if not digits:
        return 0
    digits = digits.lstrip("0") or "0"
    if len(digits) > 24:  # past any long in every base: strtol saturates (ERANGE)
        return LONG_MAX if sign > 0 else LONG_MIN
    return max(LONG_MIN, min(LONG_MAX, sign * int(digits, base)))


def c_strtof(text: str) -> float:
    m = _FLOAT.match(text)
    return float(m.group(0)) if m else 0.0


def read_graph_file(text: str) -> ReadFile:
    """The file as NCCL loads it; GraphFileError where NCCL would fail or silently misread it."""
    reader = _Reader(text)
    ignored: list[str] = []
    reader.load(ignored)
    if not reader.roots:
        raise GraphFileError("no <graphs> element")
    root = reader.roots[0]  # NCCL reads the first one (xml->nodes)
    version = c_strtol(_required(root, "version"), 0)
    if version != GRAPH_XML_VERSION:
        raise GraphFileError(f"XML Graph has wrong version {version}, {GRAPH_XML_VERSION} needed")
    graphs = tuple(_graph(g, i) for i, g in enumerate(root.subs))
    return ReadFile(version, graphs, tuple(ignored))


def _required(node: Node, name: str) -> str:
    if name not in node.attrs:
        raise GraphFileError(f"Attribute {name} of node {node.name} not found")
    return node.attrs[name]


def _graph(node: Node, index: int) -> ReadGraph:
    for name in GRAPH_ATTRIBUTES:
        if name not in OPTIONAL_GRAPH_ATTRIBUTES:
            _required(node, name)
    types = {}
    for name in ("typeintra", "typeinter"):
        value = node.attrs[name]
        match = next((t for t in PATH_TYPES if value.startswith(t)), None)
        if match is None:
            raise GraphFileError(
                f"graph {index}: {name}={value!r} is no path type (allowed: {', '.join(PATH_TYPES)}); "
                "NCCL would silently read LOC"
            )
        types[name] = match
    channels = []
    for channel in node.subs:
        gpus, ranks, nets = [], [], []
        for sub in channel.subs:
            dev = c_strtol(_required(sub, "dev"), 16)
            if sub.name == "net":
                nets.append(dev)
            else:
                gpus.append(dev)
                ranks.append(c_strtol(sub.attrs["rank"], 0) if "rank" in sub.attrs else None)
        channels.append(ReadChannel(tuple(gpus), tuple(ranks), tuple(nets)))
    attr = node.attrs
    graph = ReadGraph(
        id=c_strtol(attr["id"], 0),
        pattern=c_strtol(attr["pattern"], 0),
        crossnic=c_strtol(attr["crossnic"], 0),
        nchannels=c_strtol(attr["nchannels"], 0),
        speedintra=c_strtof(attr["speedintra"]),
        speedinter=c_strtof(attr["speedinter"]),
        latencyinter=c_strtof(attr.get("latencyinter", "0")),
        typeintra=types["typeintra"],
        typeinter=types["typeinter"],
        samechannels=c_strtol(attr["samechannels"], 0),
        channels=tuple(channels),
    )
    if problem := graph_problem(graph):
        raise GraphFileError(f"graph {index}: {problem}")
    return graph


def graph_problem(graph: ReadGraph) -> str | None:
    """What NCCL could not run from a graph it read, naming the field: channels from 1 to MAXCHANNELS, finite
    positive speeds, each channel's GPUs distinct devs from 0 to NCCL_TOPO_MAX_NODES - 1 (a ring visits each once)."""
    if not 1 <= graph.nchannels <= MAX_CHANNELS:
        return f"nchannels={graph.nchannels} is not from 1 to {MAX_CHANNELS} (NCCL's MAXCHANNELS)"
    for name in ("speedintra", "speedinter"):
        value = getattr(graph, name)
        if not (math.isfinite(value) and value > 0):
            return f"{name}={value} is not a finite positive speed (GB/s per channel)"
    if not (math.isfinite(graph.latencyinter) and graph.latencyinter >= 0):
        return f"latencyinter={graph.latencyinter} is not a finite latency from 0 µs"
    for number, channel in enumerate(graph.channels):
        bad = next((d for d in channel.gpus if not 0 <= d <= MAX_GPU_DEV), None)
        if bad is not None:
            return f"channel {number}: gpu dev={bad:#x} is not from 0 to {MAX_GPU_DEV:#x} (NCCL_TOPO_MAX_NODES)"
        if len(set(channel.gpus)) != len(channel.gpus):
            seen = sorted({d for d in channel.gpus if channel.gpus.count(d) > 1})
            return f"channel {number}: gpu dev={seen[0]:#x} appears more than once (a ring visits each GPU once)"
    return None
