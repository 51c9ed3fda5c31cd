"""The interleaved confirmation of the answers beyond (a): a route winner measured again beside the baseline at the
T where it wins, a fused kind beside its unfused reference, and the Decision that lets either go live only where
its measurement beside its reference beats it beyond the noise floor (in process, on the decision scenarios'
SYNTHETIC measured twins, tests/test_decision.py; the sweep that measures them on gloo:
tests/test_interleaved_processes.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from commprof.records.files import INTERLEAVED_FILE, META_FILE, RESULTS_FILE, read_run_files
from commprof.report.decision.types import Decision
from commprof.sweep.planning import interleave
from commprof.sweep.planning.config import parse_sweep

# The reference's (and the baseline's) measurements in the confirmation: A, A, then one after each candidate.
JITTER = (1.0, 1.02, 0.99, 1.01)


def with_confirmation(run: Path, sweep: str, out: Path, moment: frozenset[str] = frozenset()) -> Path:
    """A copy of `run` (a measured run of `sweep`) on a box whose GPUs the fused kinds' engine flags act on (SM 9.0)
    with the interleaved confirmation its sweep would measure: the candidates and sequence as
    sweep/planning/interleave.py plans them from its records, each measurement its first-pass records at the
    measurement's T, tagged as the sweep tags them; each reference's measurements jittered (JITTER: a noise floor
    of 3 %). A candidate whose answer is in `moment` was faster only in the first pass (its reference caught in a
    burst there): measured again, its times are its reference's."""
    shutil.copytree(run, out)
    meta = json.loads((out / META_FILE).read_text())
    meta["gpus"] = [{"name": "H100", "compute_capability": "9.0"}] * len(meta.get("gpus") or [None])
    (out / META_FILE).write_text(json.dumps(meta))
    records = [json.loads(line) for line in (run / RESULTS_FILE).read_text().splitlines() if line]
    by_point = {(r.get("point_id"), r.get("tokens"), r.get("mode")): r for r in records if r.get("kind") == "step"}
    found = interleave.candidates(parse_sweep(sweep), records)
    answers = {c.point.point_id: c.answer for c in found}
    seen: dict[str, int] = {}
    lines = []
    for number, measurement in enumerate(interleave.sequence(found), 1):
        point_id, against = measurement.point.point_id, measurement.against
        factor = 1.0
        if point_id == against:
            factor = JITTER[seen.get(point_id, 0) % len(JITTER)]
            seen[point_id] = seen.get(point_id, 0) + 1
        for record in records:
            if record.get("point_id") != point_id or record.get("tokens") not in measurement.tokens:
                continue
            again = json.loads(json.dumps(record))
            again["point"].update(measurement.tag(number))
            theirs = by_point.get((against, record.get("tokens"), record.get("mode")))
            if answers.get(point_id) in moment and theirs is not None and theirs.get("step_us"):
                again["step_us"], again["op_us"] = theirs["step_us"], theirs.get("op_us")
            _scale(again, factor)
            lines.append(json.dumps(again))
    (out / INTERLEAVED_FILE).write_text("".join(line + "\n" for line in lines))
    return out


def _scale(record: dict, factor: float) -> None:
    if record.get("step_us"):
        record["step_us"] = {k: v * factor if k not in ("n", "cv") else v for k, v in record["step_us"].items()}
    if record.get("op_us"):
        record["op_us"] = {
            k: [v * factor if v is not None else None for v in values]
            if k not in ("sites", "collectives", "draft", "bytes", "cv")
            else values
            for k, values in record["op_us"].items()
        }


TWIN = "measured on NCCL (synthetic twin)"
SYS_TWIN = "measured on a SYS-pair box (synthetic)"


def _decided(run_dir: Path) -> tuple[Decision, dict[str, str]]:
    """A run folder's Decision, as `report` decides it, and its exported files' texts (no page drawn)."""
    from commprof.report.analysis.decide import decide
    from commprof.report.analysis.run_analysis import RunExtras, analyze_run
    from commprof.report.command import load_run
    from commprof.report.flags import report_options, sweep_options
    from commprof.report.write import run_texts

    run_id, records, meta, _ = load_run(run_dir)
    extras = RunExtras(*read_run_files(run_dir))
    (run,) = analyze_run(run_id, records, meta, report_options({}, sweep_options(meta)), str(run_dir), extras)
    decision = decide(run)
    return decision, run_texts(decision)


def _live(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("export ", "source ", "COMMPROF_"))]


def _faster(claim) -> bool:
    return claim is not None and claim.verdict == "beyond error" and claim.gain_pct > 0


def _graph_bands(decision: Decision) -> list:
    return [r for r in decision.routes if r.collective == "all_reduce" and r.mode == "graph"]


def test_the_sweep_plans_each_answer_beside_its_reference_within_the_bound(scenarios):
    from tests.test_decision import SIM_DIRS, SWEEP

    spec = parse_sweep(SWEEP)
    records = [json.loads(line) for line in (SIM_DIRS[TWIN] / RESULTS_FILE).read_text().splitlines() if line]
    found = interleave.candidates(spec, records)
    ids = {p.impl: p.point_id for p in spec.points if not p.env}
    assert [(c.answer, c.point.impl, c.against.point_id) for c in found] == [
        (interleave.ROUTE, "flashinfer-pcie-ipc", ids["default"]),
        (interleave.FUSED_KIND, "flashinfer-fused", ids["nccl+rmsnorm"]),
    ]
    order = interleave.sequence(found)
    # the baseline's A/A control, the route between two of its measurements; the same beside the reference, at the
    # T where the fused kind won
    assert [(m.point.impl, m.against) for m in order] == [
        *[("default", ids["default"])] * 2,
        ("flashinfer-pcie-ipc", ids["default"]),
        ("default", ids["default"]),
        *[("nccl+rmsnorm", ids["nccl+rmsnorm"])] * 2,
        ("flashinfer-fused", ids["nccl+rmsnorm"]),
        ("nccl+rmsnorm", ids["nccl+rmsnorm"]),
    ]
    assert order[6].tokens == found[1].tokens and set(found[1].tokens) < set(spec.tokens)
    # the dry run's bound: the A/A control, 3 environments and 2 routes (of the 2 other unfused implementations)
    # beside the baseline; the reference's A/A control and its one fused kind beside it
    assert interleave.measurements(found) == len(order) <= interleave.bound(spec) == 2 + 2 * (3 + 2) + 2 + 2 * 1


def _rendered(report: Path) -> tuple[dict, dict[str, str]]:
    summary = json.loads((report / "summary.json").read_text())["runs"][0]
    return summary, {name: (report / name).read_text() for name in ("routing.txt", "engine_flags.txt")}


def test_a_route_and_a_fused_kind_confirmed_beside_their_references_stay_live(scenarios):
    """The decision scenario whose route and fused kind measured again as fast as in the first pass (rendered with
    the others: tests/test_decision.py)."""
    from tests.test_decision import ANSWERS_CONFIRMED

    summary, files = _rendered(scenarios[ANSWERS_CONFIRMED])
    claims = {c["id"]: c for c in summary["claims"]}
    (taken,) = [r for r in summary["routes"] if not r["kept"] and r["collective"] == "all_reduce"]
    claim = claims[taken["claim"]]
    assert taken["impl"] == "flashinfer-pcie-ipc" and taken["live"] and claim["verdict"] == "beyond error"
    assert "interleaved confirmation" in claim["subject"] and taken["reason"].startswith("confirmed: ")
    assert any(t["name"] == "noise floor" for t in claim["error"])
    assert any(line.startswith("export SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1") for line in _live(files["routing.txt"]))
    fused = [claims[r["claim"]] for r in summary["fused"] if r["claim"]]
    won = [c for c in fused if c["verdict"] == "beyond error" and c["gain_pct"] > 0]
    assert won and all("interleaved confirmation" in c["subject"] for c in won)
    flags = _live(files["engine_flags.txt"])
    assert "COMMPROF_SGLANG_ARGS+=('--flashinfer-allreduce-fusion-backend' auto)" in flags, flags


def test_a_route_and_a_fused_kind_faster_only_in_the_first_pass_are_not_made_live(scenarios):
    """Measured again beside their references they are as slow as them (the first pass caught the references in a
    burst): the route keeps NCCL, no engine switch is set, the fused kind gets no flag."""
    from tests.test_decision import ANSWERS_MOMENT

    summary, files = _rendered(scenarios[ANSWERS_MOMENT])
    claims = {c["id"]: c for c in summary["claims"]}
    graph = [r for r in summary["routes"] if r["collective"] == "all_reduce" and r["mode"] == "graph"]
    assert graph and all(r["kept"] and r["impl"] == "nccl" for r in graph), graph
    measured = [claims[r["claim"]] for r in graph if r["claim"]]
    assert measured and all(c["verdict"] == "inside error" for c in measured), measured
    assert any(r["reason"].startswith("not confirmed: measured again beside the baseline") for r in graph)
    assert not [line for line in _live(files["routing.txt"]) if "PCIE_IPC" in line]
    fused = [claims[r["claim"]] for r in summary["fused"] if r["claim"]]
    assert fused and not [c for c in fused if c["verdict"] == "beyond error" and c["gain_pct"] > 0]
    assert not [h for h in summary["engines"]["hints"] if "beat its unfused reference" in h["why"]]
    assert _live(files["engine_flags.txt"]) == ["COMMPROF_SGLANG_ARGS=()", "COMMPROF_VLLM_ARGS=()"]


def test_a_first_pass_gain_not_measured_again_has_no_verdict(scenarios, tmp_path):
    """A run that confirmed, but not the route or the fused kind (an older sweep's confirmation, or one whose bound
    left them out): their first-pass gains, measured apart from their references, are not judged."""
    from tests.test_decision import SIM_DIRS, SWEEP

    run = with_confirmation(SIM_DIRS[TWIN], SWEEP, tmp_path / "run")
    lines = (run / INTERLEAVED_FILE).read_text().splitlines()
    kept = [
        line for line in lines if json.loads(line)["point"]["impl"] not in ("flashinfer-pcie-ipc", "flashinfer-fused")
    ]
    (run / INTERLEAVED_FILE).write_text("".join(line + "\n" for line in kept))
    decision, files = _decided(run)
    graph = _graph_bands(decision)
    assert graph and all(r.kept for r in graph)
    unjudged = [decision.claim(r.claim) for r in graph if r.claim]
    assert unjudged and all(c.verdict == "not judged" for c in unjudged)
    assert all("was not measured again beside its reference" in c.reason for c in unjudged)
    fused = [decision.claim(r.claim) for r in decision.fused if r.claim]
    assert fused and not [c for c in fused if _faster(c)] and [c for c in fused if c.verdict == "not judged"]
    assert _live(files["engine_flags.txt"]) == ["COMMPROF_SGLANG_ARGS=()", "COMMPROF_VLLM_ARGS=()"]


def test_under_the_environment_the_answer_sets_a_route_is_judged_against_its_measurement(scenarios, tmp_path):
    """(a) exports NCCL_P2P_LEVEL=SYS (a SYS-pair box's twin, its SYS points 40 % faster), so the routes are judged
    against that point: in a run that confirmed, against its own measurement beside the baseline."""
    from tests.test_decision import SIM_DIRS, SWEEP

    for moment, taken in ((frozenset(), True), (frozenset({interleave.ROUTE}), False)):
        decision, files = _decided(with_confirmation(SIM_DIRS[SYS_TWIN], SWEEP, tmp_path / f"run-{taken}", moment))
        nccl = decision.nccl
        assert nccl.env == {"NCCL_P2P_LEVEL": "SYS"} and nccl.live, nccl
        band = next(r for r in _graph_bands(decision) if r.compared == "flashinfer-pcie-ipc")
        claim = decision.claim(band.claim)
        assert band.judged_against == nccl.point.point_id and "interleaved confirmation" in claim.subject
        assert (not band.kept) is taken and claim.verdict == "beyond error" and (claim.gain_pct > 0) is taken
        assert bool([line for line in _live(files["routing.txt"]) if "PCIE_IPC" in line]) is taken
