"""The user's own box as the simulator sees it, read from a `doctor --collect` bundle: every fact with its file:line.

`box_from_bundle(DIR)` reads nvidia-smi topo -m (per-pair levels, NUMA node of each GPU), nvidia-smi -q (GPU names,
PCIe generation and width, BAR1, atomics), lscpu (CPU vendor, model, sockets) and nvml.json where present (P2P
status per pair). A fact the bundle lacks is a stated assumption. `BoxTopology.transport` says, per pair, what NCCL
would choose under an environment (commprof.costmodel.nccl_paths); an NCCL log can override it with what NCCL chose.
Pure apart from reading the bundle's files once.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from commprof.costmodel.latency import arch_of_gpu_name
from commprof.costmodel.nccl_paths import PATHS_CC, PairTransport, nccl_path, pair_transport
from commprof.doctor.bundle import read_bundle
from commprof.doctor.facts import Facts
from commprof.doctor.parse_nvsmi import parse_topo_matrix
from commprof.errors import UsageError
from commprof.nccl_vocab import P2P_LEVEL_VARIABLES


@dataclass(frozen=True)
class Fact:
    """One derived fact and where it comes from: "nvidia_topo.log:3", "nvml.json", or "assumed: why"."""

    value: Any
    source: str

    @property
    def assumed(self) -> bool:
        return self.source.startswith("assumed")

    def to_dict(self) -> dict:
        return {"value": self.value, "source": self.source}


@dataclass(frozen=True)
class BoxGpu:
    index: int
    name: Fact
    bus_id: Fact
    numa_node: Fact
    compute_capability: Fact
    pcie_gen_max: Fact
    pcie_width_max: Fact
    bar1_mib: Fact
    atomics_outbound: Fact

    def to_dict(self) -> dict:
        return {"index": self.index, **{k: v.to_dict() for k, v in vars(self).items() if isinstance(v, Fact)}}


@dataclass(frozen=True)
class BoxPair:
    """Two GPUs: the path as nvidia-smi prints it and as NCCL names it, NVML's P2P status, and what NCCL chose
    (from an NCCL log) where one was given."""

    a: int
    b: int
    level: Fact  # nvidia-smi topo -m cell: PIX, PXB, PHB, NODE, SYS, NV#
    p2p_ok: Fact  # NVML P2P read and write both OK (None: not recorded)
    observed: Fact | None = None  # the transport an NCCL log shows for this pair

    @property
    def path(self) -> str:
        return nccl_path(self.level.value) or "SYS"


@dataclass(frozen=True)
class BoxTopology:
    """A box read from its own records: GPUs, pairs, sockets, CPU; `assumptions` lists what was not recorded."""

    name: str
    origin: str
    gpus: tuple[BoxGpu, ...]
    pairs: tuple[BoxPair, ...]
    cpu_vendor: Fact
    cpu_model: Fact
    sockets: Fact
    assumptions: tuple[str, ...] = ()
    nccl_log: str | None = None
    nccl_log_env: dict[str, str] = field(default_factory=dict)  # the P2P variables the log ran under

    def pair(self, a: int, b: int) -> BoxPair:
        a, b = min(a, b), max(a, b)
        return next(p for p in self.pairs if (p.a, p.b) == (a, b))

    def predicted(self, pair: BoxPair, env: Mapping[str, str], ranks: int) -> PairTransport:
        """NCCL's choice for the pair by its rules (paths.cc), from the bundle's facts."""
        return pair_transport(pair.path, env, self.cpu_vendor.value, ranks, pair.p2p_ok.value)

    def transport(self, pair: BoxPair, env: Mapping[str, str], ranks: int) -> tuple[str, str]:
        """(transport, where it comes from): the NCCL log's where it shows the pair under NCCL's defaults, else the
        rule of paths.cc on the bundle's facts."""
        if pair.observed is not None and _p2p_env(env) == self.nccl_log_env:
            return pair.observed.value, pair.observed.source
        chosen = self.predicted(pair, env, ranks)
        return chosen.transport, f"paths.cc rule: {chosen.reason}; path from {pair.level.source}"

    def ring_link(self, env: Mapping[str, str], ranks: int) -> str:
        """The simulator's transport for a ring over GPUs 0..ranks-1: "shm" when any pair among them goes through
        host memory (a ring step waits for its slowest hop, and a ring over both sockets crosses a SHM pair),
        "nvlink" when every pair is NVLink, else "pci"."""
        group = [p for p in self.pairs if p.a < ranks and p.b < ranks]
        kinds = {self.transport(p, env, ranks)[0] for p in group}
        if "SHM" in kinds:
            return "shm"
        return "nvlink" if group and all(p.path == "NVL" for p in group) else "pci"

    def pair_table(self, settings: Mapping[str, Mapping[str, str]], ranks: int) -> list[dict]:
        """Per pair: level, NCCL path, P2P status and the transport under each named setting, with sources."""
        rows = []
        for p in self.pairs:
            if p.a >= ranks or p.b >= ranks:
                continue
            row = {
                "pair": [p.a, p.b],
                "level": p.level.to_dict(),
                "nccl_path": p.path,
                "p2p_ok": p.p2p_ok.to_dict(),
                "transport": {},
            }
            for label, env in settings.items():
                transport, source = self.transport(p, env, ranks)
                row["transport"][label] = {"transport": transport, "source": source}
            rows.append(row)
        return rows

    def summary(self, ranks: int | None = None) -> dict:
        ranks = ranks or len(self.gpus)
        settings = {"defaults": {}, **{f"NCCL_P2P_LEVEL={lv}": {"NCCL_P2P_LEVEL": lv} for lv in ("PXB", "PHB", "SYS")}}
        settings["NCCL_P2P_DISABLE=1"] = {"NCCL_P2P_DISABLE": "1"}
        return {
            "name": self.name,
            "origin": self.origin,
            "nccl_log": self.nccl_log,
            "nccl_log_env": dict(self.nccl_log_env),
            "cpu_vendor": self.cpu_vendor.to_dict(),
            "cpu_model": self.cpu_model.to_dict(),
            "sockets": self.sockets.to_dict(),
            "gpus": [g.to_dict() for g in self.gpus],
            "pairs": self.pair_table(settings, ranks),
            "transport_rule": PATHS_CC,
            "assumptions": list(self.assumptions),
        }


def transport_lines(box: BoxTopology, ranks: int) -> list[str]:
    """What the terminal says of a box read from a bundle: per P2P setting, how many pairs get each transport."""
    summary = box.summary(ranks)
    lines = [
        f"box {box.name}: {len(summary['pairs'])} GPU pairs in TP {ranks}; NCCL's transport per pair ({PATHS_CC}):"
    ]
    for setting in summary["pairs"][0]["transport"] if summary["pairs"] else []:
        kinds = Counter(p["transport"][setting]["transport"] for p in summary["pairs"])
        logged = sum("NCCL's own choice" in p["transport"][setting]["source"] for p in summary["pairs"])
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        lines.append(f"  {setting}: {counts}" + (f" ({logged} as the NCCL log shows)" if logged else ""))
    lines += [f"  assumed: {a}" for a in box.assumptions]
    lines.append("  every fact's file and line: meta.json topology.box")
    return lines


def _p2p_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in P2P_LEVEL_VARIABLES}


# Compute capability by product name (NVIDIA's CUDA GPU list, developer.nvidia.com/cuda-gpus); nvidia-smi -q
# does not print it. First match wins.
_CAPABILITIES = (
    (re.compile(r"RTX PRO \d+ Blackwell|RTX 50[5-9]0"), 12.0),
    (re.compile(r"\bG?B[12]00\b"), 10.0),
    (re.compile(r"\bG?H(100|200|800|20)\b"), 9.0),
    (re.compile(r"RTX 40[5-9]0|\bL40S?\b|\bL4\b|RTX \d+ Ada"), 8.9),
    (re.compile(r"RTX 30[5-9]0|RTX A\d{4}|\bA(10|40)\b"), 8.6),
    (re.compile(r"\bA(100|800|30)\b"), 8.0),
)


def capability_of_name(name: str) -> float | None:
    """A GPU's compute capability by its product name (_CAPABILITIES), or None where it is not listed."""
    return next((capability for pattern, capability in _CAPABILITIES if name and pattern.search(name)), None)


def _capability(name: Fact) -> Fact:
    capability = capability_of_name(name.value or "")
    if capability is not None:
        return Fact(capability, f"{name.source} (product name; NVIDIA's CUDA GPU list)")
    arch = arch_of_gpu_name(name.value or "")
    fallback = {"blackwell": 10.0, "hopper": 9.0, "ampere": 8.0, "volta": 7.0}.get(arch or "", 8.0)
    return Fact(fallback, f"assumed: compute capability of {name.value!r} not known; {fallback} ({arch or 'ampere'})")


def _lines(text: str | None) -> list[str]:
    return (text or "").splitlines()


def _smi_sections(text: str | None, where: str) -> list[dict[str, Fact]]:
    """Per GPU section of nvidia-smi -q, the fields the simulator needs, each with its line."""
    sections: list[dict[str, Fact]] = []
    stack: list[tuple[int, str]] = []
    for number, raw in enumerate(_lines(text), 1):
        line = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw).rstrip()
        if re.match(r"^GPU [0-9A-Fa-f]{4,}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$", line):
            sections.append({})
            stack = []
            continue
        if not sections or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([k for _, k in stack] + [key.strip()])
        if sep and value.strip():
            sections[-1].setdefault(path, Fact(value.strip(), f"{where}:{number}"))
        else:
            stack.append((indent, key.strip()))
    return sections


def _number(fact: Fact | None, what: str, where: str) -> Fact:
    if fact is None:
        return Fact(None, f"assumed unknown: {what} not in {where}")
    m = re.match(r"\d+", fact.value)
    return Fact(int(m.group(0)) if m else None, fact.source)


def _lscpu(text: str | None, where: str, key: str) -> Fact | None:
    for number, line in enumerate(_lines(text), 1):
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:
            return Fact(value.strip(), f"{where}:{number}")
    return None


def _pairs(facts: Facts, where: str) -> tuple[dict[tuple[int, int], Fact], dict[int, Fact]]:
    """Per pair (a < b) its topo -m cell, per GPU its NUMA node; each with the row's line."""
    text = facts.text("nvidia_topo")
    header = None
    levels: dict[tuple[int, int], Fact] = {}
    numa: dict[int, Fact] = {}
    for number, line in enumerate(_lines(text), 1):
        cells = [c.strip() for c in re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line).split("\t") if c.strip()]
        if header is None and cells and cells[0].startswith("GPU"):
            header = line
            continue
        if header is None or not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        row = parse_topo_matrix(f"{header}\n{line}")
        for (a, b), level in row["levels"].items():
            if a < b:
                levels[(a, b)] = Fact(level, f"{where}:{number}")
        for gpu, node in row["numa"].items():
            numa[gpu] = Fact(node, f"{where}:{number}")
    return levels, numa


def _nvml_p2p(facts: Facts) -> dict[tuple[int, int], bool]:
    out = {}
    for pair in (facts.topology or {}).get("pairs") or []:
        gpus, p2p = pair.get("gpus"), pair.get("p2p") or {}
        if isinstance(gpus, list) and len(gpus) == 2 and p2p:
            out[(min(gpus), max(gpus))] = p2p.get("read") == "ok" and p2p.get("write") == "ok"
    return out


def box_from_bundle(directory: Path) -> BoxTopology:
    """The box a bundle describes; UsageError when it holds no nvidia-smi topo -m matrix (the pairs)."""
    facts = read_bundle(directory, "--from-bundle")
    topo = facts.source("nvidia_topo")
    if not topo.ok:
        raise UsageError(
            f"--from-bundle {directory}: no nvidia-smi topo -m in the bundle ({topo.why_missing()}); "
            "the GPU pairs come from it: collect one with `commprof doctor --collect DIR`"
        )
    topo_where = topo.where
    levels, numa = _pairs(facts, topo_where)
    indices = sorted({i for pair in levels for i in pair})
    if len(indices) < 2:
        raise UsageError(f"--from-bundle {directory}: {topo_where} shows fewer than 2 GPUs")
    smi = facts.source("nvidia_smi_full")
    sections = _smi_sections(smi.text, smi.where) if smi.ok else []
    assumptions: list[str] = []
    if not smi.ok:
        assumptions.append(f"GPU names, PCIe links and BAR1 unknown ({smi.why_missing()})")
    gpus = []
    for index in indices:
        section = sections[index] if index < len(sections) else {}
        name = section.get("Product Name") or Fact(None, f"assumed unknown: no nvidia-smi -q section for GPU {index}")
        gpus.append(
            BoxGpu(
                index=index,
                name=name,
                bus_id=section.get("PCI/Bus Id") or Fact(None, "assumed unknown: no bus id"),
                numa_node=numa.get(index) or Fact(None, "assumed unknown: no NUMA affinity"),
                compute_capability=_capability(name),
                pcie_gen_max=_number(
                    section.get("PCI/GPU Link Info/PCIe Generation/Max"), "PCIe generation", smi.where
                ),
                pcie_width_max=_number(section.get("PCI/GPU Link Info/Link Width/Max"), "link width", smi.where),
                bar1_mib=_number(section.get("BAR1 Memory Usage/Total"), "BAR1 size", smi.where),
                atomics_outbound=section.get("PCI/Atomic Caps Outbound")
                or Fact(None, "assumed unknown: Atomic Caps Outbound not printed"),
            )
        )
    nvml = _nvml_p2p(facts)
    if not nvml:
        assumptions.append(
            "NVML P2P status per pair not in the bundle (no nvml.json): every pair taken as P2P-capable, as "
            "professional and data-centre drivers allow; `commprof doctor --collect` on the box records it"
        )
    pairs = tuple(
        BoxPair(
            a,
            b,
            level,
            Fact(nvml[(a, b)], "nvml.json") if (a, b) in nvml else Fact(None, "assumed OK: NVML status not recorded"),
        )
        for (a, b), level in sorted(levels.items())
    )
    cpu = facts.source("lscpu")
    vendor_fact = _lscpu(cpu.text, cpu.where, "Vendor ID")
    vendor = Fact(
        {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(vendor_fact.value, vendor_fact.value)
        if vendor_fact
        else None,
        vendor_fact.source
        if vendor_fact
        else f"assumed unknown: {cpu.why_missing() if not cpu.ok else 'no Vendor ID'}",
    )
    if vendor.value is None:
        assumptions.append("CPU vendor unknown: NCCL's AMD rule for <= 2 GPUs (P2P level SYS) not applied")
    model = _lscpu(cpu.text, cpu.where, "Model name") or Fact(None, "assumed unknown: no lscpu Model name")
    sockets_fact = _lscpu(cpu.text, cpu.where, "Socket(s)")
    sockets = (
        Fact(int(sockets_fact.value), sockets_fact.source)
        if sockets_fact and sockets_fact.value.isdigit()
        else Fact(len({g.numa_node.value for g in gpus} - {None}) or 1, "assumed: the GPUs' NUMA nodes counted")
    )
    return BoxTopology(
        name=directory.name,
        origin=str(directory),
        gpus=tuple(gpus),
        pairs=pairs,
        cpu_vendor=vendor,
        cpu_model=model,
        sockets=sockets,
        assumptions=tuple(assumptions),
    )


_CONNECTION = re.compile(r"Channel \d+(?:/\d+)? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\](?: \[\w+\])? via (\w+)")


def with_nccl_log(box: BoxTopology, text: str, path: str, log_env: Mapping[str, str]) -> BoxTopology:
    """The box with the transport an NCCL INFO log shows per pair ("Channel 00 : 0[0] -> 1[1] via P2P/CUMEM"),
    rank i taken as GPU i of the bundle (one process per GPU, in order). `log_env`: the NCCL_P2P_* variables the log
    says were set (commprof.nccl_log.parse); its transports stand for points run under the same."""
    observed: dict[tuple[int, int], Fact] = {}
    for number, line in enumerate(text.splitlines(), 1):
        m = _CONNECTION.search(line)
        if not m:
            continue
        a, b, kind = int(m.group(1)), int(m.group(2)), m.group(3).upper()
        key = (min(a, b), max(a, b))
        if kind in ("P2P", "SHM") and key not in observed:
            observed[key] = Fact(kind, f"{path}:{number} (NCCL's own choice in its log)")
    pairs = tuple(replace(p, observed=observed.get((p.a, p.b))) for p in box.pairs)
    notes = [f"rank i of {path} taken as GPU i of the bundle ({len(observed)} pairs shown)"] if observed else []
    if not observed:
        notes.append(f"{path} shows no GPU-to-GPU connection line: transports predicted from the bundle only")
    env = _p2p_env(log_env)
    return replace(box, pairs=pairs, nccl_log=path, nccl_log_env=env, assumptions=box.assumptions + tuple(notes))


@dataclass(frozen=True)
class LinkFigures:
    """The box's PCIe figures the prior uses: the slowest GPU link's generation and width."""

    gen: Fact
    width: Fact
    notes: list[str] = field(default_factory=list)


def link_figures(box: BoxTopology) -> LinkFigures:
    gens = [g.pcie_gen_max for g in box.gpus if g.pcie_gen_max.value]
    widths = [g.pcie_width_max for g in box.gpus if g.pcie_width_max.value]
    gen = min(gens, key=lambda f: f.value) if gens else Fact(4, "assumed: PCIe Gen4 (no link generation recorded)")
    width = min(widths, key=lambda f: f.value) if widths else Fact(16, "assumed: x16 (no link width recorded)")
    return LinkFigures(gen, width)
