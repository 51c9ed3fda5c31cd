"""The smoke's first step: sweeps at >= 2 NCCL ranks (the implementations, then the knobs picked against the
baseline's logged choices), the floor probe, the doctor, the report and `pytest -m gpu`; then, with
--extended, the second step (gpu_smoke/extended.py) behind the same time guard.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from commprof.errors import UsageError
from commprof.gpu_smoke import extended as second
from commprof.gpu_smoke.budget import BUDGET_S
from commprof.gpu_smoke.knobs import pick_knobs
from commprof.gpu_smoke.points import (
    ONE_RANK_POINTS,
    POINTS,
    Placement,
    SmokePoint,
    SmokeSweep,
    knob_point,
    sweep_step_verdicts,
    sweep_verdicts,
)
from commprof.gpu_smoke.steps import Steps, run_sweep
from commprof.gpu_smoke.verdicts import (
    FAIL,
    SKIP,
    Verdict,
    doctor_verdict,
    file_verdict,
    floor_verdict,
    pytest_verdict,
)
from commprof.records.point_ids import BASELINE_POINT_ID
from commprof.records.run_meta import RunMeta, read_meta

# What each step needs at least, in the order they run; a step's limit leaves this much to every later one.
# One GPU runs every step but the floor, 2+ GPUs every step but the one-rank sweep: either way they sum to 305 s of
# the 330 s budget, each step taking what earlier ones left beyond their minimums.
STEP_MINIMUM_S = {
    "nccl-sweep": 70,
    "knob-sweep": 40,
    "one-rank-sweep": 25,
    "floor": 25,
    "doctor": 30,
    "report": 20,
    "pytest -m gpu": 120,  # its runnable tests took 90-150 s on one time-sliced GPU, and get what the rest left
}
TWO_RANK_STEPS = ("nccl-sweep", "knob-sweep")


def skipped_verdicts(points: tuple[SmokePoint, ...], placement: Placement, baseline: bool, why: str) -> list[Verdict]:
    """The verdicts a sweep would have given, each a skip with `why` (the same table names them)."""
    return [Verdict(v.path, SKIP, why) for v in sweep_verdicts([], points, placement, baseline)]


def gpu_paths(
    out: Path,
    gpus: int,
    budget_s: float = BUDGET_S,
    echo=print,
    exclusive: str | None = None,
    extended: bool = False,
) -> list[Verdict]:
    """Every GPU step on this machine's `gpus` GPUs; the verdicts in the order the steps ran. `exclusive`: why
    ranks may not share a GPU here (its compute mode), which skips the paths that need 2 ranks on one GPU."""
    ranks = next(n for n in (8, 4, 2) if n <= max(gpus, 2))
    placement = Placement(ranks, gpus)
    shared = placement.time_sliced
    two_ranks = not (shared and exclusive)
    skipped = (() if shared else ("one-rank-sweep",)) + (("floor",) if gpus < 2 else ())
    skipped += () if two_ranks else TWO_RANK_STEPS
    minimum = {name: s for name, s in STEP_MINIMUM_S.items() if name not in skipped}
    # With --extended the first step leaves the second its minimum, as one reserve the second step takes over.
    reserve = {second.RESERVE: sum(second.minimum_s(gpus, two_ranks).values())} if extended else {}
    steps = Steps(out, budget_s, {**minimum, **reserve}, echo)
    run_dirs, verdicts = _sweeps(steps, placement, exclusive if not two_ranks else None)

    meta = _run_meta(run_dirs[0]) if run_dirs else None
    title = "floor probe (peer copies) and the sweep's meta.json floor"
    if gpus >= 2:
        floor_out = ["--out", str(out / "floor.json")]
        code, stdout, output = steps.run(
            "floor", [sys.executable, "-m", "commprof", "floor", "--quick", "--json", *floor_out]
        )
        verdicts.append(floor_verdict(title, gpus, code, _json_object(stdout), output, meta))
    else:
        verdicts.append(floor_verdict(title, gpus, None, None, "", meta))

    code, stdout, output = steps.run(
        "doctor", [sys.executable, "-m", "commprof", "doctor", "--json", "--collect", str(out / "doctor")]
    )
    summary = _json_object(stdout)
    if summary is not None:
        (out / "doctor.json").write_text(json.dumps(summary, indent=1))
    verdicts.append(
        doctor_verdict("doctor's GPU checks: NCCL probe, PCIe links read under load", code, summary, output)
    )

    report_dir = out / "report"
    title = "report rendered from the smoke's records"
    if run_dirs:
        code, _, output = steps.run(
            "report", [sys.executable, "-m", "commprof", "report", *map(str, run_dirs), "--out", str(report_dir)]
        )
        made = [str(p.relative_to(out)) for p in (report_dir / "index.html", report_dir / "summary.json") if p.exists()]
        verdicts.append(file_verdict(title, code, made, output))
    else:
        steps.limit("report")
        verdicts.append(Verdict(title, FAIL, "no run folder to render"))

    pytest = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
    code, stdout, output = steps.run("pytest -m gpu", [*pytest, "--junitxml", str(out / "pytest.xml"), "tests"])
    verdicts.append(pytest_verdict("pytest -m gpu", code, stdout, output))
    if extended:
        verdicts += second.extended_paths(steps, gpus, two_ranks, exclusive)
    return verdicts


def _sweeps(steps: Steps, placement: Placement, refused: str | None) -> tuple[list[Path], list[Verdict]]:
    """The NCCL sweep, the knob sweep picked against its baseline and, on one GPU, the one-rank sweep: (their run
    folders, their verdicts). `refused`: why the ranks may not share the GPU (every 2-rank path a skip)."""
    ranks, shared = placement.ranks, placement.time_sliced
    # Ranks that share a GPU take turns on it: one T and fewer steps keep the sweep inside the budget.
    extra = ["--share-gpus", "--iterations", "3", "--warmup", "1"] if shared else []
    tokens = [4] if shared else [4, 16]
    run_dirs: list[Path] = []
    verdicts: list[Verdict] = []
    if refused:
        why = f"skipped: {refused}, so {ranks} ranks cannot share the one GPU"
        knobs = tuple(knob_point(k) for k in pick_knobs([]))
        verdicts += skipped_verdicts(POINTS, placement, True, why) + skipped_verdicts(knobs, placement, False, why)
    else:
        nccl = SmokeSweep("nccl-sweep", ranks, POINTS, tuple(tokens), tuple(extra), cap=200)
        done = run_sweep(steps, nccl)
        run_dirs += [done.run_dir] if done.run_dir else []
        verdicts += sweep_step_verdicts(f"NCCL sweep ({placement})", nccl, done, placement, True)
        # The knobs' values differ from what NCCL chose at the baseline (records of the sweep just run).
        baseline = [r for r in done.records if r.get("point_id") == BASELINE_POINT_ID]
        knobs = tuple(knob_point(k) for k in pick_knobs(baseline))
        knob_sweep = SmokeSweep("knob-sweep", ranks, knobs, tuple(tokens), tuple(extra), cap=150)
        done = run_sweep(steps, knob_sweep)
        run_dirs += [done.run_dir] if done.run_dir else []
        verdicts += sweep_step_verdicts(f"knob sweep ({placement})", knob_sweep, done, placement, False)
    if shared:
        one = SmokeSweep("one-rank-sweep", 1, ONE_RANK_POINTS, (4,), ("--single-rank",))
        done = run_sweep(steps, one)
        run_dirs += [done.run_dir] if done.run_dir else []
        verdicts += sweep_step_verdicts("one-rank sweep", one, done, Placement(1, 1), False)
    return run_dirs, verdicts


def _run_meta(run_dir: Path) -> RunMeta | None:
    """The sweep's meta.json through the one reader; None where the reader refuses it."""
    try:
        return read_meta(run_dir)
    except UsageError:
        return None


def _json_object(text: str) -> dict | None:
    """The JSON object a command printed on stdout, or None."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
