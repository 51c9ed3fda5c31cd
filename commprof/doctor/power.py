"""Check 11: clocks, power limit, throttle reasons, temperature and persistence mode (NVML / nvidia-smi)."""

from __future__ import annotations

from commprof.doctor.facts import Facts
from commprof.doctor.gpus import gpu_view
from commprof.doctor.result import OK, SKIPPED, WARN, CheckResult

ID, TITLE = "clocks", "Clocks, power and thermals steady for benchmarking"

THROTTLING = ("SW Power Cap", "HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")
# "Applications Clocks Setting" is active while locked or application clocks hold the GPU below its max.
PINNED_REASON = "Applications Clocks Setting"
MIN_TEMP_MARGIN_C = 5


def clocks_pinned(gpu: dict) -> bool | None:
    """NVML has no "locked" flag: a clock lock shows as the PINNED_REASON, or as an idle GPU at high clocks."""
    if PINNED_REASON in (gpu["event_reasons"] or []):
        return True
    if gpu["sm_clock_mhz"] is None or not gpu["sm_clock_max_mhz"]:
        return None
    idle = gpu["utilization_pct"] == 0
    return idle and gpu["sm_clock_mhz"] >= 0.9 * gpu["sm_clock_max_mhz"]


def check_clocks(facts: Facts) -> CheckResult:
    gpus, where, why = gpu_view(facts)
    if not gpus:
        return CheckResult(ID, TITLE, SKIPPED, f"no GPU: {why}")
    findings, fixes, evidence = [], [], []
    capped = [
        g
        for g in gpus
        if g["power_limit_w"] and g["power_default_w"] and g["power_limit_w"] < 0.99 * g["power_default_w"]
    ]
    if capped:
        findings.append(
            "power limit below default on GPU "
            + ", ".join(f"{g['index']} ({g['power_limit_w']:.0f} of {g['power_default_w']:.0f} W)" for g in capped)
        )
        fixes += [f"sudo nvidia-smi -i {g['index']} -pl {g['power_default_w']:.0f}" for g in capped]
    throttled = [(g["index"], r) for g in gpus for r in g["event_reasons"] or [] if r in THROTTLING]
    if throttled:
        findings.append("clocks held down by " + ", ".join(f"{r} (GPU {i})" for i, r in throttled))
        fixes.append("check cooling and power delivery; nvidia-smi -q -d PERFORMANCE shows the reason counters")
    hot = [g for g in gpus if g["temp_margin_c"] is not None and g["temp_margin_c"] < MIN_TEMP_MARGIN_C]
    if hot:
        findings.append("within 5 C of the slowdown temperature: GPU " + ", ".join(str(g["index"]) for g in hot))
    no_persistence = [g["index"] for g in gpus if g["persistence"] is False]
    if no_persistence:
        findings.append(
            f"persistence mode off on GPU {','.join(map(str, no_persistence))} (every process pays "
            "driver start-up, and clocks reset between runs)"
        )
        fixes.append("sudo nvidia-smi -pm 1 (or enable nvidia-persistenced)")
    unpinned = [g for g in gpus if clocks_pinned(g) is False]
    if unpinned:
        top = max(g["sm_clock_max_mhz"] or 0 for g in unpinned)
        findings.append(
            f"clocks not locked on {len(unpinned)} GPU(s): boost clocks drift with temperature and "
            "power, often by more than the differences a sweep ranks"
        )
        fixes.append(
            f"lock them to a clock the cards sustain under load: sudo nvidia-smi --lock-gpu-clocks=<MHz>,"
            f"<MHz> (max SM clock here {top:.0f} MHz; undo with --reset-gpu-clocks)"
        )
    g0 = gpus[0]
    evidence.append(
        f"GPU {g0['index']}: {g0['pstate'] or '?'}, SM {g0['sm_clock_mhz']} of {g0['sm_clock_max_mhz']} "
        f"MHz, power limit {g0['power_limit_w']} W (default {g0['power_default_w']} W), "
        f"{g0['temperature_c']} C, persistence {g0['persistence']} ({where})"
    )
    if findings:
        return CheckResult(ID, TITLE, WARN, "; ".join(findings), evidence, "; ".join(fixes))
    return CheckResult(ID, TITLE, OK, f"clocks locked, no power cap or throttling on {len(gpus)} GPUs", evidence)
