"""The fifth attack run, on the files commprof reads as typed structures (sweep files, calibrations, topologies,
run folders), replayed case by case through the entry point the attacker used (run as `python -m` runs it) and
checked by tests/attack_replay.py: one line naming the file and the key, exit 2, nothing written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from tests.attack_replay import REPO, Attack, attack_params, check_attack, gloo_run, sweep_file


def _simulate(body: str, error: str, whole: bool = False, limit_s: float | None = None):
    """`commprof simulate` of a sweep file holding `body` (after a name and [run] tokens = [1] unless `whole`):
    refused before anything is simulated or written (within `limit_s`, where the input once cost hours)."""

    def case(tmp):
        path = sweep_file(tmp, body)
        if whole:
            path.write_text(body)
        out = tmp / "sim"
        argv = ["commprof", "simulate", "--topology", "pcie-4gpu", "--sweep", str(path), "--out", str(out)]

        def nothing_written():
            assert not out.exists() or list(out.iterdir()) == []

        return Attack(argv, 2, error, [out], limit_s=limit_s, after=nothing_written)

    return case


def _dry_run(*flags: str, error: str):
    return lambda tmp: Attack(["commprof.allreduce_sweep", *flags, "--dry-run", "--no-doctor"], 2, error)


def _sweep_is_a_folder(tmp):
    out = tmp / "sim"
    argv = ["commprof", "simulate", "--topology", "pcie-4gpu", "--sweep", str(tmp), "--out", str(out)]
    return Attack(argv, 2, r"sweep file .*: not a regular file", [out])


_CALIBRATION = """[costmodel]
link = "nvlink"
arch = "hopper"
channels = 16
channel_bw_gbps = 26.7
overhead_us = 0.96

[costmodel.hop_us]
LL = 0.52
LL128 = 1.9
Simple = 3.4

[fit]
protocols = ["LL"]
ranks = 4
band_names = ["8-64 KB", "64 KB-1 MB"]
band_error_pct = [3.7, 2.6]
expected_error_pct = 3.7
"""


def _calibration(old: str, new: str, error: str):
    """`commprof simulate --calibration` of a calibration with `old` replaced by `new` in its [fit]: refused before
    anything is simulated or written."""

    def case(tmp):
        assert old in _CALIBRATION
        calibration, out = tmp / "calibration.toml", tmp / "sim"
        calibration.write_text(_CALIBRATION.replace(old, new))
        sweep = sweep_file(tmp, "")
        argv = ["commprof", "simulate", "--topology", "nvlink-h100", "--sweep", str(sweep), "--calibration"]
        return Attack([*argv, str(calibration), "--out", str(out)], 2, error, [out])

    return case


def _topology(old: str, new: str, error: str, status: int = 2):
    """`commprof simulate --topology` of the pcie-4gpu preset with `old` replaced by `new`: refused before a run folder
    is made."""

    def case(tmp):
        text = (REPO / "sweeps" / "topologies" / "pcie-4gpu.toml").read_text()
        assert old in text
        topology, out = tmp / "box.toml", tmp / "sim"
        topology.write_text(text.replace(old, new, 1))
        argv = ["commprof", "simulate", "--topology", str(topology), "--sweep", str(sweep_file(tmp, "")), "--out"]

        def nothing_written():
            assert not out.exists() or list(out.iterdir()) == []

        return Attack([*argv, str(out)], status, error, [out], after=nothing_written)

    return case


def _run_folder(name: str, change: Callable[[str], str], status: int, error: str, absent: str = ""):
    """`commprof report` of the gloo run with its file `name` (results.jsonl or plan.jsonl) changed by `change`."""

    def case(tmp):
        run, out = gloo_run(tmp), tmp / "out"
        (run / name).write_text(change((run / name).read_text()))
        return Attack(["commprof", "report", str(run), "--out", str(out)], status, error, [out], absent=absent)

    return case


def _line_inserted(line: str, at: int = 3) -> Callable[[str], str]:
    return lambda text: (
        "".join(text.splitlines(keepends=True)[:at]) + line + "\n" + "".join(text.splitlines(keepends=True)[at:])
    )


def _calibrate_with_meta(meta: str, error: str):
    """`commprof calibrate` of an imported nccl-tests run whose meta.json is `meta`: refused, as the report refuses it,
    not read as a run of an unknown box."""

    def case(tmp):
        from commprof.cli import main

        log = REPO / "tests" / "fixtures" / "nccl-tests" / "h100x4_all_reduce_and_broadcast_mpi.txt"
        assert main(["import-nccl-tests", str(log), "--out", str(tmp / "imported")]) == 0
        run = next((tmp / "imported").iterdir())
        (run / "meta.json").write_text(meta)
        out = tmp / "cal" / "calibration.toml"
        return Attack(["commprof", "calibrate", str(run), "--out", str(out)], 2, error, [out.parent])

    return case


_LONG = "1" * 5000  # a path name longer than any file system's 255 bytes


def _long_name(*argv: str, error: str = r"1+ \.\.\. .* 1+: a path name longer than the file system allows"):
    """A command given a 5000-character path name where it takes a file or folder (pathlib's is_dir() raises)."""
    return lambda tmp: Attack(["commprof", *(a.replace("SWEEP", str(sweep_file(tmp, ""))) for a in argv)], 2, error)


def _import_time_1e300(tmp):
    """An nccl-tests log whose first row took 1e300 µs: refused at import, not written for the report to plot."""
    log = tmp / "log.txt"
    text = (REPO / "tests" / "fixtures" / "nccl-tests" / "synthetic_per_iter_I1.txt").read_text()
    log.write_text(text.replace("-1    21.50    0.38", "-1    1e300    0.38", 1))
    out = tmp / "imported"
    return Attack(
        ["commprof", "import-nccl-tests", str(log), "--out", str(out)], 2, r"log\.txt:\d+: time 1e300 µs", [out]
    )


_NESTED = "[" * 100_000 + "]" * 100_000
_POINTS = "all_reduce_us = [[1024, 6.0], [65536, 12.0]]"
CASES: dict[str, Callable[[Path], Attack]] = {
    # 1. numbers a sweep file takes that its run's meta.json, plan.jsonl or records would refuse
    "sweep-tokens-2**63": _simulate(
        'name = "evil"\n[run]\ntokens = [9223372036854775807]\n',
        r"evil\.toml: run\.tokens\[0\]: 9223372036854775807 is above 16777216",
        whole=True,
    ),
    "sweep-iterations-2**40": _simulate(
        "iterations = 1099511627776\n", r"evil\.toml: run\.iterations: 1099511627776 is above 2147483648"
    ),
    "sweep-stage-iterations-2**63": _simulate(
        "[[stages]]\ntop_k = 1\niterations = 9223372036854775807\n",
        r"evil\.toml: stages\[0\]\.iterations: 9223372036854775807 is above",
    ),
    "sweep-point-timeout-a-year": _simulate(
        "point_timeout_s = 31536000.0\n",
        r"evil\.toml: run\.point_timeout_s: 31536000.0 is above 604800.0 \(allowed: a number > 0\)",
    ),
    "sweep-stage-name-300-characters": _simulate(
        f"[[stages]]\ntop_k = 1\niterations = 2\nname = '{'n' * 300}'\n",
        r"evil\.toml: stages\[0\]\.name: expected a string of at most 200 characters",
    ),
    "sweep-compute-ms-5000-digit-T": _simulate(
        f"[report]\ncompute_ms = {{ '{'9' * 5000}' = 1.0 }}\n",
        r"evil\.toml: report\.compute_ms\.9+ \.\.\. .* 9+: not a T of",
    ),
    "sweep-accept-length-1e300": _simulate(
        "[report]\naccept_lengths = [2.0, 1e300]\n", r"report\.accept_lengths\[1\]: 1e\+300 is above 1024\.0"
    ),
    "sweep-baseline-every-1e400-minutes": _simulate(
        f"baseline_every = '1{'0' * 400}min'\n", r"evil\.toml: run\.baseline_every: expected a number of points"
    ),
    "cli-point-timeout-a-year": _dry_run("--point-timeout", "31536000", error=r"--point-timeout.*31536000"),
    "cli-iterations-2**40": _dry_run("--iterations", "1099511627776", error=r"--iterations.*1099511627776"),
    "cli-tokens-2**30": _dry_run("--tokens", "1073741824", error=r"1073741824 is above 16777216"),
    "sweep-phase-a-million-characters": lambda tmp: replace(
        _simulate(
            f"phase = '{'p' * 1_000_000}'\n",
            r"run\.phase: 'p+ \.\.\. \(\d+ characters left out\) \.\.\. p+' is not a phase \(allowed: decode, verify\)",
        )(tmp),
        absent=r"[^\n]{2100}",
    ),
    "sweep-model-5000-characters": _simulate(
        f"model = '{_LONG}'\n", r"evil\.toml: run\.model: model config 1+ .* 1+: File name too long"
    ),
    **{
        f"sweep-{where}-100000-variables": _simulate(
            table + "".join(f"NCCL_V{i} = {value}\n" for i in range(100_000)),
            error,
            limit_s=20,  # took hours
        )
        for where, table, value, error in (
            ("axes", "[axes.env]\n", "['1']", r"evil\.toml: axes: more than 256 settings"),
            ("point", "[[points]]\n[points.env]\n", "'1'", r"evil\.toml: points\[0\]: 100000 settings"),
            ("stage-axes", "[[stages]]\ntop_k = 1\n[stages.axes.env]\n", "['1']", r"stages\[0\]\.axes: more than 256"),
        )
    },
    # 2. a folder where a file is expected, and a path name no file system holds
    "sweep-file-is-a-folder": _sweep_is_a_folder,
    "compute-trace-is-a-folder": _simulate(
        "compute = 'trace:/'\n", r"evil\.toml: run\.compute: compute trace file /: not a regular file"
    ),
    "simulate-topology-5000-characters": _long_name("simulate", "--topology", _LONG, "--sweep", "SWEEP"),
    "simulate-sweep-5000-characters": _long_name("simulate", "--topology", "pcie-4gpu", "--sweep", _LONG),
    "report-run-5000-characters": _long_name("report", _LONG),
    "nccl-graph-run-5000-characters": _long_name("nccl-graph", "--from-run", _LONG, "--out", "g"),
    # 3. a calibration's [fit], which the simulator reads for its expected error, its ranks and its protocols
    "calibration-band-names-an-integer": _calibration(
        'band_names = ["8-64 KB", "64 KB-1 MB"]',
        "band_names = 5",
        r"calibration\.toml: fit\.band_names: expected a list",
    ),
    "calibration-band-error-a-string": _calibration(
        "[3.7, 2.6]", '["a", 2.6]', r"calibration\.toml: fit\.band_error_pct\[0\]: expected a number >= 0, got 'a'"
    ),
    "calibration-band-errors-fewer-than-bands": _calibration(
        "[3.7, 2.6]", "[3.7]", r"calibration\.toml: fit\.band_error_pct: 1 errors for 2 band_names"
    ),
    "calibration-expected-error-nan": _calibration(
        "expected_error_pct = 3.7", "expected_error_pct = nan", r"fit\.expected_error_pct: nan is not a finite number"
    ),
    "calibration-expected-error-negative": _calibration(
        "expected_error_pct = 3.7", "expected_error_pct = -5", r"fit\.expected_error_pct: -5 is out of range"
    ),
    "calibration-ranks-a-string": _calibration("ranks = 4", "ranks = 'four'", r"fit\.ranks: expected an integer >= 1"),
    "calibration-protocols-an-integer": _calibration(
        'protocols = ["LL"]', "protocols = 5", r"fit\.protocols: expected a list of LL, LL128, Simple, got 5"
    ),
    # 4. topology files: figures past what meta.json records or a calibration may state, kernel figures of another
    # shape, a box the model cannot be split over (refused before the run folder is made)
    "topology-gpus-2**62": _topology(
        "gpus = 4", "gpus = 4611686018427387904", r"box\.toml: gpus: 4611686018427387904 is above"
    ),
    "topology-gpus-3-for-64-heads": _topology("gpus = 4", "gpus = 3", r"kimi-k2\.5: TP 3 is impossible"),
    "topology-channels-2**62": _topology(
        "channels = 2",
        "channels = 4611686018427387904",
        r"box\.toml: links\.pci\.channels: 4611686018427387904 is above 64",
    ),
    "topology-nvls-channels-2**62": _topology(
        "channel_bw_gbps = 24.0",
        "channel_bw_gbps = 24.0\nnvls_channels = 4611686018427387904",
        r"links\.pci\.nvls_channels: 4611686018427387904 is above 64",
    ),
    "topology-bandwidth-1e300": _topology(
        "channel_bw_gbps = 24.0", "channel_bw_gbps = 1e300", r"links\.pci\.channel_bw_gbps: 1e\+300 is above 1000"
    ),
    "topology-launch-overhead-negative": _topology(
        "launch_overhead_us = 4.0", "launch_overhead_us = -1e300", r"launch_overhead_us: -1e\+300 is out of range"
    ),
    "topology-max-bytes-2**63": _topology(
        "max_bytes = 65536",
        "max_bytes = 9223372036854775807",
        r"flashinfer-pcie-ipc\.max_bytes: 9223372036854775807 is",
    ),
    **{
        f"topology-latency-points-{name}": _topology(_POINTS, f"all_reduce_us = {value}", error)
        for name, value, error in (
            ("strings", "['12', '34']", r"all_reduce_us: \['12', '34'\] is not a list of \[bytes, microseconds\]"),
            ("nan-as-text", "[['1024', 'nan']]", r"all_reduce_us: \[\['1024', 'nan'\]\] is not a list"),
            ("inf", "[[1024, inf]]", r"all_reduce_us: \[\[1024, inf\]\] is not a list"),
            ("booleans", "[[true, true]]", r"all_reduce_us: \[\[True, True\]\] is not a list"),
            ("bytes-1e300", "[[1024, 6.0], [1e300, 7.0]]", r"all_reduce_us: .*1e\+300.* is not a list"),
            ("size-twice", "[[1024, 6.0], [1024, 7.0]]", r"all_reduce_us: .* gives a size twice"),
        )
    },
    # 5. run folders: JSON nested past msgspec's stack, and a torn last line of plan.jsonl
    "results-line-nested-100000-deep": _run_folder(
        "results.jsonl", _line_inserted(_NESTED), 2, r"results\.jsonl:4: not a JSON record"
    ),
    "results-line-object-nested-100000-deep": _run_folder(
        "results.jsonl",
        _line_inserted('{"a":' * 100_000 + "1" + "}" * 100_000),
        2,
        r"results\.jsonl:4: not a JSON record",
    ),
    "plan-line-nested-100000-deep": _run_folder(
        "plan.jsonl", _line_inserted(_NESTED, 1), 2, r"plan\.jsonl:2: not a plan line \(not JSON: maximum recursion"
    ),
    "plan-line-kind-a-list": _run_folder(
        "plan.jsonl",
        lambda text: text + '{"line": ["stages"]}\n',
        2,
        r"plan\.jsonl:4: not a plan line: line \['stages'\]",
    ),
    "plan-torn-last-line": _run_folder(
        "plan.jsonl", lambda text: text[:-20], 0, "", absent=r"UserWarning|report/command\.py|RunExtras"
    ),
    "import-time-1e300-us": _import_time_1e300,
    "calibrate-meta-not-json": _calibrate_with_meta("[[[[", r"run metadata .*meta\.json: not valid JSON"),
    "calibrate-meta-run-id-an-integer": _calibrate_with_meta(
        '{"run_id": 5}', r"meta\.json: not usable run metadata: run_id: expected a string or null, got an integer"
    ),
}


STARTS_PROCESSES: set[str] = set()  # none: the bounded cases too run in the test's process


@pytest.mark.parametrize("case", attack_params(CASES, STARTS_PROCESSES))
def test_the_attack_gives_one_line_and_leaves_everything_outside_as_it_was(case, tmp_path):
    check_attack(CASES[case], tmp_path)
