"""Gather facts from this machine: files under /proc and /sys, tool outputs, NVML, and the GPU tests.

Everything here is I/O; nothing needs root. What cannot be read becomes a Source with the reason.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from commprof.doctor import gpu_tests
from commprof.doctor.facts import Facts, Source
from commprof.doctor.nvml_health import gather_health
from commprof.doctor.pcie import AER_FILES, LINK_FILES
from commprof.doctor.topology_probe import probe_topology
from commprof.floor.fresh import measure_floor
from commprof.floor.record import not_measured

COMMANDS = {
    "dmesg": ["dmesg"],
    "dmidecode": ["dmidecode"],
    "lscpu": ["lscpu"],
    "lspci_full": ["lspci", "-vvv"],
    "numa": ["numactl", "--hardware"],
    "nvidia_smi_full": ["nvidia-smi", "-q"],
    "nvidia_topo": ["nvidia-smi", "topo", "-m"],
}
FILES = {
    "cmdline": "/proc/cmdline",
    "nvidia_params": "/proc/driver/nvidia/params",
    "uvm_disable_hmm": "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm",
}
ENV_PREFIXES = ("NCCL_", "CUDA_", "PYTORCH_", "TORCH_")  # never the whole environment: bundles get shared
PCI_FILES = (*LINK_FILES, *AER_FILES)
COMMAND_TIMEOUT_S = 20


def gather_live(
    quick: bool = True,
    run_tests: bool = True,
    tp: int | None = None,
    workdir: Path | None = None,
    floor: dict[str, Any] | None = None,
) -> Facts:
    """All facts of this machine; `run_tests` runs the NCCL subprocess tests and the floor probe where there are
    GPUs (`floor`: one measured already)."""
    facts = Facts(origin="live", tp=tp)
    with ThreadPoolExecutor(max_workers=len(COMMANDS)) as pool:
        outputs = dict(zip(COMMANDS, pool.map(run_command, COMMANDS.values())))
        topology = probe_topology()
    facts.sources.update({name: _command_source(name, COMMANDS[name], *out) for name, out in outputs.items()})
    facts.sources.update({name: read_file(name, path) for name, path in FILES.items()})
    facts.sources["iommu_groups"] = iommu_groups()
    facts.sources["env"] = Source(
        "env", "environment", "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES))
    )
    facts.sources["nccl_conf"] = nccl_conf()
    facts.topology = topology
    facts.gpu_health = gather_health() if topology["gpus"] else []
    if topology["gpus"]:
        facts.sources["sysfs_pci"] = sysfs_pci([g["pci_bus_id"] for g in topology["gpus"] if g["pci_bus_id"]])
    if not topology["gpus"]:
        facts.tests = {"pairs_skipped": f"no GPU ({topology['reason']})"}
    elif run_tests and workdir is not None:
        facts.tests, facts.sources["nccl_init"] = gpu_tests.run_gpu_tests(topology, quick, workdir)
        facts.sources.update(gpu_tests.nccl_dumps(workdir))
    elif run_tests:
        with tempfile.TemporaryDirectory(prefix="commprof-doctor-") as tmp:
            facts.tests, facts.sources["nccl_init"] = gpu_tests.run_gpu_tests(topology, quick, Path(tmp))
            facts.sources.update(gpu_tests.nccl_dumps(Path(tmp)))
    else:
        facts.tests = {"pairs_skipped": "GPU tests not requested"}
    facts.floor = floor or live_floor(
        min(tp or len(topology["gpus"]), len(topology["gpus"])), run_tests, topology.get("reason")
    )
    return facts


def live_floor(gpus: int, run_tests: bool, no_gpu_reason: str | None) -> dict[str, Any]:
    """The floor probe on this machine's first `gpus` GPUs (the TP group the doctor judges), or why it did not run."""
    if gpus == 0:
        return not_measured(f"no GPU ({no_gpu_reason})")
    if gpus < 2:
        return not_measured("one GPU: the floor probe times peer copies between at least 2")
    if not run_tests:
        return not_measured("GPU tests not requested (--no-gpu-tests)", "run `commprof doctor` without --no-gpu-tests")
    with tempfile.TemporaryDirectory(prefix="commprof-floor-") as tmp:
        return measure_floor(gpus, Path(tmp) / "floor.json")


def run_command(argv: list[str]) -> tuple[str | None, str]:
    """(stdout, "") or (None, why it could not run)."""
    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]} not installed"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"no answer within {COMMAND_TIMEOUT_S} s"
    except OSError as exc:
        return None, str(exc)
    if proc.returncode != 0 and not proc.stdout.strip():
        err = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        denied = "permission" in err.lower() or "not permitted" in err.lower()
        return None, f"permission denied, needs root ({err})" if denied else err
    return proc.stdout, ""


def _command_source(name: str, argv: list[str], text: str | None, why: str) -> Source:
    return Source(name, " ".join(argv), text, why)


def read_file(name: str, path: str) -> Source:
    try:
        return Source(name, path, Path(path).read_text(errors="replace"))
    except FileNotFoundError:
        return Source(name, path, None, "does not exist")
    except PermissionError:
        return Source(name, path, None, "permission denied, needs root")
    except OSError as exc:
        return Source(name, path, None, str(exc))


def iommu_groups() -> Source:
    """One "group bdf" line per device in an IOMMU group; empty when there are none."""
    lines = [f"{Path(p).parts[-3]} {Path(p).name}" for p in sorted(glob.glob("/sys/kernel/iommu_groups/*/devices/*"))]
    return Source("iommu_groups", "/sys/kernel/iommu_groups", "\n".join(lines))


def nccl_conf() -> Source:
    """NCCL's configuration files, lowest priority first (NCCL lets the user file win over /etc/nccl.conf)."""
    user = os.environ.get("NCCL_CONF_FILE") or os.path.expanduser("~/.nccl.conf")
    parts, where = [], []
    for path in ("/etc/nccl.conf", user):
        if os.path.isfile(path):
            try:
                parts.append(Path(path).read_text(errors="replace"))
                where.append(path)
            except OSError:
                continue
    if not parts:
        return Source("nccl_conf", "/etc/nccl.conf, ~/.nccl.conf", None, "no NCCL configuration file")
    return Source("nccl_conf", " + ".join(where), "\n".join(parts))


def sysfs_pci(gpu_bus_ids: list[str]) -> Source:
    """Link and AER files of each GPU and of every bridge between it and the root complex, as JSON."""
    data: dict[str, dict] = {}
    for bus_id in gpu_bus_ids:
        device = Path("/sys/bus/pci/devices") / bus_id
        try:
            chain = [p for p in device.resolve().parts if _is_bdf(p)]
        except OSError:
            continue
        data.setdefault(bus_id, {})["chain"] = chain[:-1]
        for bdf in chain:
            entry = data.setdefault(bdf, {})
            for name in PCI_FILES:
                try:
                    entry[name] = (device.parent / bdf / name).read_text().strip()
                except OSError:
                    continue
    return Source("sysfs_pci", "/sys/bus/pci/devices", json.dumps(data, indent=1))


def _is_bdf(part: str) -> bool:
    return len(part) == 12 and part[4] == ":" and part[7] == ":" and part[10] == "."
