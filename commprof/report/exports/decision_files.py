"""The decision's live lines and routing.txt as text: engine_flags.txt and routing.txt share `answer_block` (the
NCCL environment the answer sets, then the engine switches), so sourcing either sets the same variables. Pure (a
Decision in, strings out; report/write.py writes them)."""

from __future__ import annotations

from commprof.nccl_vocab import TUNER_PLUGIN_NOTE
from commprof.report.analysis.decision import Decision
from commprof.report.analysis.routing_settings import EngineSetting
from commprof.report.exports.export_text import OWN_FOLDER, comment, export_line, one_line, shell_guard

ROUTING_USAGE = (
    "Use: source routing.txt in the bash (or zsh) that launches the engine. Its live lines are engine_flags.txt's answer "
    "section (the NCCL environment, then the engine switches): sourcing either sets the same variables; "
    "engine_flags.txt adds the engines' command-line flags."
)


def nccl_section(decision: Decision) -> list[str]:
    """The NCCL file the answer applies, as the bash lines that apply it from this folder (none where the answer
    keeps NCCL's defaults, or its baseline ran on another backend than the engines' NCCL)."""
    if decision.backend != "nccl" or decision.nccl_file is None:
        return []
    header = comment(f"NCCL: {decision.nccl_file} -- for SGLang and vLLM, any version (both use NCCL)")
    if decision.nccl_file == "nccl_tuner.conf":
        return [
            "",
            header,
            comment(f"why: {TUNER_PLUGIN_NOTE}; also export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so"),
            one_line(f"export NCCL_TUNER_CONFIG_FILE={OWN_FOLDER}/nccl_tuner.conf"),
        ]
    return [
        "",
        header,
        comment("why: NCCL_* variables reach every rank through the environment of the shell that launches the engine"),
        one_line(f"source {OWN_FOLDER}/{decision.nccl_file}"),
    ]


def answer_block(decision: Decision) -> list[str]:
    """The answer's live lines, the same in routing.txt and engine_flags.txt: its NCCL file, then its engine
    switches."""
    return nccl_section(decision) + engine_block(decision)


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
    lines = [comment(ROUTING_USAGE), shell_guard("routing.txt"), *(comment(line) for line in provenance)]
    against = decision.nccl_point or "the baseline"
    env = " ".join(f"{k}={v}" for k, v in sorted(decision.nccl_env.items())) or "the defaults"
    lines.append(
        comment(f"Per message size, what runs where (summary.json: decision), judged against {against} ({env}).")
    )
    for route in decision.routes:
        what = decision.runs_on(route) + (f" {route.options}" if route.options and not route.kept else "")
        what += decision.left_off_note(decision.acts(route))
        tokens = f" (T = {', '.join(map(str, route.tokens))})" if route.tokens else ""
        margin = f", {route.margin_pct:g} % less time" if route.margin_pct is not None else ""
        lines.append(
            comment(
                f"  {route.collective} {route.mode} {route.min_bytes}-{route.max_bytes} B{tokens}: {what}{margin}: "
                f"{route.verdict}: {route.reason}"
            )
        )
    lines += [comment(f"left out: {note}") for note in decision.left_out]
    if not decision.engine:
        lines.append(comment(f"No engine setting: {decision.baseline_name} keeps every size."))
    lines += answer_block(decision)
    return "\n".join(lines) + "\n"


def decision_lines(decision: Decision) -> list[str]:
    """The answer in a few terminal lines, as the report's first screen says it (the sweep, `simulate` and
    `report` print them last): the environment, each verify step's figure with its verdict, each all-reduce band,
    each engine switch."""
    env = " ".join(f"{k}={v}" for k, v in sorted(decision.nccl_env.items())) or "the defaults"
    lines = [
        f"the answer ({decision.evidence}): environment: {env}"
        + (f", via {decision.nccl_file}" if decision.nccl_file else "")
    ]
    if decision.unconfirmed:
        predicted = " ".join(f"{k}={v}" for k, v in sorted(decision.withdrawn_env.items()))
        lines.append(f"  withdrawn: {decision.unconfirmed}" + (f" (predicted: {predicted})" if predicted else ""))
    for step in decision.steps:
        error = f", its error ±{step.error_pct:.0f} %" if step.error_pct is not None else ""
        lines.append(
            f"  verify step T = {step.tokens}: {step.before_ms:.2f} -> {step.after_ms:.2f} ms "
            f"({step.gain_pct:g} % less{error}): {step.verdict}"
            + (": withdrawn" if step.reason.startswith("withdrawn") else "")
        )
    for route in decision.routes:
        if route.collective == "all_reduce" and route.tokens:
            what = decision.runs_on(route) + decision.left_off_note(decision.acts(route))
            margin = f" ({route.margin_pct:g} % less time)" if route.margin_pct is not None else ""
            lines.append(
                f"  {route.mode} all-reduce, T = {', '.join(map(str, route.tokens))} "
                f"({route.min_bytes}-{route.max_bytes} B): {what}{margin}: {route.verdict}"
            )
    for setting in decision.engine:
        variables = " ".join(f"{k}={v}" for k, v in setting.variables)
        lines.append(f"  {setting.engine}: {variables}: {'set' if setting.live else 'left off: ' + setting.why}")
    return lines
