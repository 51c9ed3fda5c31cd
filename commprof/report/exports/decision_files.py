"""The decision's lines as text: engine_flags.txt and routing.txt share `answer_block` (the NCCL file the answer
applies, then the engine switches), so sourcing either sets the same variables; routing.txt's size bands; the
terminal's answer lines. Pure (a Decision in, strings out; report/write.py writes them)."""

from __future__ import annotations

from commprof.nccl_vocab import TUNER_PLUGIN_NOTE
from commprof.report.decision.claim import Claim
from commprof.report.decision.formatting import claim_words
from commprof.report.decision.observation import EXPLANATIONS_SHOWN
from commprof.report.decision.types import RECOMMEND_ENV, TUNER_CONF, Decision, EngineSetting, Route
from commprof.report.exports.engine_hints import engine_hints_text
from commprof.report.exports.export_text import OWN_FOLDER, comment, export_line, one_line, shell_guard
from commprof.report.exports.files import not_live_reason

ROUTING_FILE = "routing.txt"
ROUTING_USAGE = (
    "Use: source routing.txt in the bash (or zsh) that launches the engine. Its live lines are engine_flags.txt's answer "
    "section (the NCCL environment, then the engine switches): sourcing either sets the same variables; "
    "engine_flags.txt adds the engines' command-line flags."
)


def baseline_name(decision: Decision) -> str:
    """What the kept sizes run on, as the files and the page name it: NCCL, or the backend that ran instead."""
    return "NCCL" if decision.run.backend == "nccl" else decision.run.backend


def runs_on(decision: Decision, route: Route) -> str:
    """The name of what runs a band: the baseline's name where it kept the band (and what it was compared with),
    else the implementation."""
    if not route.kept:
        return route.impl
    keeper = baseline_name(decision) if route.impl in ("nccl", decision.run.backend) else route.impl
    return keeper + (f" ({route.compared} against it)" if route.compared else "")


def left_off_note(decision: Decision, live: bool) -> str:
    """What a band's name is followed by where its engine setting is left off: the baseline runs there."""
    return "" if live else f" (switch left off, {baseline_name(decision)} runs)"


def verdict_words(claim: Claim | None, reason: str = "") -> str:
    """A claim as every file writes it (decision/formatting.claim_words), or why nothing was compared."""
    return claim_words(claim, f"no verdict: {reason}" if reason else "no verdict: nothing compared")


def nccl_section(decision: Decision) -> list[str]:
    """The NCCL file the answer applies, as the bash lines that apply it from this folder: live where a
    measurement stands behind it, commented out otherwise; none where the answer keeps NCCL's defaults, or its
    baseline ran on another backend than the engines' NCCL."""
    nccl = decision.nccl
    if decision.run.backend != "nccl" or nccl.file is None:
        return []
    header = comment(f"NCCL: {nccl.file} -- for SGLang and vLLM, any version (both use NCCL)")
    if nccl.file == TUNER_CONF:
        lines = [
            comment(f"why: {TUNER_PLUGIN_NOTE}; also export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so"),
            one_line(f"export NCCL_TUNER_CONFIG_FILE={OWN_FOLDER}/nccl_tuner.conf"),
        ]
    else:
        lines = [
            comment(
                "why: NCCL_* variables reach every rank through the environment of the shell that launches the engine"
            ),
            one_line(f"source {OWN_FOLDER}/{nccl.file}"),
        ]
    if not nccl.live:
        lines = [comment(f"left off: {not_live_reason(decision)}"), *(comment(f"  {line}") for line in lines)]
    return ["", header, *lines]


def answer_block(decision: Decision) -> list[str]:
    """The answer's lines, the same in routing.txt and engine_flags.txt: its NCCL file, then its engine switches."""
    lines = nccl_section(decision)
    for setting in decision.engines.settings:
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


def engine_flags_text(decision: Decision) -> str:
    """engine_flags.txt: the fused kinds' hints, then the answer block."""
    return engine_hints_text(list(decision.engines.hints), decision.environment.provenance, answer_block(decision))


def routing_text(decision: Decision) -> str:
    """routing.txt: how to use it, where from, each size band of the answer once with its claim, what no file
    expresses, then the engine lines."""
    lines = [
        comment(ROUTING_USAGE),
        shell_guard(ROUTING_FILE),
        *(comment(line) for line in decision.environment.provenance),
    ]
    env = decision.nccl.env if decision.nccl.file == RECOMMEND_ENV else {}
    against = decision.routes[0].judged_against if decision.routes else "the baseline"
    said = " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "the defaults"
    lines.append(
        comment(f"Per message size, what runs where (summary.json: routes), judged against {against} ({said}).")
    )
    for route in decision.routes:
        what = runs_on(decision, route) + (f" {route.options}" if route.options and not route.kept else "")
        what += left_off_note(decision, route.live)
        tokens = f" (T = {', '.join(map(str, route.tokens))})" if route.tokens else ""
        lines.append(
            comment(
                f"  {route.collective} {route.mode} {route.min_bytes}-{route.max_bytes} B{tokens}: {what}: "
                f"{verdict_words(decision.claim(route.claim), route.reason)}"
            )
        )
    lines += [comment(f"left out: {note}") for note in decision.engines.left_out]
    if not decision.engines.settings:
        lines.append(comment(f"No engine setting: {baseline_name(decision)} keeps every size."))
    lines += answer_block(decision)
    return "\n".join(lines) + "\n"


def decision_lines(decision: Decision) -> list[str]:
    """The answer in a few terminal lines, as the report's first screen says it (the sweep, `simulate` and
    `report` print them last): the headline, the NCCL file, each verify step's claim, each all-reduce band, each
    engine switch."""
    return [
        decision.headline.text,
        _answer_line(decision),
        *_caveat_lines(decision),
        *_step_lines(decision),
        *_band_lines(decision),
        *(
            f"  {s.engine}: {' '.join(f'{k}={v}' for k, v in s.variables)}: "
            + ("set" if s.live else "left off: " + s.why)
            for s in decision.engines.settings
        ),
    ]


def observed_lines(decision: Decision) -> list[str]:
    """The engine's observation beside the prediction, as `report` prints it: the verdict and, where the model does
    not explain it, the first ranked explanations on the run's box (the page's observation card lists the same)."""
    observed = decision.environment.observed
    if observed is None:
        return []
    lines = [f"commprof: {decision.run.name}: observed beside predicted: {observed.verdict}"]
    found = observed.explanations
    if found is None:
        return lines + (
            [f"  no ranked explanation: {observed.explanations_note}"] if observed.explanations_note else []
        )
    lines.append(f"  what explains the gap (commprof explain on the run's box): {found.verdict}")
    for number, e in enumerate(found.explanations[:EXPLANATIONS_SHOWN], 1):
        magnitude = f" ({e.magnitude})" if e.magnitude else ""
        fix = f"; fix: {e.fix}" if e.fix else ""
        lines.append(f"  {number}. {e.condition}{magnitude}: {e.state}; box records: {e.evidence}{fix}")
    if found.tell_apart:
        lines.append(f"  next: {found.tell_apart}")
    return lines + [f"  landmine: {line}" for line in found.landmines]


def _answer_line(decision: Decision) -> str:
    nccl = decision.nccl
    env = " ".join(f"{k}={v}" for k, v in sorted(nccl.env.items())) if nccl.file == RECOMMEND_ENV else ""
    what = f"{nccl.file} ({env})" if env else nccl.file or "nothing to apply"
    state = ": set" if nccl.file and nccl.live else ": proposed, measure first" if nccl.file else ""
    return f"the answer ({decision.environment.evidence.label}): {what}{state}"


def _caveat_lines(decision: Decision) -> list[str]:
    lines = []
    use = decision.environment.calibration
    if use is not None and not use.applied:
        lines.append(f"  calibration {use.file} not applied: {use.why}")
    if decision.nccl.confirmation:
        lines.append(f"  {decision.nccl.confirmation}")
    if decision.unconfirmed:
        predicted = " ".join(f"{k}={v}" for k, v in sorted(decision.nccl.withdrawn_env.items()))
        lines.append(f"  withdrawn: {decision.unconfirmed}" + (f" (predicted: {predicted})" if predicted else ""))
    return lines


def _step_lines(decision: Decision) -> list[str]:
    return [
        f"  verify step T = {step.tokens}: {step.before_ms:.2f} -> {step.after_ms:.2f} ms: "
        + verdict_words(decision.claim(step.claim), "nothing changes here").removeprefix("no verdict: ")
        for step in decision.steps
    ]


def _band_lines(decision: Decision) -> list[str]:
    return [
        f"  {route.mode} all-reduce, T = {', '.join(map(str, route.tokens))} ({route.min_bytes}-{route.max_bytes} B): "
        f"{runs_on(decision, route) + left_off_note(decision, route.live)}: "
        f"{verdict_words(decision.claim(route.claim), route.reason)}"
        for route in decision.routes
        if route.collective == "all_reduce" and route.tokens
    ]
