"""`commprof nccl-graph`: candidates for the real 8 x RTX PRO 6000 bundle, read back by NCCL's parser rules."""

import json
import shutil
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.doctor import run_doctor
from commprof.doctor.bundle import read_bundle, write_bundle
from commprof.doctor.env import check_env
from commprof.doctor.facts import Facts, Source
from commprof.doctor.live import nccl_conf
from commprof.doctor.parse_nvsmi import parse_topo_matrix
from commprof.nccl_graph.box import box_from_facts
from commprof.nccl_graph.candidates import build_candidates, channel_counts, check_against_box, ring_order
from commprof.nccl_graph.graph_file import Graph, write_graph_file
from commprof.nccl_graph.nccl_reader import GraphFileError, c_strtol, read_graph_file

BUNDLE = Path(__file__).parent / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"
GOOD_GRAPH = (
    '<graphs version="1">\n'
    '  <graph id="0" pattern="4" crossnic="0" nchannels="1" speedintra="24" speedinter="24" latencyinter="0" '
    'typeintra="PHB" typeinter="PIX" samechannels="1">\n'
    '    <channel>\n      <gpu dev="0"/> <gpu dev="1"/>\n    </channel>\n  </graph>\n</graphs>\n'
)


@pytest.fixture(scope="module")
def box():
    return box_from_facts(read_bundle(BUNDLE))


def test_cli_writes_rings_that_visit_every_gpu_once_and_cross_sockets_twice(tmp_path):
    out = tmp_path / "g"
    assert main(["nccl-graph", "--from-bundle", str(BUNDLE), "--out", str(out)]) == 0
    # The box's sockets as nvidia-smi topo -m states them, read here apart from the generator.
    numa = parse_topo_matrix((BUNDLE / "nvidia_topo.log").read_text())["numa"]
    assert numa == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    files = sorted(out.glob("*.xml"))
    assert len(files) >= 1
    index = json.loads((out / "candidates.json").read_text())
    assert {c["file"] for c in index["candidates"]} == {f.name for f in files}
    for path in files:
        text = path.read_text()
        assert text.startswith("<!-- commprof nccl-graph:") and "built from" in text and "\t" not in text
        read = read_graph_file(text)
        ring = next(g for g in read.graphs if g.id == 0)
        assert ring.pattern == 4 and ring.nchannels == len(ring.channels) >= 2
        assert ring.typeintra in ("SYS", "PHB") and ring.speedintra > 0
        for channel in ring.channels:
            assert sorted(channel.gpus) == list(range(8))
            crossings = sum(numa[a] != numa[b] for a, b in zip(channel.gpus, channel.gpus[1:] + channel.gpus[:1]))
            assert crossings <= 2
        tree = next(g for g in read.graphs if g.id == 1)
        assert tree.pattern == 1 and all(sorted(c.gpus) == list(range(8)) for c in tree.channels)


def test_box_reads_sockets_switches_and_bandwidth_from_the_bundle(box):
    assert [g.socket for g in box.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    # Four switches (upstream ports in lspci), two GPUs behind each.
    assert [g.switch for g in box.gpus] == [
        "0000:01:00.0",
        "0000:01:00.0",
        "0000:71:00.0",
        "0000:71:00.0",
        "0000:81:00.0",
        "0000:81:00.0",
        "0000:f1:00.0",
        "0000:f1:00.0",
    ]
    assert not box.bandwidth_measured and "Gen5 x16" in box.bandwidth_source and "derived" in box.bandwidth_source
    assert box.hop_gbps == pytest.approx(63.0, abs=0.1)
    assert channel_counts(box) == (2, 4, 8, 16)


def test_ring_keeps_switch_neighbours_without_lspci(box):
    facts = read_bundle(BUNDLE)
    facts.sources["lspci_full"] = Source("lspci_full", "lspci", None, "not in the bundle")
    no_lspci = box_from_facts(facts)
    assert no_lspci.gpus[0].switch == no_lspci.gpus[1].switch != no_lspci.gpus[2].switch
    assert ring_order(no_lspci) == ring_order(box) == (0, 1, 2, 3, 4, 5, 6, 7)


def test_measured_floor_sets_the_channel_bandwidth():
    facts = read_bundle(BUNDLE)
    facts.floor = {"figures": {"pair_write_gbps": 24.0, "evidence": "measured", "source": "commprof floor"}}
    box = box_from_facts(facts)
    assert box.bandwidth_measured and box.hop_gbps == 24.0
    assert channel_counts(box) == (2, 4, 8)  # 24 / 8 = 3.0 GB/s, NCCL's slowest search speed
    speeds = {c.channels: c.speedintra for c in build_candidates(box)}
    assert speeds == {2: 12.0, 4: 6.0, 8: 3.0}


def test_interleaved_sockets_are_reordered():
    """GPUs numbered across sockets alternately still get a ring that crosses twice."""
    topo = "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
    rows = {0: 0, 1: 1, 2: 0, 3: 1}
    for a, node in rows.items():
        cells = ["X" if a == b else ("PIX" if rows[a] == rows[b] else "SYS") for b in rows]
        topo += f"GPU{a}\t" + "\t".join(cells) + f"\t0-7\t{node}\n"
    smi = "".join(
        f"GPU 00000000:0{i}:00.0\n    PCI\n        GPU Link Info\n            PCIe Generation\n                Max : 4\n"
        f"            Link Width\n                Max : 16x\n"
        for i in range(4)
    )
    facts = Facts(origin="synthetic")
    facts.sources["nvidia_topo"] = Source("nvidia_topo", "topo", topo)
    facts.sources["nvidia_smi_full"] = Source("nvidia_smi_full", "smi", smi)
    box = box_from_facts(facts)
    candidate = build_candidates(box)[0]
    assert candidate.ring == (0, 2, 1, 3) and candidate.socket_crossings == 2


def test_a_file_missing_a_gpu_or_miscounting_channels_is_refused(box):
    ring = tuple(range(7))
    text = write_graph_file((Graph(0, 4, 10.0, 10.0, "SYS", "PIX", (ring,)),), "short")
    with pytest.raises(GraphFileError, match="not each of the box's"):
        check_against_box(read_graph_file(text), box)
    text = write_graph_file((Graph(0, 4, 10.0, 10.0, "SYS", "PIX", (tuple(range(8)),)),), "x")
    text = text.replace('nchannels="1"', 'nchannels="2"')
    with pytest.raises(GraphFileError, match="nchannels=2 but 1"):
        check_against_box(read_graph_file(text), box)
    assert "<!-- a - -> b -->" in write_graph_file((), "a --> b")  # a folder named so cannot end the comment


def test_reader_follows_nccl_rules():
    read = read_graph_file(GOOD_GRAPH)
    assert read.version == 1 and read.graphs[0].channels[0].gpus == (0, 1)
    # Comments, single quotes, no latencyinter (2.28+ says it uses 0.0), a rank (read since 2.30).
    variant = GOOD_GRAPH.replace(' latencyinter="0"', "").replace('dev="1"', "dev='1' rank=\"3\"")
    read = read_graph_file("<!-- made by hand -->\n<!--x-->" + variant)
    assert read.graphs[0].latencyinter == 0.0 and read.graphs[0].channels[0].ranks == (None, 3)
    # dev is hexadecimal (strtol base 16): "10" is GPU 16, "0xa" GPU 10.
    assert read_graph_file(GOOD_GRAPH.replace('dev="1"', 'dev="10"')).graphs[0].channels[0].gpus == (0, 16)
    assert read_graph_file(GOOD_GRAPH.replace('dev="1"', 'dev="0xa"')).graphs[0].channels[0].gpus == (0, 10)
    assert read_graph_file(GOOD_GRAPH.replace("<channel>", "<chanel>").replace("</channel>", "</chanel>")).ignored == (
        "chanel",
    )
    assert c_strtol("010", 0) == 8 and c_strtol(" 12abc", 0) == 12 and c_strtol("zz", 16) == 0


@pytest.mark.parametrize(
    "change, message",
    [
        (("  <graph", "\t<graph"), "expecting '<'"),  # NCCL skips spaces and line ends only
        (('version="1"', 'version="2"'), "wrong version 2"),
        ((' crossnic="0"', ""), "Attribute crossnic of node graph not found"),
        (('typeintra="PHB"', 'typeintra="PCI"'), "no path type"),
        (('pattern="4"', "pattern=4"), "quoted"),
        (("</graph>", "</graphs>"), "mismatched closing tag"),
        (("</graphs>\n", ""), "unterminated <graphs>"),
        (('<gpu dev="0"/>', "<gpu/>"), "Attribute dev of node gpu not found"),
    ],
)
def test_reader_refuses_what_nccl_refuses(change, message):
    with pytest.raises(GraphFileError, match=message):
        read_graph_file(GOOD_GRAPH.replace(*change, 1))


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    assert main(["nccl-graph"]) == 2
    assert main(["nccl-graph", "--from-bundle", str(BUNDLE), "--from-run", str(tmp_path)]) == 2
    assert main(["nccl-graph", "--from-run", str(tmp_path)]) == 2
    assert "no meta.json" in capsys.readouterr().err
    out = tmp_path / "g"
    out.mkdir()
    (out / "old.xml").write_text("x")
    assert main(["nccl-graph", "--from-bundle", str(BUNDLE), "--out", str(out)]) == 2
    assert "holds other files (old.xml)" in capsys.readouterr().err


def test_from_run_uses_the_topology_probe_in_meta(tmp_path, capsys):
    bundle_box = box_from_facts(read_bundle(BUNDLE))
    gpus = [
        {
            "index": g.index,
            "name": "RTX PRO 6000",
            "pci_bus_id": g.bus_id,
            "numa_node": g.socket,
            "pcie": {"gen_max": 5, "width_max": 16},
        }
        for g in bundle_box.gpus
    ]
    pairs = [{"gpus": [a, b], "level": level} for (a, b), level in sorted(bundle_box.levels.items())]
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"topology": {"gpus": gpus, "pairs": pairs}}))
    out = tmp_path / "g"
    assert main(["nccl-graph", "--from-run", str(run), "--out", str(out)]) == 0
    shutil.rmtree(out)
    # The baseline's NCCL_GRAPH_DUMP_FILE, kept by the sweep, is NCCL's own graph beside the candidates.
    (run / "points" / "p000").mkdir(parents=True)
    ring = tuple(range(8))
    dump = write_graph_file((Graph(0, 4, 12.0, 12.0, "SYS", "PIX", (ring,)),), "dumped")
    (run / "points" / "p000" / "nccl-graphs.xml").write_text(dump)
    assert main(["nccl-graph", "--from-run", str(run), "--out", str(out)]) == 0
    assert (
        "NCCL's own graph (run/points/p000/nccl-graphs.xml): ring 0 1 2 3 4 5 6 7, 1 channels"
        in capsys.readouterr().out
    )


# --- the doctor: a stray NCCL_GRAPH_FILE in nccl.conf applies to every job -------------------------------------


def test_doctor_flags_a_graph_file_planted_in_a_bundles_nccl_conf(tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    (bundle / "nccl_conf.log").write_text("# tuned by hand\nNCCL_GRAPH_FILE=/mnt/nccl_graph_opt.xml\n")
    env = next(r for r in run_doctor(bundle) if r.id == "env")
    assert env.status == "warn" and "for every NCCL job on this box" in env.detail
    assert env.evidence == ["NCCL_GRAPH_FILE=/mnt/nccl_graph_opt.xml (bundle/nccl_conf.log)"]
    assert env.fix == "remove NCCL_GRAPH_FILE from bundle/nccl_conf.log"
    assert next(r for r in run_doctor(BUNDLE) if r.id == "env").status == "skipped"  # nothing collected


def test_doctor_flags_a_topo_file_in_the_live_users_nccl_conf_and_collects_it(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("NCCL_TOPO_FILE=/opt/topo.xml\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("NCCL_CONF_FILE", raising=False)
    source = nccl_conf()
    assert source.ok and str(home / ".nccl.conf") in source.where
    facts = Facts(origin="live", sources={"nccl_conf": source})
    result = check_env(facts)
    assert result.status == "warn" and "NCCL_TOPO_FILE replaces NCCL's own topology" in result.detail
    # NCCL_CONF_FILE replaces ~/.nccl.conf (src/misc/param.cc initEnvFunc).
    other = tmp_path / "other.conf"
    other.write_text("NCCL_GRAPH_FILE=/opt/g.xml\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(other))
    assert (
        "NCCL_GRAPH_FILE=/opt/g.xml" in check_env(Facts(origin="live", sources={"nccl_conf": nccl_conf()})).evidence[0]
    )
    # `doctor --collect` keeps it in the bundle, and the bundle flags it too.
    write_bundle(facts, tmp_path / "collected")
    assert check_env(read_bundle(tmp_path / "collected")).status == "warn"


def test_the_doctors_init_test_dumps_nccls_view_and_the_bundle_keeps_it(tmp_path, monkeypatch, capsys):
    from commprof.doctor import gpu_tests

    seen = []

    def fake_probe(gpus, env, timeout, log_path, load_seconds=0.0):
        seen.append(env)
        if "NCCL_GRAPH_DUMP_FILE" in env:  # what NCCL writes (search.cc ncclTopoDumpGraphs), one ring of 8
            ring = tuple(range(8))
            Path(env["NCCL_GRAPH_DUMP_FILE"]).write_text(
                write_graph_file((Graph(0, 4, 12.0, 12.0, "SYS", "PIX", (ring, ring)),), "dumped")
            )
            Path(env["NCCL_TOPO_DUMP_FILE"]).write_text('<system version="2"></system>\n')
        return {"gpus": gpus, "status": "ok", "seconds": 1.0, "message": "", "log": str(log_path)}

    monkeypatch.setattr(gpu_tests, "run_probe", fake_probe)
    box = box_from_facts(read_bundle(BUNDLE))
    topology = {"gpus": [{"index": g.index} for g in box.gpus], "pairs": []}
    gpu_tests.run_gpu_tests(topology, quick=True, workdir=tmp_path)
    assert set(seen[0]) == {"NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE"}
    dumps = gpu_tests.nccl_dumps(tmp_path)
    assert dumps["nccl_graphs"].ok and dumps["nccl_topo"].text.startswith("<system")
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    (bundle / "nccl_graphs.log").write_text(dumps["nccl_graphs"].text)
    assert main(["nccl-graph", "--from-bundle", str(bundle), "--out", str(tmp_path / "g")]) == 0
    out = capsys.readouterr().out
    assert "NCCL's own graph (bundle/nccl_graphs.log): ring 0 1 2 3 4 5 6 7, 2 channels at 12 GB/s, type SYS" in out
    assert main(["nccl-graph", "--from-bundle", str(BUNDLE), "--out", str(tmp_path / "h")]) == 0
    assert "NCCL's own graph: not in" in capsys.readouterr().out


def test_from_run_of_a_simulated_run_is_one_line(tmp_path, capsys):
    """A simulated run's meta.json describes a preset, not a probed box: refused in one line, never a traceback."""
    run = tmp_path / "sim"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"source": "simulated", "simulated": True, "topology": {"gpus": 8}}))
    assert main(["nccl-graph", "--from-run", str(run), "--out", str(tmp_path / "g")]) == 2
    assert "probed no box" in capsys.readouterr().err
    (run / "meta.json").write_text(json.dumps({"topology": {"gpus": 8}}))
    assert main(["nccl-graph", "--from-run", str(run), "--out", str(tmp_path / "g")]) == 2
    assert "lists no GPUs" in capsys.readouterr().err
