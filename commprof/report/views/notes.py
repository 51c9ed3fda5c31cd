"""The page's words that depend on the run: each sentence part chosen here from the Decision (markup built with
Markup, which escapes what it is given), so the templates only place it."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from commprof.report.decision.formatting import sentence
from commprof.report.decision.types import Decision


def page_notes(decision: Decision) -> dict[str, Any]:
    """The parts of the page's notes that change with the run: what the baseline stands for, where the compute
    figure comes from, table 1's caveats and section 8's files."""
    run, evidence = decision.run, decision.environment.evidence
    latest = "latest prediction" if run.simulated else "latest, longest measurement"
    tables = sum(1 for name in decision.files if name.startswith("nccl-tests/"))
    return {
        "baseline": Markup(" (the latest {} of <code>{}</code>)").format(evidence.measurement, run.baseline_requested)
        if run.baseline != run.baseline_requested
        else "",
        "compute": run.compute
        + ("" if run.compute_given else Markup(" (pass <code>--compute-ms</code>, e.g. <code>4=5.0,8=5.2</code>)")),
        "mode": sentence(run.mode or ""),
        "no_spread": " (a prediction has no spread: p90 and CV are —)" if run.simulated else "",
        "tuner_rules": Markup(": <code>nccl_tuner.conf</code> holds those per-size rules")
        if decision.nccl.tuner.rules
        else Markup("; no per-size rule is exported (<code>nccl_tuner.conf</code> says why)"),
        "remeasured": (
            f" Configurations {evidence.measured} more than once count with their {latest}: "
            + ", ".join(f"{old} → {new}" for old, new in sorted(run.remeasured.items()))
            + f" (the earlier numbers are in section 4, marked re-{evidence.measured})."
        )
        if run.remeasured
        else "",
        "folder": Markup("in <code>{}/</code> ").format(decision.folder) if decision.folder != "." else "",
        "nccl_tables": Markup(
            ", and per point an nccl-tests-style table in <code>nccl-tests/</code> ({} file{}) to diff against your "
            "own <code>all_reduce_perf</code> runs"
        ).format(tables, "s" if tables != 1 else "")
        if tables
        else "",
    }


def engine_paths(decision: Decision) -> list[dict[str, Any]]:
    """Per engine asked for, the op-by-op paths the Decision traced, with the answer's switches written out (and
    whether the files leave them off)."""
    out = []
    for path in decision.engines.paths:
        switches = path.get("switches") or {}
        shown = Markup(" ").join(Markup("<code>{}={}</code>").format(k, v) for k, v in switches.items()) or "none"
        left_off = " (left off by the files: see engine_flags.txt for why; shown as they would act)"
        out.append({**path, "switches": shown + (left_off if switches and not path.get("live") else "")})
    return out


def engine_settings(decision: Decision) -> list[dict[str, Any]]:
    """Section 8's engine switches: per engine, the variables that route the answer's bands and whether the files
    set them."""
    return [
        {"engine": s.engine, "variables": " ".join(f"{k}={v}" for k, v in s.variables), "live": s.live, "why": s.why}
        for s in decision.engines.settings
    ]
