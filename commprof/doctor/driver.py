"""Check 4: NVIDIA driver settings that decide P2P for custom all-reduce kernels (/proc/driver/nvidia/params, HMM)."""

from __future__ import annotations

import re

from commprof.doctor.facts import Facts
from commprof.doctor.gpus import gpu_view
from commprof.doctor.result import OK, SKIPPED, WARN, CheckResult, worst
from commprof.errors import UsageError

ID, TITLE = "driver", "Driver peer-to-peer settings"

# Registry keys that make the driver map peers it would otherwise refuse (tinygrad-style "P2P unlock").
P2P_OVERRIDES = ("ForceP2P", "RMForceP2PType", "RMPcieP2PType", "PeerMappingOverride", "GrdmaPciTopoCheckOverride")
# GPU models whose stock NVIDIA driver refuses peer access, so NCCL moves every pair through host memory (SHM):
# GeForce RTX 4090 (charlie0129 blog 'RTX4090 GPUDirect P2P Unlocked!', 2025-02-07: stock driver, P2P disabled;
# tinygrad/open-gpu-kernel-modules#45) and RTX 5090 (noonghunna/club-3090#880, aikitoria/open-gpu-kernel-modules#6:
# P2P only with a patched open driver and registry keys). commprof's field-evidence notes, sections 3 and 4.
STOCK_NO_P2P = re.compile(r"GeForce RTX (?:4090|5090)\b")
STOCK_NO_P2P_FIX = (
    "with this GPU model's stock driver NCCL stays on host memory (SHM) and custom all-reduce kernels that need P2P "
    "do not run; P2P needs a driver that allows it (a patched open driver with P2P registry keys, which this check "
    "reads), verified by the p2p check's pair all-reduces"
)
HMM_FIX = (
    "echo 'options nvidia_uvm uvm_disable_hmm=1' | sudo tee /etc/modprobe.d/uvm.conf, then reload nvidia_uvm "
    "(sudo modprobe -r nvidia_uvm && sudo modprobe nvidia_uvm) or reboot"
)


def parse_params(text: str) -> dict[str, str]:
    """/proc/driver/nvidia/params: "Key: value" lines."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def stock_driver_refuses_p2p(gpu_name: str | None) -> bool:
    """Whether the stock driver of this GPU model refuses peer access (STOCK_NO_P2P)."""
    return bool(gpu_name and STOCK_NO_P2P.search(gpu_name))


def check_driver(facts: Facts) -> CheckResult:
    params_src, hmm_src = facts.source("nvidia_params"), facts.source("uvm_disable_hmm")
    try:
        gpus, gpus_where, _ = gpu_view(facts)
    except UsageError:
        gpus, gpus_where = [], ""
    refused = sorted({g["name"] for g in gpus if stock_driver_refuses_p2p(g["name"])})
    if not params_src.ok and not hmm_src.ok and not refused:
        return CheckResult(ID, TITLE, SKIPPED, f"no driver parameters ({params_src.why_missing()})")
    statuses, evidence, details, fixes = [OK], [], [], []
    overrides: list[str] = []
    if params_src.ok:
        params = parse_params(params_src.text)
        registry = params.get("RegistryDwords", "")
        overrides = [k for k in P2P_OVERRIDES if re.search(rf"\b{k}\s*=", registry)]
        evidence.append(f'RegistryDwords: "{registry}" ({params_src.where})')
        if "EnableResizableBar" in params:
            evidence.append(f"EnableResizableBar: {params['EnableResizableBar']} ({params_src.where})")
        if overrides:
            pairs = facts.tests.get("pairs") or []
            verified = pairs and all(p.get("status") == "ok" for p in pairs)
            statuses.append(OK if verified else WARN)
            details.append(
                f"P2P forced by registry keys {', '.join(overrides)}"
                + (
                    "; the pair all-reduces passed"
                    if verified
                    else "; not verified by a pair all-reduce here, and forced P2P on an unvalidated "
                    "platform can hang or corrupt data"
                )
            )
    if refused and not overrides:
        statuses.append(WARN)
        evidence.append(f"GPU model {', '.join(refused)} ({gpus_where})")
        details.append(
            f"the stock driver refuses peer access on {', '.join(refused)}"
            + ("" if params_src.ok else " (driver parameters not read: a patched driver's P2P keys would show there)")
        )
        fixes.append(STOCK_NO_P2P_FIX)
    if hmm_src.ok:
        disabled = hmm_src.text.strip() in ("Y", "1")
        evidence.append(f"uvm_disable_hmm={hmm_src.text.strip()} ({hmm_src.where})")
        n_gpus = len((facts.topology or {}).get("gpus") or [])
        if not disabled and n_gpus != 1:
            statuses.append(WARN)
            details.append(
                "HMM is enabled in nvidia_uvm; with several GPUs it is a known source of UVM "
                "stalls and init failures (CUDA release notes), and nothing here needs it"
            )
            fixes.append(HMM_FIX)
    status = worst(statuses)
    detail = "; ".join(details) or "no P2P overrides, HMM off or unknown"
    return CheckResult(ID, TITLE, status, detail, evidence, "; ".join(fixes) if status != OK else "")
