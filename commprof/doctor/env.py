"""Check 10: settings in the environment and /etc/nccl.conf that skew or break measurements."""

from __future__ import annotations

from commprof.doctor.facts import Facts
from commprof.doctor.result import OK, SKIPPED, WARN, CheckResult
from commprof.nccl_tuning import TUNING_NAMES, env_value
from commprof.nccl_vocab import GRAPH_FILE_VARIABLES, value_traps

ID, TITLE = "env", "No conflicting NCCL / PyTorch settings"

# NCCL's tuner plug-in replaces its choices for every collective, as a tuning variable set globally does.
TUNER_PLUGIN = "NCCL_TUNER_PLUGIN"

# What to do about a forced choice of NCCL's (where a value traps it).
FORCED_FIXES = {
    "NCCL_ALGO": "restrict it to the all-reduce: NCCL_ALGO=allreduce:tree",
    "NCCL_PROTO": "unset NCCL_PROTO",
}

EXPANDABLE_FINDING = (
    "expandable_segments maps memory with cuMem APIs that custom all-reduce kernels' CUDA "
    "IPC handles do not cover (engines turn custom all-reduce off or fail to capture)"
)
EXPANDABLE_FIX = "unset PYTORCH_CUDA_ALLOC_CONF or set expandable_segments:False when measuring custom all-reduce"


def parse_assignments(text: str) -> dict[str, str]:
    """NAME=value lines (environment dumps, nccl.conf); '#' comments and blank lines skipped."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[7:]
        name, sep, value = line.partition("=")
        if sep and name and not name.startswith("#"):
            out[name.strip()] = value.strip().strip('"').strip("'")
    return out


def _traps(name: str, value: str) -> list[str]:
    try:
        return value_traps(name, env_value(name, value))
    except ValueError as exc:
        return [f"{name}={value!r} is not a value NCCL accepts ({exc})"]


def check_env(facts: Facts) -> CheckResult:
    env_src, conf_src = facts.source("env"), facts.source("nccl_conf")
    if not env_src.ok and not conf_src.ok:
        return CheckResult(ID, TITLE, SKIPPED, f"no environment to read ({env_src.why_missing()})")
    settings: dict[str, tuple[str, str]] = {}
    if conf_src.ok:
        settings.update({k: (v, conf_src.where) for k, v in parse_assignments(conf_src.text).items()})
    if env_src.ok:  # the environment overrides nccl.conf
        settings.update({k: (v, env_src.where) for k, v in parse_assignments(env_src.text).items()})
    findings: list[tuple[str, str, str]] = []  # (finding, evidence, fix)
    for name in GRAPH_FILE_VARIABLES:
        if name in settings:
            value, where = settings[name]
            in_conf = conf_src.ok and where == conf_src.where
            findings.append(
                (
                    f"{name} replaces NCCL's own {'graph search' if name == 'NCCL_GRAPH_FILE' else 'topology'}"
                    + (" for every NCCL job on this box (nccl.conf is read by every process)" if in_conf else "")
                    + ": a file written for other GPUs, another GPU group (a TP sub-group) or another NCCL "
                    "version silently changes rings and channels, or fails the communicator's init",
                    f"{name}={value} ({where})",
                    f"remove {name} from {where}" if in_conf else f"unset {name} (keep it only as a sweep axis)",
                )
            )
    for name, fix in FORCED_FIXES.items():
        if name in settings:
            value, where = settings[name]
            # The same trap rules the sweep file's validation applies (commprof.nccl_vocab).
            for trap in _traps(name, value):
                findings.append((trap, f"{name}={value} ({where})", fix))
    # The variables a sweep sets per point: set globally they replace NCCL's defaults in the baseline (a graph or
    # topology file is said above).
    forced = [n for n in (*TUNING_NAMES, TUNER_PLUGIN) if n in settings and n not in GRAPH_FILE_VARIABLES]
    if forced:
        findings.append(
            (
                "NCCL tuning variables set globally: the sweep's baseline would not be NCCL's defaults",
                ", ".join(f"{n}={settings[n][0]} ({settings[n][1]})" for n in forced),
                "unset " + " ".join(forced) + " (sweep them as axes instead)",
            )
        )
    alloc = settings.get("PYTORCH_CUDA_ALLOC_CONF", ("", ""))[0]
    if "expandable_segments:true" in alloc.replace(" ", "").lower():
        findings.append(
            (
                EXPANDABLE_FINDING,
                f"PYTORCH_CUDA_ALLOC_CONF={alloc} ({settings['PYTORCH_CUDA_ALLOC_CONF'][1]})",
                EXPANDABLE_FIX,
            )
        )
    order = settings.get("CUDA_DEVICE_ORDER", ("", ""))[0]
    if order and order != "PCI_BUS_ID":
        findings.append(
            (
                "CUDA numbers GPUs differently from nvidia-smi / NVML / NCCL logs, so GPU i in one is "
                "not GPU i in the other",
                f"CUDA_DEVICE_ORDER={order} ({settings['CUDA_DEVICE_ORDER'][1]})",
                "export CUDA_DEVICE_ORDER=PCI_BUS_ID",
            )
        )
    if not findings:
        shown = sorted(n for n in settings if n.startswith(("NCCL_", "CUDA_", "PYTORCH_")))
        return CheckResult(
            ID,
            TITLE,
            OK,
            "nothing forces NCCL's choices or breaks custom all-reduce",
            [
                f"set: {', '.join(shown) or 'no NCCL_* / CUDA_* / PYTORCH_* variable'}"
                f" ({', '.join(s.where for s in (env_src, conf_src) if s.ok)})"
            ],
        )
    return CheckResult(
        ID, TITLE, WARN, "; ".join(f[0] for f in findings), [f[1] for f in findings], "; ".join(f[2] for f in findings)
    )
