"""`calibrate` without --topology starts from the box its records single out: a log whose command line sets
NCCL_P2P_LEVEL=SYS never gets the no-P2P preset's prior; the real logs keep theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from commprof.cli import main
from commprof.costmodel.calibration_file import params_from_toml
from commprof.costmodel.calibration_prior import FALLBACK_PRESET, choose_prior_topology
from commprof.costmodel.nccl_tests import parse_text
from commprof.errors import UsageError

LOG = Path(__file__).parent / "fixtures" / "nccl-tests" / "rtx4090x8_sys_noP2P_charlie0129.txt"


def _variant(tmp_path: Path, command: str, gpu: str = "NVIDIA GeForce RTX 4090") -> Path:
    """The real 8-GPU log with its command line (and GPU name) replaced."""
    text = LOG.read_text().replace("# ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8", command)
    path = tmp_path / "variant.txt"
    path.write_text(text.replace("NVIDIA GeForce RTX 4090", gpu))
    return path


def test_the_log_states_its_nccl_settings_on_the_command_line_and_in_nccl_info_lines(tmp_path):
    path = _variant(tmp_path, "$ NCCL_P2P_LEVEL=SYS NCCL_DEBUG=INFO ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8")
    (run,) = parse_text(path.read_text(), str(path)).runs
    assert run.env == {"NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG": "INFO"}
    text = LOG.read_text().replace(
        "#\n# Using devices", "host:1:1 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS\n# Using devices", 1
    )
    (run,) = parse_text(text, "info.txt").runs
    assert run.env == {"NCCL_P2P_LEVEL": "SYS"}
    (plain,) = parse_text(LOG.read_text(), str(LOG)).runs
    assert plain.env == {}


def _calibrate(tmp_path: Path, log: Path, capsys) -> tuple[int, str]:
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "imported")]) == 0
    (run_dir,) = (tmp_path / "imported").iterdir()
    capsys.readouterr()
    code = main(["calibrate", str(run_dir), "--out", str(tmp_path / "m.toml")])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_log_that_sets_p2p_level_sys_never_gets_the_no_p2p_prior(tmp_path, capsys):
    log = _variant(tmp_path, "# NCCL_P2P_LEVEL=SYS ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8")
    code, printed = _calibrate(tmp_path, log, capsys)
    assert code == 0 and FALLBACK_PRESET not in printed
    assert "prior: preset pcie-gen4, the only one that fits" in printed and "NCCL_P2P_LEVEL=SYS" in printed
    written = params_from_toml((tmp_path / "m.toml").read_text(), "m.toml")
    assert written.fit["topology"] == "pcie-gen4" and written.link == "pci"


def test_a_box_the_presets_cannot_tell_apart_is_refused_naming_them(tmp_path, capsys):
    log = _variant(tmp_path, "NCCL_P2P_LEVEL=SYS ./build/all_reduce_perf -g 8", gpu="NVIDIA GeForce RTX 5090")
    code, printed = _calibrate(tmp_path, log, capsys)
    assert code == 2 and "single out no one box" in printed and "pcie-gen5-switch-p2p" in printed
    assert FALLBACK_PRESET not in printed and "--topology" in printed


def test_the_real_log_keeps_its_preset_and_says_why(tmp_path, capsys):
    code, printed = _calibrate(tmp_path, LOG, capsys)
    assert code == 0 and f"prior: preset {FALLBACK_PRESET}, the box of the records' NVIDIA GeForce RTX 4090" in printed


def test_settings_rule_out_a_box_without_p2p_even_when_nothing_else_is_known():
    with pytest.raises(UsageError, match="single out no one box"):
        choose_prior_topology(set(), None, 8, {"NCCL_P2P_LEVEL": "SYS"})
    topology, note = choose_prior_topology(set(), None, 8, {})
    assert topology.name == FALLBACK_PRESET and "--topology" in note


def test_records_under_different_p2p_settings_fit_the_default_transport():
    from commprof.costmodel.calibration_prior import records_p2p_env

    sys_point = {"point": {"env": {"NCCL_P2P_LEVEL": "SYS"}}}
    assert records_p2p_env([sys_point, sys_point]) == {"NCCL_P2P_LEVEL": "SYS"}
    assert records_p2p_env([sys_point, {"point": {"env": {}}}]) == {}  # a sweep's P2P axis
    assert records_p2p_env([{"point": {"env": {}}}]) == {}
