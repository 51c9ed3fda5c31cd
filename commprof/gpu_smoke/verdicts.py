"""What `make gpu-smoke` concludes: one verdict per GPU path, from the records and outputs of its runs. Pure.

A path passes only on evidence that it acted: a knob when NCCL's own log shows a choice that differs from the
baseline's (gpu_smoke/knobs.py), a capture when the ranks agreed on a capture verdict, the doctor's link reading
when it was taken under load. An implementation this box cannot run is a skip with the gate's reason, never a
pass; evidence that cannot tell a setting from the default is "not shown", never a pass.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from commprof.planner.models import DTYPE_BYTES

if TYPE_CHECKING:  # the smoke's verdicts load in a python without msgspec
    from commprof.records.run_meta import RunMeta

PASS, FAIL, SKIP, NOT_SHOWN = "pass", "fail", "skip", "not shown"
# How step times of ranks that share one GPU are labelled: the ranks take turns on it.
TIME_SLICED = "(time-sliced: the ranks take turns on one GPU, so these are not latencies)"
# pytest's own summary line, e.g. "3 passed, 1 skipped, 590 deselected in 2.10s" or "no tests ran in 0.01s"
# (with -q no "=" frame; without, framed by "="), and the counts in it.
PYTEST_SUMMARY = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran) in [\d.]+s\b.*$")
PYTEST_COUNT = re.compile(r"(\d+) ([a-z]+)")
# Statuses that are a capture verdict (the ranks agreed on what capture did), not a broken run; "not_engaged"
# replaces only an "ok" (captured, replayed and verified, but NCCL's log shows another choice than the point's).
CAPTURE_VERDICTS = ("ok", "capture_failed", "replay_wrong", "not_engaged")


@dataclass(frozen=True)
class Verdict:
    """One GPU path: what was exercised, pass / fail / skip, and the evidence (or the reason)."""

    path: str
    status: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def exit_code(verdicts: list[Verdict]) -> int:
    """1 when any path failed; skips (gated, not installed) and "not shown" are not failures."""
    return 1 if any(v.status == FAIL for v in verdicts) else 0


def format_verdicts(verdicts: list[Verdict]) -> str:
    width = max((len(v.path) for v in verdicts), default=0)
    lines = []
    for v in verdicts:
        tag = f"[{v.status.upper()}]"
        lines.append(f"{tag:<11}  {v.path:<{width}}  {v.detail.splitlines()[0] if v.detail else ''}")
        lines.extend(f"{'':13}{line}" for line in v.detail.splitlines()[1:6])
    counts = Counter(v.status for v in verdicts)
    lines.append(
        f"gpu-smoke: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped, "
        f"{counts[NOT_SHOWN]} not shown of {len(verdicts)} paths"
    )
    return "\n".join(lines)


# --- records of one point ----------------------------------------------------------------------------------


def point_records(records: list[dict], label: str) -> list[dict]:
    return [r for r in records if (r.get("point") or {}).get("label") == label]


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:300] if (text or "").strip() else ""


def _medians(rows: list[dict], time_sliced: bool) -> str:
    medians = ", ".join(
        f"T={r['tokens']} {r['step_us']['median']:.0f} µs"
        for r in sorted(rows, key=lambda r: r["tokens"])
        if r.get("step_us")
    )
    return f"{medians} {TIME_SLICED}" if time_sliced and medians else medians


def mode_verdict(path: str, rows: list[dict], mode: str, gated_ok: bool = False, time_sliced: bool = False) -> Verdict:
    """Every T of `mode` ended ok; `gated_ok`: an "unsupported" point is a skip with its reason, not a failure;
    `time_sliced`: the ranks shared a GPU, so the step times are labelled as such."""
    rows = [r for r in rows if r.get("mode") == mode]
    if not rows:
        return Verdict(path, FAIL, f"no {mode} record: the sweep did not reach this point")
    statuses = {r["status"] for r in rows}
    if statuses == {"ok"}:
        return Verdict(path, PASS, f"{mode} ok, verified: {_medians(rows, time_sliced)}")
    if statuses == {"unsupported"}:
        reason = _first_line(rows[0].get("message"))
        return Verdict(path, SKIP if gated_ok else FAIL, f"unsupported: {reason}")
    bad = next(r for r in rows if r["status"] != "ok")
    return Verdict(path, FAIL, f"{mode} T={bad['tokens']}: {bad['status']}: {_first_line(bad.get('message'))}")


def capture_verdict(path: str, rows: list[dict]) -> Verdict:
    """The ranks reached a capture verdict (ok, capture_failed or replay_wrong): a result, whichever it is."""
    rows = [r for r in rows if r.get("mode") == "graph"]
    if not rows:
        return Verdict(path, FAIL, "no graph record: the sweep did not reach this point")
    broken = [r for r in rows if r["status"] not in CAPTURE_VERDICTS]
    if broken:
        r = broken[0]
        return Verdict(path, FAIL, f"T={r['tokens']}: {r['status']}: {_first_line(r.get('message'))}")
    verdicts = "; ".join(
        f"T={r['tokens']} {r['status']}" + (f" ({_first_line(r.get('message'))})" if r["status"] != "ok" else "")
        for r in sorted(rows, key=lambda r: r["tokens"])
    )
    return Verdict(path, PASS, f"capture verdict recorded: {verdicts}")


# --- what NCCL's log says ----------------------------------------------------------------------------------


def all_reduce_bytes(rows: list[dict]) -> set[int]:
    """The step's all-reduce message size at each T (T x hidden x element size), from the records' plans."""
    sizes = set()
    for r in rows:
        plan = r.get("plan") or {}
        elem = DTYPE_BYTES.get(r.get("dtype") or plan.get("dtype"))
        if elem and plan.get("hidden_size") and r.get("tokens"):
            sizes.add(int(r["tokens"]) * int(plan["hidden_size"]) * elem)
    return sizes


def all_reduce_choices(rows: list[dict], coll: str = "AllReduce") -> tuple[dict[int, list[dict]], dict | None]:
    """(NCCL's choices for `coll` by logged message size, the NCCL summary) of a point's records; lines
    without a collective (NCCL 2.20-2.22) count as all-reduces."""
    nccl = next((r["nccl"] for r in rows if r.get("nccl")), None)
    by_size: dict[int, list[dict]] = {}
    for choice in (nccl or {}).get("choices") or []:
        if (choice.get("coll") or "AllReduce").lower() == coll.lower():
            by_size.setdefault(int(choice["bytes"]), []).append(choice)
    return by_size, nccl


def _choice_text(size: int, choices: list[dict]) -> str:
    shown = ", ".join(
        f"{c['algo']}/{c['proto']}" + (f" {c['channels']} ch" if c.get("channels") else "") for c in choices
    )
    return f"{size} B -> {shown}"


def nccl_log_verdict(path: str, rows: list[dict]) -> Verdict:
    """NCCL's INFO log was parsed: its version, an algorithm / protocol choice for every all-reduce size and
    one for the logits all-gather (matched on the per-rank bytes NCCL logs)."""
    by_size, nccl = all_reduce_choices(rows)
    gathers, _ = all_reduce_choices(rows, "AllGather")
    if not nccl:
        return Verdict(path, FAIL, "no NCCL summary in the records (no INFO log was written or parsed)")
    sizes = all_reduce_bytes(rows)
    missing = sorted(sizes - set(by_size))
    head = (
        f"NCCL {nccl.get('version') or '?'}, {nccl.get('channels')} coll channels, transports {nccl.get('transports')}"
    )
    if not nccl.get("version"):
        return Verdict(path, FAIL, f"{head}: the log has no version line")
    if missing:
        return Verdict(
            path,
            FAIL,
            f"{head}; no TUNING choice for all-reduce size(s) {missing} in the probe's log "
            "(NCCL prints none at one rank: the run needs >= 2 ranks)",
        )
    if not gathers:
        return Verdict(path, FAIL, f"{head}; no TUNING choice kept for the logits all-gather")
    shown = [f"AllReduce {_choice_text(s, by_size[s])}" for s in sorted(sizes)]
    shown += [f"AllGather {_choice_text(s, c)}" for s, c in sorted(gathers.items())]
    return Verdict(path, PASS, head + "\n" + "\n".join(shown))


# --- the other steps ---------------------------------------------------------------------------------------


def doctor_verdict(path: str, code: int | None, summary: dict | None, output: str) -> Verdict:
    """The doctor ran its GPU tests: an NCCL probe (check "nccl" not skipped) and link readings under load."""
    if summary is None:
        return Verdict(path, FAIL, f"no JSON from `commprof doctor` (exit {code}): {output.strip()[-500:]}")
    checks = {c["id"]: c for c in summary.get("checks") or []}
    link = checks.get("pcie-link") or {}
    nccl = checks.get("nccl") or {}
    problems = []
    if not any("under load" in e for e in link.get("evidence") or []):
        problems.append(f"no PCIe link reading under load ({link.get('detail')})")
    if nccl.get("status") in (None, "skipped"):
        problems.append(f"NCCL check not run ({nccl.get('detail')})")
    box = f"doctor says {summary.get('status')} {summary.get('counts')}"
    if problems:
        return Verdict(path, FAIL, "; ".join(problems) + f"; {box}")
    evidence = "; ".join((link.get("evidence") or [])[:2])
    return Verdict(path, PASS, f"{box} (a failing box check is the box's verdict, not the smoke's); {evidence}")


def floor_verdict(
    path: str, gpus: int, code: int | None, result: dict | None, output: str, meta: RunMeta | None
) -> Verdict:
    """The floor probe measured positive figures on >= 2 GPUs, and the sweep's meta.json recorded a floor with its
    source; one GPU is a skip (there is no peer to copy to), said so, never a pass."""
    recorded = meta.floor if meta is not None else None
    if gpus < 2:
        why = f"; the sweep's meta.json says: {recorded.why}" if recorded is not None and recorded.why else ""
        return Verdict(path, SKIP, f"skipped: one GPU (the floor probe times peer copies between at least 2){why}")
    figures = (result or {}).get("figures") or {}
    if code != 0 or not all((figures.get(k) or 0) > 0 for k in ("pair_write_gbps", "all_pairs_gbps")):
        return Verdict(path, FAIL, f"`commprof floor` exit {code}: {output.strip()[-500:]}")
    if recorded is None or recorded.figures is None or not recorded.figures.source:
        entry = "no floor entry" if recorded is None else f"its floor is {recorded.status or 'of no status'}"
        return Verdict(path, FAIL, f"the sweep's meta.json has no floor with a source: {entry}")
    rows = {r["bytes"]: r for r in (result or {}).get("floor") or []}
    shown = ", ".join(f"{rows[b]['floor_us']:.1f} µs at {b >> 10} KiB" for b in (16 << 10, 256 << 10) if b in rows)
    return Verdict(
        path,
        PASS,
        f"pair {figures['pair_write_gbps']:.1f} GB/s, all at once {figures['all_pairs_gbps']:.1f} GB/s per GPU, "
        f"floor {shown}; meta.json: {recorded.figures.source[:200]}",
    )


def pytest_summary(stdout: str) -> tuple[str, dict[str, int]] | None:
    """pytest's last summary line on stdout and its counts ({"passed": 3, "skipped": 1, ...}), or None.

    Read from stdout alone: a warning a test leaves on stderr is not pytest's verdict."""
    for line in reversed(stdout.strip().splitlines()):
        found = PYTEST_SUMMARY.match(line.strip())
        if found:
            text = line.strip().strip("=").strip()
            return text, {word: int(n) for n, word in PYTEST_COUNT.findall(found.group(1))}
    return None


def pytest_verdict(path: str, code: int | None, stdout: str, output: str = "") -> Verdict:
    """Every GPU test passed or skipped, and at least one ran (a run of skips alone proves nothing): judged on
    pytest's own summary line and exit code; `output` (stdout and stderr) only shows what went wrong."""
    found = pytest_summary(stdout)
    if code == 5:
        return Verdict(path, FAIL, "no GPU test was collected" + (f": {found[0]}" if found else ""))
    if found is None:
        tail = "\n".join((output or stdout).strip().splitlines()[-5:])
        return Verdict(path, FAIL, f"exit {code}, and no pytest summary line on its stdout: {tail}")
    line, counts = found
    if code == 0:
        if not counts.get("passed"):
            return Verdict(path, FAIL, f"no GPU test ran: {line} (why each skipped: its log under logs/)")
        return Verdict(path, PASS, line)
    failures = [x for x in stdout.strip().splitlines() if x.startswith(("FAILED ", "ERROR "))][:5]
    return Verdict(path, FAIL, f"exit {code}: {line}" + "".join(f"\n{x}" for x in failures))


def file_verdict(path: str, code: int | None, made: list[str], output: str) -> Verdict:
    """A command that must exit 0 and leave the named files behind."""
    if code == 0 and made:
        return Verdict(path, PASS, ", ".join(made))
    return Verdict(path, FAIL, f"exit {code}: {output.strip()[-500:]}")


def summary(environment: dict[str, Any], verdicts: list[Verdict], seconds: float) -> dict[str, Any]:
    """summary.json: where it ran, every verdict, and the exit status."""
    return {
        "environment": environment,
        "verdicts": [v.to_dict() for v in verdicts],
        "seconds": round(seconds, 1),
        "exit_code": exit_code(verdicts),
    }
