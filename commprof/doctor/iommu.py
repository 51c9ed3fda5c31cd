"""Check 3: IOMMU mode, from the kernel command line, /sys/kernel/iommu_groups and dmesg."""

from __future__ import annotations

import re

from commprof.doctor.facts import Facts
from commprof.doctor.result import FAIL, OK, SKIPPED, WARN, CheckResult

ID, TITLE = "iommu", "IOMMU off or passthrough"

_DOMAIN = re.compile(r"iommu: Default domain type: (\w+)")
_FAULT = re.compile(r"IO_PAGE_FAULT|DMAR: \[DMA (?:Read|Write)|DMAR:.*fault", re.IGNORECASE)
_ENABLED = re.compile(r"Adding to iommu group|DMAR: IOMMU enabled|AMD-Vi: .*IOMMU.*enabled", re.IGNORECASE)
FIX = (
    "add iommu=pt to GRUB_CMDLINE_LINUX in /etc/default/grub (AMD: amd_iommu=on iommu=pt; Intel: "
    "intel_iommu=on iommu=pt), sudo update-grub, reboot; iommu=off (amd_iommu=off / intel_iommu=off) also "
    "works where nothing needs the IOMMU (VFIO, SR-IOV do)"
)


def kernel_params(cmdline: str) -> dict[str, str]:
    """ "a=b c" -> {"a": "b", "c": ""}; the last occurrence wins, as in the kernel."""
    params = {}
    for token in cmdline.split():
        key, _, value = token.partition("=")
        params[key] = value
    return params


def check_iommu(facts: Facts) -> CheckResult:
    cmdline, dmesg, groups = facts.source("cmdline"), facts.source("dmesg"), facts.source("iommu_groups")
    if not cmdline.ok and not groups.ok and not dmesg.ok:
        return CheckResult(ID, TITLE, SKIPPED, f"nothing to read ({cmdline.why_missing()})")
    evidence = []
    params = kernel_params(cmdline.text) if cmdline.ok else {}
    iommu_params = {k: v for k, v in params.items() if "iommu" in k}
    if cmdline.ok:
        shown = " ".join(f"{k}={v}" if v else k for k, v in iommu_params.items()) or "no iommu parameter"
        evidence.append(f"{shown} ({cmdline.where})")
    n_groups = len([line for line in groups.text.splitlines() if line.strip()]) if groups.ok else None
    if n_groups is not None:
        evidence.append(f"{n_groups} IOMMU group(s) ({groups.where})")
    faults, domain, enabled = [], None, False
    if dmesg.ok:
        faults = [line.strip() for line in dmesg.text.splitlines() if _FAULT.search(line)]
        if m := _DOMAIN.search(dmesg.text):
            domain = m.group(1)
            evidence.append(f"'iommu: Default domain type: {domain}' ({dmesg.where})")
        enabled = bool(_ENABLED.search(dmesg.text))
    elif "permission" in dmesg.missing:
        evidence.append(f"dmesg unreadable: {dmesg.missing} (root, or kernel.dmesg_restrict=0, reveals more)")
    if faults:
        return CheckResult(
            ID,
            TITLE,
            FAIL,
            f"{len(faults)} IOMMU fault line(s) in dmesg: DMA was blocked",
            evidence + [f"{faults[0]} ({dmesg.where})"],
            FIX,
        )
    off = "off" in (params.get("iommu"), params.get("amd_iommu"), params.get("intel_iommu"))
    passthrough = params.get("iommu") == "pt" or params.get("iommu.passthrough") in ("1", "on", "y")
    if n_groups == 0:
        return CheckResult(ID, TITLE, OK, "no IOMMU groups: the IOMMU is not translating DMA", evidence)
    if off and n_groups is None:
        return CheckResult(ID, TITLE, OK, "IOMMU off on the kernel command line", evidence)
    if passthrough or domain == "Passthrough":
        return CheckResult(ID, TITLE, OK, "IOMMU in passthrough mode: GPU DMA is not translated", evidence)
    if n_groups or (enabled and domain in ("Translated", "DMA", "DMA-FQ")):
        return CheckResult(
            ID,
            TITLE,
            WARN,
            "the IOMMU translates DMA: GPU peer-to-peer requests go up to the root complex for "
            "translation, which slows P2P and on some platforms hangs it",
            evidence,
            FIX,
        )
    return CheckResult(ID, TITLE, SKIPPED, "cannot tell the IOMMU mode from what was read", evidence)
