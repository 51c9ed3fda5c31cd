"""What the box measured, as `commprof explain` reads it: each observation one timed op (or one step of ops), with
where it was read. From `--observed-op-us BYTES=US`, from an nccl-tests log (commprof.costmodel.nccl_tests), from
an engine's communication per step (`--observed-step-ms T=MS` set beside the step plan) or from a measured run's
records. Pure: text, parsed logs, plans and records in; UsageError naming what cannot be used.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from statistics import median

from commprof.costmodel.latency import COLLECTIVES
from commprof.costmodel.nccl_tests import ParsedLog
from commprof.errors import UsageError
from commprof.impls.registry import fuses_rmsnorm, runs_on_nccl
from commprof.planner.plan import StepPlan
from commprof.records.point_ids import BASELINE_POINT_ID
from commprof.units import MAX_BYTES, MAX_TIME_US, format_bytes


@dataclass(frozen=True)
class Observation:
    """One observed time: of one op, or of a step's ops together."""

    label: str
    """How the output names it: "56 KiB x8", "T=4 step x8"."""
    ops: tuple[tuple[str, int, int], ...]
    """(collective, bytes, how many) of the ops timed together."""
    ranks: int
    """The ranks that ran it."""
    time_us: float
    """The observed time, µs."""
    source: str
    """Where it was read: a flag, a file and line."""
    env: tuple[tuple[str, str], ...] = ()
    """The NCCL variables it states it ran under (an nccl-tests log's header)."""
    graph: bool = False
    """Timed inside a CUDA graph: the CPU launch of each op is not in it."""

    @property
    def nbytes(self) -> int:
        """The size the output lists it under: its largest all-reduce (else its largest op)."""
        reduces = [b for c, b, _ in self.ops if c == "all_reduce"]
        return max(reduces or [b for _, b, _ in self.ops])

    @property
    def count(self) -> int:
        return sum(n for _, _, n in self.ops)


def _size(text: str, flag: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(f"{flag}: {text.strip()!r} is not a whole number of bytes") from None
    if not 1 <= value <= MAX_BYTES:
        raise UsageError(
            f"{flag}: {value} bytes cannot be priced: the model prices a collective of 1 byte to "
            f"{format_bytes(MAX_BYTES)}"
        )
    return value


def _time(text: str, flag: str, unit: str, scale: float) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise UsageError(f"{flag}: {text.strip()!r} is not a number of {unit}") from None
    if not math.isfinite(value) or not 0 < value * scale <= MAX_TIME_US:
        raise UsageError(f"{flag}: {text.strip()!r} must be a number of {unit} above 0, at most a day")
    return value * scale


def _pairs(values: Sequence[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for value in values:
        for part in str(value).split(","):
            key, sep, number = part.partition("=")
            if not sep or not key.strip() or not number.strip():
                raise UsageError(f"{flag}: {part.strip()!r} is not KEY=VALUE (e.g. {flag} 57344=205)")
            out.append((key, number))
    return out


def op_observations(values: Sequence[str], ranks: int, graph: bool = False) -> list[Observation]:
    """`--observed-op-us BYTES=US` (repeatable, or comma-separated): one all-reduce of BYTES took US µs."""
    flag = "--observed-op-us"
    out = []
    for key, number in _pairs(values, flag):
        nbytes, time_us = _size(key, flag), _time(number, flag, "microseconds", 1.0)
        out.append(
            Observation(
                f"{format_bytes(nbytes)} x{ranks}",
                (("all_reduce", nbytes, 1),),
                ranks,
                time_us,
                f"{flag} {key.strip()}={number.strip()}",
                graph=graph,
            )
        )
    _no_repeats(out, flag)
    return out


def step_observations(values: Sequence[str], plans: dict[int, StepPlan], graph: bool = True) -> list[Observation]:
    """`--observed-step-ms T=MS`: the engine's communication in one step of T tokens took MS ms; its ops are the
    step plan's (`plans`: per T)."""
    flag = "--observed-step-ms"
    out = []
    for key, number in _pairs(values, flag):
        try:
            tokens = int(key.strip())
        except ValueError:
            raise UsageError(f"{flag}: T {key.strip()!r} is not a whole number") from None
        if not 1 <= tokens <= MAX_TOKENS:
            raise UsageError(f"{flag}: T must be from 1 to {MAX_TOKENS}, got {tokens}")
        plan = plans.get(tokens)
        if plan is None:
            raise UsageError(f"{flag}: no step plan for T={tokens}")
        counts = Counter((op.collective, op.bytes) for op in plan.ops)
        ops = tuple((c, b, n) for (c, b), n in sorted(counts.items()))
        out.append(
            Observation(
                f"T={tokens} step x{plan.tp}",
                ops,
                plan.tp,
                _time(number, flag, "milliseconds", 1000.0),
                f"{flag} {key.strip()}={number.strip()} ({plan.model.name}, {len(plan.ops)} collectives per step)",
                graph=graph,
            )
        )
    _no_repeats(out, flag)
    return out


def log_observations(parsed: ParsedLog) -> list[Observation]:
    """Every row of every run of an nccl-tests log the model can price: the median of its places (out-of-place,
    in-place) that nccl-tests did not report wrong; runs of collectives the model has no formula for, and runs of
    one rank or an unknown rank count, are left out."""
    name = parsed.path.rsplit("/", 1)[-1]
    out = []
    for run in parsed.runs:
        if run.collective not in COLLECTIVES or not run.ranks or run.ranks < 2:  # one rank moves nothing
            continue
        for row in run.rows:
            times = [v["time_us"] for v in row.places.values() if not v.get("wrong")]
            if not times or row.bytes < 1:
                continue
            out.append(
                Observation(
                    _label(run.collective, row.bytes, run.ranks),
                    ((run.collective, row.bytes, 1),),
                    run.ranks,
                    median(times),
                    f"{name}:{row.line}",
                    tuple(sorted(run.env.items())),
                    run.graph,
                )
            )
    return out


def run_observations(records: Iterable[dict], where: str) -> list[Observation]:
    """A measured run's baseline (NCCL with its defaults): the median of each op size's per-op medians, eager."""
    sizes: dict[tuple[str, int, int], list[float]] = {}
    for record in records:
        point = record.get("point") or {}
        if (
            record.get("kind") != "step"
            or record.get("source") != "measured"
            or record.get("status") != "ok"
            or record.get("mode") != "eager"
            or record.get("point_id") != BASELINE_POINT_ID
            or not runs_on_nccl(point.get("impl", "nccl"))
            or fuses_rmsnorm(point.get("impl", "nccl"))
            or point.get("env")
        ):
            continue
        ops = record.get("op_us") or {}
        ranks = record.get("world_size")
        collectives = ops.get("collectives") or ["all_reduce"] * len(ops.get("bytes", []))
        for collective, nbytes, value in zip(collectives, ops.get("bytes", []), ops.get("median", [])):
            if value is not None and isinstance(ranks, int) and collective in COLLECTIVES:
                sizes.setdefault((collective, int(nbytes), ranks), []).append(float(value))
    return [
        Observation(
            _label(collective, nbytes, ranks),
            ((collective, nbytes, 1),),
            ranks,
            median(values),
            f"{where}: point {BASELINE_POINT_ID}, median of {len(values)} op medians",
        )
        for (collective, nbytes, ranks), values in sorted(sizes.items(), key=lambda item: item[0][::-1])
    ]


MAX_TOKENS = 1 << 24  # the most tokens one step may hold (as `report --observed-step-ms` reads T)
MAX_OBSERVATIONS = 2000  # distinct observations one explanation is priced on: bounded time on any log


def merged(observations: Iterable[Observation]) -> list[Observation]:
    """Repeats of the same ops at the same ranks, settings and mode as one observation, the median of their times;
    UsageError beyond MAX_OBSERVATIONS distinct ones."""
    groups: dict[tuple, list[Observation]] = {}
    for obs in observations:
        groups.setdefault((obs.ops, obs.ranks, obs.env, obs.graph), []).append(obs)
    if len(groups) > MAX_OBSERVATIONS:
        raise UsageError(
            f"{len(groups)} distinct observations: explain prices at most {MAX_OBSERVATIONS} (give fewer sizes or runs)"
        )
    out = []
    for same in groups.values():
        first = same[0]
        if len(same) == 1:
            out.append(first)
            continue
        time_us = median(o.time_us for o in same)
        out.append(replace(first, time_us=time_us, source=f"{first.source} (median of {len(same)} repeats)"))
    return out


def _label(collective: str, nbytes: int, ranks: int) -> str:
    """ "56 KiB x8" for an all-reduce, "320 KiB all_gather x8" for another collective."""
    return f"{format_bytes(nbytes)}{'' if collective == 'all_reduce' else ' ' + collective} x{ranks}"


def _no_repeats(observations: list[Observation], flag: str) -> None:
    seen = Counter(o.label for o in observations)
    twice = [label for label, n in seen.items() if n > 1]
    if twice:
        raise UsageError(f"{flag}: {twice[0]} given twice")
