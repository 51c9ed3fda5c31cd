"""Parse `lspci -vvv` into devices with their PCIe links, ACS and AER state and the bridges above them.

Tolerant of what real machines print: no domain column (`lspci` without -D), devices without an Express,
ACS or AER capability, and "Capabilities: <access denied>" when lspci runs without root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from commprof.doctor.topology_probe import normalize_bus_id

_HEADER = re.compile(r"^((?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]) (.+?): (.*)$")
_BUS = re.compile(r"Bus: primary=([0-9a-f]+), secondary=([0-9a-f]+), subordinate=([0-9a-f]+)")
_EXPRESS = re.compile(r"Express \(v\d\) ([\w ]+?)(?: \(Slot[+-]\))?, ")
_LINK = re.compile(r"Speed ([\d.]+)GT/s( \(\w+\))?, Width x(\d+)( \(\w+\))?")
_FLAG = re.compile(r"(\w+)([+-])")

# PCIe generation by transfer rate (GT/s).
GEN_BY_RATE = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass
class PciDevice:
    bdf: str  # normalised "0000:06:00.0"
    kind: str  # lspci class text: "PCI bridge", "3D controller", ...
    description: str
    numa_node: int | None = None
    bus_range: tuple[int, int, int] | None = None  # (primary, secondary, subordinate) of a bridge
    port_type: str | None = None  # "Root Port", "Upstream Port", "Downstream Port", "Endpoint", ...
    link_cap: tuple[float, int] | None = None  # (GT/s, width)
    link_sta: tuple[float, int] | None = None
    acs_cap: dict[str, bool] | None = None
    acs_ctl: dict[str, bool] | None = None
    aer_uncorrectable: list[str] = field(default_factory=list)  # UESta bits set
    aer_correctable: list[str] = field(default_factory=list)  # CESta bits set
    access_denied: bool = False

    @property
    def domain(self) -> str:
        return self.bdf[:4]

    @property
    def bus(self) -> int:
        return int(self.bdf[5:7], 16)

    @property
    def is_nvidia_gpu(self) -> bool:
        return "NVIDIA" in self.description and self.kind.startswith(("3D controller", "VGA compatible"))


def parse_lspci(text: str) -> list[PciDevice]:
    devices: list[PciDevice] = []
    current: PciDevice | None = None
    section = ""
    for line in text.splitlines():
        if m := _HEADER.match(line):
            current = PciDevice(normalize_bus_id(m.group(1)), m.group(2), m.group(3))
            devices.append(current)
            section = ""
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("Capabilities:"):
            section = stripped
            if "<access denied>" in stripped:
                current.access_denied = True
            elif m := _EXPRESS.search(stripped):
                current.port_type = m.group(1)
            continue
        key, _, value = stripped.partition(":")
        value = value.strip()
        if key == "NUMA node":
            current.numa_node = int(value) if value.lstrip("-").isdigit() and int(value) >= 0 else None
        elif m := _BUS.search(stripped):
            current.bus_range = tuple(int(x, 16) for x in m.groups())
        elif key in ("LnkCap", "LnkSta") and "Express" in section:
            if m := _LINK.search(value):
                link = (float(m.group(1)), int(m.group(3)))
                setattr(current, "link_cap" if key == "LnkCap" else "link_sta", link)
        elif key in ("ACSCap", "ACSCtl"):
            setattr(current, "acs_cap" if key == "ACSCap" else "acs_ctl", _flags(value))
        elif key == "UESta":
            current.aer_uncorrectable = [k for k, on in _flags(value).items() if on]
        elif key == "CESta":
            current.aer_correctable = [k for k, on in _flags(value).items() if on]
    return devices


def bridges_above(device: PciDevice, devices: list[PciDevice]) -> list[PciDevice]:
    """The bridges whose bus range holds `device`, root port first (widest range first)."""
    above = [
        d
        for d in devices
        if d.bus_range
        and d.domain == device.domain
        and d is not device
        and d.bus_range[1] <= device.bus <= d.bus_range[2]
    ]
    return sorted(above, key=lambda d: (d.bus_range[1] - d.bus_range[2], d.bus_range[1]))


def pcie_gen(rate_gts: float | None) -> int | None:
    return GEN_BY_RATE.get(rate_gts) if rate_gts is not None else None


def _flags(value: str) -> dict[str, bool]:
    return {name: sign == "+" for name, sign in _FLAG.findall(value)}
