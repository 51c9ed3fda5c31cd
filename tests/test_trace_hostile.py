"""Traces and Inspector dumps an attacker wrote (kept in tests/fixtures/hostile): one line and exit 2, or a
summary that leaves the bad lines out; never a traceback, never a negative or infinite time, strict JSON."""

import json
import re
from pathlib import Path

import pytest

from commprof.cli import main

HOSTILE = Path(__file__).parent / "fixtures" / "hostile"


def _strict(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "name, problem",
    [
        ("negative-dur.json", r"has a duration of -40.0 µs"),
        ("infinite-dur.json", r"has a duration of inf µs"),
        ("corrupt.json.gz", r"not gzipped JSON"),
    ],
)
def test_a_bad_kineto_trace_is_one_line(capsys, name, problem):
    assert main(["trace", str(HOSTILE / "traces" / name)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and re.search(problem, err), err


def test_distributed_info_of_another_type_is_no_rank(capsys):
    assert main(["trace", str(HOSTILE / "traces" / "distributed-info-string.json"), "--json"]) == 0
    (trace,) = _strict(capsys.readouterr().out)["traces"]
    assert trace["rank"] == 0 and trace["backend"] is None and trace["world_size"] is None


def test_inspector_lines_of_wrong_types_deep_nesting_and_bad_times_are_left_out(capsys):
    assert main(["trace", str(HOSTILE / "inspector-bad")]) == 0
    out = capsys.readouterr().out
    assert "8 unreadable line(s) left out" in out and "-" not in re.sub(r"[A-Za-z]-[A-Za-z]|p10|p90", "", out)
    assert main(["trace", str(HOSTILE / "inspector-bad"), "--json"]) == 0
    account = _strict(capsys.readouterr().out)
    times = re.findall(r'"[a-z_]*(?:_us|_gbs)": (-?[\d.e+]+)', json.dumps(account))
    assert times and all(float(t) >= 0 for t in times)
