"""The crossover search: sustained runs, bisection between the last win and the first loss, its cost against an
exhaustive sweep; on a fabricated timing model, on real gloo ranks, and as a stage of a real gloo sweep."""

import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.records.files import read_records
from commprof.sweep.planning import crossover as cx


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


def test_a_search_replayed_from_its_recorded_sizes_asks_for_nothing_new():
    """What a resumed sweep relies on: the search is a pure function of the times it is given, so replaying it from
    the sizes already on disk asks for exactly those sizes, round after round, and finds the same crossover."""
    first_calls = []
    found = cx.search("k", "graph", model_measure(100_000, first_calls), plan_sizes=[14336])
    on_disk = dict(found.times)
    interrupted = {s: on_disk[s] for calls in first_calls[:3] for s in calls}  # three rounds were written

    def resumed(impl, sizes):
        new = [s for s in sizes if s not in interrupted]
        assert not new or all(s in on_disk for s in new)  # only what the interrupted run had not reached
        return {s: on_disk[s] for s in sizes}

    again = cx.search("k", "graph", resumed, plan_sizes=[14336])
    assert again.times == found.times and again.rounds == found.rounds
    assert again.crossover_bytes == found.crossover_bytes


def test_a_size_that_failed_is_not_asked_for_again():
    calls = []

    def measure(impl, sizes):
        calls.append(list(sizes))
        return {s: (10.0 if s >= 100_000 else 30.0, 20.0) for s in sizes if s != 96 * 1024}  # 96 KiB always fails

    cx.search("k", "graph", measure)
    asked = [s for round_ in calls for s in round_]
    assert asked.count(96 * 1024) == 1 and len(asked) == len(set(asked))


def test_exhaustive_measures_every_size_in_one_round():
    calls = []
    full = cx.exhaustive("k", "graph", model_measure(5000, calls), range(1024, 16 * 1024 + 1, 1024))
    assert full.rounds == 1 and len(full.times) == 16 and full.crossover_bytes == 5120


@pytest.mark.processes
def test_the_search_on_real_gloo_ranks_times_every_size_it_asks_for():
    from tests.distributed import run_ranks

    sizes = run_ranks(_gloo_search, world_size=2)
    assert sizes[0] == sizes[1] and all(s in sizes[0] for s in cx.powers(cx.KIB, GLOO_SEARCH_HIGH))


def _gloo_search(rank, world_size):
    import torch
    import torch.distributed as dist

    from commprof.impls.torch_dist import GlooAllReduce
    from commprof.replay.size_timing import SizeTiming, time_sizes

    impl = GlooAllReduce()
    impl.group, impl.device = dist.group.WORLD, torch.device("cpu")
    timing = SizeTiming(rounds=2, warmup=1)

    def measure(name, sizes):
        times = time_sizes(impl, sizes, dist.group.WORLD, torch.device("cpu"), timing)
        assert set(times) == set(sizes) and all(t > 0 for t in times.values())
        return {s: (t, t) for s, t in times.items()}  # the same implementation twice: never a win

    found = cx.search("gloo", "eager", measure, bounds=cx.SearchBounds(high=GLOO_SEARCH_HIGH))
    return sorted(found.times)


GLOO_SEARCH_HIGH = 64 * cx.KIB  # the powers of two from 1 KiB: gloo times a 1 MiB size in seconds on a busy box


@pytest.mark.processes
def test_a_crossover_stage_on_real_gloo_ranks_records_every_size_and_reports(gloo_sweep, tmp_path):
    """A one-shot candidate searched against gloo's all-reduce in a real 2-rank sweep (tests/shared_runs.py): one
    record per size in fresh workers, graph mode recorded as not searchable on CPU ranks, and a report that labels
    the search as gloo and exports no engine setting."""
    printed = gloo_sweep["stdout"][0] + gloo_sweep["stderr"][0]
    assert "crossover one-shot (eager)" in printed and "graph mode not searched" in printed
    run = Path(gloo_sweep["run"])
    searched = [r for r in read_records(run / "results.jsonl") if r["kind"] == "crossover"]
    timed = {r["bytes"]: r for r in searched if r["mode"] == "eager"}
    assert set(timed) >= {128, 512, 1024, 2048, 4096}  # the step's own all-reduces at T = 1, 4 and powers of two
    assert all(r["status"] == "ok" and r["impl_us"] > 0 and r["baseline_us"] > 0 for r in timed.values())
    assert all(r["baseline"]["impl"] == "default" and r["backend"] == "gloo" for r in timed.values())
    (graph,) = [r for r in searched if r["mode"] == "graph"]
    assert graph["status"] == "unsupported" and graph["bytes"] is None and "CUDA graphs need GPUs" in graph["message"]

    # what the sweep planned, written as it planned it: the stage's one search and its sizes, and that it ended
    plan = [json.loads(line) for line in (run / "plan.jsonl").read_text().splitlines()]
    (planned,) = [line for line in plan if line["line"] == "searches"]
    assert [(s["mode"], 128 in s["sizes"]) for s in planned["searches"]] == [("eager", True)]
    assert [line["mode"] for line in plan if line["line"] == "ended"] == ["eager"]

    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    decision = json.loads((tmp_path / "report" / "summary.json").read_text())["runs"][0]
    assert decision["run"]["complete"] is True and "1 of 1 searches" in decision["run"]["progress"]
    (eager,) = [c for c in decision["routing"]["crossovers"] if c["mode"] == "eager"]
    assert eager["sizes_measured"] == len(timed) and "not a GPU answer" in eager["evidence"]
    assert decision["engines"]["settings"] == [] and "no engine setting" in decision["engines"]["left_out"][0]
    assert "Crossover searches" in (tmp_path / "report" / "index.html").read_text()
