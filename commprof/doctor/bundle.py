"""Diagnostic bundles: a directory of raw outputs, read by `doctor --from DIR`, written by `doctor --collect DIR`.

File names follow the convention of bundles people already share (cmdline, dmesg, dmidecode, lscpu,
lspci_full, numa, nvidia_smi_full, nvidia_topo), each with or without a ".log" suffix; commprof adds its
own (nvml.json, nccl_init.log, gpu_tests.json, ...) and manifest.json, which says why anything is missing.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from commprof.doctor.facts import Facts, Source
from commprof.doctor.nvml_file import nvml_problem
from commprof.errors import UsageError
from commprof.floor.record import entry_problem
from commprof.terminal import one_line
from commprof.textfiles import CONFIG_BYTES, parse_json, read_text

# Bundle key -> what it holds.
TEXT_FILES = {
    "cmdline": "/proc/cmdline",
    "dmesg": "dmesg",
    "dmidecode": "dmidecode",
    "lscpu": "lscpu",
    "lspci_full": "lspci -vvv",
    "numa": "numactl --hardware",
    "nvidia_smi_full": "nvidia-smi -q",
    "nvidia_topo": "nvidia-smi topo -m",
    "nvidia_params": "/proc/driver/nvidia/params",
    "uvm_disable_hmm": "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm",
    "iommu_groups": "/sys/kernel/iommu_groups",
    "env": "NCCL_* / CUDA_* / PYTORCH_* / TORCH_* environment",
    "nccl_conf": "/etc/nccl.conf (~/.nccl.conf, NCCL_CONF_FILE)",
    "nccl_init": "NCCL_DEBUG=INFO log of the all-GPU init test",
    "nccl_topo": "NCCL_TOPO_DUMP_FILE of the all-GPU init test (the topology NCCL detected)",
    "nccl_graphs": "NCCL_GRAPH_DUMP_FILE of the all-GPU init test (the graphs NCCL's search found)",
}
JSON_FILES = {"sysfs_pci": "sysfs PCIe link and AER files of the GPUs and the bridges above them"}
NVML_FILE, TESTS_FILE, MANIFEST_FILE = "nvml.json", "gpu_tests.json", "manifest.json"
FLOOR_FILE = "floor.json"  # the floor probe's result as meta.json records it (commprof.floor.record)
# What is read of a bundle's text file: its last TEXT_BYTES and at most TEXT_LINES lines (a dmesg's recent end;
# every other file is far smaller), so a bundle costs what its GPUs do, whatever a file holds.
TEXT_BYTES, TEXT_LINES = 8 << 20, 100_000
# GPUs one box's bundle may describe: NCCL_TOPO_MAX_NODES (src/graph/topo.h), the most one node's topology holds.
MAX_GPUS = 256


def read_bundle(directory: Path, flag: str = "--from") -> Facts:
    """Facts from a bundle directory; every file is optional, a missing one says so. Errors name `flag`, the
    option that gave the directory."""
    if not directory.is_dir():
        raise UsageError(f"{flag} {directory}: not a directory")
    manifest = _json(directory / MANIFEST_FILE)
    missing = manifest.get("missing") if isinstance(manifest, dict) else None
    missing = {str(k): one_line(v) for k, v in missing.items()} if isinstance(missing, dict) else {}
    facts = Facts(origin=str(directory))
    for name in [*TEXT_FILES, *JSON_FILES]:
        path = _find(directory, name)
        if path is None:
            facts.sources[name] = Source(
                name, f"bundle {directory.name}/{name}", None, missing.get(name, "not in the bundle")
            )
        elif name in JSON_FILES and _json(path) is None:
            facts.sources[name] = Source(name, f"bundle {directory.name}/{path.name}", None, "not valid JSON")
        else:
            text, cut = _text_end(path)
            facts.sources[name] = Source(name, f"{directory.name}/{path.name}{cut}", text)
    nvml = _json(directory / NVML_FILE)
    nvml = nvml if isinstance(nvml, dict) else {}
    if problem := topology_problem(nvml.get("topology")):
        raise UsageError(f"{flag} {directory}: {NVML_FILE}: topology.{problem}")
    if problem := nvml_problem(nvml):
        raise UsageError(f"{flag} {directory}: {NVML_FILE}: {problem}")
    # A hand-edited or truncated bundle must not crash the checks: keep only answers of the right shape.
    facts.topology = nvml.get("topology") if isinstance(nvml.get("topology"), dict) else None
    facts.gpu_health = nvml.get("health") if isinstance(nvml.get("health"), list) else None
    tests = _json(directory / TESTS_FILE)
    facts.tests = tests if isinstance(tests, dict) else {}
    floor = _json(directory / FLOOR_FILE)
    facts.floor = floor if isinstance(floor, dict) else None
    if facts.floor is not None and (problem := entry_problem(facts.floor)):
        raise UsageError(f"{flag} {directory}: {FLOOR_FILE}: {problem}")
    if not any(s.ok for s in facts.sources.values()) and not nvml:
        raise UsageError(
            f"{flag} {directory}: no bundle file found (expected names like cmdline.log, "
            "lspci_full.log, nvidia_smi_full.log)"
        )
    return facts


def check_bundle_target(directory: Path) -> None:
    """Refuse a folder that already holds files: one bundle describes one machine at one time.

    Writing over an old bundle would keep the old box's files wherever this one has nothing to say.
    """
    try:
        present = sorted(entry.name for entry in directory.iterdir()) if directory.is_dir() else []
    except OSError as exc:
        raise UsageError(f"--collect {directory}: cannot read the folder ({exc.strerror or exc})") from None
    if present:
        shown = ", ".join(present[:3]) + (", ..." if len(present) > 3 else "")
        raise UsageError(
            f"--collect {directory}: not empty ({len(present)} entries: {shown}); "
            "give a new or empty folder, so the bundle holds this machine's files only"
        )


def write_bundle(facts: Facts, directory: Path) -> list[Path]:
    """Write every gathered source, the NVML answers and the test results into a new or empty folder;
    returns the files written. FileExistsError if a file appeared there meanwhile (nothing is overwritten)."""
    check_bundle_target(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, source in facts.sources.items():
        if source.ok:
            path = directory / (f"{name}.json" if name in JSON_FILES else f"{name}.log")
            with open(path, "x", encoding="utf-8") as handle:
                handle.write(source.text)
            written.append(path)
    files = {
        NVML_FILE: {"topology": facts.topology, "health": facts.gpu_health},
        TESTS_FILE: facts.tests,
        **({FLOOR_FILE: facts.floor} if facts.floor else {}),
        MANIFEST_FILE: {
            "collected": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "origin": facts.origin,
            "sources": {n: s.where for n, s in facts.sources.items() if s.ok},
            "missing": {n: s.missing for n, s in facts.sources.items() if not s.ok},
        },
    }
    for filename, content in files.items():
        with open(directory / filename, "x", encoding="utf-8") as handle:
            handle.write(json.dumps(content, indent=2))
        written.append(directory / filename)
    return written


def _find(directory: Path, name: str) -> Path | None:
    for candidate in (f"{name}.log", name, f"{name}.txt", f"{name}.json"):
        path = directory / candidate
        if path.is_file():
            return path
    return None


def topology_problem(topology: Any) -> str | None:
    """Why NVML's answer in nvml.json could not describe one box, naming the field, or None: at most MAX_GPUS
    GPUs, each index an integer from 0 to MAX_GPUS - 1 given once (NVML numbers each GPU once), with a bus id and a
    name; each pair two of those GPUs and a level."""
    if not isinstance(topology, dict):
        return None
    gpus, pairs = topology.get("gpus") or [], topology.get("pairs") or []
    if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        return f"gpus: not a list of at most {MAX_GPUS} GPUs (NCCL_TOPO_MAX_NODES)"
    seen: set[int] = set()
    for number, gpu in enumerate(gpus):
        index = gpu.get("index") if isinstance(gpu, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < MAX_GPUS:
            return f"gpus[{number}].index: {one_line(index)[:40]} is not an integer from 0 to {MAX_GPUS - 1}"
        if index in seen:
            return f"gpus[{number}].index: {index} given twice (NVML numbers each GPU once)"
        seen.add(index)
        for key in ("pci_bus_id", "name"):
            if not isinstance(gpu.get(key), str) or len(gpu[key]) > 200:
                return f"gpus[{number}].{key}: not a string of at most 200 characters"
    if not isinstance(pairs, list) or len(pairs) > len(seen) * (len(seen) - 1) // 2:
        return f"pairs: not a list of at most one entry per pair of its {len(seen)} GPUs"
    for number, pair in enumerate(pairs):
        ends = pair.get("gpus") if isinstance(pair, dict) else None
        if not (isinstance(ends, list) and len(ends) == 2 and all(isinstance(e, int) and e in seen for e in ends)):
            return f"pairs[{number}].gpus: not two of the GPUs' indices"
        if pair.get("level") is not None and not isinstance(pair["level"], str):
            return f"pairs[{number}].level: not a string"
    return None


def _text_end(path: Path) -> tuple[str, str]:
    """(the end of a bundle text file, read within TEXT_BYTES and TEXT_LINES, "" or a note of what was left out)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(f"cannot read bundle file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"bundle file {path}: not a regular file")
        handle.seek(max(0, info.st_size - TEXT_BYTES))
        data = handle.read(TEXT_BYTES)
    start = 0 if info.st_size <= TEXT_BYTES else data.find(b"\n") + 1  # a line cut by the seek is left out
    end = len(data) - 1
    for _ in range(TEXT_LINES):
        end = data.rfind(b"\n", start, end)
        if end < 0:
            break
    start = max(start, end + 1)
    text = data[start:].decode("utf-8", errors="replace")
    cut = (
        f" (its last {text.count(chr(10))} lines of {info.st_size} bytes)" if start or info.st_size > len(data) else ""
    )
    return text, cut


def _json(path: Path):
    try:
        return parse_json(read_text(path, "bundle file", CONFIG_BYTES), str(path))
    except UsageError:  # absent, not a regular file, too large or not JSON: the checks say what is missing
        return None
