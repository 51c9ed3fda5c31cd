"""The sweep files and topology presets commprof ships (package data in commprof/shipped, the checkout's sweeps/):
addressable by name from any folder, `--sweep pcie8-verify`, `--topology pcie-gen5-switch-p2p`."""

from __future__ import annotations

from pathlib import Path

SHIPPED = Path(__file__).resolve().parent / "shipped"
# Topology presets: a checkout's own sweeps/topologies/ (the working folder) first, then the package's.
TOPOLOGY_DIRS = (Path("sweeps/topologies"), SHIPPED / "topologies")


def sweep_names() -> list[str]:
    return sorted(p.stem for p in SHIPPED.glob("*.toml"))


def sweep_file(name_or_path: str | None) -> str | None:
    """A sweep file's path: the path given where it is one, else the shipped sweep of that name (`pcie8-verify`)."""
    if name_or_path is None or Path(name_or_path).exists():
        return name_or_path
    shipped = SHIPPED / f"{name_or_path.removesuffix('.toml')}.toml"
    return str(shipped) if Path(name_or_path).name == name_or_path and shipped.is_file() else name_or_path


def sweep_option_help(lead: str = "Sweep file", without: str = "") -> str:
    """--sweep's help line, naming the shipped sweeps."""
    return f"{lead} (TOML) or the name of a shipped one: {', '.join(sweep_names())}.{' ' if without else ''}{without}"
