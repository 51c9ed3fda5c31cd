"""Check 9: NCCL's own view (version, transports, rings, channels) and the default P2P-level trap."""

from __future__ import annotations

from commprof.doctor.env import parse_assignments
from commprof.doctor.facts import Facts
from commprof.doctor.gpus import pair_levels
from commprof.doctor.result import FAIL, OK, SKIPPED, WARN, CheckResult, worst
from commprof.nccl_log.findings import find_problems
from commprof.nccl_log.parse import parse_nccl_log
from commprof.nccl_vocab import HOST_PATHS

ID, TITLE = "nccl", "NCCL's own view: transports, rings, P2P level"

# The log's own findings on P2P reach (commprof.nccl_log.findings) that the topology-aware trap below says better.
TOPOLOGY_AWARE = ("p2p_unavailable", "p2p_through_host")
TRAP_FIX = (
    "try NCCL_P2P_LEVEL=SYS (an axis of sweeps/pcie8-verify.toml); keep it if it measures faster and "
    "the p2p check passes"
)


def cpu_vendor(facts: Facts) -> str | None:
    host = (facts.topology or {}).get("host") or {}
    if host.get("cpu_vendor"):
        return host["cpu_vendor"]
    lscpu = facts.text("lscpu") or ""
    for line in lscpu.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Vendor ID":
            return value.strip()
    return None


def check_nccl(facts: Facts) -> CheckResult:
    log = facts.source("nccl_init")
    levels, levels_where = pair_levels(facts)
    if not log.ok and not levels:
        return CheckResult(ID, TITLE, SKIPPED, f"no NCCL log and no GPU path levels ({log.why_missing()})")
    statuses, findings, evidence, fixes = [OK], [], [], []
    summary = parse_nccl_log(log.text) if log.ok else None
    if summary:
        transports = ", ".join(f"{k} {v}" for k, v in summary.transports.items()) or "none logged"
        evidence.append(
            f"NCCL {summary.version or '?'}: connections {transports}, {summary.channels} coll channels ({log.where})"
        )
        for graph in summary.graphs[:1]:
            evidence.append(
                f"{graph['kind']} graph: {graph['channels']} channels, {graph['bw_intra_gbps']:g} GB/s "
                f"per channel, paths {graph['type_intra']}/{graph['type_inter']} ({log.where})"
            )
        for finding in find_problems(summary):
            if finding.id in TOPOLOGY_AWARE:
                continue
            statuses.append(FAIL if finding.severity == "fail" else WARN)
            findings.append(finding.text)
            evidence += [f"{line} ({log.where})" for line in finding.evidence[:2]]
            fixes.append(finding.fix)
    else:
        evidence.append(f"NCCL INFO log not available ({log.why_missing()})")
    user_level = _user_p2p_level(facts)
    n_gpus = len({g for pair in levels for g in pair})
    beyond = [pair for pair, level in levels.items() if level in HOST_PATHS]  # NCCL stages them through the host
    amd_pair = (cpu_vendor(facts) or "").startswith("AuthenticAMD") and n_gpus <= 2
    if not facts.source("env").ok:
        evidence.append(f"environment not read ({facts.source('env').why_missing()}): NCCL_P2P_LEVEL assumed unset")
    if user_level:
        evidence.append(f"P2P level set by the user: {user_level}")
    elif beyond and not amd_pair:
        shm = summary.transports.get("SHM", 0) if summary else None
        statuses.append(WARN)
        findings.append(
            f"NCCL's default P2P level is PXB: {len(beyond)} of {len(levels)} GPU pairs "
            f"({'/'.join(sorted({levels[p] for p in beyond}))} paths) are staged through host memory "
            "instead of going GPU to GPU" + (f" ({shm} SHM connections in the log)" if shm else "")
        )
        evidence.append(f"{len(beyond)} pairs beyond PXB ({levels_where})")
        fixes.append(TRAP_FIX)
    status = worst(statuses)
    detail = "; ".join(findings) or (
        f"NCCL uses P2P where the topology allows ({summary.version})" if summary else "no path beyond NCCL's P2P level"
    )
    return CheckResult(ID, TITLE, status, detail, evidence, "; ".join(fixes))


def _user_p2p_level(facts: Facts) -> str | None:
    settings = {}
    for name in ("nccl_conf", "env"):
        if facts.source(name).ok:
            settings.update(parse_assignments(facts.text(name)))
    if settings.get("NCCL_P2P_DISABLE") == "1":
        return "NCCL_P2P_DISABLE=1"
    return f"NCCL_P2P_LEVEL={settings['NCCL_P2P_LEVEL']}" if settings.get("NCCL_P2P_LEVEL") else None
