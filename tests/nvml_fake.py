"""A fake pynvml for CPU tests: answers like a small PCIe box and binds every call to pynvml's real signature."""

import inspect
from types import SimpleNamespace

import pynvml


class FakeNvml:
    """Answers like a 4-GPU, 2-socket PCIe box; any pynvml function it does not model raises NOT_SUPPORTED.

    Every call is bound against the installed pynvml function's signature first, so a wrong call fails here.
    """

    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    BUS = ["00000000:06:00.0", "00000000:07:00.0", "00000000:84:00.0", "00000000:85:00.0"]

    def __init__(self, gpus=4, p2p_broken=frozenset(), missing=frozenset(), refused=frozenset()):
        """`missing`: functions this fake's nvidia-ml-py lacks (an older release); `refused`: functions that raise
        NO_PERMISSION (a VM that hides what they read)."""
        self.n = gpus
        self.p2p_broken = p2p_broken
        self.missing, self.refused = missing, refused
        self.calls = []

    def __getattr__(self, name):
        if name in self.missing:
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        real = getattr(pynvml, name)

        def call(*args):
            inspect.signature(real).bind(*args)
            self.calls.append(name)
            if name in self.refused:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
            answer = getattr(self, "_" + name, None)
            if answer is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return answer(*args)

        return call

    def _nvmlInit(self):
        return None

    def _nvmlShutdown(self):
        return None

    def _nvmlSystemGetDriverVersion(self):
        return "595.58.03"

    def _nvmlSystemGetCudaDriverVersion_v2(self):
        return 13020

    def _nvmlDeviceGetCount(self):
        return self.n

    def _nvmlDeviceGetHandleByIndex(self, i):
        return i

    def _nvmlDeviceGetName(self, h):
        return b"NVIDIA RTX PRO 6000 Blackwell Server Edition"

    def _nvmlDeviceGetPciInfo_v3(self, h):
        return SimpleNamespace(busId=self.BUS[h].encode())

    _nvmlDeviceGetPciInfo = _nvmlDeviceGetPciInfo_v3

    def _nvmlDeviceGetCudaComputeCapability(self, h):
        return (12, 0)

    def _nvmlDeviceGetMemoryInfo(self, h, version=None):
        return SimpleNamespace(total=97887 * 2**20)

    def _nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 1

    def _nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def _nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    _nvmlDeviceGetMaxPcieLinkWidth = _nvmlDeviceGetCurrPcieLinkWidth

    def _nvmlDeviceGetCpuAffinity(self, h, words):
        masks = [0] * words
        if h < 2:
            masks[0] = 0b1111
        else:
            masks[0] = 0b1111 << 4
        return masks

    def _nvmlDeviceGetNumaNodeId(self, h):
        return 0 if h < 2 else 1

    def _nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        if {a, b} in ({0, 1}, {2, 3}):
            return pynvml.NVML_TOPOLOGY_SINGLE
        return pynvml.NVML_TOPOLOGY_SYSTEM

    def _nvmlDeviceGetP2PStatus(self, a, b, index):
        if index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
            return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        if (a, b) in self.p2p_broken:
            return pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
        return pynvml.NVML_P2P_STATUS_OK


class HealthyNvml(FakeNvml):
    """FakeNvml plus the health answers of an idle box with locked clocks."""

    def _nvmlDeviceGetBAR1MemoryInfo(self, h):
        return SimpleNamespace(bar1Total=128 * 2**30)

    def _nvmlDeviceGetPcieReplayCounter(self, h):
        return 0

    def _nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 600000

    _nvmlDeviceGetPowerManagementDefaultLimit = _nvmlDeviceGetEnforcedPowerLimit

    def _nvmlDeviceGetTemperature(self, h, sensor):
        return 30

    def _nvmlDeviceGetTemperatureThreshold(self, h, threshold):
        return 90

    def _nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return pynvml.nvmlClocksEventReasonApplicationsClocksSetting | pynvml.nvmlClocksEventReasonGpuIdle

    def _nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def _nvmlDeviceGetClockInfo(self, h, clock):
        return 1800

    def _nvmlDeviceGetMaxClockInfo(self, h, clock):
        return 2430

    def _nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=0)

    def _nvmlDeviceGetPerformanceState(self, h):
        return 0
