"""Topology presets for the simulator: what NCCL would find on a box, the box's floor figures and latency models
of the other all-reduces (commprof.costmodel.kernels).

A topology is a TOML file (presets in sweeps/topologies/, shipped as commprof/shipped/topologies/). Every figure in it
is an input to NCCL's model or a published measurement, and the file says which and where it comes from. Loading reads
it as its typed structure (TopologyFile) and names the file and key of anything wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import msgspec

from commprof.costmodel.box import BoxTopology
from commprof.costmodel.calibration_file import PARAM_BOUNDS
from commprof.costmodel.kernels import KernelModel, floor_from_table, kernel_model_from_table
from commprof.costmodel.latency import LINKS, CostParams, arch_of, nccl_prior
from commprof.errors import UsageError
from commprof.evidence import ModelError
from commprof.floor.model import FloorFigures
from commprof.impls.registry import BUILTINS
from commprof.nccl_vocab import DEFAULT_P2P_LEVEL, MODEL_PROTOCOLS, NCCL_PATH_TYPES, P2P_LEVELS, nccl_user_p2p_level
from commprof.problems import Boolean, Problems, String, allowed, choice, integer, number, table
from commprof.records.values import MAX_RANKS
from commprof.shipped_files import TOPOLOGY_DIRS as PRESET_DIRS
from commprof.textfiles import parse_toml, read_text

# PCIe path types as nvidia-smi topo -m and NCCL_P2P_LEVEL name them, nearest first.
PATH_TYPES = P2P_LEVELS


@dataclass(frozen=True)
class LinkSpec:
    """NCCL's view of the box when its GPUs talk over this transport."""

    channels: int
    channel_bw_gbps: float
    nvls_channels: int = 0
    # Published measurements of this path that replace NCCL's table figures (None: NCCL's own), with their source.
    hop_us: dict[str, float] | None = None
    overhead_us: float = 0.0
    nccl_bw_gbps: float | None = None  # what NCCL's own search assumes per channel, when the measured figure differs
    max_bus_gbps: float | None = None  # the links' measured capacity: no protocol's bus bandwidth goes beyond it
    source: str = ""

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if v not in (None, "", 0.0) or k in ("channels", "nvls_channels")}


@dataclass(frozen=True)
class Topology:
    name: str
    path: str
    description: str
    gpus: int
    compute_capability: float
    gpu_path: str
    p2p_supported: bool
    launch_overhead_us: float
    links: dict[str, LinkSpec]
    p2p_atomics: bool | None = None  # native atomics on peer memory between every pair; None: the file does not say
    impls: dict[str, KernelModel] = field(default_factory=dict)
    floor: FloorFigures | None = None  # published peer-to-peer figures of this class of box, with sources
    assumptions: str = ""
    sources: tuple[str, ...] = ()
    box: BoxTopology | None = None  # the box's own records, when the topology was read from a doctor bundle
    prior_error: ModelError | None = None  # the prior's expected error on this box (None: NCCL's, from the logs)

    @property
    def arch(self) -> str:
        return arch_of(self.compute_capability)

    def prior(self, link: str, arch: str | None = None) -> CostParams:
        """NCCL's own model of this box over `link` (with another GPU generation's figures when `arch` says)."""
        spec = self.links[link]
        prior = nccl_prior(link, arch or self.arch, spec.channels, spec.channel_bw_gbps, spec.nvls_channels)
        if spec.hop_us is None:
            return prior
        return replace(
            prior,
            hop_us=dict(spec.hop_us),
            overhead_us=spec.overhead_us,
            nccl_bw_gbps=spec.nccl_bw_gbps,
            max_bus_gbps=spec.max_bus_gbps,
            source=f"box prior: {spec.source}",
        )

    def summary(self) -> dict:
        return {
            "name": self.name,
            "path": self.path,
            "description": self.description,
            "gpus": self.gpus,
            "compute_capability": self.compute_capability,
            "gpu_path": self.gpu_path,
            "p2p_supported": self.p2p_supported,
            "p2p_atomics": self.p2p_atomics,
            "launch_overhead_us": self.launch_overhead_us,
            "links": {k: v.to_dict() for k, v in self.links.items()},
            "impls": {k: v.to_dict() for k, v in self.impls.items()},
            "floor": self.floor.to_dict() if self.floor else None,
            "assumptions": self.assumptions,
            "sources": list(self.sources),
            **({"box": self.box.summary(self.gpus)} if self.box else {}),
            **({"prior_error": self.prior_error.to_dict()} if self.prior_error else {}),
        }


def preset_names() -> list[str]:
    names = set()
    for folder in PRESET_DIRS:
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.toml"))
    return sorted(names)


def preset_descriptions() -> list[tuple[str, str]]:
    """(name, description) of every preset, for `simulate --help`; a preset that does not load says so."""
    out = []
    for name in preset_names():
        try:
            out.append((name, load_topology(name).description))
        except UsageError as exc:
            out.append((name, f"(does not load: {exc})"))
    return out


def resolve_topology(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.is_dir():
        raise UsageError(
            f"--topology {name_or_path} is a folder: for a `doctor --collect` bundle use --from-bundle {name_or_path}"
        )
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise UsageError(f"topology file not found: {name_or_path}")
        return path
    for folder in PRESET_DIRS:
        candidate = folder / f"{name_or_path}.toml"
        if candidate.is_file():
            return candidate
    raise UsageError(
        f"unknown topology {name_or_path!r}; presets: {', '.join(preset_names()) or 'none found'} "
        "(or pass a path to a .toml file)"
    )


def load_topology(name_or_path: str) -> Topology:
    """A preset by name, or a topology file; UsageError lists every problem in it."""
    path = resolve_topology(name_or_path)
    return topology_from_dict(parse_toml(read_text(path, "topology file"), str(path)), str(path))


# [links.<type>.hop_us]: a published per-hop latency for each protocol (the cost model's names), µs
# A link's figures stay inside the bounds a calibration of it may state (calibration_file.PARAM_BOUNDS).
_MOST = {name: high for name, (_, high) in PARAM_BOUNDS.items()}
_LEAST = {name: low for name, (low, _) in PARAM_BOUNDS.items()}
# No host takes a millisecond to launch one kernel (a few µs; PGNCCL's Python issue some tens).
MAX_LAUNCH_OVERHEAD_US = 1_000.0
LinkHopUs = msgspec.defstruct(
    "LinkHopUs",
    [(proto, number(0.0, most=_MOST["hop_us"])) for proto in MODEL_PROTOCOLS],
    frozen=True,
    forbid_unknown_fields=True,
)


class LinkTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """[links.<type>]: NCCL's figures for one transport, and the published measurements that replace NCCL's (as a
    set, with their source)."""

    channels: integer(1, most=_MOST["channels"])  # the channels NCCL runs
    channel_bw_gbps: number(_LEAST["channel_bw_gbps"], most=_MOST["channel_bw_gbps"])  # NCCL's per-channel bus bw
    nvls_channels: integer(0, most=_MOST["nvls_channels"]) = 0
    hop_us: table(LinkHopUs) | None = None  # measured: the per-hop latencies that replace NCCL's (needs a source)
    overhead_us: number(0.0, most=_MOST["overhead_us"]) | None = None  # measured: a fixed per-op overhead (None: 0)
    # what NCCL's own search assumes, where measured differs
    nccl_bw_gbps: number(_LEAST["nccl_bw_gbps"], most=_MOST["nccl_bw_gbps"]) | None = None
    max_bus_gbps: number(0.0, strict=True) | None = None  # the links' measured capacity
    source: String | None = None  # where the measured figures come from


class TopologyFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A topology file (sweeps/topologies/*.toml) as its typed structure; what its type cannot say (the link types,
    measured figures as a set, the kernel models and the floor) topology_from_dict checks."""

    name: String
    description: String
    gpus: integer(1, most=MAX_RANKS)
    compute_capability: number(0.0, strict=True)
    gpu_path: choice(PATH_TYPES[1:], "a path type")  # the worst pair's path type (in any case)
    p2p_supported: Boolean
    p2p_atomics: Boolean | None = None
    launch_overhead_us: number(0.0, most=MAX_LAUNCH_OVERHEAD_US)  # the host's launch overhead, µs
    assumptions: String  # what the preset assumes where no measurement says
    sources: Annotated[list[String], msgspec.Meta(extra={"want": "a list of strings"})]
    links: table(dict[str, Any])  # per link type (LINKS): a LinkTable
    impls: table(dict[str, table(dict[str, Any])]) = {}  # per implementation: its kernel model (kernels.py)
    floor: Any = None  # the box's published floor figures (kernels.floor_from_table)


def topology_from_dict(data: dict, path: str) -> Topology:
    """Validate a parsed topology file; UsageError lists every problem as "file: key: problem (allowed: ...)"."""
    problems = Problems(path)
    if isinstance(data.get("gpu_path"), str):  # path types are read in any case, as nvidia-smi and NCCL read them
        data = {**data, "gpu_path": data["gpu_path"].upper()}
    topology = problems.read(data, TopologyFile)
    links = _links(topology.links, problems) if topology.links is not None else {}
    for impl in topology.impls:  # a misspelt name would model nothing, silently
        if impl not in BUILTINS and ":" not in impl:
            problems.error(
                f"impls.{impl}", f"unknown implementation (allowed: {', '.join(BUILTINS)}, or package.module:Class)"
            )
    impls = {
        impl: model
        for impl, raw in topology.impls.items()
        if raw is not None and (model := kernel_model_from_table(impl, raw, problems)) is not None
    }
    floor = floor_from_table(topology.floor, problems) if "floor" in data else None
    problems.raise_if_any()
    return Topology(
        name=topology.name,
        path=path,
        description=topology.description,
        gpus=topology.gpus,
        compute_capability=topology.compute_capability,
        gpu_path=topology.gpu_path,
        p2p_supported=topology.p2p_supported,
        p2p_atomics=topology.p2p_atomics,
        launch_overhead_us=topology.launch_overhead_us,
        links=links,
        impls=impls,
        floor=floor,
        assumptions=topology.assumptions,
        sources=tuple(topology.sources),
    )


def _links(tables: dict, problems: Problems) -> dict[str, LinkSpec]:
    links = {}
    for link, raw in tables.items():
        if link not in LINKS:
            problems.error(f"links.{link}", f"unknown link type {allowed(LINKS)}")
            continue
        before = len(problems.errors)
        spec = problems.read(raw, table(LinkTable), ("links", link))
        measured = _measured(spec, raw, f"links.{link}", problems) if spec is not None else {}
        if len(problems.errors) == before:
            links[link] = LinkSpec(spec.channels, spec.channel_bw_gbps, spec.nvls_channels, **measured)
    if not tables:
        problems.error("links", f"empty (allowed: at least one of {', '.join(LINKS)})")
    return links


def _measured(spec: LinkTable, raw: Any, key: str, problems: Problems) -> dict:
    """A link's published figures that replace NCCL's (hop_us per protocol, overhead_us, nccl_bw_gbps, max_bus_gbps),
    which need a source, and replace them as a set; {} when the link keeps NCCL's figures."""
    if not isinstance(raw, dict) or "hop_us" not in raw:
        for name in ("overhead_us", "nccl_bw_gbps", "max_bus_gbps"):
            if getattr(spec, name) is not None:
                problems.error(f"{key}.{name}", "needs hop_us: measured figures replace NCCL's as a set")
        return {}
    if spec.source is None and "source" not in raw:
        problems.error(f"{key}.source", "missing (allowed: a string)")
    hop_us = msgspec.structs.asdict(spec.hop_us) if spec.hop_us is not None else None
    figures = {"hop_us": hop_us, "overhead_us": spec.overhead_us or 0.0, "nccl_bw_gbps": spec.nccl_bw_gbps}
    return figures | {"source": spec.source, "max_bus_gbps": spec.max_bus_gbps}


def link_for(topology: Topology, env: Mapping[str, str], ranks: int | None = None) -> str:
    """The transport NCCL uses between GPUs under `env`: "nvlink" / "pci" with P2P, else "shm" (host memory).

    A topology read from a bundle decides per pair as NCCL does (commprof.costmodel.box); a preset by its worst
    pair `gpu_path`. NCCL_P2P_DISABLE / NCCL_P2P_LEVEL are read as NCCL reads them (nccl_vocab.nccl_user_p2p_level).
    """
    if topology.box is not None:
        return topology.box.ring_link(env, ranks or topology.gpus)
    user = nccl_user_p2p_level(env)
    level = user.level if user is not None else DEFAULT_P2P_LEVEL
    if topology.gpu_path == "NVL":
        use_p2p = level != "LOC"
    else:
        path = "PHB" if topology.gpu_path == "NODE" else topology.gpu_path
        use_p2p = topology.p2p_supported and NCCL_PATH_TYPES.index(path) <= NCCL_PATH_TYPES.index(level)
    if not use_p2p:
        return "shm"
    return "nvlink" if topology.gpu_path == "NVL" else "pci"
