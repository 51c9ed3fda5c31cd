"""Topology presets for the simulator: what NCCL would find on a box, the box's floor figures and latency models
of the other all-reduces (commprof.costmodel.kernels).

A topology is a TOML file (presets in sweeps/topologies/, shipped as commprof/shipped/topologies/). Every figure in it
is an input to NCCL's model or a published measurement, and the file says which and where it comes from. Loading validates every key
and names the file and key of anything wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from commprof.costmodel.box import BoxTopology
from commprof.costmodel.kernels import KernelModel, floor_from_table, kernel_model_from_table
from commprof.costmodel.latency import LINKS, CostParams, arch_of, nccl_prior
from commprof.errors import UsageError
from commprof.evidence import ModelError
from commprof.floor.model import FloorFigures
from commprof.nccl_vocab import DEFAULT_P2P_LEVEL, NCCL_PATH_TYPES, P2P_LEVELS, nccl_user_p2p_level
from commprof.problems import MISSING, Problems, allowed
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


TOPOLOGY_KEYS = (
    "name",
    "description",
    "gpus",
    "compute_capability",
    "gpu_path",
    "p2p_supported",
    "p2p_atomics",
    "launch_overhead_us",
    "assumptions",
    "sources",
    "links",
    "impls",
    "floor",
)
LINK_KEYS = (
    "channels",
    "channel_bw_gbps",
    "nvls_channels",
    "hop_us",
    "overhead_us",
    "nccl_bw_gbps",
    "max_bus_gbps",
    "source",
)
PROTOCOL_KEYS = ("LL", "LL128", "Simple")


def topology_from_dict(data: dict, path: str) -> Topology:
    """Validate a parsed topology file; UsageError lists every problem as "file: key: problem (allowed: ...)"."""
    problems = Problems(path)
    problems.unknown_keys(data, TOPOLOGY_KEYS, "")
    name = problems.string(data.get("name", MISSING), "name")
    description = problems.string(data.get("description", MISSING), "description")
    gpus = problems.integer(data.get("gpus", MISSING), "gpus", 1)
    capability = problems.number(data.get("compute_capability", MISSING), "compute_capability", 0.0, strict=True)
    gpu_path = data.get("gpu_path", MISSING)
    gpu_path = problems.choice(
        gpu_path.upper() if isinstance(gpu_path, str) else gpu_path, "gpu_path", PATH_TYPES[1:], "a path type"
    )
    p2p_supported = problems.boolean(data.get("p2p_supported", MISSING), "p2p_supported")
    p2p_atomics = problems.boolean(data["p2p_atomics"], "p2p_atomics") if "p2p_atomics" in data else None
    launch_overhead = problems.number(data.get("launch_overhead_us", MISSING), "launch_overhead_us", None)
    assumptions = problems.string(data.get("assumptions", MISSING), "assumptions")
    sources = problems.strings(data.get("sources", MISSING), "sources")
    links = _links(problems.table(data.get("links", MISSING), "links"), problems)
    impls = {
        impl: model
        for impl, table in problems.table(data.get("impls"), "impls").items()
        if (model := kernel_model_from_table(impl, problems.table(table, f"impls.{impl}"), problems)) is not None
    }
    floor = floor_from_table(data["floor"], problems) if "floor" in data else None
    problems.raise_if_any()
    return Topology(
        name=name,
        path=path,
        description=description,
        gpus=gpus,
        compute_capability=capability,
        gpu_path=gpu_path,
        p2p_supported=p2p_supported,
        p2p_atomics=p2p_atomics,
        launch_overhead_us=launch_overhead,
        links=links,
        impls=impls,
        floor=floor,
        assumptions=assumptions,
        sources=sources,
    )


def _links(tables: dict, problems: Problems) -> dict[str, LinkSpec]:
    links = {}
    for link, table in tables.items():
        key = f"links.{link}"
        if link not in LINKS:
            problems.error(key, f"unknown link type {allowed(LINKS)}")
            continue
        table = problems.table(table, key)
        problems.unknown_keys(table, LINK_KEYS, key)
        channels = problems.integer(table.get("channels", MISSING), f"{key}.channels", 1)
        bandwidth = problems.number(table.get("channel_bw_gbps", MISSING), f"{key}.channel_bw_gbps", 0.0, strict=True)
        nvls_channels = problems.integer(table.get("nvls_channels", 0), f"{key}.nvls_channels", 0)
        measured = _measured(table, key, problems)
        if channels is not None and bandwidth is not None and nvls_channels is not None and measured is not None:
            links[link] = LinkSpec(channels, bandwidth, nvls_channels, **measured)
    if not tables:
        problems.error("links", f"empty (allowed: at least one of {', '.join(LINKS)})")
    return links


def _measured(table: dict, key: str, problems: Problems) -> dict | None:
    """A link's published figures that replace NCCL's (hop_us per protocol, overhead_us, nccl_bw_gbps, max_bus_gbps),
    which need a source; {} when the link keeps NCCL's figures, None when one is wrong."""
    if "hop_us" not in table:
        for name in ("overhead_us", "nccl_bw_gbps", "max_bus_gbps"):
            if name in table:
                problems.error(f"{key}.{name}", "needs hop_us: measured figures replace NCCL's as a set")
        return {}
    hops = problems.table(table["hop_us"], f"{key}.hop_us")
    problems.unknown_keys(hops, PROTOCOL_KEYS, f"{key}.hop_us")
    hop_us = {p: problems.number(hops.get(p, MISSING), f"{key}.hop_us.{p}", 0.0) for p in PROTOCOL_KEYS}
    overhead = problems.number(table.get("overhead_us", 0.0), f"{key}.overhead_us", 0.0)
    nccl_bw = table.get("nccl_bw_gbps")
    nccl_bw = problems.number(nccl_bw, f"{key}.nccl_bw_gbps", 0.0, strict=True) if nccl_bw is not None else None
    max_bus = table.get("max_bus_gbps")
    max_bus = problems.number(max_bus, f"{key}.max_bus_gbps", 0.0, strict=True) if max_bus is not None else None
    source = problems.string(table.get("source", MISSING), f"{key}.source")
    if None in hop_us.values() or overhead is None or source is None:
        return None
    figures = {"hop_us": hop_us, "overhead_us": overhead, "nccl_bw_gbps": nccl_bw, "source": source}
    return figures | {"max_bus_gbps": max_bus}


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
