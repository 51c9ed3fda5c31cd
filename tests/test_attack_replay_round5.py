"""The fifth attack run, on the files commprof reads as typed structures (sweep files, calibrations, topologies,
run folders), replayed case by case through the entry point the attacker used, each in a process of its own and
checked by tests/attack_replay.py: one line naming the file and the key, exit 2, nothing written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.attack_replay import Attack, check_attack, sweep_file


def _simulate(body: str, error: str, whole: bool = False):
    """`commprof simulate` of a sweep file holding `body` (after a name and [run] tokens = [1] unless `whole`):
    refused before anything is simulated or written."""

    def case(tmp):
        path = sweep_file(tmp, body)
        if whole:
            path.write_text(body)
        out = tmp / "sim"
        argv = ["commprof", "simulate", "--topology", "pcie-4gpu", "--sweep", str(path), "--out", str(out)]

        def nothing_written():
            assert not out.exists() or list(out.iterdir()) == []

        return Attack(argv, 2, error, [out], after=nothing_written)

    return case


def _sweep_is_a_folder(tmp):
    out = tmp / "sim"
    argv = ["commprof", "simulate", "--topology", "pcie-4gpu", "--sweep", str(tmp), "--out", str(out)]
    return Attack(argv, 2, r"sweep file .*: not a regular file", [out])


CASES: dict[str, Callable[[Path], Attack]] = {
    # 2. a folder where a file is expected
    "sweep-file-is-a-folder": _sweep_is_a_folder,
    "compute-trace-is-a-folder": _simulate(
        "compute = 'trace:/'\n", r"evil\.toml: run\.compute: compute trace file /: not a regular file"
    ),
}


@pytest.mark.processes  # a child python per case
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_attack_gives_one_line_and_leaves_everything_outside_as_it_was(case, tmp_path):
    check_attack(CASES[case], tmp_path)
