"""The crossover search: sustained runs, bisection between the last win and the first loss, its cost against an
exhaustive sweep; on a fabricated timing model and on real gloo ranks."""

import pytest

from commprof.sweep import crossover as cx


def model_measure(crossover: int, calls: list):
    """A candidate that beats the baseline from `crossover` bytes up (and loses below)."""

    def measure(impl, sizes):
        calls.append(list(sizes))
        return {s: (10.0 if s >= crossover else 30.0, 20.0) for s in sizes}

    return measure


def test_sustained_runs_need_two_consecutive_wins():
    wins = {1: True, 2: False, 3: True, 4: True, 5: False, 6: True}
    assert cx.sustained_runs(wins) == [(3, 4)] and cx.sustained_start(wins) == 3
    assert cx.sustained_start({1: True, 2: False}) is None
    assert cx.sustained_runs({1: True, 2: True, 3: True}) == [(1, 3)]


def test_the_search_bisects_to_one_step_and_finds_the_crossover():
    calls = []
    found = cx.search("k", "graph", model_measure(100_000, calls), plan_sizes=[14336, 57344])
    assert found.crossover_bytes is not None and 100_000 <= found.crossover_bytes < 100_000 + cx.STEP_BYTES
    assert calls[0] == cx.initial_sizes([14336, 57344]) and 14336 in calls[0] and cx.KIB << 10 in calls[0]
    assert found.rounds == len(calls) and found.rounds <= 8
    # far fewer sizes than every KiB from 1 KiB to 1 MiB
    assert len(found.times) < len(cx.exhaustive_sizes(found)) / 10


def test_one_lucky_size_is_not_a_crossover():
    def measure(impl, sizes):
        return {s: (10.0 if s == 4096 or s >= 512 * 1024 else 30.0, 20.0) for s in sizes}

    found = cx.search("k", "eager", measure)
    assert found.crossover_bytes >= 256 * 1024 and 4096 not in [run[0] for run in found.winning_sizes]


def test_a_candidate_that_never_wins_costs_one_round():
    calls = []
    found = cx.search("k", "graph", model_measure(10 << 30, calls))
    assert found.crossover_bytes is None and found.rounds == 1 and found.to_dict()["sizes_measured"] == 11


def test_exhaustive_measures_every_size_in_one_round():
    calls = []
    full = cx.exhaustive("k", "graph", model_measure(5000, calls), range(1024, 16 * 1024 + 1, 1024))
    assert full.rounds == 1 and len(full.times) == 16 and full.crossover_bytes == 5120


@pytest.mark.slow
def test_the_search_on_real_gloo_ranks_times_every_size_it_asks_for():
    from tests.distributed import run_ranks

    sizes = run_ranks(_gloo_search, world_size=2)
    assert sizes[0] == sizes[1] and all(s in sizes[0] for s in cx.POWERS)


def _gloo_search(rank, world_size):
    import torch
    import torch.distributed as dist

    from commprof.impls.torch_dist import GlooAllReduce
    from commprof.size_timing import SizeTiming, time_sizes

    impl = GlooAllReduce()
    impl.group, impl.device = dist.group.WORLD, torch.device("cpu")
    timing = SizeTiming(rounds=2, warmup=1)

    def measure(name, sizes):
        times = time_sizes(impl, sizes, dist.group.WORLD, torch.device("cpu"), timing)
        assert set(times) == set(sizes) and all(t > 0 for t in times.values())
        return {s: (t, t) for s, t in times.items()}  # the same implementation twice: never a win

    found = cx.search("gloo", "eager", measure)
    return sorted(found.times)
