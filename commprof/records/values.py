"""The numbers a record or meta.json field may hold, bounded where no sweep, log or nccl-tests run could write more:
the values every reader computes with (records.schema, records.nccl_facts, records.run_meta)."""

from __future__ import annotations

import sys

from commprof.records.validate import bounded

MAX_RANKS = 1 << 20
MAX_BYTES = 1 << 48
MAX_TOKENS = 1 << 24  # a step's T
MAX_COUNT = 1 << 31  # steps timed or warmed up, bad ops, samples
MAX_POINT_TIMEOUT_S = 7 * 86400.0  # a week
# No verify step keeps more tokens than this (drafts are a handful of tokens; T itself is at most a few hundred).
MAX_ACCEPT = 1024
# An error no model is stated with: ten times the time it predicts (every page prints a prediction's ±).
MAX_ERROR_PCT = 1000.0
ErrorPct = bounded(float, "{path} {value!r} is not an error in % (allowed: 0..1000)", ge=0, le=MAX_ERROR_PCT)
# The most settings one point may make (a sweep file's [axes] or [[points]], a record's point.env): more variables
# than NCCL, torch and the engines read; a point copies its environment per setting, and every view lists them.
MAX_SETTINGS = 256
LARGEST = sys.float_info.max
Finite = bounded(float, "{colon}: expected a finite number, got {value!r}", ge=-LARGEST, le=LARGEST)
# A duration or bandwidth at the top of a record, and one inside a Stats, a list or a column.
NonNegative = bounded(float, "{path} {value!r} is negative or not finite", ge=0, le=LARGEST)
Time = bounded(float, "{head}: a negative or non-finite time", ge=0, le=LARGEST)
Ranks = bounded(int, ge=1, le=MAX_RANKS)
Bytes = bounded(int, ge=0, le=MAX_BYTES)
Count = bounded(int, ge=0, le=MAX_COUNT)
# A GPU's compute capability as torch and nvidia-smi say it ("9.0", "12.0"): shown on pages and parsed as a number.
ComputeCapability = bounded(
    str, "compute capability {value!r} is not major.minor (9.0, 12.0)", pattern=r"\A\d{1,3}\.\d{1,3}\Z"
)
