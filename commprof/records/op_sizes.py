"""A step record's per-op times per (collective as routed, message size): what the routing plan compares at each
size (report/analysis/routing_candidates.py) and what the sweep's confirmation picks route winners and fused kinds
from (sweep/planning/interleave.py), read one way. Pure."""

from __future__ import annotations

from commprof.records.schema import FUSED
from commprof.stats import median


def op_times_per_size(
    record: dict, fused: bool, baseline: bool, reference: bool
) -> dict[tuple[str, int], list[tuple[float, float]]]:
    """A record's (median, p90) op times per (collective as routed, bytes), one pair per op. `fused`: the record's
    implementation replaces all-reduce + RMSNorm, so its all-reduces after a layer are the fused collective (the
    embedding's has no RMSNorm after it, and is no candidate: it runs the kind's own kernel with its plain pattern,
    FlashInfer's kAllReduce, which no engine setting routes a band of plain all-reduces to, as
    impls/flashinfer_fused.py says); `baseline`: keep the other collectives (every implementation runs those
    with torch.distributed: the baseline's); `reference`: the unfused reference, whose plain all-reduce is the
    baseline's own, so only its fused sizes count."""
    ops = record.get("op_us") or {}
    sites = ops.get("sites", ())
    # Each op's collective as the record names it (records before that: the logits site is the all-gather).
    kinds = ops.get("collectives") or [
        "all_gather" if str(s).rsplit(".", 1)[-1] == "logits" else "all_reduce" for s in sites
    ]
    per_size: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for site, collective, nbytes, op_median, p90 in zip(
        sites, kinds, ops.get("bytes", ()), ops.get("median", ()), ops.get("p90", ops.get("median", ()))
    ):
        if op_median is None or p90 is None:
            continue
        if collective != "all_reduce" and not baseline:
            continue
        if collective == "all_reduce" and fused:
            if str(site) == "embed":
                continue
            collective = FUSED
        elif collective == "all_reduce" and reference:
            continue
        per_size.setdefault((collective, int(nbytes)), []).append((float(op_median), float(p90)))
    return per_size


def per_size_medians(
    record: dict, fused: bool, baseline: bool, reference: bool
) -> dict[tuple[str, int], tuple[float, float]]:
    """op_times_per_size with each size's ops as one (median, p90): the medians of its ops' medians and p90s."""
    return {
        key: (median([v[0] for v in values]), median([v[1] for v in values]))
        for key, values in op_times_per_size(record, fused, baseline, reference).items()
    }
