"""meta.json, its one module: its typed structure (RunMeta, its sections in meta_sections.py and meta_topology.py),
its one reader (read_meta: read once, checked by msgspec through records.validate, and read by attribute
everywhere after), its one constructor and writer, and what a run records about where it ran (versions, GPUs,
host, command line, the environment that matters). The sweep, `simulate` and `import-nccl-tests` each build their
RunMeta here, so every run folder's meta.json has the same common fields, checked before it is written and when
it is read."""

from __future__ import annotations

import functools
import os
import platform
import socket
import sys
import types
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import msgspec

from commprof.errors import UsageError
from commprof.records.files import META_BYTES, META_FILE, write_json
from commprof.records.meta_sections import (
    ImportedLog,
    ImportedRun,
    KernelBuildReport,
    MetaCalibration,
    MetaDoctor,
    MetaFloor,
    MetaGpu,
    MetaGraphs,
    MetaModelError,
    MetaPlan,
    MetaPlatform,
    MetaSection,
    MetaSweep,
)
from commprof.records.meta_topology import MetaTopology, TopologyGpu
from commprof.records.point_ids import RUN_ID
from commprof.records.schema import SOURCES, Source
from commprof.records.validate import bounded, explain
from commprof.records.values import Ranks
from commprof.textfiles import read_json
from commprof.versions import installed_version

# The software a run names, in this order; None where it is not there (or not used: a simulation has no torch).
VERSION_KEYS = ("python", "torch", "cuda", "nccl", "driver", "flashinfer", "commprof")
# Fields every meta.json has: who wrote it, when, from what command line and where.
REQUIRED = ("run_id", "source", "created", "command", "cwd", "hostname", "versions")
RUN_PATTERN = rf"\A{RUN_ID.pattern}\Z"
RunId = bounded(str, "run_id {value!r} is not a run id (letters, digits, '.', '_', '-')", pattern=RUN_PATTERN)


class RunMeta(MetaSection):
    """meta.json, built by run_meta for the sweep, simulate and the imports, read by read_meta; every field None
    where the file does not say it (a field an older writer left out)."""

    run_id: RunId | None = None  # the run folder's name
    created: str | None = None  # when the run was made, ISO 8601 UTC
    command: list[str] | None = None
    cwd: str | None = None
    hostname: str | None = None  # the host that wrote the run
    world_size: Ranks | None = None
    nnodes: Ranks | None = None
    backend: str | None = None  # the torch.distributed backend the run measured on ("nccl", "gloo")
    source: Source | None = None  # where the run's records come from (records.schema.SOURCES)
    versions: dict[str, str | None] | None = None  # the software the run names (VERSION_KEYS first); None: not there
    platform: MetaPlatform | None = None
    gpus: list[MetaGpu] | None = None  # the visible GPUs (gpu_inventory), or those an import's logs name
    env: dict[str, str] | None = None  # the environment variables that matter (relevant_env)
    plan: MetaPlan | None = None
    sweep: MetaSweep | None = None
    shared_gpus: bool | None = None  # ranks shared GPUs (--share-gpus): a functional check only
    topology: MetaTopology | None = None
    floor: MetaFloor | None = None
    doctor: MetaDoctor | None = None
    kernel_builds: list[KernelBuildReport] | None = None  # one report per node that built kernels (sweep.prebuild)
    nccl_graphs: MetaGraphs | None = None  # the NCCL graph candidates written for this box (sweep.graph_run)
    simulated: bool | None = None  # `commprof simulate` wrote the run
    calibration: MetaCalibration | str | None = None  # simulated: the calibration file's, or "nccl-prior"
    model_error: MetaModelError | None = None  # simulated: the expected error of its predictions (evidence.ModelError)
    imported: list[ImportedLog] | None = None  # nccl-tests imports: each log's file, sha256, warnings and runs
    nccl_version: str | None = None  # the NCCL version as an older commprof wrote it, outside versions

    @property
    def gpu_names(self) -> list[str]:
        """The listed GPUs' names, sorted and each once ("?" for one without)."""
        return sorted({gpu.name or "?" for gpu in self.gpus or []})

    @property
    def probed_gpus(self) -> list[TopologyGpu]:
        """The GPUs the topology probe lists (a simulation's preset gives a count, not a list: none)."""
        return self.topology.probed_gpus if self.topology else []

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
        return list(self.doctor.failed or []) if self.doctor else []

    @property
    def imported_files(self) -> list[str]:
        """The file names of the nccl-tests logs the run imported."""
        return [Path(str(item.file)).name for item in self.imported or []]

    @property
    def imported_runs(self) -> dict[str | None, ImportedRun]:
        """The imported logs' runs by point id."""
        return {run.point_id: run for item in self.imported or [] for run in item.runs or []}


def parse_meta(data: Any) -> RunMeta:
    """meta.json's parsed JSON as RunMeta; ValueError saying in a few words why it cannot be used."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    try:
        return msgspec.convert(data, RunMeta)
    except msgspec.ValidationError as refused:
        raise ValueError(explain(refused, data, RunMeta)) from None


def read_meta(run_dir: Path) -> RunMeta:
    """A run's meta.json, read once (RunMeta() where there is none); UsageError naming the file when it cannot be
    used."""
    path = Path(run_dir) / META_FILE
    if not path.exists():
        return RunMeta()
    try:
        return parse_meta(read_json(path, "run metadata", META_BYTES))
    except ValueError as problem:
        raise UsageError(f"{path}: not usable run metadata: {problem}") from None


def run_meta(**fields: Any) -> RunMeta:
    """A meta.json: RunMeta from `fields` (each section a dict or its structure), the versions in VERSION_KEYS
    order; TypeError for an unknown or missing field or a key no section declares, ValueError for a value the
    reader would refuse."""
    unknown = sorted(set(fields) - set(RunMeta.__struct_fields__))
    missing = [name for name in REQUIRED if name not in fields]
    if unknown or missing:
        raise TypeError(f"meta.json: unknown field(s) {unknown}, missing field(s) {missing}")
    if fields["source"] not in SOURCES:
        raise ValueError(f"meta.json: source {fields['source']!r} is not one of {SOURCES}")
    versions = dict(fields["versions"] or {})
    fields["versions"] = {key: versions.pop(key, None) for key in VERSION_KEYS} | versions
    return _checked(fields)


def updated_meta(meta: RunMeta, **fields: Any) -> RunMeta:
    """A meta.json read back (read_meta) with `fields` set, checked as the constructor checks a new one."""
    unknown = sorted(set(fields) - set(RunMeta.__struct_fields__))
    if unknown:
        raise TypeError(f"meta.json: unknown field(s) {unknown}")
    return _checked({**meta_data(meta), **fields})


def meta_data(meta: RunMeta) -> dict[str, Any]:
    """meta.json's JSON: the fields the file says (None ones left out)."""
    return msgspec.to_builtins(meta)


def as_written(section: MetaSection | None) -> Any:
    """A section of meta.json as the file holds it: its JSON, keys in write_json's (sorted) order, the fields it
    does not say left out; None for none."""
    return _sorted(msgspec.to_builtins(section)) if section is not None else None


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    return [_sorted(item) for item in value] if isinstance(value, list) else value


def write_meta(run_dir: Path, meta: RunMeta) -> None:
    """Write the run's meta.json atomically, refused (naming its largest section) beyond what read_meta reads."""
    write_json(Path(run_dir) / META_FILE, meta_data(meta), META_BYTES)


def _checked(fields: dict[str, Any]) -> RunMeta:
    """`fields` as RunMeta, each section as the reader reads it; a key no section declares is a TypeError (the
    reader would not read it back), a value the reader refuses a ValueError."""
    data = msgspec.to_builtins(fields, str_keys=True, enc_hook=_text)
    undeclared = _undeclared(data, RunMeta)
    if undeclared:
        raise TypeError(f"meta.json: {undeclared} is not a field of its section (records.meta_sections)")
    try:
        return parse_meta(data)
    except ValueError as problem:
        raise ValueError(f"meta.json: {problem}") from None


def _text(value: Any) -> str:
    """A string of a subclass (torch's TorchVersion) or a path, as the plain text meta.json holds."""
    if isinstance(value, (str, os.PathLike)):
        return str(value)
    raise NotImplementedError(f"meta.json cannot hold a {type(value).__name__}")


def _undeclared(given: Any, kind: Any, path: str = "") -> str | None:
    """The first key of `given` (JSON, a value not None) that the structure `kind` does not declare, "a.b[0].c"."""
    hint = kind.__origin__ if typing.get_origin(kind) is Annotated else kind
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        option = option.__origin__ if typing.get_origin(option) is Annotated else option
        if isinstance(given, dict) and isinstance(option, type) and issubclass(option, msgspec.Struct):
            hints = _hints(option)
            for key, value in given.items():
                where = f"{path}.{key}" if path else str(key)
                found = where if key not in hints and value is not None else None
                if found or (key in hints and (found := _undeclared(value, hints[key], where))):
                    return found
            return None
        inner = typing.get_args(option)
        if isinstance(given, dict) and typing.get_origin(option) is dict:
            return next((f for k, v in given.items() if (f := _undeclared(v, inner[1], f"{path}.{k}"))), None)
        if isinstance(given, list) and typing.get_origin(option) is list:
            return next((f for i, v in enumerate(given) if (f := _undeclared(v, inner[0], f"{path}[{i}]"))), None)
    return None


@functools.cache
def _hints(struct: type) -> dict[str, Any]:
    return typing.get_type_hints(struct, include_extras=True)


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
