"""The attack run, replayed case by case through the commands the attacker ran: each gives one line and a non-zero
exit (2 for bad input), leaves every file outside the folder it was given as it was, and every export it writes runs
nothing when sourced in a clean shell. Cases another test already pins exactly are named in PINNED_ELSEWHERE; those
that need processes of their own (a full disk, a killed agent) are in test_attack_replay_processes.py."""

from __future__ import annotations

import csv
import importlib
import io
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.attack_replay import tree
from tests.report_fixtures import base_points, make_meta, make_records, write_run
from tests.sweeprun import one_rank

REPO = Path(__file__).resolve().parents[1]
GLOO_RUN = REPO / "tests" / "fixtures" / "report" / "cpu-smoke-gloo"
VICTIM_TEXT = "export KEEP=1\n"
SHELL_NAMES = ["PROMPT_COMMAND", "PS1", "BASH_ENV", "LD_PRELOAD", "PATH", "IFS"]


@dataclass
class Attack:
    """One case as the attacker ran it: the command (`commprof ...` or the sweep's), and what it must do."""

    argv: list[str]
    sweep: bool = False  # the sweep's command (torchrun -m commprof.allreduce_sweep), else `commprof`
    status: int = 2
    error: str = ""  # a regular expression the one error line matches
    given: list[Path] = field(default_factory=list)  # the folders it may write in
    exports: Path | None = None  # a report folder whose exports are sourced


# ------------------------------------------------------------------------------------------------ the cases


def _victim(tmp: Path) -> Path:
    victim = tmp / "outside" / "victim"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text(VICTIM_TEXT)
    return victim


def _interrupted_run(tmp: Path, torn: bool = False) -> Path:
    """A copy of a real gloo run, at the TP of a one-rank launch, as `cp -r runs/<interrupted> X` makes it."""
    run = tmp / "X"
    shutil.copytree(GLOO_RUN, run)
    (run / "SOURCES.md").unlink()
    meta = json.loads((run / "meta.json").read_text())
    meta["plan"]["tp"], meta["world_size"] = 1, 1
    (run / "meta.json").write_text(json.dumps(meta))
    if torn:
        with open(run / "results.jsonl", "a") as results:
            results.write('{"schema": 3, "ki')
    return run


def _resume(run: Path, error: str = "symbolic link") -> Attack:
    return Attack(["--resume", str(run), "--no-doctor"], sweep=True, error=error, given=[run])


def resume_writer_lock_link(tmp):
    run = _interrupted_run(tmp)
    (run / "writer.lock").symlink_to(_victim(tmp))
    return _resume(run, r"X/writer\.lock: a symbolic link")


def resume_results_repair_link(tmp):
    run = _interrupted_run(tmp, torn=True)
    (run / "results.repair").symlink_to(_victim(tmp))
    return _resume(run, r"X/results\.repair: a symbolic link")


def resume_point_folder_link(tmp):
    run = _interrupted_run(tmp)
    (run / "points").mkdir(exist_ok=True)
    shutil.rmtree(run / "points" / "p001", ignore_errors=True)
    (run / "points" / "p001").symlink_to(_victim(tmp).parent, target_is_directory=True)
    return _resume(run, r"X/points/p001: a symbolic link")


def resume_results_link(tmp):
    run = _interrupted_run(tmp)
    (tmp / "outside").mkdir()
    shutil.move(run / "results.jsonl", tmp / "outside" / "results.jsonl")
    (run / "results.jsonl").symlink_to(tmp / "outside" / "results.jsonl")
    return _resume(run, r"X/results\.jsonl: a symbolic link")


def _meta_change(change: Callable[[dict], None], error: str):
    def case(tmp):
        run = _interrupted_run(tmp)
        meta = json.loads((run / "meta.json").read_text())
        change(meta)
        (run / "meta.json").write_text(json.dumps(meta))  # Python writes an infinite float as Infinity
        return _resume(run, error)

    return case


def resume_record_env_name(tmp):
    """A record of the interrupted run naming PROMPT_COMMAND: the resume reads records as the report does."""
    run = _interrupted_run(tmp)
    lines = (run / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["point"]["env"] = {"PROMPT_COMMAND": f"touch {tmp}/PWNED"}
    (run / "results.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    return _resume(run, r"X/results\.jsonl:1: not a usable record: point\.env: PROMPT_COMMAND is not")


def _sweep_file(tmp: Path, body: str) -> Path:
    path = tmp / "evil.toml"
    path.write_text('name = "evil"\n[run]\ntokens = [1]\n' + body)
    return path


def _sweep_name(name: str):
    def case(tmp):
        path = _sweep_file(tmp, f"[[points]]\nenv = {{ {name} = 'touch {tmp}/PWNED' }}\n")
        return Attack(["--sweep", str(path), "--dry-run", "--no-doctor"], sweep=True, error=rf"evil\.toml: .*{name}")

    return case


def _report(tmp: Path, records: list[dict], meta: dict | None = None, status: int = 2, error: str = "") -> Attack:
    run = write_run(tmp / "runs", "crafted", records=records, meta=meta or make_meta("crafted"))
    out = tmp / "out"
    return Attack(["report", str(run), "--out", str(out)], status=status, error=error, given=[out], exports=out)


def _records(change: Callable[[dict], None]) -> list[dict]:
    records = make_records("crafted")
    target = next(r for r in records if r["kind"] == "step" and r["status"] == "ok" and r.get("nccl"))
    change(target)
    return records


def _record_name(name: str):
    def case(tmp):
        records = _records(lambda r: r["point"].update(env={**r["point"]["env"], name: f"touch {tmp}/PWNED"}))
        return _report(tmp, records, error=rf"results\.jsonl:\d+: not a usable record: point\.env: {name} is not")

    return case


def _record_change(change: Callable[[dict], None], error: str):
    return lambda tmp: _report(tmp, _records(change), error=rf"results\.jsonl:\d+: not a usable record: .*{error}")


def _choice(record: dict, **values) -> None:
    record["nccl"]["choices"][0].update(values)


def _meta_field(path: tuple, value, error: str):
    """A report of a run whose meta.json holds `value` at `path` (a meta-fuzz case that reached the page)."""

    def case(tmp):
        meta = make_meta("crafted")
        target = meta
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return _report(tmp, make_records("crafted"), meta, error=rf"meta\.json: not usable run metadata: {error}")

    return case


def csv_bare_cr_label(tmp):
    points = base_points()
    points[1]["label"] = "tree\r=cmd|' /C calc'!A0"
    return _report(tmp, make_records("crafted", points=points), status=0)


def crossover_max_bytes_1gib(tmp):
    path = _sweep_file(tmp, '[[stages]]\nkind = "crossover"\nmax_bytes = 1073741824\n')
    return Attack(["--sweep", str(path), "--dry-run", "--no-doctor"], sweep=True, error=r"stages\[0\]\.max_bytes")


def sweep_env_value_nul(tmp):
    path = _sweep_file(tmp, '[[points]]\nenv = { NCCL_ALGO = "ring\\u0000x" }\n')  # TOML's "\u0000"
    return Attack(["--sweep", str(path), "--dry-run", "--no-doctor"], sweep=True, error=r"evil\.toml: .*NUL")


def floor_probe_string(tmp):
    from tests.test_floor_record import floor_json

    path = tmp / "floor.json"
    path.write_text(json.dumps({**floor_json(gpus=1), "probe": "x"}))
    return Attack(["--floor", str(path), "--tokens", "1", "--dry-run", "--no-doctor"], sweep=True, error="--floor")


CASES: dict[str, Callable[[Path], Attack]] = {
    # 1. --resume follows links planted in a run folder
    "resume-writer-lock-link": resume_writer_lock_link,
    "resume-results-repair-link": resume_results_repair_link,
    "resume-point-folder-link": resume_point_folder_link,
    "resume-results-jsonl-link": resume_results_link,
    # 2. variable names that run code, from a sweep file and from a run folder's records
    **{f"sweep-env-name-{n}": _sweep_name(n) for n in SHELL_NAMES},
    **{f"record-env-name-{n}": _record_name(n) for n in SHELL_NAMES},
    "resume-record-env-name-PROMPT_COMMAND": resume_record_env_name,
    # 3. a bare CR in a label, into results.csv
    "csv-bare-cr-label": csv_bare_cr_label,
    # 5. resource exhaustion
    "crossover-max-bytes-1gib": crossover_max_bytes_1gib,
    "sweep-env-value-nul": sweep_env_value_nul,
    # 6. unchecked numbers reaching nccl_tuner.conf
    "tuner-negative-size": _record_change(lambda r: _choice(r, bytes=-1024), r"bytes -1024 is out of range"),
    "tuner-40-digit-size": _record_change(lambda r: _choice(r, bytes=10**40), r"bytes 10{40} is out of range"),
    "tuner-nranks-1e30": _record_change(lambda r: r["nccl"].update(nranks=10**30), r"nranks 10{30} is out of"),
    # 7. tracebacks instead of one line
    "record-choices-wrong-type": _record_change(lambda r: r["nccl"].update(choices="ring"), "expected a list"),
    "record-transports-wrong-type": _record_change(lambda r: r["nccl"].update(transports=["P2P"]), "transports"),
    "record-tokens-1e30": _record_change(lambda r: r.update(tokens=1e30), "tokens: expected an integer"),
    "record-choices-bytes-string": _record_change(lambda r: _choice(r, bytes="x"), "bytes: expected an integer"),
    "meta-gpu-name-list": _meta_field(("gpus", 0, "name"), [1], "gpus: an item: name: expected a string"),
    "meta-gpu-capability-list": _meta_field(("gpus", 0, "compute_capability"), [1], "gpus: an item: compute_cap"),
    "meta-gpu-capability-long": _meta_field(("gpus", 0, "compute_capability"), "9" * 4096, "compute capability '9+"),
    "meta-topology-capability-text": _meta_field(
        ("topology", "gpus", 0, "compute_capability"), "sm_90; rm -rf", r"compute capability 'sm_90; rm -rf' is not"
    ),
    "meta-topology-gpus-1e30": _meta_field(("topology", "gpus"), 1e30, "topology: gpus: expected a list"),
    "meta-topology-gpus-count": _meta_field(("topology", "gpus"), 10**30, "topology.gpus .* out of range"),
    "meta-topology-numa-nodes-1e30": _meta_field(("topology", "host", "numa_nodes"), 1e30, "topology: host: numa"),
    "meta-topology-pair-p2p-list": _meta_field(("topology", "pairs", 0, "p2p"), [1], "topology: pairs: an item: p2p"),
    "record-op-us-bytes-short": _record_change(lambda r: r["op_us"].update(bytes=[1]), r"op_us\.bytes: 1 item"),
    "record-op-us-median-short": _record_change(lambda r: r["op_us"].update(median=[1]), r"op_us\.median: 1 item"),
    # Statistics the report reads past (it reads op_us's median and p90): checked whole beside the reading.
    "record-op-us-cv-negative": _record_change(lambda r: r["op_us"]["cv"].__setitem__(3, -1.0), r"op_us\.cv: a neg"),
    "record-op-us-p99-negative": _record_change(lambda r: r["op_us"]["p99"].__setitem__(0, -1.0), r"op_us\.p99: a"),
    "record-world-size-null": lambda tmp: _report(tmp, _records(lambda r: r.update(world_size=None)), status=0),
    "resume-timeout-infinity": _meta_change(
        lambda m: m["plan"].update(point_timeout_s=float("inf")), r"meta\.json: .*point_timeout_s"
    ),
    "resume-model-numeric": _meta_change(lambda m: m["plan"].update(model=7), r"meta\.json: .*model: expected a"),
    "floor-probe-string": floor_probe_string,
}

# Cases another test replays exactly as the attacker did (the CLI, or the function it calls, with the attack's
# input kept as a fixture); `test_every_pinned_case_is_still_pinned` keeps these names honest.
PINNED_ELSEWHERE = {
    "dry-run-listing-escapes": "tests.test_sanitisers::test_the_dry_run_listing_prints_labels_and_values_clean",
    "trace-inspector-coll-escapes": (
        "tests.test_sanitisers::test_trace_of_an_inspector_dump_with_an_escaping_coll_prints_it_clean"
    ),
    "nccl-log-warn-escapes": "tests.test_sanitisers::test_nccl_log_explains_a_warn_line_holding_escapes_without_them",
    "simulate-topology-name-escapes": "tests.test_sanitisers::test_simulate_prints_a_topology_name_without_its_escapes",
    "nccl-log-quadratic-in-ranks": "tests.test_parsers_linear::test_nccl_log_is_linear_in_the_number_of_ranks",
    "import-nccl-tests-negative-size-zero-time": (
        "tests.test_nccl_tests_import::test_import_refuses_a_negative_size_or_a_zero_time_naming_file_and_line"
    ),
    "trace-negative-infinite-times-corrupt-gzip": "tests.test_trace_hostile::test_a_bad_kineto_trace_is_one_line",
    "trace-distributed-info-string": "tests.test_trace_hostile::test_distributed_info_of_another_type_is_no_rank",
    "trace-inspector-deep-wrong-types-json-nan": (
        "tests.test_trace_hostile::test_inspector_lines_of_wrong_types_deep_nesting_and_bad_times_are_left_out"
    ),
    "record-fuzz": "tests.test_records_fuzz::test_every_record_field_gives_a_report_or_one_line",
    "meta-fuzz": "tests.test_records_fuzz::test_every_meta_field_gives_a_report_or_one_line",
    "doctor-from-floor-nan-negative-string": (
        "tests.test_floor_record::test_doctor_from_a_bundle_with_a_bad_floor_is_one_line"
    ),
    "doctor-from-manifest-string-list": (
        "tests.test_floor_record::test_doctor_from_a_bundle_with_a_manifest_of_another_shape_still_runs"
    ),
    "object-or-null-got-an-object": (
        "tests.test_records_schema::test_crafted_numbers_and_types_are_one_line_naming_file_and_line"
    ),
    "lost-agent-message": "tests.test_sweep_stops::test_a_full_disk_or_a_lost_agent_is_one_line_naming_the_resume_command",
}


# ------------------------------------------------------------------------------------------------ the checks


def _source_every_export(folder: Path, tmp: Path) -> None:
    """Each file a user sources or pastes into a shell, sourced in a clean shell: it runs nothing, sets only
    variables commprof may set."""
    from commprof.env_names import is_export_name
    from commprof.report.exports.engine_hints import OWN_FILES

    clean = tmp / "clean-shell"
    clean.mkdir()
    for path in [*folder.glob("*.env"), *folder.glob("*.txt")]:
        shell = subprocess.run(
            ["env", "-i", "bash", "--norc", "--noprofile", "-c", f"source {path} >/dev/null 2>&1; env -0"],
            cwd=clean,
            capture_output=True,
            timeout=60,
        )
        names = {item.split(b"=", 1)[0].decode() for item in shell.stdout.split(b"\0") if item}
        mine = {n for n in names if is_export_name(n) or n in OWN_FILES}  # OWN_FILES: at a file beside it
        assert names - {"PWD", "SHLVL", "_", "OLDPWD"} <= mine, (path, names)
        assert list(clean.iterdir()) == [] and not (tmp / "PWNED").exists(), path


def _csv_rows_stay_rows(path: Path) -> None:
    text = path.read_text()
    assert "\r" not in text
    rows = list(csv.reader(io.StringIO(text)))
    assert len({len(row) for row in rows}) == 1
    for line in text.splitlines():  # a reader that splits rows on any line break sees no formula either
        assert not re.match(r"[=+\-@\t]", line), line


# The cases that start processes (the report's workers and bash check, the resumed sweep's fork server).
STARTS_PROCESSES = {
    "csv-bare-cr-label",
    "record-op-us-p99-negative",  # the report's worker checks the records while the report reads them
    "record-world-size-null",
    "resume-record-env-name-PROMPT_COMMAND",
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=[pytest.mark.processes] if c in STARTS_PROCESSES else []) for c in CASES],
    ids=list(CASES),
)
def test_the_attack_gives_one_line_and_leaves_everything_outside_as_it_was(case, tmp_path, monkeypatch, capsys):
    from commprof.cli import main
    from commprof.sweep import command as sweep_command
    from commprof.sweep.running import memory

    attack = CASES[case](tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(memory, "_host_available", lambda: 22 * 2**30)  # the attacked box's, wherever this runs
    before = tree(tmp_path, attack.given)
    capsys.readouterr()
    if attack.sweep:
        one_rank(monkeypatch)
        status = sweep_command.main(attack.argv)
    else:
        status = main(attack.argv)
    err = capsys.readouterr().err
    assert tree(tmp_path, attack.given) == before
    assert not (tmp_path / "PWNED").exists()
    assert "Traceback" not in err
    assert status == attack.status, err
    errors = [line for line in err.splitlines() if "error" in line]
    if attack.status:
        assert len(errors) == 1 and re.search(attack.error, errors[0]), err
        assert "expected an object or null, got an object" not in errors[0]
    else:
        assert errors == [], err
    if attack.exports is not None and attack.exports.exists():
        _source_every_export(attack.exports, tmp_path)
        _csv_rows_stay_rows(attack.exports / "results.csv")


@pytest.mark.parametrize("case", PINNED_ELSEWHERE, ids=list(PINNED_ELSEWHERE))
def test_every_pinned_case_is_still_pinned(case):
    module, name = PINNED_ELSEWHERE[case].split("::")
    assert callable(getattr(importlib.import_module(module), name))
    assert case not in CASES


def test_a_crossover_dry_run_estimates_the_time_its_sizes_take(monkeypatch, capsys):
    """`--dry-run` of a crossover stage up to 256 MiB (the most 22 GB of gloo ranks hold): its estimate counts
    every size's bytes, not only the probe's small all-reduce (it said 0.0 min)."""
    from commprof.replay.size_timing import CROSSOVER_LAYERS
    from commprof.replay.step_counts import steps_per_mode
    from commprof.sweep import command
    from commprof.sweep.planning.config import parse_sweep
    from commprof.sweep.planning.dryrun import ASSUMED_ALGBW_GBPS, StepCost
    from commprof.sweep.running import probe

    monkeypatch.setattr(probe, "probe_step_cost", lambda *args: StepCost(0.5, {1: 19.4}, "measured (test)"))
    monkeypatch.setenv("WORLD_SIZE", "1")
    text = (
        'name = "x"\n[run]\ntokens = [1]\n[[points]]\nimpl = "tests.plugins.one_shot:OneShotGloo"\n'
        '[[stages]]\nkind = "crossover"\nmodes = ["eager"]\nmax_bytes = {}\n'
    )
    minutes = {}
    for max_bytes in (1 << 20, 1 << 28):
        command._dry_run(parse_sweep(text.format(max_bytes), "x.toml"), 0, None, False)
        out = capsys.readouterr().out
        assert "assumed 1 GB/s (gloo, not measured here)" in out
        minutes[max_bytes] = float(re.search(r"estimated ([\d.]+) min", out).group(1))
    # the largest size alone: the setting and the baseline, verified, timed and split per op, every round
    stage = parse_sweep(text.format(1 << 28), "x.toml").stages[0]
    all_reduces = 2 * steps_per_mode(stage.rounds, stage.warmup) * (2 * CROSSOVER_LAYERS + 1)
    largest_min = all_reduces * (1 << 28) / (ASSUMED_ALGBW_GBPS["gloo"] * 1e9) / 60
    assert minutes[1 << 28] > largest_min > 1 and minutes[1 << 20] < 1
