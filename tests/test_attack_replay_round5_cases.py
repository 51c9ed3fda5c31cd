"""The fifth attack run's cases that need no process of their own, replayed through the entry point the attacker
used (commprof's CLI, tools/check_engine_facts.py) in this process and checked by tests/attack_replay.py: one line
naming the file and the key, exit 2, no traceback, nothing outside the folders given changed, bounded processor
time. An expansion that filled memory is proved bounded by its refusal coming before it. Sourcing the exports in a
clean bash and zsh, the read that reserved 4 GiB under `ulimit -v`, and a resume are in the `_processes` file."""

from __future__ import annotations

import errno
import json
import re
import shutil
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.attack_replay import REPO, Attack, check_in_process, gloo_run, sweep_file
from tests.report_fixtures import make_meta, make_records, write_run

NCCL_TESTS = REPO / "tests" / "fixtures" / "nccl-tests"
H100_LOG = NCCL_TESTS / "h100x4_all_reduce_and_broadcast_mpi.txt"
BUNDLE = REPO / "tests" / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"
TOPOLOGY = REPO / "sweeps" / "topologies" / "pcie-4gpu.toml"


def _simulate(body: str, error: str, *, topology: str = "pcie-4gpu", whole: bool = False, limit_s: float = 20):
    """`commprof simulate` of a sweep file holding `body` (after a name and [run] tokens = [1] unless `whole`):
    refused before anything is simulated or written."""

    def case(tmp):
        path = sweep_file(tmp, body)
        if whole:
            path.write_text(body)
        out = tmp / "sim"
        argv = ["commprof", "simulate", "--topology", topology, "--sweep", str(path), "--out", str(out)]
        return Attack(argv, 2, error, [out], limit_s, after=lambda: _empty(out))

    return case


def _empty(folder: Path) -> None:
    assert not folder.exists() or not any(folder.rglob("*")), sorted(folder.rglob("*"))


def _report(change: Callable[[Path], None], status: int, error: str = "", absent: str = "", limit_s: float = 30):
    """`commprof report` of the real gloo run after `change(run)`."""

    def case(tmp):
        run, out = gloo_run(tmp), tmp / "out"
        change(run)
        return Attack(["commprof", "report", str(run), "--out", str(out)], status, error, [out], limit_s, absent=absent)

    return case


def _meta_version(version: str) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        meta = json.loads((run / "meta.json").read_text())
        meta["versions"]["sglang"] = version
        (run / "meta.json").write_text(json.dumps(meta))

    return change


def _point_env(count: int) -> Callable[[Path], None]:
    """The first step record's point given `count` plug-in knobs (the attack's had 200,000)."""

    def change(run: Path) -> None:
        lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
        record = json.loads(lines[0])
        record["point"]["env"] |= {f"COMMPROF_V{i}": "1" for i in range(count)}
        lines[0] = json.dumps(record) + "\n"
        (run / "results.jsonl").write_text("".join(lines))

    return change


def _winner_env(name: str, value: str):
    """A crafted NCCL run whose winning points set `name`: refused whole, so nothing is exported for it."""

    def case(tmp):
        records = make_records("crafted")
        for record in records:
            if record["kind"] == "step" and record["status"] == "ok" and record.get("nccl"):
                record["point"]["env"] = {**record["point"]["env"], name: value}
        run, out = write_run(tmp / "runs", "crafted", records=records, meta=make_meta("crafted")), tmp / "out"
        error = rf"results\.jsonl:\d+: not a usable record: point\.env: {name} is not a tuning variable commprof"
        return Attack(["commprof", "report", str(run), "--out", str(out)], 2, error, [out], 30, lambda: _empty(out))

    return case


# ------------------------------------------------------------------------------------------- model configs


def _config(preset: str, field: str, raw: str, error: str):
    """`commprof plan` of a shipped preset's config.json with `field` set to the JSON text `raw`."""

    def case(tmp):
        config = json.loads((REPO / "commprof" / "planner" / "presets" / f"{preset}.json").read_text())
        config[field] = "@@"
        path = tmp / "config.json"
        path.write_text(json.dumps(config).replace('"@@"', raw))
        return Attack(["commprof", "plan", "--model", str(path), "--tp", "8"], 2, error, limit_s=10)

    return case


# ------------------------------------------------------------------------------------------- nccl-tests logs


def _import(text: str, error: str, status: int = 2, name: str = "log.txt", limit_s: float = 10, after=None):
    def case(tmp):
        log, out = tmp / name, tmp / "imported"
        log.write_text(text)
        argv = ["commprof", "import-nccl-tests", str(log), "--out", str(out)]
        check = after(out) if after else (lambda: _empty(out))
        return Attack(argv, status, error, [out], limit_s, after=check)

    return case


def _h100(old: str, new: str) -> str:
    text = H100_LOG.read_text()
    assert old in text
    return text.replace(old, new, 1)


def _json_log(**config) -> str:
    data = json.loads((NCCL_TESTS / "synthetic_output_J.json").read_text())
    data["config"] |= config
    return json.dumps(data)


def _one_table(rows: int) -> str:
    """One table of `rows` rows of one size: `rows` processes' rows interleaved, as mpirun of a non-MPI build
    prints them (the attack's had 20,000: the split was quadratic)."""
    lines = H100_LOG.read_text().splitlines()
    return "\n".join([*lines[:15], *[lines[15]] * rows, *lines[28:31]]) + "\n"


def _one_row_tables(tables: int) -> str:
    """`tables` tables of one row each under one header (the attack's had 20,000: calibrate read meta.json once
    per record, and fitted every repeat)."""
    lines = H100_LOG.read_text().splitlines()
    rows = [f"{lines[15].replace('11.76', f'{11.76 + i % 50 / 100:.2f}')}" for i in range(tables)]
    return "\n".join([*lines[:12], *(part for row in rows for part in (lines[13], lines[14], row))]) + "\n"


def _calibrated(out: Path) -> Callable[[], None]:
    """After an import: `commprof calibrate` of what it wrote fits within seconds."""

    def check() -> None:
        import time

        from commprof.cli import main

        (run,) = out.iterdir()
        start = time.process_time()
        assert main(["calibrate", str(run), "--out", str(out / "c.toml")]) == 0
        assert time.process_time() - start < 3  # 6 s at these 2,000 tables before, and past 180 s at 20,000

    return check


# ------------------------------------------------------------------------------------------- doctor bundles


def _nvml() -> dict:
    """nvml.json as the probe writes it for the fixture's 8 GPUs (topology and health)."""
    from commprof.doctor.bundle import read_bundle
    from commprof.doctor.gpus import gpu_view

    buses = [g["bus_id"] for g in gpu_view(read_bundle(BUNDLE))[0]]
    link = {"gen_current": 5, "gen_max": 5, "gen_gpu_max": 5, "width_current": 16, "width_max": 16}
    gpus = [
        {"index": i, "name": "NVIDIA RTX PRO 6000", "pci_bus_id": bus, "compute_capability": "12.0", "pcie": link}
        for i, bus in enumerate(buses)
    ]
    pairs = [
        {"gpus": [a, b], "level": "NODE", "nvlink": False, "p2p": {"read": "ok"}} for a in range(8) for b in range(a)
    ]
    health = [
        {"bus_id": bus, "power_limit_w": 600.0, "power_default_w": 600.0, "event_reasons": [], "persistence": True}
        for bus in buses
    ]
    return {"topology": {"gpus": gpus, "pairs": pairs}, "health": health}


def _bundle(command: str, where: tuple, value, error: str):
    """`commprof doctor --from B` or `nccl-graph --from-bundle B --out G` of the fixture bundle with an nvml.json
    whose field at `where` is `value`."""

    def case(tmp):
        bundle = tmp / "b"
        shutil.copytree(BUNDLE, bundle)
        nvml = _nvml()
        holder = nvml
        for key in where[:-1]:
            holder = holder[key]
        holder[where[-1]] = value
        (bundle / "nvml.json").write_text(json.dumps(nvml))
        argv = ["commprof", "doctor", "--from", str(bundle)]
        if command == "nccl-graph":
            argv = ["commprof", "nccl-graph", "--from-bundle", str(bundle), "--out", str(tmp / "g")]
        return Attack(argv, 2, r"--from(-bundle)? .*b: nvml\.json: .*" + error, [bundle, tmp / "g"], 20)

    return case


def _smi_width_400_digits(tmp):
    """nvidia-smi's "Link Width Max" of 400 digits (a float's inf): not a reading, so the candidates are written
    from the other GPUs' links."""
    bundle = tmp / "b"
    shutil.copytree(BUNDLE, bundle)
    text = (bundle / "nvidia_smi_full.log").read_text()
    (bundle / "nvidia_smi_full.log").write_text(re.sub(r"(Max\s+: )16x", r"\g<1>" + "9" * 400 + "x", text, count=1))
    return Attack(["commprof", "nccl-graph", "--from-bundle", str(bundle), "--out", str(tmp / "g")], 0, "", [tmp / "g"])


# ------------------------------------------------------------------------------------------- engine-fact wheels


def _wheel(text: str | None, status: int, error: str = "", member: str = "all_reduce_utils.py"):
    """tools/check_engine_facts.py --wheel W --table vllm==0.33 of a wheel whose cited all_reduce_utils.py holds
    `text` (None: a file that is no zip)."""

    def case(tmp):
        wheel = tmp / "vllm-0.33.0-py3-none-any.whl"
        if text is None:
            wheel.write_text("not a zip")
        else:
            with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr(f"vllm/distributed/device_communicators/{member}", text)
        argv = ["check_engine_facts", "--wheel", str(wheel), "--table", "vllm==0.33"]
        return Attack(argv, status, error, limit_s=10, absent=r"\d{30}")

    return case


_CONSTANT = "CUSTOM_ALL_REDUCE_MAX_SIZES = {{'9.0': {{2: {value}}}}}\n"

# ------------------------------------------------------------------------------------------- topologies


def _topology(old: str, new: str, error: str):
    def case(tmp):
        text = TOPOLOGY.read_text()
        assert old in text
        topology, out = tmp / "box.toml", tmp / "sim"
        topology.write_text(text.replace(old, new))
        argv = ["commprof", "simulate", "--topology", str(topology), "--sweep", str(sweep_file(tmp, "")), "--out"]
        return Attack([*argv, str(out)], 2, error, [out], 20, lambda: _empty(out), absent=r"\bnan\b|\d{30}")

    return case


def _calibration(old: str, new: str, error: str):
    def case(tmp):
        from tests.test_attack_replay_round5 import _CALIBRATION

        assert old in _CALIBRATION
        calibration, out = tmp / "calibration.toml", tmp / "sim"
        calibration.write_text(_CALIBRATION.replace(old, new))
        argv = [
            "commprof",
            "simulate",
            "--topology",
            "nvlink-h100",
            "--sweep",
            str(sweep_file(tmp, "")),
            "--calibration",
        ]
        return Attack([*argv, str(calibration), "--out", str(out)], 2, error, [out], 20, lambda: _empty(out))

    return case


_NETWORK_NAMES = ["NCCL_COMM_ID", "NCCL_RAS_ADDR", "NCCL_SOCKET_IFNAME", "NCCL_HOSTID", "NCCL_DEBUG", "VLLM_HOST_IP"]

CASES: dict[str, Callable[[Path], Attack]] = {
    # 1. an expansion bounded before it happens
    "sweep-max-batch-10**11": _simulate(
        'name = "evil"\n[run]\ntokens = "engine:sglang:max_batch=100000000000"\n',
        r"evil\.toml: run\.tokens: engine:sglang:max_batch=100000000000: max_batch is above 65536",
        whole=True,
    ),
    "sweep-max-batch-5000-digits": _simulate(
        f'name = "evil"\n[run]\ntokens = "engine:vllm:max_batch={"9" * 5000}"\n',
        r"evil\.toml: run\.tokens: engine:vllm:max_batch=9+ \.\.\. .*: max_batch is above 65536",
        whole=True,
    ),
    # 2. a pasted file that listens or dials out
    **{
        f"sweep-axes-env-{name}": _simulate(
            f"[axes.env]\n{name} = ['203.0.113.5:4444']\n",
            rf"evil\.toml: axes\.env\.{name}: {name} is not a tuning variable commprof sweeps or models",
        )
        for name in _NETWORK_NAMES
    },
    "sweep-point-env-NCCL_RAS_ADDR": _simulate(
        "[[points]]\nenv = { NCCL_RAS_ADDR = '0.0.0.0:28028' }\n",
        r"evil\.toml: points\[0\]\.env\.NCCL_RAS_ADDR: NCCL_RAS_ADDR is not a tuning variable",
    ),
    "sweep-engine-argument-array": _simulate(
        "[axes.env]\nCOMMPROF_SGLANG_ARGS = ['--host=0.0.0.0']\n",
        r"axes\.env\.COMMPROF_SGLANG_ARGS: COMMPROF_SGLANG_ARGS is not a tuning variable",
    ),
    "report-winner-NCCL_COMM_ID": _winner_env("NCCL_COMM_ID", "203.0.113.5:4444"),
    "report-winner-NCCL_RAS_ADDR": _winner_env("NCCL_RAS_ADDR", "0.0.0.0:28028"),
    # 4. small files that cost minutes
    "report-point-env-2000-variables": _report(
        _point_env(2000), 2, r"results\.jsonl:1: not a usable record: point\.env: more than 256 settings", limit_s=10
    ),
    # 5,000 rows (the attack's 20,000 took 54 s; these 3.7 s before, 0.5 s now)
    "import-one-table-of-5000-interleaved-rows": _import(
        _one_table(5000), "", 0, limit_s=2.5, after=lambda o: lambda: None
    ),
    "import-2000-one-row-tables-then-calibrate": _import(_one_row_tables(2000), "", 0, limit_s=8, after=_calibrated),
    # 5. tracebacks instead of one line
    "meta-version-superscript-two": _report(_meta_version("0.5.²"), 0),
    "meta-version-5000-digits": _report(_meta_version("0." + "9" * 5000), 0),
    **{
        f"config-{field}-{name}": _config(preset, field, raw, rf"config\.json: '{field}' must be")
        for preset, field, name, raw in (
            ("DeepSeek-V3", "moe_layer_freq", "0.5", "0.5"),
            ("DeepSeek-V3", "moe_layer_freq", "0", "0"),
            ("DeepSeek-V3", "first_k_dense_replace", "a-string", '"x"'),
            ("DeepSeek-V3", "first_k_dense_replace", "5000-digits", "9" * 5000 + ".5"),
            ("Qwen3-235B-A22B", "decoder_sparse_step", "nan", "NaN"),
            ("Qwen3-235B-A22B", "mlp_only_layers", "an-integer", "5"),
            ("Qwen3-235B-A22B", "num_experts", "a-list", "[1]"),
        )
    },
    "config-experts-per-token-10**300": _config(
        "Qwen3-235B-A22B", "num_experts_per_tok", "1" + "0" * 300, r"'num_experts_per_tok' = 10+ is beyond any"
    ),
    "nccl-tests-header-5000-digit-ngpus": _import(
        _h100("nGpus 1", "nGpus " + "1" * 5000), r"log\.txt:4: a 5000-digit number, which no nccl-tests log states"
    ),
    "nccl-tests-header-5000-digit-version": _import(
        _h100("nccl-library=22907", "nccl-library=" + "2" * 5000), r"log\.txt:2: a 5000-digit number"
    ),
    "nccl-tests-header-10**18-gpus": _import(
        _h100("nGpus 1", "nGpus 1000000000000000"), r"log\.txt:4: nGpus .* not a count"
    ),
    "nccl-tests-json-ngpus-1e18": _import(
        _json_log(ngpus=1e18),
        r"log\.json: config: nGpus 1e\+18 is not a count \(allowed: 0\.\.1048576\)",
        name="log.json",
    ),
    "nccl-tests-json-ngpus-a-string": _import(_json_log(ngpus="x"), r"config: nGpus x is not a count", name="log.json"),
    **{
        f"bundle-nvml-{what}-{command}": _bundle(command, where, value, error)
        for what, where, value, error in (
            ("power-a-string", ("health", 0, "power_limit_w"), "x", r"health: an item: power_limit_w: expected a"),
            ("power-1e308", ("health", 0, "power_limit_w"), 1e308, r"health\[0\]\.power_limit_w 1e\+308 is out of"),
            ("health-a-string", ("health", 1), "x", r"health: an item: expected an object"),
            ("reasons-a-number", ("health", 0, "event_reasons"), 5, r"event_reasons: expected a list"),
            ("width-1e308", ("topology", "gpus", 0, "pcie", "width_max"), 1e308, r"pcie: width_max: expected an"),
            ("width-10**30", ("topology", "gpus", 0, "pcie", "width_max"), 10**30, r"width_max 10+ is out of range"),
            ("numa-a-list", ("topology", "gpus", 0, "numa_node"), [1], r"numa_node: expected an integer or null"),
            ("p2p-a-string", ("topology", "pairs", 0, "p2p"), "x", r"p2p: expected an object or null"),
        )
        for command in ("doctor", "nccl-graph")
    },
    "bundle-smi-width-400-digits": _smi_width_400_digits,
    "engine-facts-constant-shifted-2**36": _wheel(_CONSTANT.format(value="1 << (1 << 36)"), 1),
    "engine-facts-constant-40000-terms": _wheel(_CONSTANT.format(value="*".join(["2"] * 40_000)), 1),
    "engine-facts-constant-a-terabyte-string": _wheel(_CONSTANT.format(value="'x' * (1 << 40)"), 1),
    "engine-facts-not-a-zip": _wheel(None, 2, r"check_engine_facts: error: .*\.whl: not a readable wheel"),
    # 6. numbers without bounds reach the page
    "topology-launch-overhead-1e6": _topology(
        "launch_overhead_us = 4.0", "launch_overhead_us = 1e6", r"box\.toml: launch_overhead_us: 1000000\.0 is above"
    ),
    "topology-launch-overhead-above-every-op": _topology(
        "launch_overhead_us = 4.0",
        "launch_overhead_us = 999",
        r"launch_overhead_us = 999 µs is at least the [0-9.]+ µs predicted for one eager op",
    ),
    "topology-channel-bandwidth-1e-300": _topology(
        "channel_bw_gbps = 24.0", "channel_bw_gbps = 1e-300", r"channel_bw_gbps: 1e-300 is out of range"
    ),
    "calibration-band-error-1e308": _calibration(
        "[3.7, 2.6]", "[16.2, 1e308]", r"calibration\.toml: fit\.band_error_pct\[1\]: 1e\+308 is above 1000\.0"
    ),
    "calibration-expected-error-1e308": _calibration(
        "expected_error_pct = 3.7", "expected_error_pct = 1e308", r"fit\.expected_error_pct: 1e\+308 is above"
    ),
}


# ------------------------------------------------------------------------------------------- writers and reads


def _imported(tmp: Path, log: Path = H100_LOG) -> Path:
    from commprof.cli import main

    assert main(["import-nccl-tests", str(log), "--out", str(tmp / "imported")]) == 0
    (run,) = (tmp / "imported").iterdir()
    return run


def _calibrate_out_a_link(tmp):
    """`calibrate RUN --out cal.toml` where cal.toml is a link to a file outside: refused, the file as it was."""
    run, folder = _imported(tmp), tmp / "cal"
    folder.mkdir()
    (folder / "cal.toml").symlink_to(tmp / "outside" / "victim")
    argv = ["commprof", "calibrate", str(run), "--out", str(folder / "cal.toml")]
    error = r"cal\.toml: a symbolic link where commprof's own file or folder belongs; refusing to follow it"
    return Attack(argv, 2, error, [tmp / "imported"], 20, lambda: (folder / "cal.toml").is_symlink())


CASES["calibrate-out-a-link"] = _calibrate_out_a_link


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_attack_gives_one_line_and_leaves_everything_outside_as_it_was(case, tmp_path, capsys, monkeypatch):
    check_in_process(CASES[case], tmp_path, capsys, monkeypatch)


def _full_disk(monkeypatch, module, suffix: str, at: int = 1) -> None:
    """`module`'s write_nofollow fails with ENOSPC at the `at`-th write of a file ending in `suffix`, as a full disk
    fails it (a tiny tmpfs is not mountable where the tests run)."""
    from commprof.records import folder

    real, writes = folder.write_nofollow, []

    def full(path, data, append=False, sync=False):
        if str(path).endswith(suffix):
            writes.append(path)
            if len(writes) >= at:
                real(path, data[: len(data) // 2], append, sync)  # what the disk took before it filled
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data, append, sync)

    monkeypatch.setattr(module, "write_nofollow", full)


@pytest.mark.parametrize("full_at", ["results.jsonl", "plan.jsonl", "meta.json.tmp"])
def test_a_full_disk_in_simulate_is_one_line_and_leaves_no_run(tmp_path, capsys, monkeypatch, full_at):
    from commprof.records import files

    _full_disk(monkeypatch, files, full_at)
    error = r"cannot write .*sim/[^/]+: No space left on device; the unfinished folder was removed"
    check_in_process(_simulate("", error), tmp_path, capsys, monkeypatch)


def test_a_full_disk_in_nccl_graph_is_one_line_and_keeps_the_candidates_there(tmp_path, capsys, monkeypatch):
    """The third candidate's write fails: no .tmp is left, and the candidates an earlier run wrote stay whole."""
    from commprof.cli import main
    from commprof.nccl_graph import command

    out = tmp_path / "g"
    assert main(["nccl-graph", "--from-bundle", str(BUNDLE), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _full_disk(monkeypatch, command, ".tmp", at=3)
    argv = ["commprof", "nccl-graph", "--from-bundle", str(BUNDLE), "--out", str(out)]
    error = r"cannot write the candidates to .*g: No space left on device; none was written"

    def unchanged():
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    check_in_process(lambda tmp: Attack(argv, 2, error, [out], 20, unchanged), tmp_path, capsys, monkeypatch)


def test_a_full_disk_in_calibrate_keeps_the_calibration_there(tmp_path, capsys, monkeypatch):
    """A calibration written over a good one fails half-way: the good one stays whole, no .partial is left."""
    from commprof.records import folder

    run, out = _imported(tmp_path), tmp_path / "cal" / "cal.toml"
    out.parent.mkdir()
    out.write_text("# the good calibration\n")
    real = folder.os.fdopen

    def filling(fd, *args, **kwargs):
        handle = real(fd, *args, **kwargs)
        write = handle.write

        def full(data):
            write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        handle.write = full
        return handle

    monkeypatch.setattr(folder.os, "fdopen", filling)
    argv = ["commprof", "calibrate", str(run), "--out", str(out)]

    def kept():
        assert out.read_text() == "# the good calibration\n" and sorted(p.name for p in out.parent.iterdir()) == [
            "cal.toml"
        ]

    error = r"cal\.toml: cannot be written \(No space left on device\)"
    check_in_process(lambda tmp: Attack(argv, 2, error, [tmp / "imported"], 20, kept), tmp_path, capsys, monkeypatch)


def test_a_resume_repair_keeps_the_kept_lines_bytes(tmp_path):
    """The real gloo run with a field this version does not declare on every line, its last point unfinished (one
    record missing) and a torn last line, as `--resume` finds it: the repair drops the torn line and the unfinished
    point and keeps every other line byte for byte (28 of 28 records lost the field before)."""
    from commprof.sweep.running.resume import repair_results

    run = gloo_run(tmp_path)
    path = run / "results.jsonl"
    lines = [json.dumps(json.loads(line) | {"from_a_newer_commprof": [1]}) + "\n" for line in path.open()]
    ids = [json.loads(line)["point_id"] for line in lines]
    unfinished = ids[-1]
    path.write_text("".join(lines[:-1]) + lines[0][:40])
    kept = repair_results(path, ids.count(ids[0]))
    expected = "".join(line for line, point in zip(lines, ids) if point != unfinished)
    assert path.read_bytes() == expected.encode() and len(kept) == expected.count("\n")


def test_a_meta_json_larger_than_report_reads_is_never_written(tmp_path, capsys, monkeypatch):
    """The attack's 256-GPU bundle made a 48 MB meta.json that `report` refuses; here the real 8-GPU bundle's
    meta.json against a bound made smaller than it (the same check, at a size CI can afford)."""
    from commprof.records import run_meta

    monkeypatch.setattr(run_meta, "META_BYTES", 20_000)
    out = tmp_path / "sim"
    sweep = sweep_file(tmp_path, "model = 'kimi-k2.5'\ntp = 8\n")
    argv = ["commprof", "simulate", "--from-bundle", str(BUNDLE), "--sweep", str(sweep), "--out", str(out)]
    error = r"meta\.json: \d+ bytes, more than the 20000 its readers read \(its largest section, topology, holds"
    check_in_process(lambda tmp: Attack(argv, 2, error, [out], 20, lambda: _empty(out)), tmp_path, capsys, monkeypatch)


def test_a_wheel_member_past_the_bound_and_no_network_are_one_line(tmp_path, capsys, monkeypatch):
    """A cited source file past MEMBER_BYTES (the attack's was 3 GiB; here the bound is made 1 KiB and the file
    2 KiB), and a `pip download` that fails as it does without a network."""
    import subprocess

    from tests.attack_replay import _entry_point

    _entry_point("check_engine_facts")
    tool = sys.modules["check_engine_facts"]
    monkeypatch.setattr(tool, "MEMBER_BYTES", 1024)
    large = _wheel(
        "#" * 2048, 2, r"check_engine_facts: error: .*\.whl: .*all_reduce_utils\.py holds more than the 1024"
    )
    check_in_process(large, tmp_path / "large", capsys, monkeypatch)

    def offline(command, **kwargs):
        stderr = "WARNING: Retrying ... NewConnectionError\nERROR: No matching distribution found for vllm==0.33.0\n"
        return subprocess.CompletedProcess(command, 1, "", stderr)

    monkeypatch.setattr(tool.subprocess, "run", offline)
    error = r"check_engine_facts: error: vllm==0\.33\.0: pip download failed: ERROR: No matching distribution found"
    check_in_process(
        lambda tmp: Attack(["check_engine_facts", "vllm==0.33.0"], 2, error, limit_s=10),
        tmp_path / "offline",
        capsys,
        monkeypatch,
    )


def test_an_imported_log_keeps_only_the_settings_calibrate_reads(tmp_path, capsys, monkeypatch):
    """A log whose command line sets NCCL_NET_PLUGIN and NCCL_DEBUG: imported with a warning naming both, and the
    run it writes is one `calibrate` and `report` read (they refused it)."""
    from commprof.cli import main

    text = H100_LOG.read_text()
    first = text.splitlines()[0]
    log = tmp_path / "plugin.txt"
    command = (
        "$ NCCL_NET_PLUGIN=/srv/evil/net.so NCCL_DEBUG=INFO NCCL_ALGO=Ring mpirun -np 4 ./build/all_reduce_perf_mpi"
    )
    log.write_text(text.replace(first, command, 1))
    out = tmp_path / "imported"
    printed = check_in_process(
        lambda tmp: Attack(["commprof", "import-nccl-tests", str(log), "--out", str(out)], 0, "", [out], 10),
        tmp_path,
        capsys,
        monkeypatch,
    )
    assert "NCCL_DEBUG, NCCL_NET_PLUGIN left out of the records" in printed.err.replace("\n", " ")
    (run,) = out.iterdir()
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert {name for r in records for name in r["point"]["env"]} == {"NCCL_ALGO"}
    assert "/srv/evil" not in (run / "meta.json").read_text()
    assert main(["calibrate", str(run), "--out", str(tmp_path / "c.toml")]) == 0
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0


def test_a_file_is_read_into_no_more_memory_than_it_holds(tmp_path, monkeypatch):
    """Every read of a results.jsonl asked for its 4 GiB limit (a MemoryError under `ulimit -v 3000000`): each read
    asks for the file's size and one byte more (the limit itself is replayed in the _processes file)."""
    from commprof import textfiles
    from commprof.cli import main

    asked: list[int] = []
    real = textfiles.os.fdopen

    def counting(fd, *args, **kwargs):
        handle = real(fd, *args, **kwargs)
        read = handle.read
        handle.read = lambda size=-1: asked.append(size) or read(size)
        return handle

    run = gloo_run(tmp_path)
    monkeypatch.setattr(textfiles.os, "fdopen", counting)
    assert main(["calibrate", str(run), "--out", str(tmp_path / "c.toml")]) in (0, 2)
    assert asked and max(asked) <= (run / "results.jsonl").stat().st_size + 1, asked
