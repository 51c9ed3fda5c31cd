"""engine_flags.txt: how to apply what won (beyond the evidence's uncertainty) in SGLang and vLLM, each flag with the
engine version it was written for: the Decision's fused-kind hints (its engine step chose them from the
implementations' modules), then the NCCL file and the PCIe all-reduce switches of report/exports/decision_files.py
(the lines routing.txt holds too).
engine_flags.txt is a bash script (zsh reads it too): environment as `export`, command-line flags collected in
arrays, prose as comments; it finds the files beside it through its own path, and refuses in any other shell. Pure."""

from __future__ import annotations

import re
import shlex

from commprof.env_names import shell_value
from commprof.report.decision.types import TUNER_CONF, EngineHint
from commprof.report.exports.export_text import OWN_FOLDER, comment, export_line, one_line, shell_guard

ENV_ASSIGNMENT = re.compile(r"^(export )?[A-Za-z_][A-Za-z0-9_]*=")
# The variables that name a file this report writes beside engine_flags.txt, exported at that file.
ENGINE_FLAGS_FILE = "engine_flags.txt"
OWN_FILES = {"NCCL_TUNER_CONFIG_FILE": TUNER_CONF}
ARRAYS = {"SGLang": "COMMPROF_SGLANG_ARGS", "vLLM": "COMMPROF_VLLM_ARGS"}


def script_lines(hint: EngineHint) -> list[str]:
    """A hint as bash: an assignment is exported, a flag joins its engine's argument array, a file is sourced
    from this script's folder; anything else stays a comment. Every word is quoted as bash and zsh read it
    literally (env_names.shell_value), every line stays one line (a value holding a newline would start a command,
    even in a commented-out block)."""
    setting = hint.setting
    if setting.startswith("source "):
        file = shell_value(setting.split(maxsplit=1)[1])
        return [one_line(f"source {OWN_FOLDER}/{file}")]
    if ENV_ASSIGNMENT.match(setting):
        name, _, value = setting.removeprefix("export ").partition("=")
        value, _, note = value.partition("#")
        line = (
            one_line(f"export {name}={OWN_FOLDER}/{OWN_FILES[name]}")
            if OWN_FILES.get(name) == value.strip()
            else export_line(name, value.strip())
        )
        return [line + (f"  {comment(note.strip())}" if note.strip() else "")]
    if setting.startswith("--") and hint.engine in ARRAYS:
        try:
            words = " ".join(shell_value(word) for word in shlex.split(setting))
        except ValueError:  # unbalanced quotes: not a flag commprof wrote
            return [comment(setting)]
        return [one_line(f"{ARRAYS[hint.engine]}+=({words})")]
    return [comment(setting)]


def engine_hints_text(hints: list[EngineHint], provenance: list[str], engine_lines: list[str] | None = None) -> str:
    """engine_flags.txt: `source` it in bash before launching the engine, then add the array of flags; `hints`:
    the Decision's fused-kind hints; `engine_lines`: the answer's lines (decision_files.answer_block), the same as
    routing.txt's."""
    lines = [
        "#!/usr/bin/env bash",
        shell_guard(ENGINE_FLAGS_FILE),
        "# Use: source engine_flags.txt in the bash (or zsh) that launches the engine, then add its flags to the "
        "command line (its answer section is routing.txt's live lines: sourcing either sets the same variables):",
        '#   python -m sglang.launch_server ... "${COMMPROF_SGLANG_ARGS[@]}"',
        '#   vllm serve ... "${COMMPROF_VLLM_ARGS[@]}"',
    ]
    lines += [comment(line) for line in provenance]
    lines += ["COMMPROF_SGLANG_ARGS=()", "COMMPROF_VLLM_ARGS=()"]
    if not hints and not engine_lines:
        lines.append("# Nothing engine-specific to set from this run.")
    for hint in hints:
        if not hint.setting:
            lines += ["", comment(f"{hint.engine}: no setting"), comment(f"why: {hint.why}")]
            continue
        lines += ["", comment(f"{hint.engine} -- written for {hint.version}"), comment(f"why: {hint.why}")]
        if hint.untested:
            lines += [comment(f"{hint.untested}:"), *(comment(f"  {line}") for line in script_lines(hint))]
        else:
            lines += script_lines(hint)
    lines += engine_lines or []
    return "\n".join(lines) + "\n"
