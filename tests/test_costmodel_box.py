"""The user's own box from a doctor bundle: facts with their file:line, NCCL's transport per pair, the box prior."""

from __future__ import annotations

from pathlib import Path

import pytest

from commprof.costmodel import calibrate as fitting
from commprof.costmodel.box import box_from_bundle, with_nccl_log
from commprof.costmodel.box_prior import (
    BOX_PRIOR_ERROR_PCT,
    SHM_HOST_MEMORY,
    load_bundle_topology,
    published_defaults_error,
    topology_from_box,
)
from commprof.costmodel.latency import predict
from commprof.costmodel.nccl_paths import nccl_path, pair_transport
from commprof.costmodel.nccl_tests import parse_text, run_records
from commprof.costmodel.topology import link_for, load_topology
from commprof.errors import UsageError
from commprof.evidence import Evidence, ModelError
from commprof.nccl_log.parse import parse_nccl_log

FIXTURES = Path(__file__).parent / "fixtures"
ASUS = FIXTURES / "doctor" / "asus-esc8000a-8x-rtxpro6000"
PCIE_LOG = FIXTURES / "nccl_log" / "nccl-2.27-8gpu-pcie.log"


@pytest.fixture(scope="module")
def box():
    return box_from_bundle(ASUS)


def _line(source: str) -> str:
    """The text of a "bundle/file.log:N" source."""
    where = source.split(" ", 1)[0]
    name, _, number = where.rpartition(":")
    return (ASUS / Path(name).name).read_text(encoding="utf-8").splitlines()[int(number) - 1]


def test_every_fact_names_the_bundle_line_that_holds_it(box):
    assert len(box.gpus) == 8 and len(box.pairs) == 28
    levels = [p.level.value for p in box.pairs]
    assert levels.count("PIX") == 4 and sum(level in ("NODE", "SYS") for level in levels) == 24
    for pair in box.pairs:
        assert pair.level.value in _line(pair.level.source).split("\t")
    for gpu in box.gpus:
        assert gpu.name.value in _line(gpu.name.source)
        assert _line(gpu.pcie_gen_max.source).strip().endswith(": 5")
        assert "131072 MiB" in _line(gpu.bar1_mib.source)
        assert gpu.numa_node.value == (0 if gpu.index < 4 else 1)
    assert box.cpu_vendor.value == "AMD" and "AuthenticAMD" in _line(box.cpu_vendor.source)
    assert box.sockets.value == 2 and "Socket(s)" in _line(box.sockets.source)
    # What the bundle does not record is an assumption, said so.
    assert all(p.p2p_ok.assumed for p in box.pairs)
    assert any("nvml.json" in a for a in box.assumptions)


def test_transport_per_pair_as_ncclTopoCheckP2p_decides(box):
    def transports(env):
        return {(p.a, p.b): box.transport(p, env, 8)[0] for p in box.pairs}

    defaults = transports({})
    assert {pair for pair, t in defaults.items() if t == "P2P"} == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert set(transports({"NCCL_P2P_LEVEL": "SYS"}).values()) == {"P2P"}
    assert set(transports({"NCCL_P2P_LEVEL": "PHB"}).values()) == {"P2P", "SHM"}  # NODE is PHB, SYS is not
    assert transports({"NCCL_P2P_LEVEL": "PHB"})[(0, 2)] == "P2P"
    assert set(transports({"NCCL_P2P_DISABLE": "1"}).values()) == {"SHM"}
    assert transports({"NCCL_P2P_DISABLE": "2"}) == defaults  # NCCL disables only when strtol gives 1
    assert transports({"NCCL_P2P_LEVEL": "sys"}) == defaults  # NCCL's strcmp ignores lower case
    # AMD x86 with at most 2 GPUs: NCCL raises the default level to SYS.
    assert pair_transport("SYS", {}, "AMD", 2, None).transport == "P2P"
    assert pair_transport("SYS", {}, "Intel", 2, None).transport == "SHM"
    assert pair_transport("PIX", {}, None, 8, False).transport == "SHM"  # NVML says no
    assert nccl_path("NODE") == "PHB" and nccl_path("NV12") == "NVL"


def test_an_nccl_log_overrides_with_what_nccl_chose(box):
    text = PCIE_LOG.read_text(encoding="utf-8")
    logged = with_nccl_log(box, text, str(PCIE_LOG), parse_nccl_log(text).env)
    transport, source = logged.transport(logged.pair(1, 2), {}, 8)
    assert transport == "SHM" and source.startswith(f"{PCIE_LOG}:37")
    transport, source = logged.transport(logged.pair(0, 1), {}, 8)
    assert transport == "P2P" and ":36" in source
    # Under another P2P setting than the log's, NCCL's rule decides again.
    transport, source = logged.transport(logged.pair(1, 2), {"NCCL_P2P_LEVEL": "SYS"}, 8)
    assert transport == "P2P" and source.startswith("paths.cc rule")


def test_the_box_prior_lands_on_the_published_defaults_and_the_doctors_fix_beyond_its_error(box):
    topology = topology_from_box(box)
    assert link_for(topology, {}, 8) == "shm" and link_for(topology, {"NCCL_P2P_LEVEL": "SYS"}, 8) == "pci"
    defaults = topology.prior("shm")
    for kb in (32, 64, 128, 256):  # published: 48-56 us at 32-256 KB on dual Turin without the graph file
        assert 48 * 0.7 <= predict(defaults, "all_reduce", kb << 10, 8).time_us <= 56 * 1.3
    assert published_defaults_error(topology) <= BOX_PRIOR_ERROR_PCT < published_defaults_error(topology) + 1
    fixed = topology.prior("pci")
    evidence = Evidence("simulated", calibration="nccl-prior", model_error=ModelError(BOX_PRIOR_ERROR_PCT, ""))
    for kb in (14, 32, 112):
        before = predict(defaults, "all_reduce", kb << 10, 8).time_us
        after = predict(fixed, "all_reduce", kb << 10, 8).time_us
        assert evidence.beats(after, after, before)


def test_shm_figures_are_the_fit_of_the_real_log():
    text = (FIXTURES / "nccl-tests" / "rtx4090x8_sys_noP2P_charlie0129.txt").read_text(encoding="utf-8")
    records = run_records(parse_text(text, "charlie"), "r", 0, "2026-01-01T00:00:00+00:00")
    shm_preset = load_topology("pcie-dual-socket-shm")
    samples, _ = fitting.samples_from_records(records, fitting.nccl_constraints(shm_preset, "shm"))
    fitted = fitting.fit(samples, shm_preset.prior("shm"))
    assert fitted.overhead_us == pytest.approx(SHM_HOST_MEMORY.overhead_us, abs=0.02)
    assert fitted.hop_us["LL"] == pytest.approx(SHM_HOST_MEMORY.hop_us["LL"], abs=0.02)
    assert fitted.hop_us["Simple"] == pytest.approx(SHM_HOST_MEMORY.hop_us["Simple"], abs=0.02)
    assert fitted.channel_bw_gbps == pytest.approx(SHM_HOST_MEMORY.channel_bw_gbps, abs=0.02)


def test_load_bundle_topology_refuses_a_bundle_without_pairs(tmp_path):
    (tmp_path / "lscpu.log").write_text("Vendor ID: AuthenticAMD\n", encoding="utf-8")
    with pytest.raises(UsageError, match="no nvidia-smi topo -m"):
        load_bundle_topology(tmp_path)
    with pytest.raises(UsageError, match="--from-bundle"):
        load_topology(str(ASUS))


BOX_SWEEP = """
name = "box-test"
[run]
model = "kimi-k2.5"
tokens = [1, 4]
phase = "verify"
dtype = "bfloat16"
iterations = 5
warmup = 1
[axes]
NCCL_P2P_LEVEL = ["default", "SYS"]
"""


def test_simulate_from_bundle_then_report(tmp_path, capsys):
    from commprof.cli import main

    sweep = tmp_path / "box.toml"
    sweep.write_text(BOX_SWEEP, encoding="utf-8")
    out = tmp_path / "runs"
    args = ["simulate", "--from-bundle", str(ASUS), "--nccl-log", str(PCIE_LOG), "--sweep", str(sweep)]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "SIMULATED on bundle:asus-esc8000a-8x-rtxpro6000" in printed
    assert "defaults: 4 P2P, 24 SHM (8 as the NCCL log shows)" in printed and "NCCL_P2P_LEVEL=SYS: 28 P2P" in printed
    (run_dir,) = out.iterdir()
    import json

    meta = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
    pairs = meta["topology"]["box"]["pairs"]
    assert len(pairs) == 28
    first = next(p for p in pairs if p["pair"] == [1, 2])
    assert first["transport"]["defaults"] == {
        "transport": "SHM",
        "source": f"{PCIE_LOG}:37 (NCCL's own choice in its log)",
    }
    assert first["transport"]["NCCL_P2P_LEVEL=SYS"]["source"].startswith("paths.cc rule")
    assert meta["model_error"]["pct"] == BOX_PRIOR_ERROR_PCT
    report_dir = tmp_path / "report"
    assert main(["report", str(run_dir), "--out", str(report_dir)]) == 0
    assert "export NCCL_P2P_LEVEL=SYS" in (report_dir / "recommend.env").read_text(encoding="utf-8")
    assert main(["simulate", "--topology", "pcie-4gpu", "--from-bundle", str(ASUS), "--sweep", str(sweep)]) == 2
    assert main(["simulate", "--topology", str(ASUS), "--sweep", str(sweep)]) == 2
    assert "--from-bundle" in capsys.readouterr().err


def test_simulate_help_lists_the_presets(capsys):
    from commprof.cli import main

    assert main(["simulate", "--help"]) == 0
    text = capsys.readouterr().out
    for name in ("pcie-gen5-switch-p2p", "pcie-dual-socket-shm", "nvlink-h100"):
        assert f"{name}: " in text


def test_a_bundle_of_only_a_topology_matrix_states_what_it_assumes(tmp_path):
    (tmp_path / "nvidia_topo.log").write_text(
        (FIXTURES / "doctor" / "nvidia-smi-topo-nic.txt").read_text(encoding="utf-8"), encoding="utf-8"
    )
    topology = load_bundle_topology(tmp_path)
    assert topology.gpus == 4 and "unnamed GPU" in topology.description
    assert "CPU vendor unknown" in topology.assumptions and "no link generation recorded" in topology.assumptions
    nvlink_only = tmp_path / "nvlink"
    nvlink_only.mkdir()
    (nvlink_only / "nvidia_topo.log").write_text("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n", encoding="utf-8")
    with pytest.raises(UsageError, match="every GPU pair is NVLink"):
        load_bundle_topology(nvlink_only)


def test_the_ring_graph_of_an_nccl_log_sets_the_channels_of_its_transport():
    topology = load_bundle_topology(ASUS, PCIE_LOG)  # defaults: SHM rings, "nChannels 2, bw 12.000000/12.000000"
    shm = topology.links["shm"]
    assert (shm.channels, shm.nccl_bw_gbps) == (2, 12.0) and "Pattern 4, crossNic 0, nChannels 2" in shm.source
    assert shm.hop_us == SHM_HOST_MEMORY.hop_us  # the measured SHM figures stay
    turin = load_bundle_topology(ASUS, FIXTURES / "nccl_log" / "nccl-2.28-amd-cpu-turin-graph.log")
    assert turin.links["pci"].channel_bw_gbps == 15.0 and "nccl-2.28-amd-cpu-turin-graph.log" in turin.assumptions


def test_a_box_of_a_published_class_gets_the_published_kernel_figures_labelled_as_another_boxs(tmp_path):
    """8 x SM120 on PCIe Gen5 read from a bundle: FlashInfer PCIe IPC and b12x get the Gen5 preset's published figures,
    each labelled as another box's with the sweep that measures them here; the answer routes to them in the page,
    and no engine switch is live."""
    from commprof.cli import main
    from commprof.costmodel.box_prior import CONFIRM_COMMAND, published_kernels

    topology = load_bundle_topology(ASUS)
    preset = load_topology("pcie-gen5-switch-p2p").impls
    assert {"flashinfer-pcie-ipc", "b12x"} <= set(topology.impls) == set(preset)
    for name, model in topology.impls.items():
        assert model.points == preset[name].points and model.expected_error_pct == preset[name].expected_error_pct
        assert f"not measured on this one: confirm with this command on the box: {CONFIRM_COMMAND}" in model.source
    assert published_kernels(9.0, 5, 8) == {} and published_kernels(12.0, 4, 8) == {}
    assert main(["simulate", "--from-bundle", str(ASUS), "--sweep", "pcie8-verify", "--out", str(tmp_path / "r")]) == 0
    (run,) = (tmp_path / "r").iterdir()
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "flashinfer-pcie-ipc" in page and CONFIRM_COMMAND in page
    routing = (tmp_path / "report" / "routing.txt").read_text(encoding="utf-8")
    assert "flashinfer-pcie-ipc" in routing
    live = [line for line in routing.splitlines() if line.strip() and not line.startswith(("#", "[ -n "))]
    assert all(line.startswith("source ") and line.endswith("/recommend.env") for line in live)  # no engine switch
