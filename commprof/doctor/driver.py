"""Check 4: NVIDIA driver settings that decide P2P for custom all-reduce kernels (/proc/driver/nvidia/params, HMM)."""

from __future__ import annotations

import re

from commprof.doctor.facts import Facts
from commprof.doctor.result import OK, SKIPPED, WARN, CheckResult, worst

ID, TITLE = "driver", "Driver peer-to-peer settings"

# Registry keys that make the driver map peers it would otherwise refuse (tinygrad-style "P2P unlock").
P2P_OVERRIDES = ("ForceP2P", "RMForceP2PType", "RMPcieP2PType", "PeerMappingOverride", "GrdmaPciTopoCheckOverride")
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


def check_driver(facts: Facts) -> CheckResult:
    params_src, hmm_src = facts.source("nvidia_params"), facts.source("uvm_disable_hmm")
    if not params_src.ok and not hmm_src.ok:
        return CheckResult(ID, TITLE, SKIPPED, f"no driver parameters ({params_src.why_missing()})")
    statuses, evidence, details, fixes = [OK], [], [], []
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
