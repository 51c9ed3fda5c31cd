"""Findings over parsed NCCL logs: each with its evidence lines and a fix; `commprof nccl-log` end to end."""

import json
from pathlib import Path

from commprof.cli import main
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
