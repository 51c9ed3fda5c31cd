"""What the box's own records say of each condition: the doctor's verdicts (by check name), an NCCL INFO log, the
GPU models a log names. Each condition is confirmed, ruled out, or not checked, with the lines that say so and the
doctor's fix. The checks and fixes are the doctor's (commprof.doctor): read here, never restated. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from commprof.doctor import acs, driver, env, iommu, nccl, p2p, pcie
from commprof.doctor.result import FAIL, OK, WARN, CheckResult
from commprof.explain.conditions import Condition
from commprof.nccl_log.parse import NcclLogSummary
from commprof.nccl_vocab import nccl_user_p2p_level

EvidenceStatus = Literal["confirmed", "not checked", "ruled out"]
EVIDENCE_STATUSES: tuple[EvidenceStatus, ...] = get_args(EvidenceStatus)
CONFIRMED, NOT_CHECKED, RULED_OUT = EVIDENCE_STATUSES

# An environment setting as the doctor's env check quotes it: "NCCL_PROTO=Simple (bundle/env.log)".
_SETTING = re.compile(r"\b([A-Z][A-Z0-9_]*)=([^\s,()]+) \(([^)]*)\)")
CHANNEL_LIMITS = ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS")
FORCING = ("NCCL_PROTO", "NCCL_ALGO")
LATE_RANK_CHECK = (
    "no record of when each rank reaches the collectives: `commprof trace DIR` on the engine's profiler traces "
    "gives each collective's rank skew"
)
DEFAULT_FIXES: dict[Condition, str] = {
    "as-modelled": "",
    "p2p-off-shm": "`commprof doctor` on the box: its p2p check says whether P2P works, its driver, acs and iommu "
    f"checks why not; where pairs cross a CPU host bridge: {nccl.TRAP_FIX}",
    "acs-redirect": f"on the bridges the doctor's acs check names, {acs.redirect_fix(['<bridge>'])}",
    "iommu-translation": iommu.FIX,
    "link-downtrained": pcie.LINK_FIX,
    "channels-limited": "unset NCCL_MAX_NCHANNELS and NCCL_MAX_CTAS; to run more channels than NCCL picks, set "
    "NCCL_MIN_NCHANNELS (a sweep axis: measure it)",
    "proto-forced": f"unset NCCL_PROTO; for NCCL_ALGO: {env.FORCED_FIXES['NCCL_ALGO']}",
    "late-rank": "find the late rank (`commprof trace` on the engine's traces: rank skew per collective); a GPU "
    "that throttles shows in the doctor's clocks check",
}


@dataclass(frozen=True)
class BoxRecords:
    """What is known of the box beyond its model: the doctor's verdicts, an NCCL INFO log, GPU names a log prints."""

    checks: tuple[CheckResult, ...] = ()
    """The doctor's verdicts on the box (a bundle read now, or a run's meta.json)."""
    checks_where: str = ""
    """Where the verdicts come from: "doctor on bundle DIR"."""
    nccl_log: NcclLogSummary | None = None
    """An NCCL_DEBUG=INFO log of the box."""
    nccl_log_where: str = ""
    gpu_names: tuple[tuple[str, str], ...] = ()
    """(GPU name, where it was read) of the observations' own files (an nccl-tests log's device lines)."""


@dataclass(frozen=True)
class Evidence:
    """What the records say of one condition."""

    status: EvidenceStatus
    lines: tuple[str, ...]
    """What was read, each naming the doctor's check or the file."""
    fix: str
    """The doctor's fix for it (the check's own where it fired)."""


def _check(records: BoxRecords, check_id: str) -> CheckResult | None:
    return next((c for c in records.checks if c.id == check_id), None)


def _said(check: CheckResult, where: str) -> str:
    return f"doctor {check.id} ({check.status}): {check.detail}" + (f" [{where}]" if where else "")


def settings(records: BoxRecords) -> dict[str, tuple[str, str]]:
    """NAME -> (value, where) of what the doctor's env check quotes and the NCCL log says was set."""
    out: dict[str, tuple[str, str]] = {}
    check = _check(records, env.ID)
    for line in check.evidence if check else []:
        for name, value, where in _SETTING.findall(line):
            out.setdefault(name, (value, f"doctor env: {where}"))
    if records.nccl_log is not None:
        for name, value in records.nccl_log.env.items():
            out.setdefault(name, (value, records.nccl_log_where))
    return out


def evidence_for(condition: Condition, records: BoxRecords, modelled_channels: int | None = None) -> Evidence:
    """Confirmed, ruled out or not checked, with the lines that say so and the fix."""
    rule = _RULES.get(condition)
    if condition == "as-modelled":
        return Evidence(NOT_CHECKED, (), "")
    if rule is None:
        return Evidence(NOT_CHECKED, tuple(_unchecked(condition, records)), DEFAULT_FIXES[condition])
    confirmed, ruled_out, fix = rule(records, settings(records), modelled_channels)
    if confirmed:
        return Evidence(CONFIRMED, tuple(confirmed), fix or DEFAULT_FIXES[condition])
    if ruled_out:
        return Evidence(RULED_OUT, tuple(ruled_out), DEFAULT_FIXES[condition])
    return Evidence(NOT_CHECKED, tuple(_unchecked(condition, records)), DEFAULT_FIXES[condition])


def _unchecked(condition: Condition, records: BoxRecords) -> list[str]:
    names = {
        "p2p-off-shm": [p2p.ID, driver.ID],
        "acs-redirect": [acs.ID],
        "iommu-translation": [iommu.ID],
        "link-downtrained": [pcie.LINK_ID],
        "channels-limited": [env.ID],
        "proto-forced": [env.ID],
    }.get(condition, [])
    lines = [_said(c, records.checks_where) for n in names if (c := _check(records, n)) is not None]
    if condition == "late-rank":
        lines.append(LATE_RANK_CHECK)
    elif not lines:
        lines.append(f"not checked: `commprof doctor` on the box runs its {' and '.join(names)} check")
    return lines


Found = tuple[list[str], list[str], str]


def _p2p_off(records: BoxRecords, found: Mapping[str, tuple[str, str]], _channels: int | None) -> Found:
    confirmed, ruled_out, fixes = [], [], []
    user = nccl_user_p2p_level({k: v for k, (v, _) in found.items()})
    if user is not None and user.level == "LOC":
        confirmed.append(f"{user.reason} ({found[user.variable][1]})")
        fixes.append(f"unset {user.variable}")
    check = _check(records, p2p.ID)
    if check is not None and check.status in (WARN, FAIL):
        confirmed.append(_said(check, records.checks_where))
        fixes.append(check.fix)
    elif check is not None and check.status == OK:
        ruled_out.append(_said(check, records.checks_where))
    check = _check(records, driver.ID)
    if check is not None and driver.STOCK_NO_P2P_FIX in check.fix:
        confirmed.append(_said(check, records.checks_where))
        fixes.append(driver.STOCK_NO_P2P_FIX)
    refused = sorted({(n, w) for n, w in records.gpu_names if driver.stock_driver_refuses_p2p(n)})
    if refused:
        confirmed.append(
            f"GPU model {refused[0][0]} ({refused[0][1]}): its stock driver refuses peer access (the doctor's "
            "driver check's rule; a patched driver with P2P registry keys would not)"
        )
        fixes.append(driver.STOCK_NO_P2P_FIX)
    log = records.nccl_log
    if log is not None and log.transports.get("SHM"):
        confirmed.append(
            f"NCCL log: {log.transports['SHM']} of {len(log.connections)} GPU connections through host memory (SHM) "
            f"({records.nccl_log_where})"
        )
    elif log is not None and log.transports.get("P2P"):
        ruled_out.append(f"NCCL log: every GPU connection over P2P ({records.nccl_log_where})")
    return confirmed, ruled_out, "; ".join(dict.fromkeys(f for f in fixes if f))


def _by_check(check_id: str, confirm: tuple[str, ...]):
    def rule(records: BoxRecords, _found: Mapping[str, tuple[str, str]], _channels: int | None) -> Found:
        check = _check(records, check_id)
        if check is None:
            return [], [], ""
        if check.status in confirm:
            return [_said(check, records.checks_where)], [], check.fix
        if check.status == OK:
            return [], [_said(check, records.checks_where)], ""
        return [], [], ""

    return rule


def _link(records: BoxRecords, found: Mapping[str, tuple[str, str]], channels: int | None) -> Found:
    check = _check(records, pcie.LINK_ID)
    if check is not None and check.status == WARN and check.fix == pcie.LOAD_FIX:
        return [], [], ""  # read idle only: links train down on purpose when idle
    return _by_check(pcie.LINK_ID, (WARN, FAIL))(records, found, channels)


def _by_settings(names: tuple[str, ...]):
    def rule(records: BoxRecords, found: Mapping[str, tuple[str, str]], channels: int | None) -> Found:
        confirmed = [f"{n}={found[n][0]} ({found[n][1]})" for n in names if n in found]
        ruled_out = []
        log = records.nccl_log
        if names == CHANNEL_LIMITS and log is not None and log.channels and channels:
            line = f"NCCL log: {log.channels} collective channels, the model runs {channels} ({records.nccl_log_where})"
            (confirmed if log.channels < channels else ruled_out).append(line)
        check = _check(records, env.ID)
        if not confirmed and check is not None and check.status == OK:
            ruled_out.append(_said(check, records.checks_where))
        fix = "; ".join(env.FORCED_FIXES.get(n, f"unset {n}") for n in names if n in found)
        return confirmed, ruled_out, fix

    return rule


_RULES = {
    "p2p-off-shm": _p2p_off,
    "acs-redirect": _by_check(acs.ID, (FAIL, WARN)),
    "iommu-translation": _by_check(iommu.ID, (FAIL, WARN)),
    "link-downtrained": _link,
    "channels-limited": _by_settings(CHANNEL_LIMITS),
    "proto-forced": _by_settings(FORCING),
}


def landmines(records: BoxRecords) -> tuple[str, ...]:
    """What the doctor's env check found that turns a faster all-reduce off, beside the explanations."""
    check = _check(records, env.ID)
    if check is None or env.EXPANDABLE_FINDING not in check.detail:
        return ()
    quoted = next((line for line in check.evidence if "PYTORCH_CUDA_ALLOC_CONF" in line), "")
    return (f"doctor env: {quoted}: {env.EXPANDABLE_FINDING}; fix: {env.EXPANDABLE_FIX}",)
