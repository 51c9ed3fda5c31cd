"""Per-GPU health answers from NVML (BAR1, replays, power, clocks, temperature), keyed like the nvidia-smi view."""

from __future__ import annotations

import importlib
from typing import Any

from commprof.doctor.nvml_guard import NvmlCalls
from commprof.doctor.topology_probe import as_text, normalize_bus_id

# nvmlClocksEventReason* bits, named as `nvidia-smi -q` names them.
EVENT_REASONS = {
    0x1: "Idle",
    0x2: "Applications Clocks Setting",
    0x4: "SW Power Cap",
    0x8: "HW Slowdown",
    0x10: "Sync Boost",
    0x20: "SW Thermal Slowdown",
    0x40: "HW Thermal Slowdown",
    0x80: "HW Power Brake Slowdown",
    0x100: "Display Clock Setting",
}


def gather_health(nvml: Any = None) -> list[dict[str, Any]]:
    """One dict per GPU; [] without NVML or GPUs. Fields NVML does not answer are None, the calls behind them
    under "unanswered" with NVML's reason (or the function this nvidia-ml-py lacks)."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return []
    try:
        nvml.nvmlInit()
    except Exception:  # no driver
        return []
    ask = NvmlCalls(nvml)
    try:
        return [_health(nvml, ask("nvmlDeviceGetHandleByIndex", i)) for i in range(ask("nvmlDeviceGetCount") or 0)]
    finally:
        ask("nvmlShutdown")


def _health(nvml, h) -> dict[str, Any]:
    ask = NvmlCalls(nvml)  # one per GPU: its own reasons
    pci = ask("nvmlDeviceGetPciInfo", h)
    memory = ask("nvmlDeviceGetMemoryInfo", h)
    bar1 = ask("nvmlDeviceGetBAR1MemoryInfo", h)
    limit = ask("nvmlDeviceGetEnforcedPowerLimit", h)
    default = ask("nvmlDeviceGetPowerManagementDefaultLimit", h)
    temp = ask("nvmlDeviceGetTemperature", h, nvml.NVML_TEMPERATURE_GPU)
    margin = ask("nvmlDeviceGetMarginTemperature", h)
    if margin is None and temp is not None:
        slowdown = ask("nvmlDeviceGetTemperatureThreshold", h, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        margin = slowdown - temp if slowdown is not None else None
    reasons = ask("nvmlDeviceGetCurrentClocksEventReasons", h)
    if reasons is None and not hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons"):  # before nvidia-ml-py 12.535
        reasons = ask("nvmlDeviceGetCurrentClocksThrottleReasons", h)
    persistence = ask("nvmlDeviceGetPersistenceMode", h)
    utilization = ask("nvmlDeviceGetUtilizationRates", h)
    pstate = ask("nvmlDeviceGetPerformanceState", h)
    health = {
        "bus_id": normalize_bus_id(as_text(pci.busId)) if pci is not None else None,
        "fb_total_mib": memory.total / 2**20 if memory is not None else None,
        "bar1_total_mib": bar1.bar1Total / 2**20 if bar1 is not None else None,
        "replays": ask("nvmlDeviceGetPcieReplayCounter", h),
        "power_limit_w": limit / 1000 if limit is not None else None,  # NVML answers mW
        "power_default_w": default / 1000 if default is not None else None,
        "temperature_c": temp,
        "temp_margin_c": margin,
        "persistence": None if persistence is None else persistence == 1,
        "event_reasons": [name for bit, name in EVENT_REASONS.items() if reasons & bit] if reasons is not None else [],
        "sm_clock_mhz": ask("nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_SM),
        "sm_clock_max_mhz": ask("nvmlDeviceGetMaxClockInfo", h, nvml.NVML_CLOCK_SM),
        "utilization_pct": utilization.gpu if utilization is not None else None,
        "pstate": f"P{pstate}" if pstate is not None else None,
    }
    if ask.unanswered:
        health["unanswered"] = ask.unanswered
    return health
