"""meta.json, its one module: its typed structure (read and checked by msgspec, records.validate), its reader, its
one constructor and what a run records about where it ran (versions, GPUs, host, command line, the environment that
matters). The sweep, `simulate` and `import-nccl-tests` each build their RunMeta here, so every run folder's
meta.json has the same common fields in the same order, checked before it is written and when it is read."""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

import msgspec

from commprof.errors import UsageError
from commprof.records.files import META_BYTES, META_FILE
from commprof.records.meta_sections import (
    ImportedLog,
    KernelBuildReport,
    MetaCalibration,
    MetaDoctor,
    MetaFloor,
    MetaGraphs,
    MetaModelError,
    MetaPlatform,
    ReportOptions,
    TopologyGpu,
    TopologyHost,
    TopologyKernel,
    TopologyLink,
    TopologyPair,
)
from commprof.records.point_ids import RUN_ID
from commprof.records.schema import SOURCES, Source
from commprof.records.validate import bounded, problem_of
from commprof.records.values import MAX_POINT_TIMEOUT_S, MAX_TOKENS, ComputeCapability, Count, Finite, Ranks
from commprof.textfiles import read_json
from commprof.versions import installed_version

# The software a run names, in this order; None where it is not there (or not used: a simulation has no torch).
VERSION_KEYS = ("python", "torch", "cuda", "nccl", "driver", "flashinfer", "commprof")
# Fields every meta.json has: who wrote it, when, from what command line and where.
REQUIRED = ("run_id", "source", "created", "command", "cwd", "hostname", "versions")
RUN_PATTERN = rf"\A{RUN_ID.pattern}\Z"
_TIMEOUT = "{path} {value} is out of range (allowed: above 0, at most a week)"


class MetaPlan(TypedDict, total=False):
    """meta.json's plan: what the sweep replayed (commprof.sweep.running.run_folder)."""

    model: str | None
    tp: Ranks | None
    phase: str | None
    dtype: str | None
    tokens: list[bounded(int, "plan.tokens: a T out of range (allowed: {low}..{high})", ge=1, le=MAX_TOKENS)] | None
    iterations: Count | None
    warmup: Count | None
    point_timeout_s: bounded(float, _TIMEOUT, gt=0, le=MAX_POINT_TIMEOUT_S) | None
    layout: str | None
    compute: str | None  # what each rank ran between two collectives, as the sweep file (or --compute) said
    skew: str | None
    spec: str | None  # the draft cycle and DP attention (commprof.planner.speculative.PlanOptions)
    num_steps: int | None
    draft_vocab: int | None
    dp_attention: bool | None


class MetaSweep(TypedDict, total=False):
    """meta.json's sweep: the file the run was made from, as it was (a --resume rebuilds the sweep from it)."""

    path: str | None
    name: str | None
    content: str | None
    sha256: str | None
    report: ReportOptions | None  # its [report] table


class MetaGpu(TypedDict, total=False):
    """One visible GPU as gpu_inventory writes it."""

    index: int
    name: str
    compute_capability: ComputeCapability
    memory_gib: Finite
    pci_bus_id: str | None


class MetaTopology(TypedDict, total=False):
    """meta.json's topology: the topology probe's answer, or a simulation's preset summary (`gpus` a count there)."""

    source: str | None
    reason: str | None
    host: TopologyHost | None
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: list[TopologyGpu] | Ranks | None
    pairs: list[TopologyPair] | None
    links: dict[str, TopologyLink | str] | None  # a simulated box's transports by name; text is shown as it is
    impls: dict[str, TopologyKernel] | None  # a simulated box's kernel models by implementation
    sources: list[str] | None


class RunMeta(TypedDict, total=False):
    """meta.json, built by run_meta for the sweep, simulate and the imports; a reader
    relies on these types (meta_problem), and a key an older writer left out is None."""

    run_id: bounded(str, "run_id {value!r} is not a run id (letters, digits, '.', '_', '-')", pattern=RUN_PATTERN)
    created: str | None
    command: list[str] | None
    cwd: str | None
    hostname: str | None
    world_size: Ranks | None
    nnodes: Ranks | None
    backend: str | None
    source: Source | None
    versions: dict[str, str | None] | None
    platform: MetaPlatform | None
    gpus: list[MetaGpu] | None
    env: dict[str, str] | None
    plan: MetaPlan | None
    sweep: MetaSweep | None
    shared_gpus: bool | None
    topology: MetaTopology | None
    floor: MetaFloor | None
    doctor: MetaDoctor | None
    kernel_builds: list[KernelBuildReport] | None  # one report per node that built kernels (sweep.prebuild)
    nccl_graphs: MetaGraphs | None  # the NCCL graph candidates written for this box (sweep.graph_run)
    simulated: bool | None  # `commprof simulate` wrote the run
    calibration: MetaCalibration | str | None  # simulated: the calibration file's fit, or "nccl-prior"
    model_error: MetaModelError | None  # simulated: the expected error of its predictions (evidence.ModelError)
    imported: list[ImportedLog] | None  # nccl-tests imports: each log's file, sha256, warnings and runs


class RunMetaView(msgspec.Struct, frozen=True, kw_only=True):
    """meta.json as its readers use it (meta_view): each field None where the file does not say it."""

    run_id: str | None = None
    """The run's id (the run folder's name)."""
    created: str | None = None
    """When the run was made, ISO 8601 UTC."""
    hostname: str | None = None
    """The host that wrote the run."""
    world_size: int | None = None
    """The ranks the run had."""
    nnodes: int | None = None
    """The nodes the run had."""
    backend: str | None = None
    """The torch.distributed backend the run measured on ("nccl", "gloo")."""
    source: str | None = None
    """Where the run's records come from (records.schema.SOURCES)."""
    versions: dict[str, str | None] | None = None
    """The software the run names (VERSION_KEYS first); a None value: not there."""
    nccl_version: str | None = None
    """The NCCL version as an older commprof wrote it, outside versions."""
    gpus: list[Any] | None = None
    """The visible GPUs as gpu_inventory writes them (MetaGpu)."""
    env: dict[str, str] | None = None
    """The environment variables that matter (relevant_env)."""
    plan: dict[str, Any] | None = None
    """What the sweep replayed (MetaPlan)."""
    sweep: dict[str, Any] | None = None
    """The sweep file the run was made from (MetaSweep)."""
    shared_gpus: bool | None = None
    """Ranks shared GPUs (--share-gpus): a functional check only."""
    topology: dict[str, Any] | None = None
    """The topology probe's answer, or a simulation's preset summary (MetaTopology)."""
    floor: dict[str, Any] | None = None
    """The box's floor: `commprof floor`'s floor.json, its figures, or why it was not measured."""
    doctor: dict[str, Any] | None = None
    """commprof.doctor.doctor_summary() plus the sweep's failed check ids."""
    simulated: bool | None = None
    """`commprof simulate` wrote the run."""
    calibration: dict[str, Any] | str | None = None
    """A simulation's calibration file's fit, or "nccl-prior"."""
    model_error: Any = None
    """A simulation's expected error (evidence.ModelError's dict)."""
    imported: list[Any] | None = None
    """nccl-tests imports: each log's file, sha256, warnings and runs."""

    @property
    def gpu_list(self) -> list[dict[str, Any]]:
        """The GPUs meta.json lists (none where it lists none)."""
        return [g for g in self.gpus or [] if isinstance(g, dict)]

    @property
    def gpu_names(self) -> list[str]:
        """The listed GPUs' names, sorted and each once ("?" for one without)."""
        return sorted({str(g.get("name", "?")) for g in self.gpu_list})

    @property
    def probed_gpus(self) -> list[dict[str, Any]]:
        """The GPUs the topology probe lists (a simulation's preset gives a count, not a list: none)."""
        listed = (self.topology or {}).get("gpus")
        return [g for g in listed if isinstance(g, dict)] if isinstance(listed, list) else []

    @property
    def named_versions(self) -> dict[str, str]:
        """The software versions the run names, without those it does not have."""
        return {k: v for k, v in (self.versions or {}).items() if v not in (None, "")}

    @property
    def nccl(self) -> str | None:
        """The NCCL version the run names, in versions or where an older commprof wrote it."""
        return (self.versions or {}).get("nccl") or self.nccl_version

    @property
    def failed_checks(self) -> list[str]:
        """The doctor checks that failed before the sweep."""
        return list((self.doctor or {}).get("failed") or [])

    @property
    def imported_files(self) -> list[str]:
        """The file names of the nccl-tests logs the run imported."""
        return [Path(str(item.get("file"))).name for item in self.imported or [] if isinstance(item, dict)]

    @property
    def imported_runs(self) -> dict[str, dict[str, Any]]:
        """The imported logs' runs by point id."""
        return {run["point_id"]: run for item in self.imported or [] for run in item.get("runs") or []}


def meta_view(meta: Mapping[str, Any]) -> RunMetaView:
    """meta.json (as read_meta returns it, or {}) as its typed view; keys it does not use are left out."""
    return msgspec.convert(meta, RunMetaView)


def meta_problem(meta: Any) -> str | None:
    """Why a meta.json read from a file cannot be used, in a few words, or None."""
    if not isinstance(meta, dict):
        return "not a JSON object"
    return problem_of(meta, RunMeta)


def read_meta(run_dir: Path) -> RunMeta:
    """A run's meta.json ({} where there is none); UsageError naming the file when it cannot be used."""
    path = Path(run_dir) / META_FILE
    if not path.exists():
        return {}
    meta = read_json(path, "run metadata", META_BYTES)
    problem = meta_problem(meta)
    if problem:
        raise UsageError(f"{path}: not usable run metadata: {problem}")
    return meta


def run_meta(**fields: Any) -> RunMeta:
    """A meta.json: RunMeta's fields in their declared order, the versions in VERSION_KEYS order; TypeError for an
    unknown or missing field, ValueError for a value the reader would refuse."""
    names = RunMeta.__annotations__
    unknown = sorted(set(fields) - set(names))
    missing = [name for name in REQUIRED if name not in fields]
    if unknown or missing:
        raise TypeError(f"meta.json: unknown field(s) {unknown}, missing field(s) {missing}")
    if fields["source"] not in SOURCES:
        raise ValueError(f"meta.json: source {fields['source']!r} is not one of {SOURCES}")
    versions = dict(fields["versions"] or {})
    fields["versions"] = {key: versions.pop(key, None) for key in VERSION_KEYS} | versions
    meta: Any = {name: fields[name] for name in names if name in fields}
    problem = meta_problem(meta)
    if problem:
        raise ValueError(f"meta.json: {problem}")
    return meta


def updated_meta(meta: RunMeta, **fields: Any) -> RunMeta:
    """A meta.json read back (read_meta) with `fields` set, checked as the constructor checks a new one; keys an
    older commprof wrote are kept as they are."""
    unknown = sorted(set(fields) - set(RunMeta.__annotations__))
    if unknown:
        raise TypeError(f"meta.json: unknown field(s) {unknown}")
    updated: Any = {**meta, **fields}
    problem = meta_problem(updated)
    if problem:
        raise ValueError(f"meta.json: {problem}")
    return updated


# ------------------------------------------------------------------------ what the run records about where it ran

# Variables that change what a collective does or how it is measured.
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "FLASHINFER_", "OMP_", "GLOO_")


def relevant_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}


def nccl_version() -> str | None:
    """The NCCL torch links, as "2.27.3"; None on a CPU build of torch."""
    import torch

    try:
        if not torch.cuda.is_available():
            return None
        version = torch.cuda.nccl.version()
    except (RuntimeError, AttributeError):
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            value = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no NVML library, or no GPU: all mean "none here"
        return None
    return value.decode() if isinstance(value, bytes) else value


def gpu_inventory() -> list[dict[str, Any]]:
    """Name, compute capability, memory and PCI bus id of each visible GPU (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(
            {
                "index": index,
                "name": props.name,
                "compute_capability": f"{props.major}.{props.minor}",
                "memory_gib": round(props.total_memory / 2**30, 1),
                "pci_bus_id": f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
                if hasattr(props, "pci_bus_id")
                else None,
            }
        )
    return gpus


def launch_facts(argv: list[str], measuring: bool = True) -> dict[str, Any]:
    """The fields of meta.json about this host and launch (records.run_meta.run_meta takes them). `measuring`: the
    run times collectives here, so torch, CUDA, NCCL, the GPUs and the environment are recorded; a command that
    only reads files (simulate, an import) names Python and commprof alone."""
    versions: dict[str, str | None] = {"python": platform.python_version(), "commprof": installed_version("commprof")}
    facts: dict[str, Any] = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": argv,
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "nnodes": 1,
        "versions": versions,
        "platform": {"system": platform.system(), "machine": platform.machine(), "python": sys.executable},
        "gpus": [],
        "env": {},
    }
    if measuring:
        import torch

        versions.update(
            torch=torch.__version__,
            cuda=torch.version.cuda,
            nccl=nccl_version(),
            driver=driver_version(),
            flashinfer=installed_version("flashinfer-python"),
            sglang=installed_version("sglang"),  # the engines whose dispatch tables the report then uses
            vllm=installed_version("vllm"),
        )
        facts.update(
            nnodes=int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("NNODES", "1")) or 1),
            gpus=gpu_inventory(),
            env=relevant_env(),
        )
    return facts
