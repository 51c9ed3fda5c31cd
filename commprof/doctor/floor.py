"""The box's floor: what the floor probe measured (one-shot / two-shot / ring at a few sizes), or, without a
probe, the ceiling the GPUs' PCIe links set, derived from their generation and width and labelled so."""

from __future__ import annotations

from commprof.doctor.facts import Facts
from commprof.doctor.gpus import gpu_view
from commprof.doctor.result import OK, SKIPPED, WARN, CheckResult
from commprof.floor.model import FloorFigures, floor
from commprof.floor.record import MEASURE_HOW
from commprof.units import format_bytes

FLOOR_ID, FLOOR_TITLE = "floor", "The all-reduce floor of this box"
SIZES = (16 << 10, 64 << 10, 256 << 10, 1 << 20)
# Per lane, one direction: transfer rate (GT/s) x line encoding (8b/10b to Gen2, 128b/130b from Gen3; Gen6's FLIT
# mode carries 242 of every 256 bytes), PCIe base specifications.
LANE_GTPS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
ENCODING = {1: 0.8, 2: 0.8, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}


def link_ceiling_gbps(gen: int, width: int) -> float:
    """The most a PCIe link of this generation and width carries per direction (GB/s), before protocol overhead."""
    return LANE_GTPS[gen] * ENCODING[gen] * width / 8.0


def check_floor(facts: Facts) -> CheckResult:
    gpus, where, _ = gpu_view(facts)
    entry = facts.floor or {}
    ceiling = _ceiling(gpus, where)
    if isinstance(entry.get("figures"), dict):
        return _measured(entry, ceiling, facts.tp or entry.get("ranks") or len(gpus))
    why = entry.get("why") or ("not in the bundle (floor.json)" if facts.origin != "live" else "not measured")
    how = entry.get("how") or (
        MEASURE_HOW
        if facts.origin == "live"
        else "collect the bundle again (`commprof doctor --collect DIR` probes "
        "the floor where there are 2 GPUs or more), or run `commprof floor` on the box"
    )
    if ceiling is None:
        return CheckResult(FLOOR_ID, FLOOR_TITLE, SKIPPED, f"not measured: {why}; {how}")
    gbps, text = ceiling
    ranks = facts.tp or len(gpus)
    evidence = [f"{text} (derived from the link, not measured)"]
    for nbytes in SIZES:
        one, two = ((ranks - 1) * nbytes, 2 * (ranks - 1) / ranks * nbytes)
        evidence.append(
            f"{format_bytes(nbytes)} on {ranks} GPUs: data movement alone at least {one / (1000 * gbps):.1f} µs "
            f"one-shot, {two / (1000 * gbps):.1f} µs two-shot or ring (derived)"
        )
    least = [2 * (ranks - 1) / ranks * nbytes / (1000 * gbps) for nbytes in (SIZES[0], SIZES[-1])]
    detail = (
        f"not measured ({why}); derived from the links, not measured: at {gbps:.1f} GB/s per direction, moving the "
        f"data alone takes at least {least[0]:.1f} µs at {format_bytes(SIZES[0])} and {least[1]:.1f} µs at "
        f"{format_bytes(SIZES[-1])} on {ranks} GPUs; to measure it: {how}"
    )
    return CheckResult(FLOOR_ID, FLOOR_TITLE, SKIPPED, detail, evidence)


def _measured(entry: dict, ceiling: tuple[float, str] | None, ranks: int) -> CheckResult:
    figures = FloorFigures(**{k: entry["figures"][k] for k in FloorFigures.__dataclass_fields__})
    rows = [floor(nbytes, ranks, figures) for nbytes in SIZES]
    detail = f"{figures.evidence} on {ranks} GPUs: " + ", ".join(
        f"{f.us:.1f} µs at {format_bytes(f.nbytes)} ({f.algorithm})" for f in rows
    )
    evidence = [
        f"best pair {figures.pair_write_gbps:.1f} GB/s, every GPU at once {figures.all_pairs_gbps:.1f} GB/s per GPU, "
        f"peer write {figures.write_latency_us:.2f} µs, launch + flags {figures.sync_us:.2f} µs ({figures.source})"
    ]
    evidence += [
        f"{format_bytes(f.nbytes)}: one-shot {f.one_shot_us:.1f}, two-shot {f.two_shot_us:.1f}, ring {f.ring_us:.1f} µs"
        for f in rows
    ]
    status, fix = OK, ""
    if ceiling is not None:
        gbps, text = ceiling
        evidence.append(f"best pair = {100 * figures.pair_write_gbps / gbps:.0f} % of {text} (derived)")
    gaps = entry.get("not_measured") or []
    evidence += [f"not measured: {line}" for line in gaps]
    if any("peer access" in line for line in gaps):
        status = WARN
        detail += "; some GPU pairs have no peer access, so their floor is not this one"
        fix = "see the p2p check: enable peer access (driver, BIOS ACS / IOMMU settings), then re-run `commprof floor`"
    return CheckResult(FLOOR_ID, FLOOR_TITLE, status, detail, evidence, fix)


def _ceiling(gpus: list[dict], where: str) -> tuple[float, str] | None:
    """The slowest GPU link's per-direction ceiling at its full generation and width, and how it was read."""
    links = [(g["gen_max"], g["width_max"]) for g in gpus if g.get("gen_max") in LANE_GTPS and g.get("width_max")]
    if not links:
        return None
    gen, width = min(links, key=lambda link: link_ceiling_gbps(*link))
    gbps = link_ceiling_gbps(gen, width)
    return gbps, f"PCIe Gen{gen} x{width}: {gbps:.1f} GB/s per direction ({where})"
