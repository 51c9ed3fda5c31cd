"""What may be proposed from a result: the one rule the staged search (which points to refine) and the report
(which points to rank and recommend) share, so the search never spends a point on what the report must refuse.

A simulation checks no result and times nothing: a simulated point whose settings carry a known correctness trap
on the interconnect (LL128 off NVLink), or a kernel predicted with an unknown error (only the floor of its
algorithm), may not be proposed. Measured points are judged by their own checks (a corrupt one is "wrong").
"""

from __future__ import annotations

from commprof.nccl_vocab import ENV_CHECKS, value_traps


def interconnect_of(topology: dict | None) -> str:
    """ "nvlink" where the GPUs' path is NVLink (a topology preset's or probe's gpu_path "NV..."), else "pcie"."""
    path = str((topology or {}).get("gpu_path", "")).upper() if isinstance(topology, dict) else ""
    return "nvlink" if path.startswith("NV") else "pcie"


def not_proposable(record: dict, interconnect: str) -> str | None:
    """Why a step record's point may not be proposed (searched further, ranked, recommended), or None."""
    if record.get("source") != "simulated":
        return None
    kernel = record.get("kernel_model")
    if isinstance(kernel, dict) and kernel.get("expected_error_pct") is None:
        basis = "only as the floor of its algorithm" if kernel.get("basis") == "floor" else "from figures"
        return (
            f"{kernel.get('impl')} is predicted {basis} ({kernel.get('source')}) with an unknown error, so it is "
            "not ranked: measure it"
        )
    env = (record.get("point") or {}).get("env") or {}
    traps = [
        trap
        for name, value in sorted(env.items())
        if name in ENV_CHECKS
        for trap in value_traps(str(name), str(value), interconnect)
    ]
    if traps:
        return f"{traps[0].split(';')[0]}; a simulation checks no result, so it is not ranked: measure it"
    return None
