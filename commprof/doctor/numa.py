"""Check 8: which socket each GPU hangs off, and whether the tensor-parallel group spans sockets."""

from __future__ import annotations

from commprof.doctor.facts import Facts
from commprof.doctor.gpus import gpu_view, pair_levels
from commprof.doctor.result import OK, SKIPPED, WARN, CheckResult

ID, TITLE = "numa", "NUMA placement of the GPUs"


def check_numa(facts: Facts) -> CheckResult:
    gpus, where, why = gpu_view(facts)
    if not gpus:
        return CheckResult(ID, TITLE, SKIPPED, f"no GPU: {why}")
    tp = min(facts.tp or len(gpus), len(gpus))
    if tp < 2:
        return CheckResult(ID, TITLE, SKIPPED, "a TP group of one GPU has no peers")
    group = list(range(tp))
    levels, levels_where = pair_levels(facts)
    cross = [(a, b) for (a, b), level in levels.items() if a in group and b in group and level == "SYS"]
    nodes: dict[int | None, list[int]] = {}
    for g in gpus[:tp]:
        nodes.setdefault(g["numa_node"], []).append(g["index"])
    placement = ", ".join(
        f"GPU {_span(ids)} on NUMA {node if node is not None else '?'}" for node, ids in nodes.items()
    )
    numa_where = levels_where if where != "NVML" and levels_where else where
    evidence = [f"{placement} ({numa_where if any(n is not None for n in nodes) else 'NUMA unknown'})"]
    if levels:
        evidence.append(f"{len(cross)} of {tp * (tp - 1) // 2} pairs in TP {tp} are SYS ({levels_where})")
    if not levels and None in nodes:
        return CheckResult(ID, TITLE, SKIPPED, "neither path levels nor NUMA nodes of the GPUs were read", evidence)
    if cross or (not levels and len(nodes) > 1):
        return CheckResult(
            ID,
            TITLE,
            WARN,
            f"TP {tp} spans two sockets ({placement}): every all-reduce crosses the socket link, a one-shot "
            "all-reduce (each GPU reads every peer) loses most there, and NCCL stages SYS pairs through host "
            "memory unless NCCL_P2P_LEVEL=SYS",
            evidence,
            "keep a TP group inside one socket where the model fits (e.g. TP 4 on GPUs 0-3 and 4-7), or measure "
            "TP across sockets with NCCL_P2P_LEVEL=SYS as a sweep axis; bind each rank to its GPU's node: "
            "numactl --cpunodebind=<node> --membind=<node>",
        )
    return CheckResult(ID, TITLE, OK, f"TP {tp} stays within one socket ({placement})", evidence)


def _span(ids: list[int]) -> str:
    return (
        f"{ids[0]}-{ids[-1]}" if len(ids) > 1 and ids == list(range(ids[0], ids[-1] + 1)) else ",".join(map(str, ids))
    )
