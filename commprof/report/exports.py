"""What a user pastes: recommend.env, NCCL tuner-plugin rules, nccl-tests tables and the results CSV, as text.

Pure (DataFrames and dicts in, strings out; report/write.py writes them). Every file says which run and which
source (measured / simulated / imported) it came from. Engine flags: engine_hints.py.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

import pandas as pd

from commprof.nccl_vocab import ALGORITHMS, CHANNEL_VARIABLES, COLLECTIVES, ENV_NAME, PROTOCOLS, Name, forced, named
from commprof.planner.models import DTYPE_BYTES
from commprof.report.engine_hints import EngineHint

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


# ------------------------------------------------------------------------------------------- tuner rules


@dataclass(frozen=True)
class TunerRule:
    """One line of the NCCL example tuner plugin's config file."""

    collective: str
    min_bytes: int
    max_bytes: int  # -1: no upper bound (strtoull("-1") is the largest size)
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
        for choice in choices:
            coll = _tuner(named(COLLECTIVES, choice.get("coll")))
            if coll:
                logged.setdefault(coll, choice)
                sizes.setdefault(coll, choice.get("bytes"))
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


def tuner_rules(inputs: pd.DataFrame) -> list[TunerRule]:
    """One rule per message-size range, per collective: each measured size owns the range up to the geometric
    midpoint with its neighbours; neighbouring ranges with the same choice merge; sizes without a known
    algorithm and protocol get no rule (NCCL keeps its own choice there)."""
    rules: list[TunerRule] = []
    for coll, group in inputs.groupby("collective", sort=True):
        group = group.sort_values("bytes").drop_duplicates("bytes")
        sizes = group["bytes"].tolist()
        bounds = [math.isqrt(a * b) for a, b in zip(sizes, sizes[1:])]
        lows = [0] + bounds
        highs = [b - 1 for b in bounds] + [-1]
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


def tuner_conf_text(rules: list[TunerRule], inputs: pd.DataFrame, provenance: list[str]) -> str:
    """nccl_tuner.conf: comments (where from, how to load, the override trap), then one CSV line per rule."""
    lines = [f"# {line}" for line in provenance]
    lines += [
        "# NCCL example tuner plugin rules (plugins/tuner/example in the NCCL source tree). Load with:",
        "#   export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so",
        "#   export NCCL_TUNER_CONFIG_FILE=/path/to/nccl_tuner.conf",
        "# NCCL_ALGO / NCCL_PROTO in the environment override a tuner: do not set them together with this file.",
        "# An algorithm/protocol pair NCCL cannot run is silently ignored: check NCCL_DEBUG=INFO's TUNING lines.",
        "# Ranges come from the fastest point at each measured size (one T each); -1 = any / keep NCCL's choice.",
        "# " + ",".join(TUNER_FIELDS),
    ]
    for r in inputs.sort_values(["collective", "bytes"]).itertuples():
        note = getattr(r, "note", None)
        choice = (
            f"{r.algorithm}/{r.protocol}"
            if isinstance(r.algorithm, str) and isinstance(r.protocol, str)
            else f"{note}: no rule"
            if isinstance(note, str) and note
            else "no single algo/proto: no rule"
        )
        lines.append(f"#   {r.collective} {r.bytes} B (T={r.tokens}): {r.point_id} {r.label!s} -> {choice}")
    if not rules:
        lines.append(
            "# No rule: at every size NCCL keeps its own choice (no winner beyond noise with a known "
            "algorithm and protocol)."
        )
    lines += [rule.csv() for rule in rules]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- recommend.env


def recommend_env_text(point: pd.Series | None, provenance: list[str], notes: list[str]) -> str:
    """Bash-sourceable export lines for the recommended point's environment, with where it was measured."""
    lines = [f"# {line}" for line in provenance + notes]
    env = point["env"] if point is not None and isinstance(point.get("env"), dict) else {}
    if point is None:
        lines.append("# No point passed at every T in this run: nothing to recommend.")
    elif not env:
        lines.append("# The recommendation sets no variable: nothing to export.")
    lines.append("# NCCL reads most variables once per process: restart the engine after sourcing this file.")
    for name, value in sorted(env.items()):
        if not ENV_NAME.match(name):
            lines.append(f"# skipped {name!r}: not a valid environment variable name")
            continue
        lines.append(f"export {name}={shlex.quote(str(value))}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- nccl-tests tables


def nccl_tests_table(
    sizes: list[tuple[str, int, float]], world_size: int, dtype: str, header: list[str], wrong: int | None
) -> str:
    """An all_reduce_perf-style table per collective: size, count, type, redop, root, time, algbw, busbw, #wrong.

    `sizes`: (collective, bytes, time µs) rows, time being the median over the ops of that size.
    algbw = bytes / time; busbw = algbw × 2(n−1)/n for all-reduce, × (n−1)/n for all-gather (nccl-tests'
    definitions); count is elements of the buffer (all-reduce) or per rank (all-gather), as nccl-tests prints.
    """
    elem = DTYPE_BYTES.get(dtype, 2)
    type_name = NCCL_TESTS_TYPES.get(dtype, dtype)
    lines = [f"# {line}" for line in header]
    busbws = []
    for collective in sorted({row[0] for row in sizes}):
        factor = 2 * (world_size - 1) / world_size if collective == "all_reduce" else (world_size - 1) / world_size
        redop = "sum" if collective == "all_reduce" else "none"
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
    """Every record as one CSV row (nested op_us / nccl left out; per-rank medians joined with ';')."""
    table = frame.drop(columns=[c for c in CSV_DROP if c in frame])
    if "rank_step_median_us" in frame:
        table["rank_step_median_us"] = [
            ";".join(f"{v:g}" for v in ranks) if isinstance(ranks, list) else ""
            for ranks in frame["rank_step_median_us"]
        ]
    return table.to_csv(index=False)


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
