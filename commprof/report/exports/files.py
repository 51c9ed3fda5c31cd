"""What a user pastes: recommend.env, NCCL tuner-plugin rules, nccl-tests tables and the results CSV, as text.

Pure (DataFrames and dicts in, strings out; report/write.py writes them). Every file says which run and which
source (measured / simulated / imported) it came from. Engine flags: engine_hints.py.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from commprof.nccl_vocab import (
    ALGORITHMS,
    CHANNEL_VARIABLES,
    COLLECTIVES,
    PROTOCOLS,
    TUNER_PLUGIN_NOTE,
    Name,
    forced,
    named,
)
from commprof.planner.models import DTYPE_BYTES
from commprof.report.analysis.frame import whole_counts
from commprof.report.exports.engine_hints import EngineHint
from commprof.report.exports.export_text import comment, export_line, one_line, spreadsheet_cell

# The NCCL example tuner plugin's CSV (plugins/tuner/example): 10 fields, lower-case names, -1 = any / keep.
TUNER_FIELDS = (
    "collective",
    "min_bytes",
    "max_bytes",
    "algorithm",
    "protocol",
    "channels",
    "nNodes",
    "nRanks",
    "numPipeOps",
    "regBuff",
)
TUNER_ALGORITHMS = tuple(a.tuner for a in ALGORITHMS)
TUNER_PROTOCOLS = tuple(p.tuner for p in PROTOCOLS)
NCCL_TESTS_TYPES = {"bfloat16": "bfloat16", "float16": "half", "float32": "float"}


# ------------------------------------------------------------------------------------------ what to apply

RECOMMEND_ENV = "recommend.env"
TUNER_CONF = "nccl_tuner.conf"
# What the example tuner plugin can set per size: the algorithm, the protocol and the channel count.
TUNER_VARIABLES = frozenset(("NCCL_ALGO", "NCCL_PROTO", *CHANNEL_VARIABLES))


@dataclass(frozen=True)
class ApplyPlan:
    """The one file to apply (`choice`, None: nothing), why, and what each file holds."""

    choice: str | None
    why: str
    env: dict[str, str]  # what recommend.env exports (the recommendation's settings; {} when the baseline is kept)
    rules: list[TunerRule] = field(default_factory=list)
    inputs: pd.DataFrame = field(default_factory=pd.DataFrame)  # rule_inputs: the per-size winners
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # collective -> the run's sizes (min, max)
    no_rule: str = ""  # why nccl_tuner.conf has no rule, when it has none

    @property
    def alternative(self) -> str | None:
        """The other file, when it holds something to apply instead (its lines are commented out)."""
        if self.choice == RECOMMEND_ENV and self.rules:
            return TUNER_CONF
        if self.choice == TUNER_CONF and self.env:
            return RECOMMEND_ENV
        return None


# ------------------------------------------------------------------------------------------- tuner rules


@dataclass(frozen=True)
class TunerRule:
    """One line of the NCCL example tuner plugin's config file."""

    collective: str
    min_bytes: int
    max_bytes: int  # inclusive; commprof never writes -1 ("any size": strtoull("-1") is the largest size)
    algorithm: str
    protocol: str
    channels: int = -1
    n_nodes: int = -1
    n_ranks: int = -1
    num_pipe_ops: int = -1
    reg_buff: int = -1

    def csv(self) -> str:
        return ",".join(
            str(v)
            for v in (
                self.collective,
                self.min_bytes,
                self.max_bytes,
                self.algorithm,
                self.protocol,
                self.channels,
                self.n_nodes,
                self.n_ranks,
                self.num_pipe_ops,
                self.reg_buff,
            )
        )


def _tuner(name: Name | None) -> str | None:
    return name.tuner if name is not None else None


def rule_inputs(winners: pd.DataFrame) -> pd.DataFrame:
    """Per winning record (one per T) and collective: size and what NCCL ran (its log), else what env forced.

    A winner with a `note` (e.g. within measurement noise of the baseline) gets no choice: NCCL keeps its own.
    """
    rows = []
    for r in winners.itertuples():
        note = getattr(r, "note", None)
        note = note if isinstance(note, str) and note else None
        env = r.env if isinstance(r.env, dict) else {}
        choices = (r.nccl or {}).get("choices") or [] if isinstance(r.nccl, dict) else []
        sizes = {
            "allreduce": int(r.tokens) * int(r.hidden_size) * DTYPE_BYTES.get(r.dtype, 2)
            if _number(r.hidden_size) and _number(r.tokens)
            else None
        }
        logged: dict[str, dict] = {}
        ranks = int(r.world_size) if _number(r.world_size) else None
        for choice in choices:
            coll = _tuner(named(COLLECTIVES, choice.get("coll")))
            if coll:
                logged.setdefault(coll, choice)
                sizes.setdefault(coll, tuner_bytes(coll, choice, ranks))
        sets_channels = any(k in env for k in CHANNEL_VARIABLES)
        for coll, size in sizes.items():
            if not size:
                continue
            choice = logged.get(coll, {})
            algorithm = _tuner(named(ALGORITHMS, choice.get("algo")) or forced("NCCL_ALGO", env.get("NCCL_ALGO"), coll))
            protocol = _tuner(
                named(PROTOCOLS, choice.get("proto")) or forced("NCCL_PROTO", env.get("NCCL_PROTO"), coll)
            )
            channels = choice.get("channels") if sets_channels and choice.get("channels") else -1
            if note:
                algorithm = protocol = None
            rows.append(
                {
                    "collective": coll,
                    "bytes": int(size),
                    "tokens": int(r.tokens),
                    "point_id": r.point_id,
                    "label": r.label,
                    "algorithm": algorithm,
                    "protocol": protocol,
                    "channels": int(channels),
                    "n_ranks": int(r.world_size) if _number(r.world_size) else -1,
                    "note": note,
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "collective",
            "bytes",
            "tokens",
            "point_id",
            "label",
            "algorithm",
            "protocol",
            "channels",
            "n_ranks",
            "note",
        ],
    )


# Collectives whose tuner size is nRanks x a rank's piece: NCCL passes getCollInfo nBytes = type size x
# ncclFuncMaxSendRecvCount(func, nRanks, count), nRanks x count for these two (src/enqueue.cc and
# src/include/enqueue.h, NCCL 2.23 to 2.30), while 2.24+ log count x type size (one rank's piece).
WHOLE_BUFFER_TUNER = ("allgather", "reducescatter")


def tuner_bytes(coll: str, choice: dict, ranks: int | None) -> int | None:
    """The size NCCL hands the tuner plugin for a logged choice: the logged size, times nRanks for an all-gather
    or reduce-scatter logged per rank (NCCL >= 2.24); None when the rank count needed is unknown."""
    logged = choice.get("bytes")
    if not isinstance(logged, int) or coll not in WHOLE_BUFFER_TUNER or choice.get("bytes_scope") != "per_rank":
        return logged
    return logged * ranks if ranks else None


def size_band(size: int) -> tuple[int, int]:
    """The power-of-two band a message size falls in, [2^k, 2^(k+1) - 1]: how far a rule reaches beyond the
    smallest and largest measured size (never to size 0 or to -1, "any size": prefill was not measured)."""
    low = 1 << (max(int(size), 1).bit_length() - 1)
    return low, 2 * low - 1


def tuner_rules(inputs: pd.DataFrame) -> list[TunerRule]:
    """One rule per message-size range, per collective, over the measured sizes only: each measured size owns the
    range up to the geometric midpoint with its neighbours, the smallest and largest down and up to the edges of
    their size_band; neighbouring ranges with the same choice merge; sizes without a known algorithm and protocol
    get no rule (NCCL keeps its own choice there, as it does outside the measured range)."""
    rules: list[TunerRule] = []
    for coll, group in inputs.groupby("collective", sort=True):
        group = group.sort_values("bytes").drop_duplicates("bytes")
        sizes = group["bytes"].tolist()
        bounds = [math.isqrt(a * b) for a, b in zip(sizes, sizes[1:])]
        lows = [size_band(sizes[0])[0]] + bounds
        highs = [b - 1 for b in bounds] + [size_band(sizes[-1])[1]]
        merged: list[TunerRule] = []
        for r, low, high in zip(group.itertuples(), lows, highs):
            if not (r.algorithm in TUNER_ALGORITHMS and r.protocol in TUNER_PROTOCOLS):
                continue
            rule = TunerRule(coll, low, high, r.algorithm, r.protocol, int(r.channels), -1, int(r.n_ranks))
            last = merged[-1] if merged else None
            if (
                last
                and last.max_bytes == low - 1
                and (last.algorithm, last.protocol, last.channels) == (rule.algorithm, rule.protocol, rule.channels)
            ):
                merged[-1] = TunerRule(
                    coll, last.min_bytes, high, last.algorithm, last.protocol, last.channels, -1, last.n_ranks
                )
            else:
                merged.append(rule)
        rules.extend(merged)
    return rules


def measured_ranges(inputs: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """Per collective, the smallest and largest size the run covers (the rules' scope, before the band edges)."""
    return {str(c): (int(g["bytes"].min()), int(g["bytes"].max())) for c, g in inputs.groupby("collective")}


def tuner_conf_text(plan: ApplyPlan, provenance: list[str]) -> str:
    """nccl_tuner.conf: comments (where from, whether to apply it or recommend.env, how to load, the override
    trap, the measured scope), then one CSV line per rule, commented out when it is only the alternative."""
    lines = [
        "# Use: export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so and "
        "NCCL_TUNER_CONFIG_FILE=/path/to/nccl_tuner.conf in the shell that launches the engine; NCCL reads both at init.",
        *(comment(line) for line in provenance),
    ]
    active = plan.choice == TUNER_CONF
    if active:
        lines.append(comment(f"commprof recommends this file for this run: {plan.why}."))
        if plan.alternative:
            lines.append("# recommend.env holds the alternative (commented out): use one of the two, never both.")
    elif plan.rules and plan.choice is None:
        lines.append(comment(f"Not recommended for this run, so commented out: {plan.why}."))
    elif plan.rules:
        lines += [
            comment(f"ALTERNATIVE, not recommended for this run: commprof recommends {plan.choice} ({plan.why})."),
            "# To use these rules instead of it (never with its NCCL_ALGO / NCCL_PROTO), uncomment them.",
        ]
    lines += [
        comment(f"NCCL example tuner plugin rules, for {TUNER_PLUGIN_NOTE}. Load with:"),
        "#   export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so",
        "#   export NCCL_TUNER_CONFIG_FILE=/path/to/nccl_tuner.conf",
        "# NCCL_ALGO / NCCL_PROTO in the environment override a tuner: do not set them together with this file.",
        "# An algorithm/protocol pair NCCL cannot run is silently ignored: check NCCL_DEBUG=INFO's TUNING lines.",
    ]
    for coll, (low, high) in sorted(plan.ranges.items()):
        lines.append(
            f"# {coll} sizes this run covers: {low}-{high} B; rules reach {size_band(low)[0]}-"
            f"{size_band(high)[1]} B at most. Larger messages (prefill's: thousands of tokens, tens of MB) and "
            "smaller ones were not in this run: NCCL keeps its own choice there."
        )
    if not plan.inputs.empty:
        lines.append("# The fastest point at each size of this run (one T each):")
    for r in plan.inputs.sort_values(["collective", "bytes"]).itertuples() if not plan.inputs.empty else []:
        note = getattr(r, "note", None)
        choice = (
            f"{r.algorithm}/{r.protocol}"
            if isinstance(r.algorithm, str) and isinstance(r.protocol, str)
            else f"{note}: no rule"
            if isinstance(note, str) and note
            else "no single algo/proto: no rule"
        )
        lines.append(comment(f"  {r.collective} {r.bytes} B (T={r.tokens}): {r.point_id} {r.label!s} -> {choice}"))
    if not plan.rules:
        lines.append(comment(f"No rule: {plan.no_rule}"))
    lines.append("# " + ",".join(TUNER_FIELDS))
    lines += [one_line(rule.csv()) if active else comment(rule.csv()) for rule in plan.rules]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- recommend.env


def recommend_env_text(plan: ApplyPlan, provenance: list[str], notes: list[str]) -> str:
    """Bash-sourceable export lines of the recommended settings, with where they were measured and why; the
    lines are commented out when nccl_tuner.conf is what to apply (they would override it)."""
    lines = [
        "# Use: source recommend.env in the bash that launches the engine (every rank inherits its NCCL_* variables).",
        *(comment(line) for line in provenance + notes),
    ]
    active = plan.choice == RECOMMEND_ENV
    if active:
        lines.append(comment(f"commprof recommends this file for this run: {plan.why}."))
        if plan.alternative:
            lines.append("# nccl_tuner.conf holds the alternative (commented out): use one of the two, never both.")
    elif plan.env and plan.choice is None:
        lines.append(comment(f"Not recommended for this run, so commented out: {plan.why}."))
    elif plan.env:
        lines += [
            comment(f"ALTERNATIVE, not recommended for this run: commprof recommends {plan.choice} ({plan.why})."),
            "# To use these settings instead of it (never with it: they override a tuner), uncomment them.",
        ]
    else:
        lines.append(comment(f"Nothing to export: {plan.why}."))
    if plan.env:
        lines.append(
            "# These variables are read once per process (NCCL reads most of its own at init): restart the engine "
            "after sourcing this file."
        )
    for name, value in sorted(plan.env.items()):
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

CSV_DROP = ("env", "config", "op_us", "nccl", "rank_step_median_us")


def results_csv(frame: pd.DataFrame) -> str:
    """Every record as one CSV row (nested op_us / nccl left out; per-rank medians joined with ';'); text cells
    that a spreadsheet would run as a formula are prefixed with an apostrophe."""
    table = whole_counts(frame.drop(columns=[c for c in CSV_DROP if c in frame]))
    for column in table.columns:
        if not pd.api.types.is_numeric_dtype(table[column]):  # text columns (object or pandas' str dtype)
            table[column] = table[column].map(spreadsheet_cell)
    if "rank_step_median_us" in frame:
        table["rank_step_median_us"] = [
            ";".join(f"{v:g}" for v in ranks) if isinstance(ranks, list) else ""
            for ranks in frame["rank_step_median_us"]
        ]
    return table.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC)


def _number(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


@dataclass
class RunExports:
    """One run's exported files: their texts (the page shows them too) and where they were written."""

    folder: str  # relative to the report's folder ("." for a single run)
    files: dict[str, str]  # file name -> path relative to the report's folder
    recommend_env: str
    tuner_conf: str
    engine_text: str
    hints: list[EngineHint]
    plan: ApplyPlan
    routing_text: str = ""
    decision: Any = None  # the run's one answer (report/decision.Decision) every file above renders
