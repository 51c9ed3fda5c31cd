"""What does the crossover search save? Its cost against an exhaustive sweep of the same sizes, on 2 gloo ranks.

The candidate is a genuine one-shot all-reduce on gloo (all-gather every rank's tensor, then sum locally),
against gloo's own all-reduce as the baseline; both are timed by the replay harness at every size the search
asks for (commprof.replay.size_timing). The search measures powers of two from 1 KiB to 1 MiB, then
bisects every win/loss boundary to STEP; the exhaustive sweep measures every STEP from 1 KiB to 1 MiB. Both
run in this one process pair, one after the other. Reported: sizes measured, measure() rounds (each a fresh
set of processes in a sweep), wall time, the ratios, and whether both found the same crossover.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STEP = 16 * 1024


def _rank(rank: int, world_size: int) -> dict:
    import torch
    import torch.distributed as dist

    from commprof.impls.torch_dist import GlooAllReduce
    from commprof.replay.size_timing import SizeTiming, time_sizes
    from commprof.sweep.planning import crossover as cx
    from tests.plugins.one_shot import OneShotGloo

    group, device = dist.group.WORLD, torch.device("cpu")
    impls = {"one-shot-gloo": OneShotGloo(), "gloo": GlooAllReduce()}
    for impl in impls.values():
        impl.group, impl.device = group, device
    timing = SizeTiming(rounds=8, warmup=2)

    def measure(name: str, sizes: list[int]) -> dict[int, tuple[float, float]]:
        mine = time_sizes(impls[name], sizes, group, device, timing)
        base = time_sizes(impls["gloo"], sizes, group, device, timing)
        return {s: (mine[s], base[s]) for s in sizes if s in mine and s in base}

    started = time.perf_counter()
    searched = cx.search("one-shot-gloo", "eager", measure, bounds=cx.SearchBounds(step=STEP, max_rounds=12))
    search_s = time.perf_counter() - started
    grid = sorted({*range(cx.KIB, cx.POWERS[-1] + 1, STEP), *cx.POWERS})
    started = time.perf_counter()
    full = cx.exhaustive("one-shot-gloo", "eager", measure, grid)
    exhaustive_s = time.perf_counter() - started
    return {
        "search": searched.to_dict() | {"wall_s": search_s},
        "exhaustive": full.to_dict() | {"wall_s": exhaustive_s},
    }


def main() -> int:
    from tests.distributed import run_ranks

    result = run_ranks(_rank, world_size=2, timeout=1800)[0]
    search, full = result["search"], result["exhaustive"]
    sizes_ratio = search["sizes_measured"] / full["sizes_measured"]
    wall_ratio = search["wall_s"] / full["wall_s"]
    print("crossover search vs exhaustive sweep, 2 gloo ranks, one-shot (gather + sum) vs gloo all-reduce, eager:")
    print(
        f"  search:     {search['sizes_measured']:4d} sizes in {search['rounds']:2d} rounds, {search['wall_s']:7.1f} s, "
        f"crossover {search['crossover_bytes']} B, winning {search['winning_sizes']}"
    )
    print(
        f"  exhaustive: {full['sizes_measured']:4d} sizes in {full['rounds']:2d} round,  {full['wall_s']:7.1f} s, "
        f"crossover {full['crossover_bytes']} B, winning {full['winning_sizes']}"
    )
    print(f"  cost ratio (search / exhaustive): sizes {sizes_ratio:.2f}, wall time {wall_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
