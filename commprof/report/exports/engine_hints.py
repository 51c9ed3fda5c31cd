"""Engine flags: how to apply what won (beyond the evidence's uncertainty) in SGLang and vLLM, each flag with the
engine version it was written for and where that was checked: the fused kinds' flags from their implementations'
modules (commprof.impls.registry); the NCCL file and the decision's PCIe all-reduce switches from
report/exports/decision_files.py (the lines routing.txt holds too).
engine_flags.txt is a bash script (zsh reads it too): environment as `export`, command-line flags collected in
arrays, prose as comments; it finds the files beside it through its own path, and refuses in any other shell. Pure."""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from commprof.evidence import Evidence
from commprof.impls.base import EngineFlag
from commprof.impls.registry import engine_flag_table
from commprof.report.exports.export_text import OWN_FOLDER, comment, export_line, one_line, shell_guard


@dataclass(frozen=True)
class EngineHint:
    """One way to apply the result in a serving engine, with the version it was written for; `setting` empty:
    the engine has no setting for it (engine work)."""

    engine: str
    setting: str
    version: str
    why: str
    untested: str = ""  # set: why this was not tested (a simulation ran nothing); the script keeps it commented out


def untested_reason(evidence: Evidence, what: str) -> str:
    """Why a simulated result is not a setting to enable: nothing ran, so its capture and results are unchecked."""
    if not evidence.simulated:
        return ""
    return (
        f"not tested: a simulation ran nothing, so {what} was never captured into a CUDA graph or checked against "
        "the exact reduction; measure it with a sweep on the box before enabling it"
    )


def engine_hints(
    fusion: pd.DataFrame,
    fused_measured: bool,
    applied: str | None,
    evidence: Evidence,
    fusion_refused: dict[str, str] | None = None,
) -> list[EngineHint]:
    """SGLang / vLLM flags for what won; only what this run measured (the NCCL file is the decision's
    answer_block). A simulated run's implementation switches are untested (commented out in the script).

    `fusion`: choices.fusion_comparison (impl, tokens, beyond_uncertainty, slower_beyond_uncertainty per T);
    `applied`: the file the report recommends ("recommend.env", "nccl_tuner.conf" or None);
    `fusion_refused`: engine -> why its fusion flag cannot act on these GPUs (Decision.fusion_refused).
    """
    hints = []
    if applied and evidence.backend not in (None, "nccl"):
        hints.append(
            EngineHint(
                "SGLang and vLLM",
                "",
                "—",
                f"this run's all-reduce ran on {evidence.backend} (CPU ranks); engines run theirs on NCCL on GPUs, "
                f"where nothing measured here applies: {applied} is for {evidence.backend} launches only. Run the "
                "sweep on the GPU box to tune the engine",
            )
        )
    if not fused_measured or fusion.empty:
        return hints
    flags = engine_flag_table()
    flagged = fusion["impl"].astype(str).isin(list(flags)).to_numpy()
    won = fusion[flagged & np.array([v is True for v in fusion["beyond_uncertainty"]], dtype=bool)]
    lost = fusion[np.array([v is True for v in fusion["slower_beyond_uncertainty"]], dtype=bool)]
    if not won.empty:
        tokens = ", ".join(str(int(t)) for t in won["tokens"])
        verb = "is predicted to beat" if evidence.simulated else "beat"
        why = (
            f"the FlashInfer fused all-reduce + RMSNorm {verb} its unfused reference {evidence.beyond} at T = "
            f"{tokens}; the engine uses it only where its FlashInfer build supports this GPU: check its log says it "
            "initialised"
        )
        untested = untested_reason(evidence, "the fused all-reduce + RMSNorm")
        hints += _acting(_flags(flags, won, "won"), why, untested, fusion_refused or {})
    elif not fusion.empty and len(lost) == len(fusion):
        why = (
            f"the fused all-reduce + RMSNorm was slower than its unfused reference, {evidence.beyond}, at every T "
            + ("predicted" if evidence.simulated else "measured")
        )
        hints += _acting(_flags(flags, lost, "lost"), why, "", fusion_refused or {})
    return hints


def _acting(flags: list[EngineFlag], why: str, untested: str, refused: dict[str, str]) -> list[EngineHint]:
    """The flags as hints; an engine whose fusion cannot act on these GPUs (its dispatch table's flag check) gets
    one "no flag" hint saying why instead of its flags."""
    hints, said = [], set()
    for flag in flags:
        fails = refused.get(flag.engine)
        if fails is None:
            hints.append(EngineHint(flag.engine, flag.setting, flag.version, flag.note or why, untested))
        elif flag.engine not in said:
            said.add(flag.engine)
            hints.append(EngineHint(flag.engine, "", "—", f"{why}; but {fails}: no flag"))
    return hints


def _flags(flags: dict[str, tuple[EngineFlag, ...]], rows: pd.DataFrame, when: str) -> list[EngineFlag]:
    """The `when` flags of the implementations in `rows`, each once, in their modules' order."""
    found: list[EngineFlag] = []
    for impl in dict.fromkeys(rows["impl"].astype(str)):
        found += [f for f in flags.get(impl, ()) if f.when == when and f not in found]
    return found


ENV_ASSIGNMENT = re.compile(r"^(export )?[A-Za-z_][A-Za-z0-9_]*=")
# The variables that name a file this report writes beside engine_flags.txt, exported at that file.
OWN_FILES = {"NCCL_TUNER_CONFIG_FILE": "nccl_tuner.conf"}
ARRAYS = {"SGLang": "COMMPROF_SGLANG_ARGS", "vLLM": "COMMPROF_VLLM_ARGS"}


def script_lines(hint: EngineHint) -> list[str]:
    """A hint as bash: an assignment is exported, a flag joins its engine's argument array, a file is sourced
    from this script's folder; anything else stays a comment. Every line stays one line (a value holding a
    newline would start a command, even in a commented-out block)."""
    setting = hint.setting
    if setting.startswith("source "):
        file = shlex.quote(setting.split(maxsplit=1)[1])
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
            words = " ".join(shlex.quote(word) for word in shlex.split(setting))
        except ValueError:  # unbalanced quotes: not a flag commprof wrote
            return [comment(setting)]
        return [one_line(f"{ARRAYS[hint.engine]}+=({words})")]
    return [comment(setting)]


def engine_hints_text(hints: list[EngineHint], provenance: list[str], engine_lines: list[str] | None = None) -> str:
    """engine_flags.txt: `source` it in bash before launching the engine, then add the array of flags;
    `engine_lines`: the answer's live lines (report/decision_files.answer_block), the same as routing.txt's."""
    lines = [
        "#!/usr/bin/env bash",
        shell_guard("engine_flags.txt"),
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


def hints_as_dicts(hints: list[EngineHint]) -> list[dict]:
    return [asdict(h) for h in hints]
