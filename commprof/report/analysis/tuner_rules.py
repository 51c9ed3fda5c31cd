"""The rules NCCL's tuner plugin reads, and which one file a run applies: per size, what NCCL ran at each winning
point, the plugin's rules and the apply plan that chooses between recommend.env and nccl_tuner.conf. Pure: the
files' texts are made from these in report/exports/files.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from commprof.nccl_vocab import (
    ALGORITHMS,
    CHANNEL_VARIABLES,
    COLLECTIVES,
    PROTOCOLS,
    Name,
    forced,
    named,
)
from commprof.planner.models import DTYPE_BYTES
from commprof.report.decision.formatting import finite
from commprof.report.decision.types import RECOMMEND_ENV, TUNER_CONF, NcclFile

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


# ------------------------------------------------------------------------------------------ what to apply

# What the example tuner plugin can set per size: the algorithm, the protocol and the channel count.
TUNER_VARIABLES = frozenset(("NCCL_ALGO", "NCCL_PROTO", *CHANNEL_VARIABLES))


@dataclass(frozen=True)
class ApplyPlan:
    """The one file to apply (`choice`, None: nothing), why, and what each file holds."""

    choice: NcclFile | None
    why: str
    env: dict[str, str]  # what recommend.env exports (the recommendation's settings; {} when the baseline is kept)
    rules: list[TunerRule] = field(default_factory=list)
    inputs: pd.DataFrame = field(default_factory=pd.DataFrame)  # rule_inputs: the per-size winners
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # collective -> the run's sizes (min, max)
    no_rule: str = ""  # why nccl_tuner.conf has no rule, when it has none
    winners: dict[int, str] = field(default_factory=dict)  # T -> the point the rules run there (beyond error)

    @property
    def alternative(self) -> str | None:
        """The other file, when it holds something to apply instead (its lines are commented out)."""
        if self.choice == RECOMMEND_ENV and self.rules:
            return TUNER_CONF
        if self.choice == TUNER_CONF and self.env:
            return RECOMMEND_ENV
        return None

    @property
    def reach(self) -> dict[str, tuple[int, int]]:
        """Collective -> the sizes its rules reach at most: the size bands of the run's smallest and largest."""
        return {coll: (size_band(low)[0], size_band(high)[1]) for coll, (low, high) in self.ranges.items()}


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
            if finite(r.hidden_size) and finite(r.tokens)
            else None
        }
        logged: dict[str, dict] = {}
        ranks = int(r.world_size) if finite(r.world_size) else None
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
                    "n_ranks": int(r.world_size) if finite(r.world_size) else -1,
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
