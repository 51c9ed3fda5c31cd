"""`commprof explain` as a user runs it (in-process: the command line's own entry point, its exit status and both
streams): one command on the shipped bundle, the JSON the issue names, and one line for bad input."""

import contextlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from commprof.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
ASUS = FIXTURES / "doctor" / "asus-esc8000a-8x-rtxpro6000"
CHARLIE = FIXTURES / "nccl-tests" / "rtx4090x8_sys_noP2P_charlie0129.txt"


def commprof(*args):
    """`commprof ARGS...`: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(a) for a in args])
    return SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())


def test_one_command_on_the_bundle_answers_with_a_ranked_list():
    out = commprof("explain", "--from-bundle", ASUS, "--observed-op-us", "57344=205")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    verdict = next(line for line in lines if line.startswith("verdict: "))
    assert "nothing explains it within error" in verdict and "the closest" in verdict
    assert any(line.startswith("next: to tell ") for line in lines)  # the measurement that tells them apart
    assert any(line.startswith("1. ") for line in lines) and "doctor iommu (ok)" in out.stdout


def test_json_lists_the_explanations_best_first_with_the_issue_keys():
    out = commprof("explain", "--topology", "pcie-gen4", "--nccl-tests", CHARLIE, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    first = data["explanations"][0]
    assert first["condition"] == "p2p-off-shm"
    assert {"condition", "predicted_us", "observed_us", "error_pct", "confirmed_by", "fix"} <= set(first)
    assert len(first["predicted_us"]) == len(first["observed_us"]) == 25 and first["error_pct"] <= 41
    assert any("GeForce RTX 4090" in line for line in first["confirmed_by"]) and first["fix"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--observed-op-us", "57344=205"), "explain needs one box"),
        (("--topology", "pcie-gen4"), "explain needs what the box measured"),
        (("--topology", "pcie-gen4", "--observed-op-us", "0=205"), "cannot be priced"),
        (("--topology", "pcie-gen4", "--observed-op-us", "99999999999999999=205"), "cannot be priced"),
        (("--topology", "pcie-4gpu", "--observed-op-us", "57344=205", "--nccl-tests", CHARLIE), "8 ranks cannot"),
        (("--topology", "no-such-box", "--observed-op-us", "57344=205"), "unknown topology"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    out = commprof("explain", *args)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("commprof: error: ") and message in out.stderr and out.stderr.count("\n") == 1


def test_an_empty_log_is_one_line_and_exit_2(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out = commprof("explain", "--topology", "pcie-gen4", "--nccl-tests", empty)
    assert out.returncode == 2 and out.stderr.startswith("commprof: error: ") and out.stderr.count("\n") == 1
    nccl_log = tmp_path / "nccl.log"
    nccl_log.write_text("nothing from NCCL here\n")
    out = commprof("explain", "--topology", "pcie-gen4", "--observed-op-us", "57344=205", "--nccl-log", nccl_log)
    assert out.returncode == 2 and "no 'NCCL INFO'" in out.stderr


def test_step_observations_use_the_models_step_plan():
    out = commprof("explain", "--from-bundle", ASUS, "--observed-step-ms", "4=25", "--graph", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["explanations"][0]["observed_us"] == [25000.0]
    assert "--observed-step-ms (kimi-k2.5)" in data["observed_from"]


def test_a_measured_runs_nccl_baseline_is_an_observation(tmp_path):
    from tests.report_fixtures import write_run

    run = write_run(tmp_path, "measured")
    out = commprof("explain", "--topology", "pcie-gen4", "--run", run, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    sizes = data["explanations"][0]["bytes"]
    assert sizes == sorted(sizes) and 57344 in sizes and str(run) in data["observed_from"]
    simulated = write_run(tmp_path, "simulated", source="simulated")
    out = commprof("explain", "--topology", "pcie-gen4", "--run", simulated)
    assert out.returncode == 2 and "a simulated run is no observation" in out.stderr
