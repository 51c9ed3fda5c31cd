"""Topology presets for the simulator: what NCCL would find on a box, and stated latencies of other all-reduces.

A topology is a TOML file (presets in sweeps/topologies/). Every figure in it is an input to NCCL's model
or a published measurement, and the file says which and where it comes from. Loading validates every key
and names the file and key of anything wrong.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

from commprof.costmodel.latency import LINKS, CostParams, arch_of, nccl_prior
from commprof.errors import UsageError
from commprof.nccl_vocab import DEFAULT_P2P_LEVEL, LEGACY_P2P_LEVELS, P2P_LEVELS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# Where the presets live, relative to the repository root (the working directory of a checkout).
PRESET_DIRS = (Path("sweeps/topologies"), Path(__file__).resolve().parents[2] / "sweeps" / "topologies")
# PCIe path types as nvidia-smi topo -m and NCCL_P2P_LEVEL name them, nearest first.
PATH_TYPES = P2P_LEVELS


@dataclass(frozen=True)
class LinkSpec:
    """NCCL's view of the box when its GPUs talk over this transport."""

    channels: int
    channel_bw_gbps: float
    nvls_channels: int = 0


@dataclass(frozen=True)
class StatedImpl:
    """Published latencies of a non-NCCL all-reduce: (bytes, µs) points, NCCL beyond max_bytes."""

    points: tuple[tuple[int, float], ...]
    max_bytes: int | None
    source: str

    def latency_us(self, nbytes: int) -> float:
        """Piecewise linear in bytes; the first figure below the range, the last slope above it."""
        sizes = [p[0] for p in self.points]
        if nbytes <= sizes[0] or len(self.points) == 1:
            return self.points[0][1] if nbytes <= sizes[0] else self.points[-1][1]
        i = min(bisect.bisect_left(sizes, nbytes), len(sizes) - 1)
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0)

    def covers(self, nbytes: int) -> bool:
        return self.max_bytes is None or nbytes <= self.max_bytes


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
    impls: dict[str, StatedImpl] = field(default_factory=dict)
    assumptions: str = ""
    sources: tuple[str, ...] = ()

    @property
    def arch(self) -> str:
        return arch_of(self.compute_capability)

    def prior(self, link: str) -> CostParams:
        """NCCL's own model of this box over `link`."""
        spec = self.links[link]
        return nccl_prior(link, self.arch, spec.channels, spec.channel_bw_gbps, spec.nvls_channels)

    def summary(self) -> dict:
        return {
            "name": self.name,
            "path": self.path,
            "description": self.description,
            "gpus": self.gpus,
            "compute_capability": self.compute_capability,
            "gpu_path": self.gpu_path,
            "p2p_supported": self.p2p_supported,
            "launch_overhead_us": self.launch_overhead_us,
            "links": {k: vars(v) for k, v in self.links.items()},
            "impls": {
                k: {"points": [list(p) for p in v.points], "max_bytes": v.max_bytes, "source": v.source}
                for k, v in self.impls.items()
            },
            "assumptions": self.assumptions,
            "sources": list(self.sources),
        }


def preset_names() -> list[str]:
    names = set()
    for folder in PRESET_DIRS:
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.toml"))
    return sorted(names)


def resolve_topology(name_or_path: str) -> Path:
    path = Path(name_or_path)
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
    path = resolve_topology(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None
    return topology_from_dict(data, str(path))


def topology_from_dict(data: dict, path: str) -> Topology:
    """Validate a parsed topology file; UsageError names the file and the key."""

    def need(table: dict, key: str, kind, where: str = "", positive: bool = False, optional: bool = False):
        name = f"{where}{key}"
        if key not in table:
            if optional:
                return None
            raise UsageError(f"{path}: missing key {name!r}")
        value = table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise UsageError(f"{path}: {name} must be {' or '.join(k.__name__ for k in kinds)}, got {value!r}")
        if positive and value <= 0:
            raise UsageError(f"{path}: {name} must be > 0, got {value!r}")
        return value

    known = {
        "name",
        "description",
        "gpus",
        "compute_capability",
        "gpu_path",
        "p2p_supported",
        "launch_overhead_us",
        "links",
        "impls",
        "assumptions",
        "sources",
    }
    for key in data:
        if key not in known:
            raise UsageError(f"{path}: unknown key {key!r} (known: {', '.join(sorted(known))})")
    gpu_path = need(data, "gpu_path", str).upper()
    if gpu_path not in PATH_TYPES[1:]:
        raise UsageError(f"{path}: gpu_path must be one of {', '.join(PATH_TYPES[1:])}, got {gpu_path!r}")
    links_table = need(data, "links", dict)
    links = {}
    for link, table in links_table.items():
        if link not in LINKS:
            raise UsageError(f"{path}: links.{link}: unknown link type (known: {', '.join(LINKS)})")
        if not isinstance(table, dict):
            raise UsageError(f"{path}: links.{link} must be a table")
        where = f"links.{link}."
        links[link] = LinkSpec(
            channels=need(table, "channels", int, where, positive=True),
            channel_bw_gbps=float(need(table, "channel_bw_gbps", (int, float), where, positive=True)),
            nvls_channels=need(table, "nvls_channels", int, where, optional=True) or 0,
        )
    if not links:
        raise UsageError(f"{path}: links needs at least one of {', '.join(LINKS)}")
    impls = {}
    for impl, table in (need(data, "impls", dict, optional=True) or {}).items():
        where = f"impls.{impl}."
        if not isinstance(table, dict):
            raise UsageError(f"{path}: impls.{impl} must be a table")
        raw = need(table, "all_reduce_us", list, where)
        try:
            points = tuple(sorted((int(b), float(us)) for b, us in raw))
        except (TypeError, ValueError):
            raise UsageError(f"{path}: {where}all_reduce_us must be a list of [bytes, microseconds] pairs") from None
        if not points or any(b <= 0 or us <= 0 for b, us in points):
            raise UsageError(f"{path}: {where}all_reduce_us needs positive [bytes, microseconds] pairs")
        impls[impl] = StatedImpl(
            points=points,
            max_bytes=need(table, "max_bytes", int, where, optional=True),
            source=need(table, "source", str, where),
        )
    sources = need(data, "sources", list)
    if not all(isinstance(s, str) for s in sources):
        raise UsageError(f"{path}: sources must be a list of strings")
    return Topology(
        name=need(data, "name", str),
        path=path,
        description=need(data, "description", str),
        gpus=need(data, "gpus", int, positive=True),
        compute_capability=float(need(data, "compute_capability", (int, float), positive=True)),
        gpu_path=gpu_path,
        p2p_supported=need(data, "p2p_supported", bool),
        launch_overhead_us=float(need(data, "launch_overhead_us", (int, float))),
        links=links,
        impls=impls,
        assumptions=need(data, "assumptions", str),
        sources=tuple(sources),
    )


def p2p_level(value: str) -> str:
    """NCCL_P2P_LEVEL as a path type; UsageError for values NCCL rejects."""
    level = LEGACY_P2P_LEVELS.get(value.strip(), value.strip().upper())
    if level not in PATH_TYPES:
        raise UsageError(f"NCCL_P2P_LEVEL={value!r}: use one of {', '.join(PATH_TYPES)} (or 0-4)")
    return level


def link_for(topology: Topology, env: dict[str, str]) -> str:
    """The transport NCCL uses between GPUs under `env`: "nvlink" / "pci" with P2P, else "shm" (host memory)."""
    disabled = env.get("NCCL_P2P_DISABLE", "0").strip() not in ("0", "")
    level = "LOC" if disabled else p2p_level(env.get("NCCL_P2P_LEVEL", DEFAULT_P2P_LEVEL))
    if topology.gpu_path == "NVL":
        use_p2p = level != "LOC"
    else:
        use_p2p = topology.p2p_supported and PATH_TYPES.index(topology.gpu_path) <= PATH_TYPES.index(level)
    if not use_p2p:
        return "shm"
    return "nvlink" if topology.gpu_path == "NVL" else "pci"
