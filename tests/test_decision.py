"""One answer: every shipped scenario rendered as a user would (every preset and sweep simulated, the doctor bundle
with observations the model over- and under-predicts, a calibration from another box, measured synthetic runs
with an environment and with a tuner answer, gloo runs, runs side by side), then every output read back: the page,
the terminal, summary.json and every exported file, each sourced in a clean shell the way it is used. The claim
check (tests/claims_check.py) reads every verdict of every output against the Decision, and catches each defect
of the report's history planted back (D1-D10)."""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from commprof.cli import main
from commprof.records.files import META_FILE, RESULTS_FILE
from commprof.sweep.planning import interleave
from tests import claims_check
from tests.conftest import GLOO_RUN, TESTS, draw_no_figures
from tests.report_fixtures import measured_twin, write_run
from tests.sweeprun import one_rank
from tests.test_crossover_stage import kernel_times, search_records
from tests.test_interleaved import run_with_confirmation
from tests.test_interleaved_answers import with_confirmation
from tests.test_report_evidence import gloo_run_with

PRESETS = sorted(p.stem for p in (TESTS.parent / "sweeps" / "topologies").glob("*.toml"))
NCCL_TESTS_LOG = TESTS / "fixtures" / "nccl-tests" / "rtx4090x8_sys_noP2P_charlie0129.txt"
ASUS = TESTS / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"
# The field report's step with the axes that decide it (P2P level, a protocol) and every PCIe kernel, plus the
# crossover search: pcie8-verify.toml without its slower NCCL stages.
SWEEP = """
name = "decision"
[run]
model = "kimi-k2.5"
tokens = [1, 4, 8, 16]
phase = "verify"
dtype = "bfloat16"
interconnect = "pcie"
iterations = 20
warmup = 5
[axes]
NCCL_PROTO = ["default", "LL"]
NCCL_P2P_LEVEL = ["default", "SYS"]
[[points]]
impl = "flashinfer-pcie-ipc"
options = { tune = false }
[[points]]
impl = "b12x"
[[points]]
impl = "flashinfer-fused"
options = { use_oneshot = true }
[[points]]
impl = "nccl+rmsnorm"
[[stages]]
kind = "crossover"
name = "crossover"
impls = ["flashinfer-pcie-ipc", "b12x"]
modes = ["graph"]
step_bytes = 4096
max_rounds = 8
[report]
compute_ms = 5.0
accept_lengths = [1.3, 1.5, 2.0]
"""


def _one(folder: Path) -> Path:
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return run


def _simulate(root: Path, preset: str, calibration: Path | None = None) -> Path:
    # A calibrated simulation of a preset is a run of its own name: run ids are the second and the name, and the
    # claim check finds a run's records by its id (two runs made in one second were one id).
    name = "decision-calibrated" if calibration else "decision"
    sweep = root / f"{name}.toml"
    if not sweep.exists():
        sweep.write_text(SWEEP.replace('name = "decision"', f'name = "{name}"', 1))
    out = root / f"sim-{preset}{'-cal' if calibration else ''}"
    args = ["simulate", "--topology", preset, "--sweep", str(sweep), "--out", str(out)]
    assert main(args + (["--calibration", str(calibration)] if calibration else [])) == 0
    return _one(out)


def _twin(root: Path, simulated: Path, name: str = "measured-twin", sys_factor: float = 1.0) -> Path:
    """SYNTHETIC: a measured run of the same sweep on NCCL (the model's times x a per-setting factor; points with
    NCCL_P2P_LEVEL=SYS x `sys_factor`, as on a box whose GPU pairs are SYS), its crossover searches included."""
    run = root / name
    run.mkdir()
    records = [json.loads(line) for line in (simulated / RESULTS_FILE).read_text().splitlines() if line]
    steps = [r for r in records if r["kind"] == "step"]
    twin = measured_twin(steps, name, bias=1.0, spread=0.01)
    for record in twin:
        if record["point"]["env"].get("NCCL_P2P_LEVEL") == "SYS" and record.get("step_us"):
            record["step_us"] = {
                k: v * sys_factor if k != "n" and k != "cv" else v for k, v in record["step_us"].items()
            }
            if record.get("op_us"):
                for key in ("min", "median", "mean", "p90", "max"):
                    record["op_us"][key] = [v * sys_factor for v in record["op_us"][key]]
    for record in records:
        if record["kind"] == "crossover":
            twin.append({**record, "source": "measured", "run_id": name, "calibration": None, "model_error": None})
    (run / RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in twin))
    meta = json.loads((simulated / META_FILE).read_text())
    for key in ("simulated", "source", "calibration", "model_error"):
        meta.pop(key, None)
    meta.update(run_id=name, gpus=[{"name": "RTX PRO 6000", "compute_capability": "12.0"}] * 8)
    (run / META_FILE).write_text(json.dumps(meta))
    return run


def _gloo_crossover(root: Path) -> Path:
    """The real gloo run with a gloo crossover search appended (what a crossover stage on CPU ranks writes)."""
    run = root / "gloo-crossover"
    shutil.copytree(GLOO_RUN, run)
    meta = json.loads((run / META_FILE).read_text())
    _search, searched = search_records(
        kernel_times(8192), backend="gloo", impl="tests.plugins.one_shot:OneShotGloo", mode="eager"
    )
    with open(run / RESULTS_FILE, "a", encoding="utf-8") as handle:
        for record in searched:
            handle.write(json.dumps({**record, "run_id": meta["run_id"]}) + "\n")
    return run


SIM_DIRS: dict[str, Path] = {}  # each scenario's first run folder, filled by conftest's `scenarios`
TERMINALS: dict[str, str] = {}  # what each scenario's `report` printed, filled by conftest's `scenarios`
UNCONFIRMED = "observed step the model does not explain"
INCOMPLETE = "incomplete gloo run"
BUNDLE = "bundle simulation"
OVER = "bundle, the model over-predicts the engine's step"
CROSS_BOX = "calibration from another box"
TUNER = "measured tuner run (synthetic)"
COMPARED = "two runs compared"
CONFIRMED = "measured run, confirmed beside the baseline"
NOT_CONFIRMED = "measured run, not confirmed beside the baseline"
ANSWERS_CONFIRMED = "measured run, its route and fused kind confirmed beside their references (synthetic)"
ANSWERS_MOMENT = "measured run, its route and fused kind faster only in the first pass (synthetic)"
CALIBRATED = "calibrated simulation (SYS pairs)"  # its logits all-gathers above 1 MB: outside the calibrated sizes
TWIN = "measured on NCCL (synthetic twin)"
SYS_TWIN = "measured on a SYS-pair box (synthetic)"
# The reports of several runs, by the scenarios whose runs they set side by side: the same sweep measured on two boxes
# (the SYS pairs make P2P=SYS win on one), and a measured tuner run beside a simulation of a box of the same GPUs.
SIDE_BY_SIDE = {COMPARED: (TWIN, SYS_TWIN), "tuner run beside the bundle": (TUNER, BUNDLE)}
REPORT_OPTIONS = {
    UNCONFIRMED: ["--observed-step-ms", "25"],
    OVER: ["--observed-step-ms", "1=0.5"],
    TUNER: ["--compute-ms", "5.0"],
    "tuner run beside the bundle": ["--compute-ms", "5.0"],
}


def rendered_scenarios(root: Path) -> dict[str, dict[str, str]]:
    """Every shipped scenario, rendered in `root` (conftest's `scenarios`, once for a whole `make test`): by name,
    the report folder, the first run folder and what `report` printed; by run id, every run's folder (the claim
    check reads records from it). Paths are relative to `root` (or absolute, outside it)."""
    runs: dict[str, list[Path]] = {f"simulated {p}": [_simulate(root, p)] for p in PRESETS}
    imported = root / "imported"
    assert main(["import-nccl-tests", str(NCCL_TESTS_LOG), "--out", str(imported)]) == 0
    runs["nccl-tests import"] = [_one(imported)]
    calibration = root / "calibration.toml"
    assert main(["calibrate", str(_one(imported)), "--out", str(calibration)]) == 0
    runs[CALIBRATED] = [_simulate(root, "pcie-dual-socket-shm", calibration)]
    runs[CROSS_BOX] = [_simulate(root, "pcie-gen5-switch-p2p", calibration)]  # an 8 x RTX 4090 fit: no point uses it
    gen5 = runs["simulated pcie-gen5-switch-p2p"][0]
    runs[TWIN] = [_twin(root, gen5)]
    runs[SYS_TWIN] = [_twin(root, gen5, "measured-sys", sys_factor=0.6)]
    # The twin's route (flashinfer-pcie-ipc) and fused kind measured again beside their references, on a box whose
    # GPUs the fused kind's flags act on: as fast as in the first pass, or as slow as their references.
    twin = runs[TWIN][0]
    runs[ANSWERS_CONFIRMED] = [with_confirmation(twin, SWEEP, root / "answers-confirmed")]
    moment = frozenset({interleave.ROUTE, interleave.FUSED_KIND})
    runs[ANSWERS_MOMENT] = [with_confirmation(twin, SWEEP, root / "answers-moment", moment)]
    runs[BUNDLE] = [_simulate_bundle(root)]
    runs[OVER] = runs[BUNDLE]
    runs[TUNER] = [write_run(root / "synthetic", "tuner-run", seed=0)]  # per-size winners: nccl_tuner.conf
    runs["gloo"] = [GLOO_RUN]
    runs["gloo crossover"] = [_gloo_crossover(root)]
    for name, each in SIDE_BY_SIDE.items():
        runs[name] = [runs[one][0] for one in each]
    # The box contradicts the model (the engine's 25 ms step), and a run whose last stage never ran: no answer.
    runs[UNCONFIRMED] = runs[BUNDLE]
    # Stage 1 never ran; OMP_NUM_THREADS=2 made 3x faster, a gain beyond noise that an unfinished run may not act on.
    (root / "incomplete").mkdir()
    runs[INCOMPLETE] = [gloo_run_with(root / "incomplete", lambda r: not r["point_id"].startswith("s1-"), 3.0)]
    # The same 3x first-pass gain, measured again beside the baseline (interleaved.jsonl): there, or not there.
    for name, factor in ((CONFIRMED, 3.0), (NOT_CONFIRMED, 1.0)):
        (root / name).mkdir()
        runs[name] = [run_with_confirmation(root / name, candidate_factor=factor)]
    terminals = {}
    reports = {}
    for index, (name, dirs) in enumerate(runs.items()):
        out = root / f"report-{index}"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["report", *map(str, dirs), "--out", str(out), *REPORT_OPTIONS.get(name, [])]) == 0, name
        terminals[name] = printed.getvalue()
        reports[name] = out

    def kept(path: Path) -> str:
        return str(path.relative_to(root) if root in path.parents else path)

    return {
        "reports": {name: kept(out) for name, out in reports.items()},
        "runs": {name: kept(dirs[0]) for name, dirs in runs.items()},
        "terminals": terminals,
        "run_ids": {
            json.loads((folder / META_FILE).read_text())["run_id"]: kept(folder)
            for dirs in runs.values()
            for folder in dirs
        },
    }


def _simulate_bundle(root: Path) -> Path:
    """The real ASUS 8 x RTX PRO 6000 doctor bundle simulated with the kernels' sweep."""
    sweep = root / "decision.toml"
    if not sweep.exists():
        sweep.write_text(SWEEP)
    out = root / "sim-bundle"
    assert main(["simulate", "--from-bundle", str(ASUS), "--sweep", str(sweep), "--out", str(out)]) == 0
    return _one(out)


SINGLE = [
    *(f"simulated {p}" for p in PRESETS),
    "nccl-tests import",
    CALIBRATED,
    CROSS_BOX,
    "measured on NCCL (synthetic twin)",
    "measured on a SYS-pair box (synthetic)",
    BUNDLE,
    OVER,
    TUNER,
    "gloo",
    "gloo crossover",
    UNCONFIRMED,
    INCOMPLETE,
    CONFIRMED,
    NOT_CONFIRMED,
    ANSWERS_CONFIRMED,
    ANSWERS_MOMENT,
]
SCENARIOS = [*SINGLE, COMPARED, "tuner run beside the bundle"]


# ------------------------------------------------------------------------------------------ the claim check


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_verdict_of_every_output_is_the_decisions_claim(scenarios, name):
    assert claims_check.problems(scenarios[name], TERMINALS[name]) == []


def test_the_scenarios_hold_what_the_claim_check_reads(scenarios):
    """Not checked in vain: the confirmed run exports the point confirmed beside the baseline and the other keeps the
    baseline, both with a noise floor; the unexplained observation carries ranked explanations; the calibrated
    simulation has ops outside the calibrated sizes."""
    runs = {name: json.loads((scenarios[name] / "summary.json").read_text())["runs"][0] for name in SCENARIOS}
    confirmed, unconfirmed = runs[CONFIRMED]["nccl"], runs[NOT_CONFIRMED]["nccl"]
    assert confirmed["live"] and confirmed["confirmation"].startswith("confirmed") and not confirmed["keeps_baseline"]
    assert unconfirmed["keeps_baseline"] and unconfirmed["confirmation"].startswith("not confirmed")
    assert all(runs[n]["environment"]["evidence"]["noise_floor_pct"] for n in (CONFIRMED, NOT_CONFIRMED))
    live = {
        name: [r for r in runs[name]["routes"] if not r["kept"] and r["live"]]
        for name in (ANSWERS_CONFIRMED, ANSWERS_MOMENT)
    }
    assert [r["impl"] for r in live[ANSWERS_CONFIRMED]] == ["flashinfer-pcie-ipc"] and not live[ANSWERS_MOMENT]
    flagged = {name: [h for h in runs[name]["engines"]["hints"] if h["setting"]] for name in live}
    assert flagged[ANSWERS_CONFIRMED] and not flagged[ANSWERS_MOMENT]
    explained = runs[UNCONFIRMED]["environment"]["observed"]["explanations"]
    assert explained["explanations"] and explained["verdict"]
    assert "outside the calibrated sizes" in runs[CALIBRATED]["environment"]["evidence"]["expected_error_basis"]


def _planted(monkeypatch, tmp_path, scenario: str, plant, decide_again: bool) -> list[str]:
    """The claim check's findings on `scenario` rendered again with one defect planted back (`plant(monkeypatch)`):
    decided again from its records, or (a renderer's defect) rendered again from its summary.json alone. Its figures
    are not drawn: the claim check reads no figure (it strips every <svg>), and drawing them was half of each render."""
    plant(monkeypatch)
    draw_no_figures(monkeypatch)
    out = tmp_path / "planted"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        if decide_again:
            dirs = [SIM_DIRS[one] for one in SIDE_BY_SIDE.get(scenario, (scenario,))]
            assert main(["report", *map(str, dirs), "--out", str(out), *REPORT_OPTIONS.get(scenario, [])]) == 0
        else:
            assert (
                main(["report", "--from-summary", str(scenarios_of(scenario) / "summary.json"), "--out", str(out)]) == 0
            )
    return claims_check.problems(out, printed.getvalue())


_RENDERED: dict[str, Path] = {}


def scenarios_of(name: str) -> Path:
    return _RENDERED[name]


def _d1(monkeypatch):
    """D1: the verify step judged again, by a two-sided rule of its own, beside the environment's one-sided one."""
    from commprof.evidence import rule
    from commprof.report.analysis import claims

    derive = claims.ClaimBook.derive

    def judged_again(self, claim_id, subject, source, figures, unit):
        made = derive(self, claim_id, subject, source, figures, unit)
        twice = (made.error_pct or 0) * 1.6  # the after side's error added as well
        self.claims[claim_id] = msgspec.structs.replace(made, verdict=rule(made.gain_pct, twice))
        return self.claims[claim_id]

    monkeypatch.setattr(claims.ClaimBook, "derive", judged_again)


def _d2(monkeypatch):
    """D2: the comparison quotes the fastest point's figure, not the exported point's the files name."""
    from commprof.report.views import page

    view = page.comparison_view

    def fastest(decisions):
        out = view(decisions)
        if out:
            out["rows"][0]["verdict"] = out["rows"][0]["verdict"].replace(" % less", "1 % less", 1)
        return out

    monkeypatch.setattr(page, "comparison_view", fastest)


def _d3(monkeypatch):
    """D3: the routing plan's table says the band's own words, not the route's claim."""
    from commprof.report.views import routing

    row = routing._row
    monkeypatch.setattr(
        routing, "_row", lambda decision, route: {**row(decision, route), "verdict": "beyond model error"}
    )


def _d4(monkeypatch):
    """D4: the break-even from another statistic than the chart's (the figure lowered by the model's error)."""
    from commprof.report.analysis import decide_steps

    rows = decide_steps.projection_rows

    def lowered(run, parts, book):
        return [msgspec.structs.replace(r, break_even=r.break_even / 0.75) for r in rows(run, parts, book)]

    monkeypatch.setattr(decide_steps, "projection_rows", lowered)
    from commprof.report.analysis import decide

    monkeypatch.setattr(decide, "projection_rows", lowered)


def _d5(monkeypatch):
    """D5: an observation withdraws the files' answer but not table 1's claims."""
    from commprof.report.analysis import claims

    add = claims.ClaimBook._add

    def partly(self, claim):
        if claim.id.startswith("T = "):
            self.claims[claim.id] = claim
            return claim
        return add(self, claim)

    monkeypatch.setattr(claims.ClaimBook, "_add", partly)


def _d6(monkeypatch):
    """D6: routing.txt says a band's reason with verdict words beside another verdict."""
    from commprof.report.exports import decision_files

    words = decision_files.verdict_words
    monkeypatch.setattr(
        decision_files,
        "verdict_words",
        lambda claim, reason="": words(claim, reason).replace(": beyond error", ": inside error: within model error"),
    )


def _d7(monkeypatch):
    """D7: a run with nothing compared prints a verdict for its verify step."""
    from commprof.report.exports import decision_files

    lines = decision_files.decision_lines
    monkeypatch.setattr(
        decision_files,
        "decision_lines",
        lambda decision: [
            line.replace("nothing changes here", "0.0 % less (±0.0 %): inside error") for line in lines(decision)
        ],
    )
    from commprof.report import command

    monkeypatch.setattr(command, "decision_lines", decision_files.decision_lines, raising=False)


def _d8(monkeypatch):
    """D8: a calibration from another box applied to the points it happens to share a transport with, live."""
    from commprof.costmodel import fitted_box, simulate_command

    monkeypatch.setattr(simulate_command, "holds", lambda calibration: "")
    monkeypatch.setattr(simulate_command, "whole", lambda records, name, link: "")
    monkeypatch.setattr(fitted_box, "holds", lambda calibration: "")


def _d9(monkeypatch):
    """D9: a calibration of the older layout read as if it stated neither its error nor its box."""
    from commprof.costmodel import simulate_command

    monkeypatch.setattr(simulate_command, "older_layout", lambda fit: fit)


def _d10(monkeypatch):
    """D10: the comparison renders each run's environment point, not what its answer (a tuner's per-T winners)
    runs at each T."""
    from commprof.report.views import page

    view = page.comparison_view

    def environment_point(decisions):
        out = view(decisions)
        if out:
            for row in out["rows"]:
                row["settings"] = row["settings"].replace("p002:", "p001:").replace("p003:", "p001:")
        return out

    monkeypatch.setattr(page, "comparison_view", environment_point)


# Each defect, the scenario it showed in, and whether it lives in the analysis (decided again from the records) or
# in a renderer (rendered again from summary.json alone).
PLANTED = {
    "D1": (BUNDLE, _d1, True),
    "D2": ("tuner run beside the bundle", _d2, False),
    "D3": (BUNDLE, _d3, False),
    "D4": (BUNDLE, _d4, True),
    "D5": (UNCONFIRMED, _d5, True),
    "D6": (BUNDLE, _d6, False),
    "D7": ("gloo", _d7, False),
    "D10": ("tuner run beside the bundle", _d10, False),
}


def _caught_when_planted_back(scenarios, monkeypatch, tmp_path, defect: str, planted: tuple) -> None:
    """The scenario passes the claim check as rendered, and fails it with the defect planted back."""
    scenario, plant, decide_again = planted
    _RENDERED.update(scenarios)
    assert claims_check.problems(scenarios[scenario], TERMINALS[scenario]) == []  # clean without it
    assert _planted(monkeypatch, tmp_path, scenario, plant, decide_again), f"{defect} planted back went unnoticed"


@pytest.mark.parametrize("defect", sorted(PLANTED))
def test_the_claim_check_catches_each_defect_planted_back(scenarios, monkeypatch, tmp_path, defect):
    _caught_when_planted_back(scenarios, monkeypatch, tmp_path, defect, PLANTED[defect])


def _fused_plain_all_reduce_routed(monkeypatch):
    """A fused kind's plain (embedding) all-reduce counted as an all-reduce candidate: a band of plain all-reduces
    routed to FlashInfer's fusion kernel, which no engine setting can route there."""
    from commprof.report.analysis import routing_candidates

    times = routing_candidates.op_times_per_size

    def with_the_embedding(record, fused, baseline, reference):
        found = times(record, fused, baseline, reference)
        ops = record["op_us"]
        if fused:
            for site, nbytes, median, p90 in zip(ops["sites"], ops["bytes"], ops["median"], ops["p90"]):
                if site == "embed":
                    found.setdefault(("all_reduce", int(nbytes)), []).append((float(median), float(p90)))
        return found

    monkeypatch.setattr(routing_candidates, "op_times_per_size", with_the_embedding)


def _fused_kind_faster_still(monkeypatch):
    """The verify card reads the fused kinds' bands as (b)'s: "another implementation is faster still" beside (b)'s
    "no other all-reduce implementation ran"."""
    from commprof.report.views import verify_answers

    monkeypatch.setattr(
        verify_answers,
        "routed_bands",
        lambda decision: [r for r in decision.routes if r.mode == decision.run.mode and not r.kept and r.tokens],
    )


def _nothing_else_ran(monkeypatch):
    """(b) says no other implementation ran where the routes give sizes to one."""
    from commprof.report.views import answers

    alternative = answers.alternative_answer

    def nothing(decision):
        return {**alternative(decision), "lines": [claims_check.NOTHING_RAN + "."], "rows": []}

    monkeypatch.setattr(answers, "alternative_answer", nothing)


def _model_name_case(monkeypatch):
    """Two runs of one step told apart by their model's name as written ("Kimi-K2.5", "kimi-k2.5")."""
    from commprof.report.analysis import compared

    monkeypatch.setattr(compared, "same_step", lambda a, b: a == b)


def _simulation_applied_side_by_side(monkeypatch):
    """A simulated run's row shows its NCCL point as the answer applied at each T, not its plan's proposal."""
    from commprof.report.views import page

    rows = page._compared_rows
    monkeypatch.setattr(page, "_compared_rows", lambda name, d: rows(name, msgspec.structs.replace(d, plan=None)))


def _qualified_heading(monkeypatch):
    """The verify card's heading with its qualifications in it: the per-all-reduce routing, sixty words."""
    from commprof.report.views import verify_answers

    verdict = verify_answers._faster_verdict

    def long(decision):
        heading, below, noise = verdict(decision)
        return f"{heading}. {below}" if below else heading, "", noise

    monkeypatch.setattr(verify_answers, "_faster_verdict", long)


def _switch_unsaid(monkeypatch):
    """The headline judged on (a) alone: "keep the defaults" where the steps run a routed implementation live."""
    from commprof.report.analysis import decide_plan

    monkeypatch.setattr(decide_plan, "_switched", lambda run, steps: [])


# What ran and what is routed, the runs side by side, the headings: each defect, its scenario, and whether it lives
# in the analysis (decided again from the records) or in a renderer (rendered again from summary.json alone).
PLANTED_VIEWS = {
    "a fused kind's plain all-reduce routed": (TUNER, _fused_plain_all_reduce_routed, True),
    "a fused kind faster still in the verify card": (TUNER, _fused_kind_faster_still, False),
    "(b) says nothing else ran": (BUNDLE, _nothing_else_ran, False),
    "one step told apart by its model's name": ("tuner run beside the bundle", _model_name_case, True),
    "a simulation's row applied side by side": ("tuner run beside the bundle", _simulation_applied_side_by_side, False),
    "a heading of sixty words": (CROSS_BOX, _qualified_heading, False),
    "the headline keeps the defaults the steps leave": (TWIN, _switch_unsaid, True),
}


@pytest.mark.parametrize("defect", sorted(PLANTED_VIEWS))
def test_the_claim_check_catches_what_a_view_says_otherwise_planted_back(scenarios, monkeypatch, tmp_path, defect):
    _caught_when_planted_back(scenarios, monkeypatch, tmp_path, defect, PLANTED_VIEWS[defect])


def _confirmation_ignored(monkeypatch):
    """The answer chosen on the first pass's numbers though the run measured its points again beside the baseline."""
    from commprof.report.analysis import decide_nccl

    monkeypatch.setattr(decide_nccl, "confirmed_choice", lambda first, *_: first)


def _floor_not_a_term(monkeypatch):
    """The noise floor said in the rule but left out of the error terms the rule judges (drift alone)."""
    from commprof.evidence import DRIFT_SOURCE, ErrorTerm, Evidence

    monkeypatch.setattr(
        Evidence,
        "margin_term",
        lambda self: ErrorTerm("drift", self.drift_pct, DRIFT_SOURCE) if self.drift_pct is not None else None,
    )


def _explanation_reworded(monkeypatch):
    """The terminal words an explanation's verdict its own way (as the page's card once called explain's words)."""
    from commprof.report.exports import decision_files

    lines = decision_files.observed_lines
    monkeypatch.setattr(
        decision_files,
        "observed_lines",
        lambda decision: [line.replace(": explains: ", ": fits: ") for line in lines(decision)],
    )


def _range_forgotten(monkeypatch):
    """The run's expected error read without the ops priced outside the calibrated sizes (the calibration's own)."""
    from commprof.evidence import ModelError

    from_meta = ModelError.from_meta

    def inside_only(meta):
        error = from_meta(meta)
        return ModelError(error.pct and error.pct / 2, error.basis.split("; ")[0], error.boxes)

    monkeypatch.setattr(ModelError, "from_meta", staticmethod(inside_only))


def _route_confirmation_ignored(monkeypatch):
    """The routes judged on the first pass's per-op numbers though the run measured their winner again."""
    from dataclasses import replace

    from commprof.report.analysis import decide_routing

    route = decide_routing._route
    monkeypatch.setattr(decide_routing, "_route", lambda band, judging: route(band, replace(judging, confirming=None)))


def _fused_confirmation_ignored(monkeypatch):
    """The fused kinds judged on the first pass's numbers though the run measured them again beside their reference."""
    from commprof.report.analysis import decide_answers

    monkeypatch.setattr(
        decide_answers, "_confirmed", lambda run, book, point, t, figures, subject: (figures, subject, "")
    )


# What main's branches brought into the Decision, each planted back out (decided again from the records).
PLANTED_DATA = {
    "confirmation ignored": (NOT_CONFIRMED, _confirmation_ignored),
    "route confirmation ignored": (ANSWERS_MOMENT, _route_confirmation_ignored),
    "fused confirmation ignored": (ANSWERS_MOMENT, _fused_confirmation_ignored),
    "noise floor not an error term": (CONFIRMED, _floor_not_a_term),
    "explanation reworded in the terminal": (UNCONFIRMED, _explanation_reworded),
    "calibrated range forgotten": (CALIBRATED, _range_forgotten),
}


@pytest.mark.parametrize("defect", sorted(PLANTED_DATA))
def test_the_claim_check_catches_the_merged_data_planted_out(scenarios, monkeypatch, tmp_path, defect):
    scenario, plant = PLANTED_DATA[defect]
    _RENDERED.update(scenarios)
    assert _planted(monkeypatch, tmp_path, scenario, plant, True), f"{defect} went unnoticed"


@pytest.mark.parametrize("defect", ["D8", "D9"])
def test_the_claim_check_catches_a_calibration_applied_in_part_or_read_without_its_box(
    scenarios, monkeypatch, tmp_path, defect
):
    """D8: the 8 x RTX 4090 calibration on the RTX PRO 6000 bundle (SHM pairs) priced some points; D9: an older
    calibration file's stated error and box lost. Each planted back, the simulation's report fails the check."""
    sweep = scenarios[BUNDLE].parent / "decision.toml"  # the scenarios' sweep and their calibration of the log
    calibration = tmp_path / "calibration.toml"
    shutil.copy(scenarios[BUNDLE].parent / "calibration.toml", calibration)
    if defect == "D9":
        text = calibration.read_text()
        fit = [
            line
            for line in text[text.index("[fit]") :].splitlines()[1:]
            if line.startswith(("topology", "link", "samples"))
        ]
        calibration.write_text(
            text[: text.index("[fit]")] + "[fit]\n" + "\n".join(fit) + "\nholdout_median_pct = 17.4\n"
        )
    where = ["--from-bundle", str(ASUS)] if defect == "D8" else ["--topology", "pcie-dual-socket-shm"]

    def render(out: Path) -> list[str]:
        runs = out / "runs"
        assert (
            main(["simulate", *where, "--sweep", str(sweep), "--calibration", str(calibration), "--out", str(runs)])
            == 0
        )
        run = _one(runs)
        claims_check.RUN_DIRS[json.loads((run / META_FILE).read_text())["run_id"]] = run
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["report", str(run), "--out", str(out / "report")]) == 0
        found = claims_check.problems(out / "report", printed.getvalue())
        said = json.dumps(json.loads((out / "report" / "summary.json").read_text())["runs"][0]["environment"])
        return found + [f"summary.json says: {w}" for w in ("states no error", "fitted on unknown") if w in said]

    (_d8 if defect == "D8" else _d9)(monkeypatch)  # clean: the scenario "calibration from another box"
    assert render(tmp_path / "planted"), f"{defect} planted back went unnoticed"


# ------------------------------------------------------------------------ summary.json renders every output


@pytest.mark.parametrize("name", [BUNDLE, TUNER, COMPARED])
def test_every_output_renders_again_from_summary_json_alone(scenarios, tmp_path, name):
    """`report --from-summary`: recommend.env, nccl_tuner.conf, engine_flags.txt, routing.txt, confirm.toml and
    summary.json byte for byte, index.html apart from the figures' SVG bytes (matplotlib's ids and paths)."""
    report = scenarios[name]
    again = tmp_path / "again"
    assert main(["report", "--from-summary", str(report / "summary.json"), "--out", str(again)]) == 0
    compared = [p.relative_to(report) for p in report.rglob("*") if p.is_file() and p.name != "results.csv"]
    compared = [p for p in compared if p.parts[-2:-1] != ("nccl-tests",)]
    for path in compared:
        if path.name == "index.html":
            assert _without_figures(again / path) == _without_figures(report / path), path
        else:
            assert (again / path).read_bytes() == (report / path).read_bytes(), path
    assert {p for p in compared} == {p.relative_to(again) for p in again.rglob("*") if p.is_file()}


def _without_figures(page: Path) -> str:
    return re.sub(r"(?s)<svg\b.*?</svg>", "<svg/>", page.read_text())


def test_a_summary_of_another_layout_is_refused_in_one_line(tmp_path, capsys):
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps({"runs": [{"run_id": "x"}], "costmodel_checks": []}))
    assert main(["report", "--from-summary", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a summary.json of this commprof" in err
    assert main(["report", "--from-summary", str(bad)]) == 2 and "needs --out" in capsys.readouterr().err


def test_every_decision_survives_its_own_file(scenarios):
    """summary.json read back is the same Decision: encoded again, the same bytes."""
    from commprof.report.decision.codec import decode, encode

    for name in SCENARIOS:
        data = (scenarios[name] / "summary.json").read_bytes()
        assert encode(decode(data)) == data, name


# ---------------------------------------------------------------------- the files, sourced as they are used


def sourced(path: Path, shell: str = "bash") -> dict[str, str]:
    """The variables a child process sees after `source FILE` in a clean shell (env -i), beyond a clean shell's.
    The child is `env -0`, which prints the environment it was given, each variable ended by a NUL."""
    script = 'source "$1" >/dev/null || exit 3; exec env -0'
    clean = "exec env -0"

    def run(body: str) -> dict[str, str]:
        done = subprocess.run(
            ["env", "-i", shell, "-c", body, "_", str(path)],
            capture_output=True,
            text=True,
            cwd=path.parent,
            timeout=30,
        )
        assert done.returncode == 0, (path.name, done.stderr)
        return dict(line.split("=", 1) for line in done.stdout.split("\0") if line)

    base = run(clean)
    return {k: v for k, v in run(script).items() if base.get(k) != v and k != "_"}


def answer_env(decision: dict, folder: Path) -> dict[str, str]:
    """What sourcing the answer sets, from summary.json's Decision alone: its NCCL file where a measurement stands
    behind it (and NCCL is what the engines run) and its live engine switches."""
    nccl = decision["nccl"]
    env: dict[str, str] = {}
    if decision["run"]["backend"] == "nccl" and nccl["live"] and nccl["file"] == "recommend.env":
        env.update(nccl["env"])
    elif decision["run"]["backend"] == "nccl" and nccl["live"] and nccl["file"] == "nccl_tuner.conf":
        env["NCCL_TUNER_CONFIG_FILE"] = str(folder.resolve() / "nccl_tuner.conf")
    return env | {k: v for s in decision["engines"]["settings"] if s["live"] for k, v in s["variables"]}


def live_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def page_answers(page: Path) -> list[dict]:
    return [json.loads(html.unescape(k)) for k in re.findall(r'data-answer="([^"]*)"', page.read_text())]


def run_folders(report: Path, summary: dict) -> list[tuple[dict, Path]]:
    return [(run, report if run["folder"] == "." else report / run["folder"]) for run in summary["runs"]]


@pytest.mark.processes
@pytest.mark.parametrize("name", SCENARIOS)
def test_the_page_summary_and_every_file_give_the_one_answer(scenarios, name):
    report = scenarios[name]
    summary = json.loads((report / "summary.json").read_text())
    answers = page_answers(report / "index.html")
    for run, folder in run_folders(report, summary):
        nccl = run["nccl"]
        live = nccl["live"] and nccl["file"]
        assert sourced(folder / "recommend.env") == (nccl["env"] if live == "recommend.env" else {})
        assert live_lines(folder / "nccl_tuner.conf") == (nccl["tuner"]["rules"] if live == "nccl_tuner.conf" else [])
        # routing.txt sets exactly the answer's NCCL file and live engine variables; engine_flags.txt sets the same.
        answer = answer_env(run, folder)
        assert sourced(folder / "routing.txt") == answer
        flags = sourced(folder / "engine_flags.txt")
        assert {k: flags.get(k) for k in answer} == answer
        engine_env = {k: v for s in run["engines"]["settings"] if s["live"] for k, v in s["variables"]}
        for variable in set(flags) - set(engine_env) - set(nccl["env"]) - set(answer):
            assert not variable.startswith(("SGLANG_", "NCCL_")) and "PCIE" not in variable, (name, variable)
        # Every route is judged against the NCCL environment (a) proposes or sets.
        env = nccl["env"] if nccl["file"] == "recommend.env" else {}
        assert all(route["nccl_env"] == env for route in run["routes"]), name
        # The page's answer table says what summary.json says, per T, mode and collective.
        keys = ("tokens", "mode", "collective", "impl", "options", "nccl_env", "band")
        mine = [
            {"tokens": t, "mode": r["mode"], "collective": r["collective"], "impl": r["impl"], "options": r["options"],
             "nccl_env": r["nccl_env"], "band": [r["min_bytes"], r["max_bytes"]]}
            for r in run["routes"] for t in r["tokens"]
        ]  # fmt: skip
        assert all({k: row[k] for k in keys} in answers for row in mine), name
        assert run["run"]["tp"] is None or isinstance(run["run"]["tp"], int)


SIMULATED = [f"simulated {p}" for p in PRESETS] + [CALIBRATED, CROSS_BOX, BUNDLE]


@pytest.mark.processes
@pytest.mark.parametrize("name", [BUNDLE, "simulated pcie-gen5-switch-p2p", "simulated nvlink-h100", CROSS_BOX])
def test_a_simulation_sources_to_no_tuning_variable_in_bash_or_zsh(scenarios, name):
    """A simulation proposes, a measurement disposes: no file of it sets anything in a clean bash or zsh (every
    simulated scenario's files hold no live line at all: the claim check reads them)."""
    report = scenarios[name]
    for shell in ("bash", "zsh") if shutil.which("zsh") else ("bash",):
        for file in ("recommend.env", "routing.txt", "engine_flags.txt"):
            assert sourced(report / file, shell) == {}, (shell, file)


@pytest.mark.parametrize("name", SIMULATED)
def test_a_simulations_answer_is_a_plan_whose_points_the_sweep_accepts(scenarios, name):
    """confirm.toml: the baseline and the ranked candidates, read by the sweep's own parser (what --dry-run lists),
    each candidate's settings the Decision's."""
    from commprof.sweep.planning.config import load_sweep

    report = scenarios[name]
    plan = json.loads((report / "summary.json").read_text())["runs"][0]["plan"]
    spec = load_sweep(report / "confirm.toml")
    assert spec.points[0].label == "defaults" and not spec.points[0].env  # p000, NCCL's defaults
    listed = [(p.impl, p.env, p.options) for p in spec.points[1:]]
    assert listed == [(c["impl"], c["env"], c["options"]) for c in plan["candidates"]]
    assert all(
        c["low_pct"] is None or c["low_pct"] <= c["gain_pct"] <= c["high_pct"] <= 100 for c in plan["candidates"]
    )
    assert [c["gain_pct"] for c in plan["candidates"]] == sorted(
        (c["gain_pct"] for c in plan["candidates"]), reverse=True
    )
    assert plan["command"].endswith("-m commprof.allreduce_sweep --sweep confirm.toml")


def test_confirm_toml_sets_only_the_variables_a_sweep_may_set(scenarios):
    """confirm.toml's env tables hold the allow-list's variables alone (commprof.env_names, the one the sweep's
    parser applies): one the Decision names beyond it is a comment saying why, and the file still parses."""
    from commprof.report.decision.codec import decode
    from commprof.report.exports.confirm import confirm_text
    from commprof.sweep.planning.config import parse_sweep

    (decision,) = decode((scenarios[BUNDLE] / "summary.json").read_bytes()).runs
    first = decision.plan.candidates[0]
    planted = msgspec.structs.replace(first, env={**first.env, "LD_PRELOAD": "/tmp/x.so"})
    plan = msgspec.structs.replace(decision.plan, candidates=[planted, *decision.plan.candidates[1:]])
    text = confirm_text(msgspec.structs.replace(decision, plan=plan))
    assert "# skipped 'LD_PRELOAD': LD_PRELOAD is not a tuning variable" in text and "/tmp/x.so" not in text
    assert [p.env for p in parse_sweep(text).points[1:]] == [c.env for c in decision.plan.candidates]


@pytest.mark.processes  # the dry run's probe forks from the sweep's fork server
def test_the_sweeps_dry_run_lists_a_confirm_toml(scenarios, monkeypatch, capsys):
    """`python -m commprof.allreduce_sweep --sweep confirm.toml --dry-run` (the plan's command) in the report's
    folder, run here as one rank: it lists the plan's candidates after the baseline."""
    from commprof.sweep import command

    report = scenarios[BUNDLE]
    plan = json.loads((report / "summary.json").read_text())["runs"][0]["plan"]
    one_rank(monkeypatch)
    monkeypatch.chdir(report)
    status = command.main(["--sweep", "confirm.toml", "--dry-run"])
    out, err = capsys.readouterr()
    assert status == 0, err
    listed = re.findall(r"^[ x] (p\d{3})  (.+?)  ", out, re.M)
    assert [label.strip() for _, label in listed[1:]] == [c["label"] for c in plan["candidates"]]


# -------------------------------------------------------------------------------------- what the cards say


def page_text(page: Path) -> str:
    return claims_check.page_text(page.read_text())


@pytest.mark.parametrize("name", SINGLE)
def test_every_card_gives_the_answer_or_says_why_there_is_none(scenarios, name):
    """A run that may not answer says why and what would decide it, with no before/after; nothing predicted is
    called measured; every engine switch is in section 8, set or commented out; a gloo run's engine section says it
    measured gloo, not NCCL."""
    report = scenarios[name]
    (run,) = json.loads((report / "summary.json").read_text())["runs"]
    text = page_text(report / "index.html")
    if run["unconfirmed"] or run["nccl"]["withheld"]:
        faster = text.split("How much faster is my verify step?", 1)[1].split("What do I set?", 1)[0]
        assert "no answer" in faster.lower() and "What decides it" in faster and "→" not in faster, faster
    if run["run"]["simulated"]:
        assert "largest size measured" not in text and "What to measure" in text
        for table in (report / "nccl-tests").glob("*.txt"):
            assert "timed" not in table.read_text().split("\n# Compare", 1)[0].replace("nothing was timed", "")
    engines = text.split("8 · How to apply it", 1)[-1].split("SGLang and vLLM", 1)[-1]
    for setting in run["engines"]["settings"]:
        switch = " ".join(f"{k}={v}" for k, v in setting["variables"])
        status = "set" if setting["live"] else "commented out"
        assert f"{setting['engine']} {switch} {status}" in engines, (setting, engines[:400])
    if run["environment"]["evidence"]["backend"] == "gloo":
        for entry in run["engines"]["paths"]:
            assert "This run measured gloo" in entry["basis"] and "NCCL never ran" in entry["basis"], entry


@pytest.mark.processes
def test_on_sm120_the_sglang_switch_is_live_only_with_its_cap_and_fusion_never(scenarios):
    report = scenarios["measured on NCCL (synthetic twin)"]
    decision = json.loads((report / "summary.json").read_text())["runs"][0]
    (sglang,) = [s for s in decision["engines"]["settings"] if s["engine"] == "SGLang"]
    variables = dict(sglang["variables"])
    routed = next(r for r in decision["routes"] if r["impl"] == sglang["impl"] and r["mode"] == "graph")
    assert sglang["live"] and variables == {
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1",
        "SGLANG_PCIE_IPC_MAX_NUMEL": str(max(routed["tokens"]) * 7168),
    }
    env = sourced(report / "engine_flags.txt")
    assert env["SGLANG_PCIE_IPC_MAX_NUMEL"] == variables["SGLANG_PCIE_IPC_MAX_NUMEL"]
    assert sourced(report / "routing.txt") == answer_env(decision, report)
    (vllm,) = [s for s in decision["engines"]["settings"] if s["engine"] == "vLLM"]
    assert not vllm["live"] and "no size cap" in vllm["why"]
    args = subprocess.run(
        ["env", "-i", "bash", "-c", 'source "$1" >/dev/null; printf "%s\\n" "${COMMPROF_SGLANG_ARGS[@]}"', "_",
         str(report / "engine_flags.txt")],
        capture_output=True, text=True, timeout=30,
    ).stdout  # fmt: skip
    assert "--flashinfer-allreduce-fusion-backend" not in args


def test_a_simulation_leaves_every_engine_switch_off_and_says_why(scenarios):
    decision = json.loads((scenarios["simulated pcie-gen5-switch-p2p"] / "summary.json").read_text())["runs"][0]
    settings = decision["engines"]["settings"]
    assert settings and not any(s["live"] for s in settings)
    assert all("not tested" in s["why"] or "no size cap" in s["why"] for s in settings)


def test_a_crossover_run_has_integral_tp_and_tokens_and_compares_with_a_plain_run(scenarios):
    from commprof.report.analysis.compared import same_step, step_shape
    from commprof.report.analysis.run_analysis import analyze_run
    from commprof.report.command import load_run
    from commprof.report.flags import report_options, sweep_options

    (run,) = json.loads((scenarios["gloo crossover"] / "summary.json").read_text())["runs"]
    assert run["run"]["tp"] == 2 and all(isinstance(t, int) for t in run["run"]["tokens"])
    shapes = []
    for folder in (GLOO_RUN, SIM_DIRS["gloo crossover"]):
        run_id, records, meta, _ = load_run(folder)
        (analysed,) = analyze_run(run_id, records, meta, report_options({}, sweep_options(meta)), str(folder))
        shapes.append(step_shape(analysed))
    assert same_step(*shapes)


def test_the_engine_section_lists_each_op_groups_path_today_and_with_the_answer(scenarios):
    report = scenarios["simulated pcie-gen5-switch-p2p"]
    decision = json.loads((report / "summary.json").read_text())["runs"][0]
    by_engine = {e["engine"]: e for e in decision["engines"]["paths"]}
    assert set(by_engine) == {"SGLang 0.5.23", "vLLM 0.33"}
    for entry in by_engine.values():
        assert [r["tokens"] for r in entry["rows"]] == [1, 4, 8, 16]
        assert all(r["today"] == "NCCL" and r["with_answer_source"] for r in entry["rows"])
        assert not entry["live"]  # a simulation: the switches are shown as they would act, and left off
    sglang = [r["with_answer"] for r in by_engine["SGLang 0.5.23"]["rows"]]
    assert sglang == ["FlashInfer PCIe IPC", "NCCL", "NCCL", "NCCL"]  # its cap keeps T >= 4 on NCCL
    vllm = [r["with_answer"] for r in by_engine["vLLM 0.33"]["rows"]]
    assert vllm == ["FlashInfer PCIe IPC"] * 4  # no cap: why its switch is left off
    assert any("flashinfer-allreduce-fusion-backend" in f for f in by_engine["SGLang 0.5.23"]["fails_here"])
    page = (report / "index.html").read_text()
    assert "What your engine runs, op by op" in page and "pcie_ipc_ar.py: should_pcie_ipc_ar" in page


@pytest.mark.parametrize("name", ["simulated pcie-gen5-switch-p2p", "measured on a SYS-pair box (synthetic)", "gloo"])
def test_the_sweeps_closing_lines_are_the_reports(scenarios, name):
    """The lines the sweep and `simulate` end with are `report`'s, rendered from the same Decision."""
    from commprof.report.command import answer_lines

    lines = answer_lines(SIM_DIRS[name])
    assert lines and "\n".join(lines) in TERMINALS[name]


def test_a_tuner_answer_carries_its_per_t_winners_everywhere(scenarios):
    """nccl_tuner.conf is the answer: the steps, the terminal, the tuner file and the comparison run each T's
    winner, never recommend.env's one point."""
    report = scenarios[TUNER]
    (run,) = json.loads((report / "summary.json").read_text())["runs"]
    assert run["nccl"]["file"] == "nccl_tuner.conf" and run["nccl"]["live"]
    winners = {at["tokens"]: at["point_id"] for at in run["nccl"]["per_t"]}
    assert len(set(winners.values())) > 1  # per size: another point at another T
    assert {s["tokens"]: s["point_id"] for s in run["steps"]} == {t: p for t, p in winners.items() if t > 1}
    assert all(s["applied"] for s in run["steps"]) and "verify step" in run["headline"]["text"]
    conf = (report / "nccl_tuner.conf").read_text()
    for at in run["nccl"]["per_t"]:
        assert f"#   T = {at['tokens']}: {at['settings']}: step time " in conf
    beside = scenarios["tuner run beside the bundle"]
    section = (beside / "index.html").read_text().split('<section id="compare">', 1)[1]
    assert all(f"<code>{html.escape(at['settings'])}</code>" in section for at in run["nccl"]["per_t"])


def test_a_gloo_run_names_its_baseline_gloo_everywhere(scenarios):
    """On CPU ranks NCCL never ran: routing.txt and the page name the baseline gloo."""
    routing = (scenarios["gloo"] / "routing.txt").read_text()
    assert "NCCL keeps every size" not in routing and "gloo keeps every size" in routing
    page = (scenarios["gloo"] / "index.html").read_text()
    assert "Keep gloo&#39;s defaults" in page


def test_trace_answer_reads_the_decisions_routes(scenarios):
    """`commprof trace --answer` reads summary.json as data: an engine that ran NCCL where the bundle's answer routes
    a band to another implementation is a mismatch; a size no route covers is said so."""
    from commprof.trace.answer import answer_run, check_answer
    from commprof.trace.kernels import runs_as

    path = scenarios[BUNDLE] / "summary.json"
    run = answer_run(json.loads(path.read_text()), str(path))
    moved = next(r for r in run["routes"] if not r["kept"] and r["collective"] == "all_reduce")
    group = {"kind": "all_reduce", "bytes": moved["min_bytes"], "count": 3, "implementations": {"nccl": 3}}
    (check,) = check_answer([{**group, "kernels": ["nccl"]}], run, world_size=run["run"]["tp"])
    assert (check["status"], check["expected"]) == ("MISMATCH", runs_as().get(moved["impl"], moved["impl"]))
    (check,) = check_answer([{**group, "bytes": 1 << 40, "kernels": ["nccl"]}], run)
    assert check["status"] == "not covered", check["sentence"]
