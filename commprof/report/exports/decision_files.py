"""The decision's engine lines and routing.txt as text: engine_flags.txt and routing.txt share `engine_block`, so
their live lines are the same lines. Pure (a Decision in, strings out; report/write.py writes them)."""

from __future__ import annotations

from commprof.report.analysis.decision import Decision
from commprof.report.analysis.routing_settings import EngineSetting
from commprof.report.exports.export_text import comment, export_line

ROUTING_USAGE = (
    "Use: source routing.txt in the bash that launches the engine (its live lines are the same as engine_flags.txt's "
    "engine lines: source one of the two)."
)


def engine_block(decision: Decision) -> list[str]:
    """Per engine setting of the decision: where it was read and why, then its `export` lines, live or commented
    out with the one reason."""
    lines: list[str] = []
    for setting in decision.engine:
        lines += ["", *setting_lines(setting)]
    return lines


def setting_lines(setting: EngineSetting) -> list[str]:
    lines = [comment(f"{setting.engine}: {setting.impl} -- written for {setting.version}")]
    lines.append(comment(f"workspace: {setting.workspace}"))
    exports = [export_line(name, value) for name, value in setting.variables]
    if setting.live:
        return [*lines, comment(f"why: {setting.why}"), *exports]
    return [
        *lines,
        comment(f"left off: {setting.why.removeprefix('left off: ')}"),
        *(comment(f"  {e}") for e in exports),
    ]


def routing_text(decision: Decision, provenance: list[str]) -> str:
    """routing.txt: how to use it, where from, each size band of the answer once, what no file expresses, then
    the engine lines."""
    lines = [comment(ROUTING_USAGE), *(comment(line) for line in provenance)]
    against = decision.nccl_point or "the baseline"
    env = " ".join(f"{k}={v}" for k, v in sorted(decision.nccl_env.items())) or "the defaults"
    lines.append(
        comment(f"Per message size, what runs where (summary.json: decision), judged against {against} ({env}).")
    )
    for route in decision.routes:
        what = decision.runs_on(route) + (f" {route.options}" if route.options and not route.kept else "")
        tokens = f" (T = {', '.join(map(str, route.tokens))})" if route.tokens else ""
        margin = f", {route.margin_pct:g} % less time" if route.margin_pct is not None else ""
        lines.append(
            comment(
                f"  {route.collective} {route.mode} {route.min_bytes}-{route.max_bytes} B{tokens}: {what}{margin}: "
                f"{route.verdict}"
            )
        )
    lines += [comment(f"left out: {note}") for note in decision.left_out]
    if not decision.engine:
        lines.append(comment(f"No engine setting: {decision.baseline_name} keeps every size."))
    lines += engine_block(decision)
    return "\n".join(lines) + "\n"


def decision_lines(decision: Decision) -> list[str]:
    """The answer in a few terminal lines, as the report's first screen says it (the sweep prints them last)."""
    env = " ".join(f"{k}={v}" for k, v in sorted(decision.nccl_env.items())) or "the defaults"
    lines = [
        f"the answer ({decision.evidence}): environment: {env}"
        + (f", via {decision.nccl_file}" if decision.nccl_file else "")
    ]
    for route in decision.routes:
        if route.collective == "all_reduce" and route.tokens:
            what = decision.runs_on(route)
            margin = f" ({route.margin_pct:g} % less time)" if route.margin_pct is not None else ""
            lines.append(
                f"  {route.mode} all-reduce, T = {', '.join(map(str, route.tokens))} "
                f"({route.min_bytes}-{route.max_bytes} B): {what}{margin}"
            )
    for setting in decision.engine:
        variables = " ".join(f"{k}={v}" for k, v in setting.variables)
        lines.append(f"  {setting.engine}: {variables}: {'set' if setting.live else 'left off: ' + setting.why}")
    return lines
