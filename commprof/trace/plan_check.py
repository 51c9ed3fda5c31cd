"""Is the step in a trace the step commprof replays? The trace's step against the step plan (pure)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from commprof.planner.models import DTYPE_BYTES
from commprof.planner.plan import StepPlan


def plan_signature(plan: StepPlan) -> tuple:
    """The plan's ops as the trace records them: (kind, bytes one rank sends in, bytes it receives)."""
    return tuple(
        (op.collective, math.prod(op.input_shape) * DTYPE_BYTES[op.dtype], math.prod(op.shape) * DTYPE_BYTES[op.dtype])
        for op in plan.ops
    )


def compare_with_plan(step: tuple, plan: StepPlan, group_sizes: set[int]) -> dict[str, Any]:
    """`plan_match` (the same ops, sizes and order) and, where they differ, what differs."""
    expected = plan_signature(plan)
    differences: list[dict[str, Any]] = []
    if group_sizes and group_sizes != {plan.tp}:
        differences.append(
            {
                "what": "group size",
                "plan": plan.tp,
                "trace": sorted(group_sizes)[0] if len(group_sizes) == 1 else sorted(group_sizes),
            }
        )
    plan_counts, trace_counts = Counter(expected), Counter(step)
    for key in sorted(set(plan_counts) | set(trace_counts), key=str):
        if plan_counts[key] != trace_counts[key]:
            kind, bytes_in, bytes_out = key
            differences.append(
                {
                    "what": f"{kind} of {bytes_in} B in, {bytes_out} B out",
                    "plan": plan_counts[key],
                    "trace": trace_counts[key],
                }
            )
    if not differences and step != expected:
        first = next(i for i, (a, b) in enumerate(zip(expected, step)) if a != b)
        differences.append(
            {"what": "order", "plan": f"op {first}: {expected[first]}", "trace": f"op {first}: {step[first]}"}
        )
    return {
        "plan_match": not differences,
        "plan": {
            "model": plan.model.name,
            "tp": plan.tp,
            "tokens": plan.tokens,
            "phase": plan.phase,
            "ops": len(expected),
        },
        "differences": differences,
    }
