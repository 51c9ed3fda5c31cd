"""The GPU-test machinery of the doctor, on CPU: process isolation and time limits, pair scheduling, NVML
health answers, and the torch / NVML calls bound against their installed signatures."""

import inspect
import os
import time
from pathlib import Path

import pynvml
import pytest

from commprof.doctor import gpu_tests, live
from commprof.doctor.nccl_probe import ProbeWorker, run_probe
from commprof.doctor.nvml_health import gather_health
from commprof.doctor.runner import run_checks
from commprof.doctor.topology_probe import probe_topology
from commprof.floor.record import not_measured
from tests.nvml_fake import FakeNvml, HealthyNvml

DOCTOR = Path(__file__).parent / "fixtures" / "doctor"


@pytest.fixture
def fake_probes_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{DOCTOR}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


@pytest.mark.processes
def test_a_hang_is_killed_at_the_time_limit_with_every_rank(tmp_path, fake_probes_importable):
    start = time.monotonic()
    result = run_probe([0, 1], {}, 1.5, tmp_path / "hang.log", worker=ProbeWorker(module="fake_probe_hang"))
    assert time.monotonic() - start < 5
    assert result["status"] == "timeout" and "hang" in result["message"]
    for rank in (0, 1):
        pid = int((tmp_path / f"hang.json.pid{rank}").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.processes
def test_a_crashing_rank_is_reported_with_its_exit_code_and_log_tail(tmp_path, fake_probes_importable):
    result = run_probe(
        [0, 1], {"NCCL_P2P_DISABLE": "1"}, 20, tmp_path / "crash.log", worker=ProbeWorker(module="fake_probe_crash")
    )
    assert result["status"] == "crashed"
    assert "-6" in result["message"] and "illegal memory access" in result["message"]
    assert result["env"] == {"NCCL_P2P_DISABLE": "1"}


@pytest.mark.processes
def test_the_real_probe_all_reduces_on_gloo(tmp_path):
    result = run_probe([0, 1], {}, 120, tmp_path / "gloo.log", worker=ProbeWorker("gloo"))
    assert result["status"] == "ok", result
    assert result["max_abs_err"] == 0.0


def test_pair_rounds_are_gpu_disjoint_and_quick_takes_one_pair_per_level():
    pairs = [(a, b) for a in range(8) for b in range(a + 1, 8)]
    rounds = gpu_tests.rounds(pairs)
    assert sorted(p for r in rounds for p in r) == pairs
    for r in rounds:
        used = [g for p in r for g in p]
        assert len(used) == len(set(used))
    assert len(rounds) <= 8
    levels = {
        (0, 1): "PIX",
        (0, 2): "NODE",
        (0, 4): "SYS",
        (1, 2): "NODE",
        (2, 3): "PIX",
        (2, 4): "NODE",
        (3, 5): "SYS",
    }
    assert gpu_tests.representative_pairs(levels) == [(0, 1), (2, 4), (3, 5)]
    assert gpu_tests.representative_pairs({(0, 1): "PIX", (0, 2): "SYS"}) == [(0, 1), (0, 2)]


def test_gpu_tests_escalate_to_every_pair_and_control_the_failures(tmp_path, monkeypatch):
    calls = []

    def fake_probe(gpus, env, timeout_s, log_path, load_seconds=0.0):
        calls.append((tuple(gpus), dict(env)))
        log_path.write_text("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n")
        if len(gpus) == 4:
            return {"gpus": gpus, "status": "timeout", "message": "hang", "seconds": 1.0, "log": str(log_path)}
        bad = tuple(gpus) == (0, 2) and "NCCL_P2P_DISABLE" not in env
        return {
            "gpus": gpus,
            "env": env,
            "status": "timeout" if bad else "ok",
            "seconds": 1.0,
            "message": "",
            "log": str(log_path),
        }

    monkeypatch.setattr(gpu_tests, "run_probe", fake_probe)
    topology = probe_topology(FakeNvml())
    tests, log = gpu_tests.run_gpu_tests(topology, quick=True, workdir=tmp_path)
    assert tests["all_gpus"]["status"] == "timeout"
    assert len(tests["pairs"]) == 6 and tests["pairs_scope"] == ""  # the all-GPU hang widened the scope
    assert all(env == {"NCCL_P2P_LEVEL": "SYS"} for gpus, env in calls[1:7])
    failed = [t for t in tests["pairs"] if t["status"] != "ok"]
    assert [t["gpus"] for t in failed] == [[0, 2]] and failed[0]["control"]["status"] == "ok"
    assert calls[-1] == ((0, 2), {"NCCL_P2P_DISABLE": "1"})
    assert tests["pairs"][0]["transports"] == ["P2P"] and log.ok


@pytest.mark.processes
def test_live_gather_with_gpus_wires_nvml_tests_and_log_into_the_checks(monkeypatch, tmp_path):
    topology = probe_topology(FakeNvml())
    monkeypatch.setattr(live, "probe_topology", lambda: topology)
    monkeypatch.setattr(live, "gather_health", lambda: gather_health(HealthyNvml()))
    log = (Path(__file__).parent / "fixtures" / "nccl_log" / "nccl-2.27-8gpu-pcie.log").read_text()

    def fake_tests(topo, quick, workdir):
        pairs = [
            {"gpus": [0, 1], "status": "ok", "seconds": 2.0, "transports": ["P2P"], "message": ""},
            {"gpus": [0, 2], "status": "ok", "seconds": 2.0, "transports": ["P2P"], "message": ""},
        ]
        return (
            {
                "pairs": pairs,
                "pairs_scope": " (quick)",
                "link_load": {g["pci_bus_id"]: {"gen": 5, "width": 16} for g in topo["gpus"]},
            },
            live.Source("nccl_init", "fake", log),
        )

    monkeypatch.setattr(live.gpu_tests, "run_gpu_tests", fake_tests)
    probed = []  # the floor probe's own process (its refusal without GPUs: test_gpu_smoke_verdicts.py)

    def fake_floor(gpus, path):
        probed.append(gpus)
        return not_measured("the test's")

    monkeypatch.setattr(live, "measure_floor", fake_floor)
    facts = live.gather_live(quick=True)
    assert probed == [len(topology["gpus"])] and facts.floor["why"] == "the test's"
    verdicts = {r.id: r for r in run_checks(facts)}
    assert verdicts["p2p"].status == "ok" and "2 pair(s) (quick)" in verdicts["p2p"].detail
    assert verdicts["pcie-link"].status == "ok"  # Gen1 idle in NVML, Gen5 under load
    assert verdicts["bar1"].status == "ok"
    assert verdicts["nccl"].status == "warn" and "2.27.3" in verdicts["nccl"].evidence[0]
    assert verdicts["clocks"].status == "ok"


def test_nvml_health_answers():
    health = gather_health(HealthyNvml(gpus=2))
    h = health[0]
    assert h["bus_id"] == "0000:06:00.0" and h["bar1_total_mib"] == 131072 and h["fb_total_mib"] == 97887
    assert (h["power_limit_w"], h["temperature_c"], h["temp_margin_c"]) == (600.0, 30, 60)
    assert h["event_reasons"] == ["Idle", "Applications Clocks Setting"] and h["persistence"] is True
    assert h["pstate"] == "P0" and h["utilization_pct"] == 0
    bare = gather_health(FakeNvml(gpus=1))[0]  # NOT_SUPPORTED everywhere: None, never an exception
    assert bare["bar1_total_mib"] is None and bare["event_reasons"] == [] and bare["persistence"] is None


def test_torch_calls_of_the_probe_bind_to_the_installed_signatures():
    import torch
    import torch.distributed as dist

    inspect.signature(dist.init_process_group).bind(
        "nccl", init_method="tcp://127.0.0.1:1", rank=0, world_size=2, device_id=torch.device("cuda", 0)
    )
    inspect.signature(dist.all_reduce).bind(torch.ones(1), op=dist.ReduceOp.MAX)
    inspect.signature(torch.cuda.can_device_access_peer).bind(0, 1)
    inspect.signature(torch.cuda.set_device).bind(torch.device("cuda", 0))
    # The link load: a side stream, pinned host memory, asynchronous copies.
    inspect.signature(torch.cuda.Stream.__new__).bind(torch.cuda.Stream, torch.device("cuda", 0))
    inspect.signature(torch.cuda.stream).bind(None)
    inspect.signature(torch.cuda.Stream.synchronize).bind(None)
    host = torch.empty(4, pin_memory=False)  # builtins have no signature: calling them binds the keywords
    host.copy_(torch.ones(4), non_blocking=True)
    assert host.tolist() == [1.0] * 4
    for name, args in [
        ("nvmlDeviceGetPciInfo", (0,)),
        ("nvmlDeviceGetCurrPcieLinkGeneration", (0,)),
        ("nvmlDeviceGetCurrPcieLinkWidth", (0,)),
        ("nvmlDeviceGetHandleByIndex", (0,)),
    ]:
        inspect.signature(getattr(pynvml, name)).bind(*args)


@pytest.mark.gpu
@pytest.mark.processes
def test_gpu_tests_on_this_machine(tmp_path):
    topology = probe_topology()
    tests, log = gpu_tests.run_gpu_tests(topology, quick=True, workdir=tmp_path)
    assert tests["all_gpus"]["status"] == "ok", tests["all_gpus"]
    assert log.ok and "NCCL INFO" in log.text
    assert tests["link_load"]


def test_link_reading_binds_the_nvml_calls_it_makes(monkeypatch):
    import sys
    import types

    from commprof.doctor import nccl_probe

    def bound(name, answer):
        signature = inspect.signature(getattr(pynvml, name))

        def call(*args):
            signature.bind(*args)
            return answer(*args) if callable(answer) else answer

        return call

    fake = types.SimpleNamespace(
        NVML_PCIE_UTIL_TX_BYTES=pynvml.NVML_PCIE_UTIL_TX_BYTES,
        NVML_PCIE_UTIL_RX_BYTES=pynvml.NVML_PCIE_UTIL_RX_BYTES,
        nvmlInit=bound("nvmlInit", None),
        nvmlShutdown=bound("nvmlShutdown", None),
        nvmlDeviceGetCount=bound("nvmlDeviceGetCount", 1),
        nvmlDeviceGetHandleByIndex=bound("nvmlDeviceGetHandleByIndex", "h0"),
        nvmlDeviceGetPciInfo=bound("nvmlDeviceGetPciInfo", types.SimpleNamespace(busId=b"00000000:1B:00.0")),
        nvmlDeviceGetCurrPcieLinkGeneration=bound("nvmlDeviceGetCurrPcieLinkGeneration", 5),
        nvmlDeviceGetCurrPcieLinkWidth=bound("nvmlDeviceGetCurrPcieLinkWidth", 16),
        nvmlDeviceGetPcieThroughput=bound(
            "nvmlDeviceGetPcieThroughput",
            lambda h, counter: 20_000_000 if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else 5,
        ),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reading = {"gen": 5, "width": 16, "tx_kbps": 20_000_000, "rx_kbps": 5}
    assert nccl_probe._nvml_links() == ({"0000:1b:00.0": reading}, {})


@pytest.mark.gpu
@pytest.mark.processes
@pytest.mark.timeout(300)
def test_one_gpu_is_read_under_a_load_of_host_copies(tmp_path):
    """At one GPU an in-place NCCL sum moves nothing: the load is host <-> device copies, read while they run."""
    from commprof.doctor.topology_probe import probe_topology

    gpu = probe_topology()["gpus"][0]
    result = run_probe([gpu["index"]], {}, 120, tmp_path / "one.log", load_seconds=0.5)
    assert result["status"] == "ok", result
    assert result["load"]["gbps"] > 1.0, result["load"]  # copies really moved data over the link
    reading = result["link_load"][gpu["pci_bus_id"]]
    assert reading["gen"] >= 1 and reading["width"] >= 1
    if reading["tx_kbps"] is not None:  # NVML reports traffic on this GPU: it was read under load
        assert reading["tx_kbps"] + reading["rx_kbps"] > 100_000, reading


# --- every NVML call tolerates an older nvidia-ml-py and a refused read ------------------------------------

# Functions an older nvidia-ml-py lacks, and reads a VM refuses: what the health, topology and link reads ask.
NEWER_FUNCTIONS = frozenset(
    {
        "nvmlDeviceGetMarginTemperature",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    }
)
LINK_READS = frozenset({"nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth"})


def test_health_answers_without_the_functions_an_older_nvidia_ml_py_lacks():
    old = HealthyNvml(gpus=1, missing=NEWER_FUNCTIONS, refused=frozenset({"nvmlDeviceGetBAR1MemoryInfo"}))
    (health,) = gather_health(old)
    assert health["temp_margin_c"] == 60  # from the slowdown threshold instead
    assert health["bar1_total_mib"] is None and health["fb_total_mib"] == 97887
    assert "not in this nvidia-ml-py" in health["unanswered"]["nvmlDeviceGetMarginTemperature"]
    assert "NVMLError_NoPermission" in health["unanswered"]["nvmlDeviceGetBAR1MemoryInfo"]
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in old.calls  # the older name is asked instead


def test_health_and_topology_survive_a_refused_device_count():
    refused = frozenset({"nvmlDeviceGetCount"})
    assert gather_health(HealthyNvml(refused=refused)) == []
    topology = probe_topology(FakeNvml(refused=refused))
    assert topology["gpus"] == [] and "NVML gave no device count (NVMLError_NoPermission" in topology["reason"]


def test_topology_keeps_why_each_call_gave_no_answer():
    topology = probe_topology(FakeNvml(gpus=2, missing=NEWER_FUNCTIONS, refused=LINK_READS))
    gpu = topology["gpus"][0]
    assert gpu["pcie"]["gen_current"] is None and gpu["pcie"]["gen_max"] == 5 and gpu["pcie"]["gen_gpu_max"] is None
    assert "not in this nvidia-ml-py" in topology["nvml_unanswered"]["nvmlDeviceGetGpuMaxPcieLinkGeneration"]
    assert "NVMLError_NoPermission" in topology["nvml_unanswered"]["nvmlDeviceGetCurrPcieLinkWidth"]


@pytest.mark.parametrize("missing, refused", [(LINK_READS, frozenset()), (frozenset(), LINK_READS)])
def test_a_link_read_nvml_cannot_answer_leaves_that_gpu_out_with_the_reason(monkeypatch, missing, refused):
    import sys

    from commprof.doctor import nccl_probe

    fake = FakeNvml(gpus=2, missing=missing | {"nvmlDeviceGetPcieThroughput"}, refused=refused)
    fake.NVML_PCIE_UTIL_TX_BYTES, fake.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    readings, why = nccl_probe._nvml_links()
    assert readings == {} and set(why) == {"0000:06:00.0", "0000:07:00.0"}
    expected = "not in this nvidia-ml-py" if missing else "NVMLError_NoPermission"
    assert f"nvmlDeviceGetCurrPcieLinkGeneration: {expected}" in why["0000:06:00.0"]
