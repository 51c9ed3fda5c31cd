"""`commprof doctor` on the real 8 x RTX PRO 6000 bundle, on this machine, and through bundles it writes."""

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from commprof.doctor import doctor_summary, has_failures, run_doctor
from commprof.doctor.bundle import read_bundle, write_bundle
from commprof.doctor.command import doctor
from commprof.doctor.runner import run_checks
from commprof.errors import UsageError

BUNDLE = Path(__file__).parent / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"


@pytest.fixture(scope="module")
def verdicts():
    return {r.id: r for r in run_doctor(BUNDLE)}


def test_real_bundle_gives_the_documented_verdicts(verdicts):
    assert verdicts["iommu"].status == "ok"  # amd_iommu=off iommu=off
    assert "amd_iommu=off iommu=off" in verdicts["iommu"].evidence[0]
    assert verdicts["acs"].status == "ok"  # ACS request redirect cleared
    assert "12 ACS-capable bridges above 8 GPUs" in verdicts["acs"].detail
    assert verdicts["numa"].status == "warn"  # TP 8 spans two sockets
    assert "spans two sockets" in verdicts["numa"].detail and "GPU 4-7 on NUMA 1" in verdicts["numa"].detail
    link = verdicts["pcie-link"]  # Gen1 while idle: not a fail, measure under load
    assert link.status == "warn" and "measure under load" in link.detail
    assert "Gen1 x16 of Gen5 x16 idle" in link.evidence[0]
    assert verdicts["bar1"].status == "ok"  # BAR1 131072 MiB >= VRAM 97887 MiB
    assert "BAR1 131072 MiB, VRAM 97887 MiB" in verdicts["bar1"].evidence[0]


def test_real_bundle_other_verdicts(verdicts):
    assert verdicts["pcie-errors"].status == "ok"  # the AdvNonFatalErr bits are on devices not above GPUs
    assert verdicts["nccl"].status == "warn" and "PXB" in verdicts["nccl"].detail
    assert "NCCL_P2P_LEVEL=SYS" in verdicts["nccl"].fix
    assert verdicts["clocks"].status == "warn" and "not locked" in verdicts["clocks"].detail
    for skipped in ("p2p", "driver", "env"):
        assert verdicts[skipped].status == "skipped" and verdicts[skipped].detail
    results = list(verdicts.values())
    assert not has_failures(results)
    summary = doctor_summary(results)
    assert summary["status"] == "warn" and summary["counts"] == {"ok": 4, "warn": 4, "skipped": 4}
    json.dumps(summary)


def test_cli_from_bundle_text_and_json():
    runner = CliRunner()
    result = runner.invoke(doctor, ["--from", str(BUNDLE)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("commprof doctor: bundle ")
    assert any(line.startswith("warn    numa") for line in lines)
    assert any("fix:" in line and "numactl --cpunodebind" in line for line in lines)
    result = runner.invoke(doctor, ["--from", str(BUNDLE), "--json", "--tp", "4"])
    data = json.loads(result.output)
    numa = next(c for c in data["checks"] if c["id"] == "numa")
    assert numa["status"] == "ok" and "TP 4 stays within one socket" in numa["detail"]


def test_bad_flags_are_one_line_usage_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(doctor, ["--from", str(tmp_path / "nope")])
    assert isinstance(result.exception, UsageError) and "not a directory" in str(result.exception)
    result = runner.invoke(doctor, ["--from", str(tmp_path)])
    assert isinstance(result.exception, UsageError) and "no bundle file" in str(result.exception)
    result = runner.invoke(doctor, ["--from", str(BUNDLE), "--collect", str(tmp_path)])
    assert isinstance(result.exception, UsageError)


def test_failing_bundle_exits_1(tmp_path):
    (tmp_path / "cmdline").write_text("BOOT_IMAGE=/vmlinuz ro intel_iommu=on")
    (tmp_path / "dmesg.log").write_text(
        "[ 9.1] DMAR: DRHD: handling fault status reg 2\n"
        "[ 9.1] DMAR: [DMA Read NO_PASID] Request device [43:00.0] fault addr 0x0\n"
    )
    result = CliRunner().invoke(doctor, ["--from", str(tmp_path)])
    assert result.exit_code == 1
    assert "fail    iommu" in result.output and "iommu=pt" in result.output


@pytest.mark.processes
def test_live_doctor_on_this_cpu_machine_is_fast_and_says_there_is_nothing_to_tune():
    start = time.monotonic()
    result = CliRunner().invoke(doctor, [])
    elapsed = time.monotonic() - start
    assert result.exit_code in (0, 1), result.output
    assert elapsed < 3.0
    if "no NVIDIA GPU here" not in result.output:
        pytest.skip("this machine has an NVIDIA driver")
    assert "skipped p2p" in result.output and "nothing to tune" in result.output


def test_collect_then_from_replays_the_same_verdicts(tmp_path):
    facts = read_bundle(BUNDLE)
    written = write_bundle(facts, tmp_path / "copy")
    names = {p.name for p in written}
    assert {"cmdline.log", "lspci_full.log", "nvidia_smi_full.log", "manifest.json", "nvml.json"} <= names
    manifest = json.loads((tmp_path / "copy" / "manifest.json").read_text())
    assert manifest["missing"]["env"] == "not in the bundle"
    again = read_bundle(tmp_path / "copy")
    assert again.source("env").missing == "not in the bundle"  # the reason survives the round trip
    before = [(r.id, r.status, r.detail) for r in run_checks(facts)]
    after = [(r.id, r.status, r.detail.replace("copy/", BUNDLE.name + "/")) for r in run_checks(again)]
    assert [b[:2] for b in before] == [a[:2] for a in after]


@pytest.mark.processes
def test_collect_on_this_machine_writes_a_readable_bundle(tmp_path):
    result = CliRunner().invoke(doctor, ["--collect", str(tmp_path / "b"), "--no-gpu-tests"])
    assert result.exit_code in (0, 1), result.output
    assert (tmp_path / "b" / "cmdline.log").read_text() == Path("/proc/cmdline").read_text()
    env = (tmp_path / "b" / "env.log").read_text()
    assert "PATH=" not in env and "HOME=" not in env  # only NCCL_ / CUDA_ / PYTORCH_ / TORCH_ variables
    replay = CliRunner().invoke(doctor, ["--from", str(tmp_path / "b"), "--json"])
    assert json.loads(replay.output)["checks"][0]["id"] == "p2p"


def test_collect_refuses_a_folder_that_holds_another_bundle(tmp_path):
    old = tmp_path / "bundle"
    old.mkdir()
    (old / "lspci_full.log").write_text("the old box")
    result = CliRunner().invoke(doctor, ["--collect", str(old), "--no-gpu-tests"])
    assert isinstance(result.exception, UsageError)
    assert "not empty (1 entries: lspci_full.log)" in str(result.exception)
    assert [p.name for p in old.iterdir()] == ["lspci_full.log"]  # nothing written, nothing mixed
    with pytest.raises(UsageError, match="not empty"):
        write_bundle(read_bundle(BUNDLE), old)
