"""What ran between the collectives of a run's steps, and the step told apart by it: communication = step -
compute (the compute timed on its own), wire = step - waiting for late ranks. Pure, over the baseline's records.
"""

from __future__ import annotations

from typing import Any


def spacing_summary(records: list[dict[str, Any]], point_id: str | None, mode: str) -> dict[str, Any] | None:
    """The baseline's step, compute, communication and waiting in `mode`, summed over T (µs) as the ranking sums
    them; None when its steps ran back to back with no late rank (nothing to tell apart)."""
    rows = [
        r
        for r in records
        if r.get("kind") == "step"
        and r.get("point_id") == point_id
        and r.get("mode") == mode
        and r.get("status") == "ok"
        and r.get("step_us")
    ]
    described = next((r["spacing"] for r in rows if r.get("spacing")), None)
    if not rows or described is None:
        return None

    def total(name: str) -> float | None:
        values = [(r.get(name) or {}).get("median") for r in rows]
        return None if any(v is None for v in values) else float(sum(values))

    step, compute, wait = total("step_us"), total("compute_us"), total("wait_us")
    clock = next((r.get("wait_clock") for r in rows if r.get("wait_clock")), None)
    parts = [f"compute {described.get('compute')}, late ranks: {described.get('skew')} ({mode} mode, sums over T)"]
    parts.append(f"step {step / 1000:.3f} ms")
    if compute is not None:
        parts.append(
            f"compute {compute / 1000:.3f} ms (timed on its own); communication = step − compute: "
            f"{(step - compute) / 1000:.3f} ms"
        )
    if wait is not None:
        parts.append(
            f"waiting for the last rank {wait / 1000:.3f} ms ({clock}); step − wait: {(step - wait) / 1000:.3f} ms"
        )
    elif clock:
        parts.append(f"waiting {clock}")
    return {
        "compute": described.get("compute"),
        "skew": described.get("skew"),
        "mode": mode,
        "step_us": step,
        "compute_us": compute,
        "communication_us": None if compute is None else step - compute,
        "wait_us": wait,
        "wait_clock": clock,
        "sentence": "Replayed with work between the collectives: "
        + "; ".join(parts)
        + (". The times this report ranks are communication (step − compute)." if compute is not None else "."),
    }
