"""The floor a run records in meta.json: from a floor.json (validated), a probe, a preset, or not measured with
why; the report carries its source or its reason; the doctor summarises it (on the real 8-GPU bundle too)."""

import json
from pathlib import Path

import pytest
import torch

from commprof.doctor.bundle import read_bundle, write_bundle
from commprof.doctor.facts import Facts
from commprof.doctor.floor import check_floor, link_ceiling_gbps
from commprof.errors import UsageError
from commprof.floor.measure import FloorProbe, PairCopy, figures, floor_table
from commprof.floor.model import floor
from commprof.floor.record import file_floor, load_floor_file, measured_floor, not_measured
from commprof.records.run_meta import RunMeta, parse_meta
from commprof.report.analysis.routing import routing_plan
from commprof.report.analysis.routing_candidates import NO_FLOOR, floor_of, missing_floor
from commprof.sweep import command as sweep_command
from commprof.sweep.planning.config import default_sweep
from commprof.sweep.planning.spec import RunOverrides
from commprof.sweep.running.console import SweepConsole
from commprof.sweep.running.run_folder import prepare_run_folder
from commprof.sweep.running.runner import SweepOptions

BUNDLE = Path(__file__).parent / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"


def floor_json(gpus: int = 4, not_measured_lines=()) -> dict:
    """What `commprof floor --json` prints, from fabricated measurements."""
    probe = FloorProbe(
        gpus=["RTX PRO 6000"] * gpus,
        pairs=[PairCopy(0, 1, 50.0, 53.0, 0.4), PairCopy(1, 0, 48.0, None, 0.5)],
        all_pairs_ingress_gbps={g: 22.0 for g in range(gpus)},
        launch_us=1.5,
        copy_bytes=1 << 24,
        not_measured=list(not_measured_lines),
        host="box",
        time="2026-11-30T00:00:00+00:00",
    )
    figs = figures(probe)
    return {"probe": probe.to_dict(), "figures": figs.to_dict(), "ranks": gpus, "floor": floor_table(figs, gpus)}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "floor file not found"),
        ("{not json", "not valid JSON"),
        ("[]", "not a floor.json"),
        (json.dumps({"figures": {"pair_write_gbps": 1}}), "figures are not usable"),
        (json.dumps({**floor_json(), "figures": {**floor_json()["figures"], "evidence": "published"}}), "published"),
        (json.dumps({**floor_json(), "probe": {}}), "which GPUs were probed"),
        (json.dumps({**floor_json(), "probe": "x"}), "which GPUs were probed"),
        (json.dumps({**floor_json(), "figures": {**floor_json()["figures"], "sync_us": "x"}}), "finite number"),
        (json.dumps({**floor_json(), "figures": {**floor_json()["figures"], "pair_write_gbps": 1e30}}), "at most"),
        (json.dumps(floor_json(gpus=4)), "measured on 4 GPUs, this run uses 8"),
    ],
)
def test_a_floor_file_is_refused_in_one_line_naming_the_problem(tmp_path, content, message):
    path = tmp_path / "floor.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message) as refused:
        load_floor_file(path, 8)
    assert "\n" not in str(refused.value)


def test_every_floor_in_meta_says_its_source_and_the_report_carries_it(tmp_path):
    data = load_floor_file(_write(tmp_path, floor_json(gpus=8)), 8)
    from_file = file_floor(data, tmp_path / "floor.json")
    assert from_file["status"] == "file" and from_file["ranks"] == 8 and from_file["table"]
    assert from_file["figures"]["source"].startswith(f"{tmp_path / 'floor.json'}: commprof floor on box at 2026-11-30")
    figs = floor_of(parse_meta({"floor": from_file}))
    assert figs.evidence == "measured" and str(tmp_path) in figs.source
    now = measured_floor(floor_json(gpus=8), 4.25)
    assert now["status"] == "measured" and "measured at the start of this run in 4.2 s" in now["figures"]["source"]
    # No figures: the report says why and how, and never falls back to invented ones.
    missing = not_measured("no GPU here")
    unmeasured = parse_meta({"floor": missing})
    assert floor_of(unmeasured) is None and missing_floor(unmeasured).startswith("floor not measured")
    assert missing_floor(RunMeta()) == NO_FLOOR
    plan = routing_plan([], 8, None, missing_floor=missing_floor(unmeasured))
    assert "no GPU here" in plan["missing_floor"] and "commprof floor --out" in plan["missing_floor"]


def test_a_gloo_run_records_that_the_floor_was_not_measured_and_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    spec = default_sweep(RunOverrides(tokens=(1,)))
    prepare_run_folder(tmp_path, "gloo", spec, SweepOptions(out=tmp_path), False, SweepConsole(False))
    entry = json.loads((tmp_path / "meta.json").read_text())["floor"]
    assert entry["status"] == "not measured" and entry.get("figures") is None
    assert "gloo" in entry["why"] and "commprof floor --out floor.json" in entry["how"]


def test_a_floor_file_is_recorded_with_its_path(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    path = _write(tmp_path, floor_json(gpus=8))
    options = SweepOptions(out=tmp_path, floor_file=path, floor=load_floor_file(path, 8))
    prepare_run_folder(tmp_path, "nccl", default_sweep(RunOverrides(tokens=(1,))), options, False, SweepConsole(False))
    entry = json.loads((tmp_path / "meta.json").read_text())["floor"]
    assert entry["status"] == "file" and entry["file"] == str(path) and str(path) in entry["figures"]["source"]


@pytest.mark.processes
@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="checks the probe's failure without two GPUs")
def test_a_probe_that_cannot_run_leaves_its_reason_in_meta(tmp_path, monkeypatch):
    """NCCL ranks on a box whose probe fails (here: no GPU at all): a fresh `commprof floor` says why."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    prepare_run_folder(
        tmp_path,
        "nccl",
        default_sweep(RunOverrides(tokens=(1,))),
        SweepOptions(out=tmp_path),
        False,
        SweepConsole(False),
    )
    entry = json.loads((tmp_path / "meta.json").read_text())["floor"]
    assert entry["status"] == "not measured" and "needs at least 2 CUDA GPUs" in entry["why"]


def test_the_sweep_refuses_a_floor_file_on_gloo_before_any_process_starts(tmp_path, capsys):
    path = _write(tmp_path, floor_json(gpus=1))
    assert sweep_command.main(["--tokens", "1", "--floor", str(path), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--floor" in err and "gloo" in err and len(err.splitlines()) == 1
    assert not any(tmp_path.glob("*/meta.json"))


def test_doctor_on_the_real_bundle_derives_the_link_ceiling_and_labels_it():
    result = check_floor(read_bundle(BUNDLE))
    assert result.status == "skipped" and "not in the bundle" in result.detail
    assert "derived from the links, not measured" in result.detail and "63.0 GB/s" in result.detail
    assert result.evidence[0].startswith("PCIe Gen5 x16: 63.0 GB/s per direction") and "derived" in result.evidence[0]
    assert link_ceiling_gbps(5, 16) == pytest.approx(63.0, abs=0.05) and link_ceiling_gbps(4, 8) < 16


def test_doctor_summarises_a_measured_floor_and_a_bundle_keeps_it(tmp_path):
    facts = read_bundle(BUNDLE)
    facts.floor = measured_floor(floor_json(gpus=8), 3.0)
    result = check_floor(facts)
    figs = floor_of(parse_meta({"floor": facts.floor}))
    assert result.status == "ok" and f"{floor(16 << 10, 8, figs).us:.1f} µs at 16 KiB" in result.detail
    assert "measured at the start" in result.evidence[0] and any("% of PCIe Gen5 x16" in e for e in result.evidence)
    write_bundle(facts, tmp_path / "bundle")
    assert read_bundle(tmp_path / "bundle").floor == facts.floor
    gaps = Facts(origin="live", floor=measured_floor(floor_json(8, ["no peer access for 2 pair(s)"]), 3.0))
    warned = check_floor(gaps)
    assert warned.status == "warn" and warned.fix


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "floor.json"
    path.write_text(json.dumps(data))
    return path


def test_the_live_doctor_says_why_it_did_not_probe():
    from commprof.doctor.live import live_floor

    assert "no GPU (no driver)" in live_floor(0, True, "no driver")["why"]
    assert live_floor(1, True, None)["why"].startswith("one GPU")
    assert "--no-gpu-tests" in live_floor(8, False, None)["why"]


@pytest.mark.parametrize(
    "figure, value, problem",
    [
        ("pair_write_gbps", float("nan"), "must be a finite number"),
        ("sync_us", -1.0, "must be >= 0"),
        ("write_latency_us", "fast", "must be a finite number"),
        ("all_pairs_gbps", 1e30, "must be at most"),
    ],
)
def test_doctor_from_a_bundle_with_a_bad_floor_is_one_line(tmp_path, capsys, figure, value, problem):
    from commprof.cli import main

    facts = read_bundle(BUNDLE)
    facts.floor = measured_floor(floor_json(gpus=8), 3.0)
    write_bundle(facts, tmp_path / "bundle")
    entry = json.loads((tmp_path / "bundle" / "floor.json").read_text())
    entry["figures"][figure] = value
    (tmp_path / "bundle" / "floor.json").write_text(json.dumps(entry))
    assert main(["doctor", "--from", str(tmp_path / "bundle")]) == 2
    err = capsys.readouterr().err.strip()
    assert "floor.json: its figures are not usable" in err and problem in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("manifest", ['"x"', "[1, 2]", '{"missing": "all"}', '{"missing": {"cmdline.log": [1]}}'])
def test_doctor_from_a_bundle_with_a_manifest_of_another_shape_still_runs(tmp_path, capsys, manifest):
    from commprof.cli import main

    write_bundle(read_bundle(BUNDLE), tmp_path / "bundle")
    (tmp_path / "bundle" / "manifest.json").write_text(manifest)
    assert main(["doctor", "--from", str(tmp_path / "bundle")]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err
