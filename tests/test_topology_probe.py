"""The NVML topology probe, against a fake NVML that checks every call against pynvml's real signatures."""

import json

import pynvml
import pytest
from click.testing import CliRunner

from commprof.doctor.command import topo
from commprof.doctor.topology_probe import (
    cpu_list,
    format_topology,
    normalize_bus_id,
    p2p_all_pairs,
    parse_cpuinfo,
    probe_topology,
)
from tests.nvml_fake import FakeNvml


def test_probe_of_a_fake_four_gpu_box():
    nvml = FakeNvml()
    t = probe_topology(nvml)
    assert t["source"] == "nvml" and t["reason"] is None
    assert (t["driver_version"], t["cuda_driver_version"]) == ("595.58.03", "13.2")
    g0, g2 = t["gpus"][0], t["gpus"][2]
    assert g0["pci_bus_id"] == "0000:06:00.0" and g0["compute_capability"] == "12.0"
    assert g0["pcie"] == {"gen_current": 1, "gen_max": 5, "gen_gpu_max": None, "width_current": 16, "width_max": 16}
    assert (g0["numa_node"], g0["cpu_affinity"], g2["cpu_affinity"]) == (0, "0-3", "4-7")
    assert g0["nvlink_active"] == 0 and g0["memory_total_mib"] == 97887
    levels = {tuple(p["gpus"]): p["level"] for p in t["pairs"]}
    assert levels == {(0, 1): "PIX", (2, 3): "PIX", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS"}
    assert t["pairs"][0]["p2p"] == {"read": "ok", "write": "ok", "nvlink": "not_supported", "atomics": "ok"}
    assert nvml.calls[-1] == "nvmlShutdown"
    json.dumps(t)
    assert p2p_all_pairs(t) == (True, "NVML: P2P read and write OK between all 6 GPU pairs")
    text = format_topology(t)
    assert "PIX/ok" in text and "SYS/ok" in text and "Gen1x16/Gen5x16" in text


def test_p2p_all_pairs_names_the_broken_pairs_and_says_unknown_without_gpus():
    t = probe_topology(FakeNvml(p2p_broken={(0, 2), (1, 3)}))
    ok, detail = p2p_all_pairs(t)
    assert ok is False and "GPU0-GPU2" in detail and "GPU1-GPU3" in detail and "chipset_not_supported" in detail
    assert p2p_all_pairs({"gpus": [], "pairs": [], "reason": "no GPU"}) == (None, "no GPU")
    assert p2p_all_pairs(probe_topology(FakeNvml(gpus=1)))[0] is None
    partial = probe_topology(FakeNvml())
    partial["pairs"] = partial["pairs"][:2]
    assert p2p_all_pairs(partial)[0] is None


def test_no_driver_and_no_gpu_are_answers_not_crashes():
    class NoDriver(FakeNvml):
        def _nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    t = probe_topology(NoDriver())
    assert t["gpus"] == [] and t["reason"].startswith("no NVIDIA driver")
    assert t["host"]["logical_cpus"] >= 1
    zero = probe_topology(FakeNvml(gpus=0))
    assert zero["reason"].startswith("no GPU")
    assert "nothing to tune here" in format_topology(zero)


def test_topo_command_on_this_machine_prints_text_and_json():
    runner = CliRunner()
    result = runner.invoke(topo, [])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("host ")
    result = runner.invoke(topo, ["--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert set(data) >= {"host", "gpus", "pairs", "reason", "driver_version"}


def test_helpers():
    assert cpu_list([0b1111, 0, 0b11]) == "0-3,128-129"
    assert cpu_list([0b101]) == "0,2"
    assert cpu_list([0]) == ""
    assert normalize_bus_id("00000000:06:00.0") == "0000:06:00.0"
    assert normalize_bus_id("06:00.0") == "0000:06:00.0"
    assert normalize_bus_id("0001:A1:00.0") == "0001:a1:00.0"
    info = parse_cpuinfo(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9575F 64-Core Processor\n"
        "physical id\t: 0\n\nprocessor\t: 1\nphysical id\t: 1\n"
    )
    assert info == {"cpu_model": "AMD EPYC 9575F 64-Core Processor", "cpu_vendor": "AuthenticAMD", "sockets": 2}
    assert parse_cpuinfo("") == {"cpu_model": None, "cpu_vendor": None, "sockets": None}


@pytest.mark.gpu
@pytest.mark.processes
def test_probe_on_this_gpu_machine():
    t = probe_topology()
    assert t["source"] == "nvml" and t["gpus"]
    assert all(g["pci_bus_id"] and g["compute_capability"] for g in t["gpus"])
