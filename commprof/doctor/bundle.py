"""Diagnostic bundles: a directory of raw outputs, read by `doctor --from DIR`, written by `doctor --collect DIR`.

File names follow the convention of bundles people already share (cmdline, dmesg, dmidecode, lscpu,
lspci_full, numa, nvidia_smi_full, nvidia_topo), each with or without a ".log" suffix; commprof adds its
own (nvml.json, nccl_init.log, gpu_tests.json, ...) and manifest.json, which says why anything is missing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from commprof.doctor.facts import Facts, Source
from commprof.errors import UsageError
from commprof.floor.record import entry_problem
from commprof.terminal import one_line
from commprof.textfiles import LOG_BYTES, parse_json, read_text

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
            text = read_text(path, "bundle file", LOG_BYTES, errors="replace")
            facts.sources[name] = Source(name, f"{directory.name}/{path.name}", text)
    nvml = _json(directory / NVML_FILE)
    nvml = nvml if isinstance(nvml, dict) else {}
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


def _json(path: Path):
    try:
        return parse_json(read_text(path, "bundle file", LOG_BYTES), str(path))
    except UsageError:  # absent, not a regular file, too large or not JSON: the checks say what is missing
        return None
