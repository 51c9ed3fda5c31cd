"""`commprof plan` as a user runs it: the table, the JSON, and one clear line for bad input."""

import json
import subprocess
import sys

import pytest


def commprof(*args):
    return subprocess.run([sys.executable, "-m", "commprof", *args], capture_output=True, text=True, timeout=60)


def test_plan_json_matches_issue_contract():
    out = commprof("plan", "--model", "kimi-k2.5", "--tp", "8", "--tokens", "4", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    ops = plan["ops"]
    assert len(ops) == 124 and plan["all_reduce"] == 123 and plan["all_gather"] == 1
    assert ops[25] == {
        "index": 25,
        "site": "layer.12.attn",
        "collective": "all_reduce",
        "shape": [4, 7168],
        "input_shape": [4, 7168],
        "dtype": "bfloat16",
        "bytes": 57344,
        "rmsnorm_after": True,
    }
    assert ops[-1]["collective"] == "all_gather" and ops[-1]["shape"] == [4, 163840]
    assert plan["total_bytes"] == 123 * 57344 + 4 * 163840 * 2


def test_plan_table_has_totals():
    out = commprof("plan", "--tp", "8", "--tokens", "4")
    assert out.returncode == 0
    assert "total all_reduce: 123 ops, 7053312 bytes" in out.stdout
    assert "total all_gather: 1 ops" in out.stdout


def test_plan_from_speculative_method():
    out = commprof("plan", "--spec", "eagle", "--num-steps", "3", "--json")
    assert json.loads(out.stdout)["tokens"] == 4


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--model", "nope"), "known presets"),
        (("--tokens", "0"), "tokens must be >= 1"),
        (("--tp", "0"), "tensor parallel degree"),
        (("--model", "/nonexistent/config.json"), "not found"),
    ],
)
def test_bad_input_is_one_line(args, needle):
    out = commprof("plan", *args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
