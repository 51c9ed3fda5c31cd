"""The smoke's second step (`--extended`, about four minutes): a 2-rank sweep at T = 1, 4, 8 of Tree/LL,
Ring/Simple and 4 channels in both modes, whose graph mode captures one graph per T on each point's one
communicator; a `--profile` trace read back by `commprof trace` against the plan; and at one GPU the floor
probe's refusal. It starts only when the first step left it its minimum (the time guard).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from commprof.gpu_smoke.knobs import Knob
from commprof.gpu_smoke.points import Placement, SmokeSweep, knob_point, sweep_step_verdicts, sweep_verdicts
from commprof.gpu_smoke.steps import Steps, run_sweep
from commprof.gpu_smoke.verdicts import FAIL, PASS, SKIP, Verdict
from commprof.nccl_vocab import PLAN_COLLECTIVES
from commprof.records.point_ids import BASELINE_POINT_ID

TOKENS = [1, 4, 8]
TRACE_TOKENS = 4
KNOBS = (Knob(algo="TREE", proto="LL"), Knob(algo="RING", proto="SIMPLE"), Knob(channels=4))
POINTS = tuple(knob_point(k) for k in KNOBS)
MODEL = "kimi-k2.5"  # the smoke sweeps' model (points.sweep_toml)
PREFIX = "extended: "
GRAPHS = f"{PREFIX}several whole-step graphs (T = {', '.join(map(str, TOKENS))}) captured on one communicator"
TRACE = f"{PREFIX}--profile trace read back by `commprof trace` against the plan (plan_match)"
FLOOR_REFUSAL = f"{PREFIX}the floor probe refuses one GPU in one line (exit 2)"


RESERVE = "second step"  # what the first step leaves the second, under this name in the steps' minimums


def minimum_s(gpus: int, two_ranks: bool) -> dict[str, float]:
    """What each extended step needs at least, in the order they run."""
    needs: dict[str, float] = {"extended-sweep": 90, "trace": 25} if two_ranks else {}
    return {**needs, **({"floor refusal": 15} if gpus < 2 else {})}


def titles(gpus: int, two_ranks: bool) -> list[str]:
    """Every extended path's title, in order (what a skip names)."""
    placement = Placement(2, min(gpus, 2))
    sweep = []
    if two_ranks:
        sweep = [PREFIX + v.path for v in sweep_verdicts([], POINTS, placement, False)] + [GRAPHS, TRACE]
    return sweep + ([FLOOR_REFUSAL] if gpus < 2 else [])


def extended_paths(steps: Steps, gpus: int, two_ranks: bool, exclusive: str | None) -> list[Verdict]:
    """The second step's verdicts; every path a skip with the reason when the time guard or the box refuses."""
    steps.pending.pop(RESERVE, None)
    needed = sum(minimum_s(gpus, two_ranks).values())
    if steps.left() < needed:
        why = f"not run: {steps.left():.0f} s of the {steps.budget_s:.0f} s budget left after the first step, {needed:.0f} s needed"
        return [Verdict(title, SKIP, why) for title in titles(gpus, two_ranks)]
    steps.pending.update(minimum_s(gpus, two_ranks))
    verdicts = []
    if two_ranks:
        verdicts += _sweep_and_trace(steps, gpus)
    elif exclusive:
        verdicts += [Verdict(t, SKIP, f"skipped: {exclusive}") for t in titles(gpus, True) if t != FLOOR_REFUSAL]
    if gpus < 2:
        code, _, output = steps.run("floor refusal", [sys.executable, "-m", "commprof", "floor", "--quick", "--json"])
        verdicts.append(floor_refusal_verdict(FLOOR_REFUSAL, code, output))
    return verdicts


def _sweep_and_trace(steps: Steps, gpus: int) -> list[Verdict]:
    placement = Placement(2, min(gpus, 2))
    extra = ["--profile"] + (["--share-gpus", "--iterations", "3", "--warmup", "1"] if placement.time_sliced else [])
    sweep = SmokeSweep("extended-sweep", 2, POINTS, tuple(TOKENS), tuple(extra))
    done = run_sweep(steps, sweep)
    run_dir, records = done.run_dir, done.records
    found = sweep_step_verdicts(f"extended sweep ({placement})", sweep, done, placement, False)
    verdicts = [Verdict(v.path if v.path.startswith(PREFIX) else PREFIX + v.path, v.status, v.detail) for v in found]
    verdicts.append(graphs_verdict(GRAPHS, records))
    traces = trace_folder(run_dir) if run_dir else None
    if traces is None:
        steps.limit("trace")
        verdicts.append(
            Verdict(TRACE, FAIL, f"no trace of the baseline at T={TRACE_TOKENS} under the sweep's run folder")
        )
        return verdicts
    cmd = [sys.executable, "-m", "commprof", "trace", str(traces), "--model", MODEL, "--tp", "2"]
    code, stdout, output = steps.run("trace", [*cmd, "--tokens", str(TRACE_TOKENS), "--json"])
    verdicts.append(trace_verdict(TRACE, code, stdout, output))
    return verdicts


def trace_folder(run_dir: Path) -> Path | None:
    """The baseline's traces at T = TRACE_TOKENS (points/<id>/profile/T<T>/rank<r>.json.gz), if written."""
    folder = run_dir / "points" / BASELINE_POINT_ID / "profile" / f"T{TRACE_TOKENS}"
    return folder if any(folder.glob("rank*.json*")) else None


def graphs_verdict(path: str, records: list[dict]) -> Verdict:
    """The baseline's graph mode captured and replayed a whole-step graph at every T on its one communicator
    (one worker per point runs every T), verified; the other points' capture verdicts are listed."""
    graphs = [r for r in records if r.get("mode") == "graph" and r.get("kind", "step") == "step"]
    base = sorted((r for r in graphs if r.get("point_id") == BASELINE_POINT_ID), key=lambda r: r["tokens"])
    if not base:
        return Verdict(path, FAIL, "no graph record of the baseline: the sweep did not reach it")
    bad = [r for r in base if r["status"] != "ok"]
    if bad or len(base) < len(TOKENS):
        r = bad[0] if bad else None
        why = f"T={r['tokens']} {r['status']}: {(r.get('message') or '').strip()[:200]}" if r else "missing T values"
        return Verdict(path, FAIL, f"baseline graphs: {len(base) - len(bad)} of {len(TOKENS)} ok; {why}")
    ops = {sum(int((r.get("plan") or {}).get(c) or 0) for c in PLAN_COLLECTIVES) for r in base}
    others = sorted({(r["point"]["label"], r["tokens"], r["status"]) for r in graphs if r not in base})
    listed = "; ".join(f"{label} T={t} {status}" for label, t, status in others)
    return Verdict(
        path,
        PASS,
        f"{len(base)} graphs of {'/'.join(map(str, sorted(ops)))} collectives each (T={', '.join(str(r['tokens']) for r in base)}) "
        f"captured, replayed and verified on the baseline's one communicator" + (f"; {listed}" if listed else ""),
    )


def trace_verdict(path: str, code: int | None, stdout: str, output: str) -> Verdict:
    """`commprof trace --model --json` found the step in the trace and it matched the plan."""
    try:
        account = json.loads(stdout)
    except json.JSONDecodeError:
        return Verdict(path, FAIL, f"exit {code}, no JSON: {output.strip()[-400:]}")
    if code != 0 or not isinstance(account, dict) or "plan_match" not in account:
        return Verdict(path, FAIL, f"exit {code}, no plan_match in `commprof trace`'s answer: {output.strip()[-400:]}")
    plan = account.get("plan") or {}
    head = f"plan {plan.get('model')} TP {plan.get('tp')} T={plan.get('tokens')} ({plan.get('ops')} ops)"
    if not account["plan_match"]:
        differences = "; ".join(f"{d['what']}: plan {d['plan']}, trace {d['trace']}" for d in account["differences"])
        return Verdict(path, FAIL, f"{head}: plan_match false: {differences}")
    steps = account.get("steps") or {}
    return Verdict(path, PASS, f"{head}: plan_match true over {steps.get('alike')} alike steps")


def floor_refusal_verdict(path: str, code: int | None, output: str) -> Verdict:
    """At one GPU `commprof floor` refuses with exit 2 and one line saying why (there is no peer to copy to)."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    if code == 2 and len(lines) == 1 and "at least 2" in lines[0]:
        return Verdict(path, PASS, lines[0])
    return Verdict(path, FAIL, f"exit {code} (expected 2 with one line): " + " | ".join(lines[-3:]))
