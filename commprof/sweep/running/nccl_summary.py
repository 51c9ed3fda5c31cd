"""What a point's NCCL INFO logs say, as its records keep it: the facts of the init log, NCCL's choices for the
step's own ops from the untimed logging worker's TUNING lines, the log's findings, and whether NCCL engaged the
algorithm, protocol and channels the point asked for (commprof.nccl_log.engagement)."""

from __future__ import annotations

import math
from pathlib import Path

from commprof.nccl_log.engagement import engagements, not_engaged_at
from commprof.nccl_log.parse import choice_matches, parse_nccl_log
from commprof.replay.trial import TrialRequest


def sizes_by_tokens(request: TrialRequest) -> dict[int, list[tuple[str, int, int]]]:
    """Per T, (collective, input bytes per rank, output bytes) of every op of the point's plan."""
    from commprof.planner.models import DTYPE_BYTES, ModelShape
    from commprof.planner.plan import PlanOptions, build_step_plan

    model = ModelShape(**request.model)
    options = PlanOptions(**request.plan_options)
    sizes = {}
    for tokens in request.tokens:
        plan = build_step_plan(model, request.tp, tokens, request.phase, request.dtype, options)
        sizes[tokens] = sorted(
            {
                (
                    op.collective,
                    math.prod(op.input_shape) * DTYPE_BYTES[op.dtype],
                    math.prod(op.shape) * DTYPE_BYTES[op.dtype],
                )
                for op in plan.ops
            }
        )
    return sizes


def plan_sizes(request: TrialRequest) -> set[tuple[str, int, int]]:
    """(collective, input bytes per rank, output bytes) of every op of the point's plans, over its T values."""
    return {size for sizes in sizes_by_tokens(request).values() for size in sizes}


def point_nccl(request: TrialRequest, init_log: Path, tuning_log: Path | None) -> tuple[dict | None, dict[int, str]]:
    """(the point's `nccl` section: its init log summarised, the logging worker's choices where it ran, and what NCCL
    engaged of the point's settings; T -> why NCCL did not engage a setting there)."""
    by_tokens = sizes_by_tokens(request)
    sizes = {size for ops in by_tokens.values() for size in ops}
    nccl = summarize_nccl_log(init_log, sizes)
    tuning = summarize_nccl_log(tuning_log, sizes) if tuning_log is not None else None
    if nccl is None:
        return None, {}
    if tuning is not None:
        nccl["choices"] = tuning.get("choices", [])
    found = engagements({str(k): str(v) for k, v in (request.point.get("env") or {}).items()}, nccl, by_tokens)
    if found:
        nccl["engagement"] = [item.to_dict() for item in found]
    return nccl, not_engaged_at(found)


# What a record keeps of the parsed log: the op sequence and the TUNING table stay in the point's log files.
RECORD_KEYS = (
    "version",
    "nranks",
    "nnodes",
    "transports",
    "peer_transports",
    "channels",
    "channel_counts",
    "graphs",
    "rings",
    "choices",
    "p2p_level",
    "env",
    "warnings",
)


def summarize_nccl_log(path: Path, sizes: set[tuple[str, int, int]]) -> dict | None:
    """What NCCL reported in a point's rank-0 INFO log, its choices kept for the step's own ops, and the
    log's findings (see commprof.nccl_log.findings)."""
    from commprof.nccl_log.findings import find_problems

    if not path.exists():
        return None
    parsed = parse_nccl_log(path.read_text(errors="replace"))
    summary = {key: value for key, value in parsed.to_dict().items() if key in RECORD_KEYS}
    summary["choices"] = _unique_choices(summary.get("choices", []), sizes)
    summary["findings"] = [f.to_dict() for f in find_problems(parsed)]
    return summary


def _unique_choices(choices: list[dict], sizes: set[tuple[str, int, int]]) -> list[dict]:
    """One entry per distinct choice, for the step's own ops (torch's init traffic left out)."""
    unique = {}
    for choice in choices:
        if sizes and not any(choice_matches(choice, *size) for size in sizes):
            continue
        key = (choice.get("coll"), choice.get("bytes"), choice.get("algo"), choice.get("proto"), choice.get("channels"))
        unique.setdefault(key, choice)
    return list(unique.values())
