"""Check 2: ACS request / completion redirect on the bridges above the GPUs (`lspci -vvv` ACSCtl)."""

from __future__ import annotations

from commprof.doctor.facts import Facts
from commprof.doctor.parse_lspci import bridges_above, parse_lspci
from commprof.doctor.result import FAIL, OK, SKIPPED, CheckResult

ID, TITLE = "acs", "ACS redirect off above the GPUs"


def check_acs(facts: Facts) -> CheckResult:
    lspci = facts.source("lspci_full")
    if not lspci.ok:
        return CheckResult(
            ID,
            TITLE,
            SKIPPED,
            f"no lspci output ({lspci.why_missing()})",
            fix="install pciutils (apt install pciutils) and run as root",
        )
    devices = parse_lspci(lspci.text)
    gpus = [d for d in devices if d.is_nvidia_gpu]
    if not gpus:
        return CheckResult(ID, TITLE, SKIPPED, "no NVIDIA GPU in the lspci output")
    bridges = list({b.bdf: b for g in gpus for b in bridges_above(g, devices)}.values())
    denied = [b for b in bridges if b.access_denied and b.acs_ctl is None]
    readable = [b for b in bridges if b.acs_ctl is not None]
    redirect = [b for b in readable if b.acs_ctl.get("ReqRedir") or b.acs_ctl.get("CmpltRedir")]
    if redirect:
        bdfs = [b.bdf for b in redirect]
        return CheckResult(
            ID,
            TITLE,
            FAIL,
            f"ACS redirect is on at {len(redirect)} bridge(s) above the GPUs: peer-to-peer traffic is sent up "
            "to the root complex instead of across the switch (slow, or hangs with the IOMMU off)",
            evidence=[
                f"{b.bdf} ({b.port_type or b.kind}): ACSCtl ReqRedir{_sign(b, 'ReqRedir')} "
                f"CmpltRedir{_sign(b, 'CmpltRedir')} ({lspci.where})"
                for b in redirect
            ],
            fix=redirect_fix(bdfs),
        )
    if not readable and denied:
        return CheckResult(
            ID,
            TITLE,
            SKIPPED,
            f"lspci shows '<access denied>' for the capabilities of {len(denied)} bridge(s) above "
            "the GPUs: reading ACS needs root",
            fix="sudo commprof doctor (or sudo lspci -vvv)",
        )
    note = f"; {len(denied)} bridge(s) unreadable without root" if denied else ""
    without = len(bridges) - len(readable) - len(denied)
    return CheckResult(
        ID,
        TITLE,
        OK,
        f"ReqRedir- CmpltRedir- on all {len(readable)} ACS-capable bridges above {len(gpus)} GPUs"
        + (f" ({without} without ACS)" if without else "")
        + note,
        evidence=[f"{len(readable)} ACSCtl lines with ReqRedir- CmpltRedir- ({lspci.where})"],
    )


def redirect_fix(bdfs: list[str]) -> str:
    """How to turn ACS redirect off on these bridges (bus/device.function addresses), at every boot."""
    return (
        "at every boot (a systemd unit or udev rule), as root: "
        + "; ".join(f"setpci -s {bdf} ECAP_ACS+0x6.w=0000" for bdf in bdfs)
        + f"; or the kernel parameter pci=disable_acs_redir={';'.join(bdfs)}"
    )


def _sign(bridge, flag: str) -> str:
    return "+" if bridge.acs_ctl.get(flag) else "-"
