"""What a user pastes: recommend.env and NCCL tuner-plugin rules rendered from the Decision alone, and the records'
own tables (nccl-tests-style per point, the results CSV), as text.

Pure (a Decision, or DataFrames, in; strings out; report/write.py writes them). Every file says which run and which
source (measured / simulated / imported) it came from. Engine flags: engine_hints.py.
"""

from __future__ import annotations

import csv
import io

import pandas as pd

from commprof.nccl_vocab import TUNER_PLUGIN_NOTE
from commprof.planner.models import DTYPE_BYTES
from commprof.report.decision.formatting import claim_words, whole_counts
from commprof.report.decision.types import RECOMMEND_ENV, TUNER_CONF, Decision
from commprof.report.exports.export_text import comment, export_line, one_line, spreadsheet_cells

NCCL_TESTS_TYPES = {"bfloat16": "bfloat16", "float16": "half", "float32": "float"}


def not_live_reason(decision: Decision) -> str:
    """Why the NCCL file's lines are commented out although it holds the answer: a simulation (it proposes what to
    measure), imported figures, an observation the model does not explain, an unfinished run."""
    if decision.run.simulated:
        plan = decision.plan
        how = f" (`{plan.command}`, from this folder)" if plan is not None else ""
        return (
            "a simulation proposes what to measure, a measurement disposes: nothing here ran on your box, so every "
            f"line stays commented out until confirm.toml measures it{how}"
        )
    if decision.unconfirmed:
        return decision.unconfirmed
    return f"{decision.environment.evidence.label}: not a measurement of the step on this box; measure it first"


def _standing(decision: Decision, name: str, holds: bool, instead: str) -> list[str]:
    """The comment lines saying whether file `name` is the one to apply, the alternative, or not recommended (none
    when it holds nothing and is not the choice)."""
    nccl = decision.nccl
    if nccl.file == name and nccl.live:
        other = TUNER_CONF if name == RECOMMEND_ENV else RECOMMEND_ENV
        lines = [comment(f"commprof recommends this file for this run: {nccl.why}.")]
        if nccl.alternative:
            lines.append(f"# {other} holds the alternative (commented out): use one of the two, never both.")
        return lines
    if nccl.file == name:
        return [
            comment(f"The answer, NOT TO APPLY YET: {not_live_reason(decision)}."),
            comment(f"Why this file: {nccl.why}."),
        ]
    if not holds:
        return []
    if nccl.file is None:
        return [comment(f"Not recommended for this run, so commented out: {nccl.why}.")]
    return [
        comment(f"ALTERNATIVE, not recommended for this run: commprof recommends {nccl.file} ({nccl.why})."),
        f"# To use {instead}, uncomment them.",
    ]


def tuner_conf_text(decision: Decision) -> str:
    """nccl_tuner.conf: comments (where from, whether to apply it or recommend.env, how to load, the override
    trap, the measured scope), then one CSV line per rule, live only when it is the answer a measurement stands
    behind."""
    tuner = decision.nccl.tuner
    lines = [
        "# Use: export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so and "
        "NCCL_TUNER_CONFIG_FILE=/path/to/nccl_tuner.conf in the shell that launches the engine; NCCL reads both at init.",
        *(comment(line) for line in decision.environment.provenance),
    ]
    active = decision.nccl.file == TUNER_CONF and decision.nccl.live
    lines += _standing(
        decision, TUNER_CONF, bool(tuner.rules), "these rules instead of it (never with its NCCL_ALGO / NCCL_PROTO)"
    )
    lines += [
        comment(f"NCCL example tuner plugin rules, for {TUNER_PLUGIN_NOTE}. Load with:"),
        "#   export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so",
        "#   export NCCL_TUNER_CONFIG_FILE=/path/to/nccl_tuner.conf",
        "# NCCL_ALGO / NCCL_PROTO in the environment override a tuner: do not set them together with this file.",
        "# An algorithm/protocol pair NCCL cannot run is silently ignored: check NCCL_DEBUG=INFO's TUNING lines.",
    ]
    for coll, (low, high) in sorted(tuner.ranges.items()):
        reach = tuner.reach[coll]
        lines.append(
            f"# {coll} sizes this run covers: {low}-{high} B; rules reach {reach[0]}-{reach[1]} B at most. Larger "
            "messages (prefill's: thousands of tokens, tens of MB) and smaller ones were not in this run: NCCL keeps "
            "its own choice there."
        )
    if tuner.inputs:
        lines.append("# The fastest point at each size of this run (one T each):")
    for r in tuner.inputs:
        choice = (
            f"{r.algorithm}/{r.protocol}"
            if r.algorithm is not None and r.protocol is not None
            else f"{r.note}: no rule"
            if r.note
            else "no single algo/proto: no rule"
        )
        lines.append(comment(f"  {r.collective} {r.bytes} B (T={r.tokens}): {r.point_id} {r.label!s} -> {choice}"))
    lines += _tuner_per_t(decision)
    if not tuner.rules:
        lines.append(comment(f"No rule: {tuner.no_rule}"))
    lines.append("# " + ",".join(tuner.fields))
    lines += [one_line(rule) if active else comment(rule) for rule in tuner.rules]
    return "\n".join(lines) + "\n"


def _tuner_per_t(decision: Decision) -> list[str]:
    """Where the rules are the answer: per T, the point they run and its step against the baseline (its claim)."""
    if decision.nccl.file != TUNER_CONF:
        return []
    lines = ["# What the rules run, per T, against the baseline:"]
    for at in decision.nccl.per_t:
        said = claim_words(decision.claim(at.claim), "keeps the baseline: nothing compared")
        lines.append(comment(f"  T = {at.tokens}: {at.settings}: step time {said}"))
    return lines


# ---------------------------------------------------------------------------------------- recommend.env


def recommend_env_text(decision: Decision) -> str:
    """Bash-sourceable export lines of (a)'s settings, with where they were measured and why; live only when
    recommend.env is the answer a measurement stands behind, else every line commented out with the reason."""
    nccl = decision.nccl
    lines = [
        "# Use: source recommend.env in the bash that launches the engine (every rank inherits its NCCL_* variables).",
        *(comment(line) for line in [*decision.environment.provenance, *nccl.notes, *nccl.graph_notes]),
    ]
    active = nccl.file == RECOMMEND_ENV and nccl.live
    lines += _standing(
        decision, RECOMMEND_ENV, bool(nccl.env), "these settings instead of it (never with it: they override a tuner)"
    ) or [comment(f"Nothing to export: {nccl.why}.")]
    if nccl.env:
        lines.append(
            "# These variables are read once per process (NCCL reads most of its own at init): restart the engine "
            "after sourcing this file."
        )
    for name, value in sorted(nccl.env.items()):
        line = export_line(str(name), value)
        lines.append(line if active or line.startswith("#") else comment(line))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- nccl-tests tables


def nccl_tests_table(
    sizes: list[tuple[str, int, float]], world_size: int, dtype: str, header: list[str], wrong: int | None
) -> str:
    """An all_reduce_perf-style table per collective: size, count, type, redop, root, time, algbw, busbw, #wrong.

    `sizes`: (collective, bytes, time µs) rows, time being the median over the ops of that size.
    algbw = bytes / time; busbw = algbw × 2(n−1)/n for all-reduce, × (n−1)/n for all-gather and reduce-scatter
    (nccl-tests' definitions); count is elements of the buffer (all-reduce) or per rank (all-gather,
    reduce-scatter), as nccl-tests prints.
    """
    elem = DTYPE_BYTES.get(dtype, 2)
    type_name = NCCL_TESTS_TYPES.get(dtype, dtype)
    lines = [comment(line) for line in header]
    busbws = []
    for collective in sorted({row[0] for row in sizes}):
        factor = 2 * (world_size - 1) / world_size if collective == "all_reduce" else (world_size - 1) / world_size
        redop = "none" if collective == "all_gather" else "sum"
        lines += [
            "#",
            f"# {collective} (in place)",
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  "
            f"{'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
            f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  "
            f"{'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}",
        ]
        for _, size, time_us in sorted(row for row in sizes if row[0] == collective):
            size = int(size)
            count = size // elem if collective == "all_reduce" else size // elem // world_size
            algbw = size / time_us / 1e3 if time_us > 0 else 0.0
            busbw = algbw * factor
            busbws.append(busbw)
            lines.append(
                f"{size:>12}  {count:>12}  {type_name:>8}  {redop:>6}  {-1:>6}  {time_us:>7.2f}  "
                f"{algbw:>6.2f}  {busbw:>6.2f}  {'N/A' if wrong is None else wrong:>6}"
            )
    lines.append(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws) if busbws else 0.0:.4f}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------- csv

# The records' frame's columns results.csv leaves out: nested values, and what other columns say (env.*, config).
CSV_LEFT_OUT = ("env", "config", "op_us", "nccl")


def csv_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns of the records' frame that results_csv reads: what a process that writes it is sent."""
    return frame.drop(columns=[c for c in CSV_LEFT_OUT if c in frame])


def results_csv(frame: pd.DataFrame) -> str:
    """Every record as one CSV row (nested op_us / nccl left out; per-rank medians joined with ';'); text cells
    that a spreadsheet would run as a formula are prefixed with an apostrophe.

    Written as pandas' to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC) writes the same table, byte for byte (each
    cell the Python object csv.writer quotes or not by its type, a missing one ""), a column at a time."""
    table = whole_counts(csv_columns(frame).drop(columns=["rank_step_median_us"], errors="ignore"))
    names, cells = list(table.columns), [_csv_cells(table[name]) for name in table.columns]
    if "rank_step_median_us" in frame:
        names.append("rank_step_median_us")
        cells.append(
            [
                ";".join(f"{v:g}" for v in ranks) if isinstance(ranks, list) else ""
                for ranks in frame["rank_step_median_us"]
            ]
        )
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    writer.writerow(names)
    writer.writerows(zip(*cells))
    return out.getvalue()


def _csv_cells(column: pd.Series) -> list:
    """A column's cells as csv.writer takes them: Python objects, a missing one "", text (object or pandas' str
    dtype) made safe for a spreadsheet (spreadsheet_cells)."""
    values = column.to_numpy(dtype=object)
    cells = values.tolist() if pd.api.types.is_numeric_dtype(column) else spreadsheet_cells(values)
    missing = column.isna().to_numpy()
    return ["" if gone else cell for cell, gone in zip(cells, missing)] if missing.any() else cells
