"""Parse `nvidia-smi -q` (indented key : value tree) and `nvidia-smi topo -m` (tab-separated matrix).

Both keep going past the odd things real drivers print: "N/A", "[N/A]", "Requested functionality has been
deprecated", "Insufficient Permissions", ANSI escape codes around the topo header, NIC columns.
"""

from __future__ import annotations

import math
import re
from typing import Any

from commprof.errors import UsageError

MAX_TOPO_DEVICES = 512  # GPUs and NICs one `nvidia-smi topo -m` may list: NCCL_TOPO_MAX_NODES (256) of each
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_SECTION = re.compile(r"^GPU [0-9A-Fa-f]{4,}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?")
_UNKNOWN = (
    "n/a",
    "[n/a]",
    "not supported",
    "[not supported]",
    "unknown error",
    "insufficient permissions",
    "requested functionality has been deprecated",
    "",
)


def parse_nvidia_smi_q(text: str) -> dict[str, Any]:
    """{"Driver Version": ..., "CUDA Version": ..., "gpus": [tree per "GPU <bus id>" section]}."""
    root: dict[str, Any] = {"gpus": []}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if not line.strip() or line.lstrip().startswith("="):
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        key = key.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else root
        if indent == 0 and _GPU_SECTION.match(line):
            gpu = {"bus_id": line[4:].strip()}
            root["gpus"].append(gpu)
            stack = [(-1, root), (0, gpu)]
        elif sep and value.strip():
            parent[key] = value.strip()
        else:
            child: dict[str, Any] = {}
            parent[key] = child
            stack.append((indent, child))
    return root


def value(tree: dict[str, Any], *path: str) -> str | None:
    """The text at `path` in a parsed tree, None when absent or one of nvidia-smi's "no value" spellings."""
    node: Any = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if not isinstance(node, str) or node.strip().lower() in _UNKNOWN:
        return None
    return node.strip()


def number(tree: dict[str, Any], *path: str) -> float | None:
    """The leading number of a value: "600.00 W" -> 600.0, "16x" -> 16, "N/A" -> None; None too for one past a
    float's range (400 digits read as inf), which no reading is."""
    text = value(tree, *path)
    m = _NUMBER.match(text) if text else None
    return float(m.group(0)) if m and math.isfinite(float(m.group(0))) else None


def parse_topo_matrix(text: str) -> dict[str, Any]:
    """`nvidia-smi topo -m`: {"gpus": [0, 1, ...], "levels": {(a, b): "PIX"}, "cpu_affinity": {...}, "numa": {...}}."""
    header: list[str] | None = None
    out: dict[str, Any] = {"gpus": [], "levels": {}, "cpu_affinity": {}, "numa": {}}
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if line.strip().startswith("Legend") or line.strip().startswith("NIC Legend"):
            break
        cells = [c.strip() for c in line.split("\t") if c.strip()]
        if not cells:
            continue
        if header is None:
            if cells[0].startswith("GPU"):
                header = cells
            continue
        if not re.fullmatch(r"GPU[0-9]+", cells[0]):
            continue
        if len(cells[0]) > 6:
            raise UsageError(
                f"nvidia-smi topo -m: row {cells[0][:12]}... ({len(cells[0]) - 3} digits) names no GPU of a box"
            )
        row = int(cells[0][3:])
        out["gpus"].append(row)
        devices = [h for h in header if re.fullmatch(r"(GPU|NIC)[0-9]{1,3}", h)]
        if len(devices) > MAX_TOPO_DEVICES:
            raise UsageError(
                f"nvidia-smi topo -m: {len(devices)} GPUs and NICs, more than the {MAX_TOPO_DEVICES} a box holds"
            )
        matrix, rest = cells[1 : 1 + len(devices)], cells[1 + len(devices) :]
        for col, level in zip(devices, matrix):
            if col.startswith("GPU") and int(col[3:]) != row:
                out["levels"][(row, int(col[3:]))] = level
        extra = dict(zip([h for h in header if h not in devices], rest))
        out["cpu_affinity"][row] = extra.get("CPU Affinity") if extra.get("CPU Affinity") != "N/A" else None
        numa = extra.get("NUMA Affinity")
        out["numa"][row] = int(numa) if numa and re.fullmatch(r"[0-9]{1,4}", numa) else None
    return out
