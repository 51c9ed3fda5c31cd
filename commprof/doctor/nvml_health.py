"""Per-GPU health answers from NVML (BAR1, replays, power, clocks, temperature), keyed like the nvidia-smi view."""

from __future__ import annotations

import importlib
from typing import Any

from commprof.doctor.topology_probe import as_text, normalize_bus_id, nvml_answer

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
    """One dict per GPU; [] without NVML or GPUs. Fields NVML does not answer are None."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return []
    try:
        nvml.nvmlInit()
    except Exception:  # no driver
        return []
    try:
        return [_health(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(nvml.nvmlDeviceGetCount())]
    finally:
        nvml_answer(nvml.nvmlShutdown)


def _health(nvml, h) -> dict[str, Any]:
    pci = nvml_answer(nvml.nvmlDeviceGetPciInfo, h)
    memory = nvml_answer(nvml.nvmlDeviceGetMemoryInfo, h)
    bar1 = nvml_answer(nvml.nvmlDeviceGetBAR1MemoryInfo, h)
    limit = nvml_answer(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
    default = nvml_answer(nvml.nvmlDeviceGetPowerManagementDefaultLimit, h)
    temp = nvml_answer(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
    margin = nvml_answer(nvml.nvmlDeviceGetMarginTemperature, h)
    if margin is None and temp is not None:
        slowdown = nvml_answer(nvml.nvmlDeviceGetTemperatureThreshold, h, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        margin = slowdown - temp if slowdown is not None else None
    reasons = nvml_answer(nvml.nvmlDeviceGetCurrentClocksEventReasons, h)
    persistence = nvml_answer(nvml.nvmlDeviceGetPersistenceMode, h)
    utilization = nvml_answer(nvml.nvmlDeviceGetUtilizationRates, h)
    pstate = nvml_answer(nvml.nvmlDeviceGetPerformanceState, h)
    return {
        "bus_id": normalize_bus_id(as_text(pci.busId)) if pci is not None else None,
        "fb_total_mib": memory.total / 2**20 if memory is not None else None,
        "bar1_total_mib": bar1.bar1Total / 2**20 if bar1 is not None else None,
        "replays": nvml_answer(nvml.nvmlDeviceGetPcieReplayCounter, h),
        "power_limit_w": limit / 1000 if limit is not None else None,  # NVML answers mW
        "power_default_w": default / 1000 if default is not None else None,
        "temperature_c": temp,
        "temp_margin_c": margin,
        "persistence": None if persistence is None else persistence == 1,
        "event_reasons": [name for bit, name in EVENT_REASONS.items() if reasons & bit] if reasons is not None else [],
        "sm_clock_mhz": nvml_answer(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
        "sm_clock_max_mhz": nvml_answer(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
        "utilization_pct": utilization.gpu if utilization is not None else None,
        "pstate": f"P{pstate}" if pstate is not None else None,
    }
