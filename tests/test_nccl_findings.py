"""Findings over parsed NCCL logs: each with its evidence lines and a fix; `commprof nccl-log` end to end."""

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.nccl_log.command import format_explanation
from commprof.nccl_log.findings import find_problems
from commprof.nccl_log.parse import parse_nccl_log

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_log"


def findings(name):
    return {f.id: f for f in find_problems(parse_nccl_log((FIXTURES / name).read_text()))}


def test_p2p_disabled_by_the_variable_cites_it_and_the_shm_lines():
    f = findings("nccl-2.27-8gpu-p2p-disabled.log")["p2p_disabled"]
    assert f.severity == "warn" and "16 of 16" in f.text and "unset NCCL_P2P_DISABLE" in f.fix
    assert "NCCL_P2P_DISABLE set by environment to 1" in f.evidence[0]
    assert all("via SHM/direct/direct" in line for line in f.evidence[1:])


def test_p2p_unavailable_without_a_variable_and_p2p_through_the_host():
    found = findings("nccl-2.27-8gpu-pcie.log")
    assert "NCCL_P2P_LEVEL=SYS" in found["p2p_unavailable"].fix
    assert found["p2p_through_host"].severity == "info" and "type SYS" in found["p2p_through_host"].text


def test_turin_graph_ll128_on_pcie_and_env_over_tuner():
    found = findings("nccl-2.28-turin-tuner-ll128.log")
    assert "Pattern 4, crossNic 0, nChannels 2, bw 15.000000/15.000000" in found["turin_graph"].evidence[0]
    assert found["ll128_forced_on_pcie"].severity == "fail"
    tuner = found["env_overrides_tuner"]
    assert "NCCL_ALGO=allreduce:ring" in tuner.text and "tuner plugin example" in tuner.evidence[0]


def test_duplicate_gpu_no_algorithm_and_capture_errors():
    found = findings("nccl-2.27-warnings.log")
    assert {"duplicate_gpu", "no_algorithm", "capture_error"} <= set(found)
    assert all(found[i].severity == "fail" for i in ("duplicate_gpu", "no_algorithm", "capture_error"))
    assert "allreduce:tree" in found["no_algorithm"].fix
    assert "nccl_warnings" not in found  # every warning has its own finding


def test_a_clean_log_has_no_findings():
    assert findings("real-2.19-per-rank-rings-two-nodes.log") == {}


def test_nccl_log_command_json_has_the_documented_keys(capsys):
    assert main(["nccl-log", str(FIXTURES / "nccl-2.27-8gpu-p2p-disabled.log"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("version", "nranks", "nnodes", "transports", "channels", "findings", "ops", "choices"):
        assert key in d
    assert (d["version"], d["nranks"], d["transports"]) == ("2.27.3+cuda12.9", 8, {"SHM": 16})
    assert set(d["findings"][0]) == {"id", "severity", "text", "fix", "evidence"}
    assert [op["bytes"] for op in d["ops"]] == [57344, 57344, 57344, 163072]


def test_nccl_log_command_text_and_bad_input(capsys, tmp_path):
    assert main(["nccl-log", str(FIXTURES / "nccl-2.27-8gpu-p2p-disabled.log")]) == 0
    out = capsys.readouterr().out
    assert "NCCL 2.27.3+cuda12.9 · 8 ranks · 1 node(s)" in out
    assert "AllReduce 28672 x bfloat16 = 57344 B  x3" in out and "[warn] P2P is disabled" in out
    assert main(["nccl-log", str(tmp_path / "missing.log")]) == 2
    (tmp_path / "other.txt").write_text("Traceback (most recent call last):\n")
    assert main(["nccl-log", str(tmp_path / "other.txt")]) == 2
    assert "no NCCL INFO or WARN lines" in capsys.readouterr().err


# Lines as NCCL prints them (src/debug.cc prefix "host:pid:tid [dev]"; WARN lines carry file:line): 2.25.1's INFO of
# the RTX 5090 log in NVIDIA/nccl#1637, and the WARN formats of src/enqueue.cc in 2.27.3 and 2.30.7.
SHARED_MEM_LINES = {
    "2.25.1": "box:4766:4780 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856",
    "2.27.3": "box:4766:4780 [0] enqueue.cc:57 NCCL WARN cudaArch 1200 ncclMaxSharedMem 82240 exceeds device/fn "
    "maxSharedMem 79856",
    "2.30.7": "box:4766:4780 [0] enqueue.cc:81 NCCL WARN cudaArch 1200 dynamic smem 82240 exceeds device/fn "
    "maxSharedMem 79856",
}


@pytest.mark.parametrize("version", sorted(SHARED_MEM_LINES))
def test_shared_memory_beyond_the_device_limit_is_a_failure_with_its_figures(version):
    text = f"box:4766:4766 [0] NCCL INFO NCCL version {version}+cuda12.8\n{SHARED_MEM_LINES[version]}\n"
    findings = {f.id: f for f in find_problems(parse_nccl_log(text))}
    found = findings["shared_memory_too_small"]
    assert found.severity == "fail" and "82240 B asked, 79856 B allowed" in found.text
    assert "2.26" in found.fix and found.evidence == [SHARED_MEM_LINES[version]]
    assert "nccl_warnings" not in findings  # not counted again among the other warnings


@pytest.mark.parametrize(
    "line,meaning",
    [
        ("enqueue.cc:1626 NCCL WARN Cuda failure 701 'too many resources requested for launch'", "registers"),
        (
            "init.cc:1395 NCCL WARN Cuda failure 'no kernel image is available for execution on the device'",
            "architecture",
        ),
        ("enqueue.cc:1626 NCCL WARN Cuda failure 719 'unspecified launch failure'", "faulted"),
    ],
)
def test_cuda_launch_errors_are_failures_that_say_what_the_error_means(line, meaning):
    findings = {f.id: f for f in find_problems(parse_nccl_log(f"box:1:2 [3] {line}\n"))}
    assert meaning in findings["launch_failure"].text and findings["launch_failure"].severity == "fail"
    assert "nccl_warnings" not in findings


def test_node_count_is_nccls_or_the_host_hashes_or_unknown(capsys):
    two_hosts = "node:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n"
    assert parse_nccl_log(two_hosts).nnodes == 2
    hashes = "".join(
        f"{name}:1:1 [0] init.cc:1067 NCCL WARN Failed to determine local ranks rank {r} hostHash {h} pidHash 9 "
        "localRank 0 localRanks 0 localRank0 0\n"
        for name, r, h in (("pod", 0, "a1b2"), ("pod", 8, "c3d4"))
    )
    summary = parse_nccl_log(hashes)  # one host name (containers), two host hashes
    assert (summary.nnodes, summary.nnodes_basis, len(summary.hosts)) == (2, "host hashes", 1)
    assert "at least 2 node(s)" in format_explanation(summary, find_problems(summary))
    unknown = parse_nccl_log("a:1:1 [0] NCCL INFO Channel 00/02 : 0 1\nb:1:1 [0] NCCL INFO Channel 00/02 : 0 1\n")
    assert unknown.nnodes is None and "node count unknown" in format_explanation(unknown, [])
