"""Each doctor check as a pure function of facts, on hand-written fixtures of odd real-world cases."""

import json
from pathlib import Path

from commprof.doctor.acs import check_acs
from commprof.doctor.driver import check_driver
from commprof.doctor.env import check_env
from commprof.doctor.facts import Facts, Source
from commprof.doctor.gpus import gpu_view
from commprof.doctor.iommu import check_iommu
from commprof.doctor.nccl import check_nccl
from commprof.doctor.numa import check_numa
from commprof.doctor.p2p import check_p2p
from commprof.doctor.parse_lspci import bridges_above, parse_lspci
from commprof.doctor.parse_nvsmi import parse_nvidia_smi_q, parse_topo_matrix
from commprof.doctor.pcie import check_bar1, check_pcie_errors, check_pcie_link
from commprof.doctor.power import check_clocks
from commprof.doctor.result import worst

FIXTURES = Path(__file__).parent / "fixtures"
DOCTOR = FIXTURES / "doctor"


def facts(**texts):
    """Facts from source texts; a value of None means 'missing' with a reason."""
    f = Facts(origin="test")
    for name, text in texts.items():
        f.sources[name] = Source(name, f"test/{name}", text, "" if text is not None else "lspci not installed")
    return f


def fixture(name):
    return (DOCTOR / name).read_text()


def gpu_topology(n=2, level="SYS", p2p="ok", vendor="GenuineIntel"):
    gpus = [
        {
            "index": i,
            "pci_bus_id": f"0000:{0x43 + i:02x}:00.0",
            "name": "GPU",
            "numa_node": i * 2 // n,
            "cpu_affinity": None,
            "pcie": {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16},
        }
        for i in range(n)
    ]
    pairs = [
        {"gpus": [a, b], "level": level, "p2p": {"read": p2p, "write": p2p}} for a in range(n) for b in range(a + 1, n)
    ]
    return {"gpus": gpus, "pairs": pairs, "host": {"cpu_vendor": vendor}, "reason": None}


# --- parsers --------------------------------------------------------------------------------------------


def test_lspci_tree_links_and_capabilities():
    devices = parse_lspci(fixture("lspci-acs-redirect.txt"))
    gpu = next(d for d in devices if d.is_nvidia_gpu)
    assert gpu.bdf == "0000:43:00.0" and gpu.link_sta == (2.5, 16) and gpu.link_cap == (16.0, 16)
    assert [b.bdf for b in bridges_above(gpu, devices)] == ["0000:40:01.1", "0000:41:00.0", "0000:42:08.0"]
    assert gpu.aer_uncorrectable == ["CmpltTO"] and gpu.aer_correctable == ["RxErr"]
    nic = next(d for d in devices if d.bdf == "0000:44:00.0")
    assert nic.acs_ctl is None and not nic.is_nvidia_gpu
    audio = next(d for d in devices if d.bdf == "0000:43:00.1")
    assert not audio.is_nvidia_gpu  # the GPU's audio function is not a GPU


def test_topo_matrix_with_escape_codes_nvlink_nic_and_na():
    m = parse_topo_matrix(fixture("nvidia-smi-topo-nic.txt"))
    assert m["gpus"] == [0, 1, 2, 3]
    assert m["levels"][(0, 1)] == "NV18" and m["levels"][(0, 3)] == "SYS" and m["levels"][(3, 0)] == "SYS"
    assert m["cpu_affinity"] == {0: "0-55,112-167", 1: "0-55,112-167", 2: None, 3: "56-111,168-223"}
    assert m["numa"] == {0: 0, 1: 0, 2: None, 3: 1}


def test_nvidia_smi_q_of_an_older_driver_with_na_fields():
    f = facts(nvidia_smi_full=fixture("nvidia-smi-q-old-driver.txt"))
    gpus, where, _ = gpu_view(f)
    assert where == "test/nvidia_smi_full" and len(gpus) == 2
    g0, g1 = gpus
    assert (g0["width_current"], g0["width_max"], g0["replays"]) == (8, 16, 12)
    assert (g0["power_limit_w"], g0["power_default_w"], g0["temp_margin_c"]) == (300.0, 450.0, 3.0)
    assert g0["event_reasons"] == ["SW Power Cap"] and g0["persistence"] is False and g0["utilization_pct"] == 97
    assert g0["bar1_total_mib"] is None  # "N/A"
    assert g1["gen_current"] is None and g1["temperature_c"] is None and g1["event_reasons"] == []
    assert parse_nvidia_smi_q("")["gpus"] == []


# --- acs ----------------------------------------------------------------------------------------------


def test_acs_redirect_fails_with_setpci_for_each_port():
    r = check_acs(facts(lspci_full=fixture("lspci-acs-redirect.txt")))
    assert r.status == "fail" and "1 bridge(s)" in r.detail
    assert "setpci -s 0000:42:08.0 ECAP_ACS+0x6.w=0000" in r.fix and "pci=disable_acs_redir=0000:42:08.0" in r.fix
    assert "0000:42:10.0" not in r.fix  # the NIC's port redirects too, but no GPU sits below it
    assert "ReqRedir+ CmpltRedir+" in r.evidence[0]


def test_acs_without_root_lspci_missing_or_no_gpu():
    denied = check_acs(facts(lspci_full=fixture("lspci-nonroot.txt")))
    assert denied.status == "skipped" and "access denied" in denied.detail and "sudo" in denied.fix
    missing = check_acs(facts(lspci_full=None))
    assert missing.status == "skipped" and "lspci not installed" in missing.detail and "pciutils" in missing.fix
    no_gpu = check_acs(facts(lspci_full="00:00.0 Host bridge: Intel Corporation Device 1234\n"))
    assert no_gpu.status == "skipped"


def test_acs_ok_when_no_bridge_has_the_capability():
    text = "\n".join(line for line in fixture("lspci-acs-redirect.txt").splitlines() if "ACS" not in line)
    r = check_acs(facts(lspci_full=text))
    assert r.status == "ok" and "0 ACS-capable" in r.detail and "3 without ACS" in r.detail


# --- iommu --------------------------------------------------------------------------------------------


def test_iommu_verdicts():
    translated = check_iommu(
        facts(
            cmdline="ro quiet intel_iommu=on",
            iommu_groups="0 0000:00:00.0\n1 0000:43:00.0",
            dmesg="[0.5] iommu: Default domain type: Translated\n",
        )
    )
    assert translated.status == "warn" and "iommu=pt" in translated.fix
    assert (
        check_iommu(facts(cmdline="ro amd_iommu=on iommu=pt", iommu_groups="0 0000:00:00.0", dmesg="")).status == "ok"
    )
    assert (
        check_iommu(
            facts(cmdline="ro", dmesg="iommu: Default domain type: Passthrough (set via kernel command line)")
        ).status
        == "ok"
    )
    fault = check_iommu(
        facts(cmdline="ro", dmesg="AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0010 address=0x0 flags=0x0020]")
    )
    assert fault.status == "fail"
    assert check_iommu(facts()).status == "skipped"


def test_iommu_with_dmesg_denied_says_root_reveals_more():
    f = facts(cmdline="ro iommu=off")
    f.sources["dmesg"] = Source(
        "dmesg",
        "dmesg",
        None,
        "permission denied, needs root (dmesg: read kernel buffer failed: Operation not permitted)",
    )
    r = check_iommu(f)
    assert r.status == "ok" and any("root" in e for e in r.evidence)


# --- driver -------------------------------------------------------------------------------------------


def test_driver_forced_p2p_and_hmm():
    params = 'ResmanDebugLevel: 4294967295\nRegistryDwords: "ForceP2P=0x11;RMForceP2PType=1"\nEnableResizableBar: 1\n'
    f = facts(nvidia_params=params, uvm_disable_hmm="N\n")
    f.topology = gpu_topology(4)
    r = check_driver(f)
    assert r.status == "warn" and "ForceP2P, RMForceP2PType" in r.detail and "uvm_disable_hmm=1" in r.fix
    f.tests = {"pairs": [{"gpus": [0, 1], "status": "ok"}]}
    f.sources["uvm_disable_hmm"] = Source("uvm_disable_hmm", "x", "Y")
    assert check_driver(f).status == "ok"
    assert check_driver(facts()).status == "skipped"


def test_driver_names_a_gpu_model_whose_stock_driver_refuses_peer_access():
    geforce = facts(nvidia_smi_full=fixture("nvidia-smi-q-old-driver.txt"))  # two GeForce RTX 4090
    r = check_driver(geforce)
    assert r.status == "warn" and "stock driver refuses peer access on NVIDIA GeForce RTX 4090" in r.detail
    assert "not read" in r.detail and "patched open driver" in r.fix
    unlocked = facts(
        nvidia_smi_full=fixture("nvidia-smi-q-old-driver.txt"), nvidia_params='RegistryDwords: "ForceP2P=0x11"\n'
    )
    assert "refuses" not in check_driver(unlocked).detail  # a patched driver's P2P keys: forced P2P, its own warning


# --- pcie ---------------------------------------------------------------------------------------------


def test_pcie_link_under_load_fails_below_max_and_idle_only_warns():
    f = Facts(origin="test", topology=gpu_topology(2))
    f.topology["gpus"][0]["pcie"]["gen_current"] = 1
    idle = check_pcie_link(f)
    assert idle.status == "warn" and "measure under load" in idle.detail
    f.tests = {"link_load": {"0000:43:00.0": {"gen": 3, "width": 16}, "0000:44:00.0": {"gen": 4, "width": 16}}}
    loaded = check_pcie_link(f)
    assert loaded.status == "fail" and "Gen3 of Gen4 under load" in loaded.detail and "reseat" in loaded.fix
    f.tests = {"link_load": {"0000:43:00.0": {"gen": 4, "width": 16}, "0000:44:00.0": {"gen": 4, "width": 16}}}
    assert check_pcie_link(f).status == "ok"


def test_pcie_uplink_downgrade_from_lspci_and_sysfs():
    f = facts(lspci_full=fixture("lspci-acs-redirect.txt"))
    f.topology = gpu_topology(1)
    r = check_pcie_link(f)
    assert r.status == "warn" and "uplink 0000:41:00.0" in r.detail and "x8 of Gen4 x16" in r.detail
    sysfs = {
        "0000:43:00.0": {"chain": ["0000:40:01.1", "0000:41:00.0", "0000:42:08.0"]},
        "0000:40:01.1": {
            "current_link_speed": "16.0 GT/s PCIe",
            "max_link_speed": "16.0 GT/s PCIe",
            "current_link_width": "16",
            "max_link_width": "16",
        },
        "0000:41:00.0": {
            "current_link_speed": "8.0 GT/s PCIe",
            "max_link_speed": "16.0 GT/s PCIe",
            "current_link_width": "16",
            "max_link_width": "16",
        },
        "0000:42:08.0": {"current_link_speed": "2.5 GT/s PCIe", "max_link_speed": "16.0 GT/s PCIe"},
    }
    f.sources["sysfs_pci"] = Source("sysfs_pci", "/sys/bus/pci/devices", json.dumps(sysfs))
    r = check_pcie_link(f)
    assert "uplink 0000:41:00.0 above GPU 0000:43:00.0 at Gen3 x16 of Gen4 x16" in r.detail
    assert "42:08.0" not in r.detail  # the GPU's own link, idle


def test_pcie_errors_from_lspci_bits_sysfs_counters_and_replays():
    f = facts(lspci_full=fixture("lspci-acs-redirect.txt"))
    f.topology = gpu_topology(1)
    assert check_pcie_errors(f).status == "fail"  # CmpltTO+ on the GPU
    sysfs = {
        "0000:43:00.0": {
            "chain": ["0000:40:01.1"],
            "aer_dev_correctable": "RxErr 3\nBadTLP 0\nTOTAL_ERR_COR 3",
            "aer_dev_fatal": "TOTAL_ERR_FATAL 0",
            "aer_dev_nonfatal": "TOTAL_ERR_NONFATAL 0",
        },
        "0000:40:01.1": {"aer_dev_correctable": "TOTAL_ERR_COR 0"},
    }
    f.sources["sysfs_pci"] = Source("sysfs_pci", "/sys/bus/pci/devices", json.dumps(sysfs))
    r = check_pcie_errors(f)
    assert r.status == "warn" and "correctable AER errors at 0000:43:00.0" in r.detail
    replays = facts(nvidia_smi_full=fixture("nvidia-smi-q-old-driver.txt"))
    assert check_pcie_errors(replays).status == "warn"
    assert "GPU 0 (12)" in check_pcie_errors(replays).detail


def test_bar1_small_warns_and_na_skips():
    f = Facts(origin="test", topology=gpu_topology(2))
    f.gpu_health = [
        {"bus_id": "0000:43:00.0", "bar1_total_mib": 256, "fb_total_mib": 24564},
        {"bus_id": "0000:44:00.0", "bar1_total_mib": 32768, "fb_total_mib": 24564},
    ]
    r = check_bar1(f)
    assert r.status == "warn" and "1 GPU(s)" in r.detail and "Above 4G" in r.fix
    assert check_bar1(facts(nvidia_smi_full=fixture("nvidia-smi-q-old-driver.txt"))).status == "skipped"


# --- numa, nccl, env, clocks, p2p ------------------------------------------------------------------------


def test_numa_from_topo_matrix_with_na_numa():
    f = facts(nvidia_smi_full=fixture("nvidia-smi-q-old-driver.txt"), nvidia_topo=fixture("nvidia-smi-topo-nic.txt"))
    r = check_numa(f)
    assert r.status == "ok"  # 2 GPUs (smi), both on NUMA 0 in the topo matrix, pair NV18


def test_nccl_trap_amd_exemption_user_level_and_log():
    f = Facts(origin="test", topology=gpu_topology(4, level="SYS", vendor="AuthenticAMD"))
    assert check_nccl(f).status == "warn"
    two = Facts(origin="test", topology=gpu_topology(2, level="SYS", vendor="AuthenticAMD"))
    assert check_nccl(two).status == "ok"  # NCCL allows P2P between 2 GPUs on AMD CPUs
    f.sources["env"] = Source("env", "environment", "NCCL_P2P_LEVEL=SYS")
    assert check_nccl(f).status == "ok"
    f = Facts(origin="test", topology=gpu_topology(8, level="SYS"))
    f.sources["nccl_init"] = Source("nccl_init", "log", (FIXTURES / "nccl_log" / "nccl-2.27-8gpu-pcie.log").read_text())
    r = check_nccl(f)
    assert r.status == "warn" and "8 SHM connections" in r.detail
    assert "NCCL 2.27.3+cuda12.9: connections P2P 8, SHM 8, 2 coll channels" in r.evidence[0]
    assert "ring graph: 2 channels, 12 GB/s" in r.evidence[1]


def test_nccl_net_inside_one_host_warns():
    log = (
        "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 1 localRank 0 MNNVL 0\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n"
    )
    f = Facts(origin="test", topology=gpu_topology(2, level="PIX"))
    f.sources["nccl_init"] = Source("nccl_init", "log", log)
    r = check_nccl(f)
    assert r.status == "warn" and "--ipc=host" in r.fix


def test_env_conflicts_and_conf_file_precedence():
    r = check_env(
        facts(
            env="NCCL_ALGO=Tree\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nCUDA_DEVICE_ORDER=FASTEST_FIRST",
            nccl_conf="NCCL_GRAPH_FILE=/etc/nccl-graph.xml\n# NCCL_PROTO=LL128\nNCCL_ALGO=Ring",
        )
    )
    assert r.status == "warn"
    assert "NCCL_ALGO=allreduce:tree" in r.fix and "expandable_segments:False" in r.fix
    assert "remove NCCL_GRAPH_FILE from test/nccl_conf" in r.fix and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in r.fix
    assert any("NCCL_ALGO=Tree (test/env)" in e for e in r.evidence)  # the environment beats nccl.conf
    assert not any("LL128" in e for e in r.evidence)  # commented out
    assert check_env(facts(env="NCCL_DEBUG=INFO\nCUDA_DEVICE_ORDER=PCI_BUS_ID")).status == "ok"
    assert check_env(facts(env="export NCCL_PROTO=LL128")).status == "warn"
    assert check_env(facts(env=None)).status == "skipped"


def test_every_variable_a_sweep_sets_is_a_forced_default_where_set_for_every_process():
    """The tuning variables are the ones commprof.nccl_tuning defines (the P2P level, LL128's buffer and NVLS
    among them) and NCCL's tuner plug-in; a graph file is said once, by its own finding."""
    env = (
        "NCCL_P2P_LEVEL=SYS\nNCCL_NVLS_ENABLE=0\nNCCL_TUNER_PLUGIN=libtuner.so\nNCCL_GRAPH_FILE=/g.xml\nNCCL_DEBUG=INFO"
    )
    r = check_env(facts(env=env))
    (forced,) = [e for e in r.evidence if e.startswith("NCCL_P2P_LEVEL=SYS")]
    assert (
        forced
        == "NCCL_P2P_LEVEL=SYS (test/env), NCCL_NVLS_ENABLE=0 (test/env), NCCL_TUNER_PLUGIN=libtuner.so (test/env)"
    )
    assert "unset NCCL_P2P_LEVEL NCCL_NVLS_ENABLE NCCL_TUNER_PLUGIN (sweep them as axes instead)" in r.fix
    assert sum("NCCL_GRAPH_FILE" in e for e in r.evidence) == 1


def _smi_facts(**overrides):
    f = Facts(origin="test", topology=gpu_topology(1))
    health = {
        "bus_id": "0000:43:00.0",
        "power_limit_w": 600.0,
        "power_default_w": 600.0,
        "event_reasons": [],
        "temp_margin_c": 40.0,
        "persistence": True,
        "sm_clock_mhz": 2400,
        "sm_clock_max_mhz": 2430,
        "utilization_pct": 0,
        "pstate": "P0",
        "temperature_c": 35,
    }
    health.update(overrides)
    f.gpu_health = [health]
    return f


def test_clocks_power_thermals_persistence():
    assert check_clocks(_smi_facts()).status == "ok"  # idle at 2400 of 2430 MHz: locked
    unpinned = check_clocks(_smi_facts(sm_clock_mhz=180, pstate="P8"))
    assert unpinned.status == "warn" and "--lock-gpu-clocks" in unpinned.fix
    assert check_clocks(_smi_facts(sm_clock_mhz=180, event_reasons=["Applications Clocks Setting"])).status == "ok"
    capped = check_clocks(_smi_facts(power_limit_w=450.0))
    assert capped.status == "warn" and "sudo nvidia-smi -i 0 -pl 600" in capped.fix
    assert "persistence" in check_clocks(_smi_facts(persistence=False)).detail
    assert "SW Power Cap" in check_clocks(_smi_facts(event_reasons=["SW Power Cap"])).detail
    old = check_clocks(facts(nvidia_smi_full=fixture("nvidia-smi-q-old-driver.txt")))
    assert old.status == "warn" and "450 W" in old.detail and "within 5 C" in old.detail


def _pair(a, b, status="ok", control=None, transports=("P2P",)):
    return {
        "gpus": [a, b],
        "status": status,
        "seconds": 2.0,
        "message": "" if status == "ok" else "hang",
        "transports": list(transports),
        "control": control,
    }


def test_p2p_verdicts():
    f = Facts(origin="test", topology=gpu_topology(4))
    f.tests = {"pairs": [_pair(0, 1), _pair(2, 3)], "pairs_scope": " (one per path type)"}
    assert check_p2p(f).status == "ok"
    f.tests["pairs"].append(_pair(0, 2, "timeout", control={"status": "ok"}))
    r = check_p2p(f)
    assert r.status == "fail" and "P2P fails but SHM works between GPU 0-2" in r.detail
    assert "NCCL_P2P_DISABLE=1" in r.fix
    f.tests["pairs"].append(_pair(1, 3, "crashed", control={"status": "timeout"}))
    r = check_p2p(f)
    assert "nothing works between GPU 1-3" in r.detail and "xid" in r.fix
    f.tests = {"pairs": [_pair(0, 1, transports=("SHM",))]}
    assert check_p2p(f).status == "warn"
    f.tests["all_gpus"] = {"status": "timeout", "message": "rank(s) [3] gave no result within 90 s (hang): killed"}
    r = check_p2p(f)
    assert r.status == "fail" and "all-GPU NCCL all-reduce ended 'timeout'" in r.detail
    broken = Facts(origin="test", topology=gpu_topology(2, p2p="topology_not_supported"))
    broken.tests = {"pairs_skipped": "GPU tests not requested"}
    assert check_p2p(broken).status == "warn"
    assert check_p2p(Facts(origin="test", topology=gpu_topology(1))).status == "skipped"
    assert check_p2p(Facts(origin="test")).status == "skipped"


def test_worst():
    assert worst(["ok", "skipped", "warn"]) == "warn" and worst(["fail", "warn"]) == "fail" and worst([]) == "skipped"
