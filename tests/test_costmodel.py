"""The cost model's NCCL prior against hand-computed cases, its TOML files, and calibration."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from commprof.cli import main
from commprof.costmodel import calibrate as fitting
from commprof.costmodel.calibration_file import params_from_toml, params_to_toml
from commprof.costmodel.latency import (
    Op,
    default_protocols,
    estimate,
    nccl_prior,
    predict,
    trimmed_channels,
)
from commprof.costmodel.nccl_tests import parse_text
from commprof.errors import UsageError

FIXTURES = Path(__file__).parent / "fixtures" / "nccl-tests"
LOG_8GPU = FIXTURES / "rtx4090x8_sys_noP2P_charlie0129.txt"
MB = 1 << 20


def pcie_prior():
    return nccl_prior("pci", "ampere", channels=2, channel_bw_gbps=12.0)


def test_ring_ll_by_hand():
    # latency 6.6 + 2(8-1) x 1.0; bus min(87.7, 0.5 x 2 x 12) = 12; algbw 12 x 8 / 14
    choice = estimate(pcie_prior(), Op("all_reduce", MB, 8), "ring", "LL")
    assert choice.channels == 2
    assert choice.latency_us == pytest.approx(20.6)
    assert choice.algbw_gbps == pytest.approx(12 * 8 / 14)
    assert choice.time_us == pytest.approx(20.6 + MB / (1000 * 12 * 8 / 14))


def test_ring_simple_and_tree_by_hand_and_the_pick():
    simple = estimate(pcie_prior(), Op("all_reduce", MB, 8), "ring", "Simple")
    assert simple.time_us == pytest.approx(8.4 + 14 * 5.7 + MB / (1000 * 24 * 8 / 14))
    # Tree/Simple: bus min(0.92 x 24, 2 x 24.0) = 22.08, x 0.5 (correction at 1 MB = 64 B << 14), algbw x 0.5
    tree = estimate(pcie_prior(), Op("all_reduce", MB, 8), "tree", "Simple")
    assert tree.time_us == pytest.approx(8.4 + 14 * 4.0 + MB / (1000 * 22.08 * 0.5 * 0.5))
    picked = predict(pcie_prior(), "all_reduce", MB, 8)
    assert (picked.algo, picked.proto) == ("ring", "Simple")
    assert (
        predict(pcie_prior(), "all_reduce", 16384, 8).algo,
        predict(pcie_prior(), "all_reduce", 16384, 8).proto,
    ) == ("ring", "LL")


def test_per_op_trimming():
    # Ring/LL on 8 ranks: threshold 8 x 8 = 64 B per thread, 512 threads: < 64 KB runs on one channel
    assert trimmed_channels(pcie_prior(), Op("all_reduce", 14336, 8), "ring", "LL") == 1
    assert trimmed_channels(pcie_prior(), Op("all_reduce", 65536, 8), "ring", "LL") == 2
    no_thresholds = replace(pcie_prior(), thread_thresholds=(0, 0, 0, 0, 0, 0))
    assert trimmed_channels(no_thresholds, Op("all_reduce", 14336, 8), "ring", "LL") == 2
    small = estimate(pcie_prior(), Op("all_reduce", 14336, 8), "ring", "LL")
    assert small.algbw_gbps == pytest.approx(6 * 8 / 14)


def test_protocols_and_nvls_follow_the_link():
    assert default_protocols("pci") == ("LL", "Simple")
    assert default_protocols("nvlink") == ("LL", "LL128", "Simple")
    nvlink = nccl_prior("nvlink", "hopper", channels=16, channel_bw_gbps=24.0, nvls_channels=16)
    assert estimate(nvlink, Op("all_reduce", MB, 8), "nvls", "Simple").latency_us == pytest.approx(25.0)
    assert estimate(pcie_prior(), Op("all_reduce", MB, 8), "nvls", "Simple") is None
    assert predict(nvlink, "all_reduce", 1 << 28, 8).algo == "nvls"
    assert estimate(pcie_prior(), Op("all_gather", MB, 8), "tree", "LL") is None
    with pytest.raises(UsageError, match="no algorithm/protocol"):
        predict(pcie_prior(), "all_gather", MB, 8, algos=("tree",))


def test_calibration_toml_round_trip_and_errors(tmp_path):
    params = replace(
        pcie_prior(),
        overhead_us=3.5,
        channel_bw_gbps=7.25,
        hop_us={"LL": 2.0, "LL128": 2.5, "Simple": 6.0},
        nccl_bw_gbps=12.0,
        fit={"samples": 9, "protocols": ["LL", "Simple"]},
    )
    text = params_to_toml(params, "a header")
    assert text.startswith("# a header\n")
    back = params_from_toml(text, "calibration.toml")
    assert (back.overhead_us, back.channel_bw_gbps, back.hop_us, back.nccl_bw_gbps) == (3.5, 7.25, params.hop_us, 12.0)
    assert back.fit["protocols"] == ["LL", "Simple"] and back.source == "calibration.toml"
    assert "\n[costmodel]\n" in text and "\n[model]\n" not in text
    legacy = text.replace("[costmodel]", "[model]").replace("[costmodel.hop_us]", "[model.hop_us]")
    assert params_from_toml(legacy, "old.toml").hop_us == params.hop_us  # written before the table's rename
    with pytest.raises(
        UsageError, match=r"calibration.toml: costmodel.channel_bw_gbps: 0 is out of range .allowed: a number >= 0.001"
    ):
        params_from_toml(text.replace("channel_bw_gbps = 7.25", "channel_bw_gbps = 0"), "calibration.toml")
    # What a calibration may say is bounded: a negative overhead would predict negative steps.
    for edit, match in (
        (
            "overhead_us = -20.0",
            r"costmodel.overhead_us: -20.0 is out of range .allowed: a number >= 0 and <= 10000",
        ),
        ("overhead_us = nan", r"costmodel.overhead_us: nan is not a finite number"),
        ("overhead_us = inf", r"costmodel.overhead_us: inf is not a finite number"),
    ):
        with pytest.raises(UsageError, match=match):
            params_from_toml(re.sub(r"overhead_us = \S+", edit, text), "calibration.toml")
    with pytest.raises(
        UsageError, match=r"costmodel.hop_us.LL: -1.0 is out of range .allowed: a number >= 0 and <= 1000"
    ):
        params_from_toml(re.sub(r"LL = \S+", "LL = -1.0", text, count=1), "calibration.toml")
    with pytest.raises(
        UsageError, match=r"m.toml: costmodel.link: 'carrier-pigeon' is not a link type .allowed: nvlink, pci"
    ):
        params_from_toml(text.replace('link = "pci"', 'link = "carrier-pigeon"'), "m.toml")
    with pytest.raises(UsageError, match="not valid TOML"):
        params_from_toml("[model\n", "m.toml")
    with pytest.raises(UsageError) as info:  # every problem at once, one line each, as sweep files report them
        params_from_toml(text.replace('arch = "', 'arch = "x').replace("LL128 = ", "LL129 = "), "m.toml")
    assert str(info.value).splitlines() == [
        "m.toml: costmodel.arch: 'xampere' is not a GPU generation (allowed: volta, ampere, hopper, blackwell)",
        "m.toml: costmodel.hop_us.LL129: unknown key (allowed: LL, LL128, Simple)",
        "m.toml: costmodel.hop_us.LL128: missing (allowed: a number >= 0 and <= 1000)",
    ]


def test_nelder_mead_finds_a_minimum():
    x, value = fitting.nelder_mead(lambda v: float(np.sum((v - np.array([1.0, -2.0])) ** 2)), np.zeros(2))
    assert x == pytest.approx([1.0, -2.0], abs=1e-3) and value < 1e-6


def test_calibration_recovers_known_parameters():
    truth = replace(
        pcie_prior(),
        overhead_us=12.0,
        channel_bw_gbps=7.0,
        hop_us={"LL": 2.0, "LL128": 2.5, "Simple": 9.0},
        nccl_bw_gbps=12.0,
    )
    samples = [
        fitting.Sample("synthetic", "all_reduce", size, ranks, predict(truth, "all_reduce", size, ranks).time_us)
        for ranks in (2, 4, 8)
        for size in (1 << k for k in range(10, 25))
    ]
    fitted = fitting.fit(samples, pcie_prior(), ridge=1e-6)
    assert fitted.overhead_us == pytest.approx(12.0, rel=0.05)
    assert fitted.channel_bw_gbps == pytest.approx(7.0, rel=0.05)
    assert fitted.hop_us["LL"] == pytest.approx(2.0, rel=0.05)
    assert fitted.hop_us["Simple"] == pytest.approx(9.0, rel=0.05)
    assert fitted.hop_us["LL128"] == 2.5  # never picked on PCIe: keeps the prior's figure
    assert fitted.fit["protocols"] == ["LL", "Simple"]
    assert max(fitting.abs_pct_errors(fitted, samples)) < 1.0


def _real_samples():
    (run,) = parse_text(LOG_8GPU.read_text(), str(LOG_8GPU)).runs
    return [
        fitting.Sample("charlie0129 x8", "all_reduce", row.bytes, 8, values["time_us"])
        for row in run.rows
        for values in row.places.values()
    ]


def test_holdout_on_the_real_8gpu_log_meets_the_target():
    prior = nccl_prior("shm", "ampere", channels=2, channel_bw_gbps=12.0)
    (result,) = fitting.holdout(_real_samples(), prior)
    assert result.ranks == 8
    assert result.fit_sizes == (8 << 10, 32 << 10, 128 << 10, 512 << 10)
    assert result.held_sizes == (16 << 10, 64 << 10, 256 << 10, 1 << 20)
    assert result.held_median_pct <= 15.0
    assert result.prior_median_pct > 30.0  # NCCL's own model is far off on this box
    bands = fitting.band_errors(result.params, _real_samples())
    assert [b["band"] for b in bands] == ["< 8 KB", "8-64 KB", "64 KB-1 MB", "1-16 MB", ">= 16 MB"]
    assert sum(b["n"] for b in bands) == 50


def test_calibrate_command(tmp_path, capsys):
    assert main(["import-nccl-tests", str(LOG_8GPU), "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    capsys.readouterr()
    out = tmp_path / "calibration.toml"
    assert main(["calibrate", str(run_dir), "--topology", "pcie-dual-socket-shm", "--out", str(out), "--holdout"]) == 0
    printed = capsys.readouterr().out
    assert "pass" in printed and "fit error per size band" in printed
    params = params_from_toml(out.read_text(), str(out))
    assert params.link == "shm" and params.fit["samples"] == 8  # every other size of 8 KB-1 MB, both places
    assert main(["calibrate", str(run_dir)]) == 2
    assert "needs --out" in capsys.readouterr().err


def test_samples_from_measured_step_records():
    from commprof.costmodel.topology import load_topology

    topology = load_topology("pcie-dual-socket-shm")
    step = {
        "kind": "step",
        "source": "measured",
        "status": "ok",
        "mode": "eager",
        "world_size": 8,
        "tokens": 4,
        "run_id": "r",
        "point_id": "p000",
        "point": {"label": "defaults", "impl": "default", "env": {}},
        "op_us": {
            "sites": ["embed", "layer.0.attn", "layer.0.mlp", "logits"],
            "bytes": [57344, 57344, 57344, 1048576],
            "median": [40.0, 44.0, 46.0, 300.0],
        },
    }
    forced = {
        **step,
        "point_id": "p004",
        "point": {"label": "LL128", "impl": "default", "env": {"NCCL_PROTO": "LL128"}},
    }
    graph = {**step, "mode": "graph", "op_us": None}
    other = {**step, "point": {"label": "fi", "impl": "flashinfer-pcie-ipc", "env": {}}}
    samples, notes = fitting.samples_from_records(
        [step, forced, graph, other], fitting.nccl_constraints(topology, "shm")
    )
    assert [(s.collective, s.bytes, s.time_us) for s in samples] == [
        ("all_gather", 1048576, 300.0),
        ("all_reduce", 57344, 44.0),
    ]
    assert samples[1].protos == ("LL", "Simple") and samples[1].ranks == 8
    assert len(notes) == 2  # the forced-LL128 point and the FlashInfer point are named as skipped


def test_calibrate_refuses_a_run_with_negative_times_naming_file_and_line(tmp_path, capsys):
    assert main(["import-nccl-tests", str(LOG_8GPU), "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    results = run_dir / "results.jsonl"
    lines = results.read_text().splitlines()
    record = json.loads(lines[4])
    record["time_us"] = -12.5
    lines[4] = json.dumps(record)
    results.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    args = ["calibrate", str(run_dir), "--topology", "pcie-dual-socket-shm", "--out", str(tmp_path / "m.toml")]
    assert main(args) == 2
    assert f"{results}:5: not a usable record: time_us -12.5 is negative or not finite" in capsys.readouterr().err
    assert not (tmp_path / "m.toml").exists()


def test_simulate_refuses_a_calibration_with_a_negative_overhead(tmp_path, capsys):
    calibration = tmp_path / "calibration.toml"
    calibration.write_text(params_to_toml(replace(pcie_prior(), overhead_us=-20.0)))
    sweep = tmp_path / "s.toml"
    sweep.write_text('[run]\nmodel = "llama-3.1-70b"\ntokens = [1]\n')
    args = ["simulate", "--topology", "pcie-4gpu", "--sweep", str(sweep), "--calibration", str(calibration)]
    assert main([*args, "--out", str(tmp_path / "runs")]) == 2
    assert "costmodel.overhead_us: -20.0 is out of range" in capsys.readouterr().err
