"""The floor model and the kernel latency models built on it: pure, on figures a test chooses."""

import math

import pytest

from commprof.costmodel.kernels import KernelModel, floor_from_table, kernel_model_from_table
from commprof.costmodel.topology import load_topology
from commprof.errors import UsageError
from commprof.floor.model import (
    FloorFigures,
    algorithm_us,
    all_gather_floor,
    crossover_bytes,
    floor,
    pct_of_floor,
    received_bytes,
)
from commprof.problems import Problems

FIG = FloorFigures(
    pair_write_gbps=56.0, all_pairs_gbps=24.0, write_latency_us=0.4, sync_us=2.0, evidence="published", source="t"
)


def test_one_shot_receives_n_minus_one_payloads_two_shot_twice_n_minus_one_over_n():
    assert received_bytes("one-shot", 1000, 8) == 7000
    assert received_bytes("two-shot", 1000, 8) == pytest.approx(1750)
    # 14 KiB on 8 GPUs at 24 GB/s per GPU: one-shot moves 100 KB (4.18 µs), two-shot 25 KB (1.05 µs)
    assert algorithm_us("one-shot", 14336, 8, FIG) == pytest.approx(2.0 + 0.4 + 7 * 14336 / 24000)
    assert algorithm_us("two-shot", 14336, 8, FIG) == pytest.approx(2.0 + 0.8 + 1.75 * 14336 / 24000)
    assert algorithm_us("one-shot", 14336, 1, FIG) == 0.0
    with pytest.raises(ValueError, match="unknown all-reduce algorithm"):
        received_bytes("three-shot", 1, 8)


def test_the_floor_is_the_cheaper_algorithm_and_switches_at_the_crossover():
    cross = crossover_bytes(8, FIG)
    below, above = floor(int(cross * 0.5), 8, FIG), floor(int(cross * 2), 8, FIG)
    assert below.algorithm == "one-shot" and above.algorithm == "two-shot"
    assert below.us == min(below.one_shot_us, below.two_shot_us, below.ring_us)
    assert math.isinf(crossover_bytes(2, FIG)) and floor(1 << 20, 2, FIG).algorithm != "two-shot"
    assert pct_of_floor(10.0, 4.0) == 250.0 and pct_of_floor(10.0, 0.0) is None


def test_large_messages_floor_at_the_ring_which_moves_data_at_the_pair_figure():
    """A ring only receives from its neighbour: its data moves at the single-pair figure, one write per hop."""
    big = floor(8 << 20, 8, FIG)
    assert big.algorithm == "ring"
    assert big.ring_us == pytest.approx(2.0 + 14 * 0.4 + 1.75 * (8 << 20) / 56000)
    assert big.us < big.two_shot_us  # all-to-all at 24 GB/s per GPU is not the bound for a ring
    gather = all_gather_floor(8 << 20, 8, FIG)
    assert gather.algorithm == "ring" and gather.us == pytest.approx(2.0 + 7 * 0.4 + 7 / 8 * (8 << 20) / 56000)
    small = all_gather_floor(8192, 8, FIG)
    assert small.algorithm == "one-shot" and small.us == pytest.approx(2.0 + 0.4 + 7 / 8 * 8192 / 24000)


def test_floor_figures_refuse_nonsense():
    with pytest.raises(ValueError, match="all_pairs_gbps must be > 0"):
        FloorFigures(56.0, 0.0, 0.4, 2.0, "published", "t")
    with pytest.raises(ValueError, match="evidence"):
        FloorFigures(56.0, 24.0, 0.4, 2.0, "guessed", "t")


def test_the_gen5_preset_floor_matches_the_published_range():
    """frontier notes: with 2-5 µs of flags and launch, the floor is about 3-5 µs at 14 KiB and 8-12 µs at 112 KiB."""
    gen5 = load_topology("pcie-gen5-switch-p2p")
    assert gen5.floor.evidence == "published" and "p2pmark" in gen5.floor.source
    assert 3.0 <= floor(14 << 10, 8, gen5.floor).us <= 5.0
    assert 8.0 <= floor(112 << 10, 8, gen5.floor).us <= 12.0
    # every published kernel on this class of box is above the floor at its sizes
    for model in gen5.impls.values():
        for nbytes, us in model.points:
            assert us >= floor(nbytes, 8, gen5.floor).us, (model.impl, nbytes)


def test_published_kernel_models_interpolate_and_extend_with_the_floor_slope():
    model = KernelModel("k", "published", "src", points=((8192, 9.2), (32768, 16.5)), algorithm="one-shot")
    assert model.graph_us(4096, 8, None, FIG) == 9.2
    assert model.graph_us(20480, 8, None, FIG) == pytest.approx((9.2 + 16.5) / 2)
    assert model.graph_us(32768 + 24000, 8, None, FIG) == pytest.approx(16.5 + 7.0)  # 7 x 24 KB at 24 GB/s
    assert model.graph_us(65536, 8, None, None) == pytest.approx(16.5 + 7.3 * 32768 / 24576)


def test_floor_based_models_follow_the_algorithm_the_point_runs():
    model = KernelModel("k", "floor", "src", overhead_us=3.0)
    assert model.graph_us(1 << 20, 8, "two-shot", FIG) == pytest.approx(3.0 + algorithm_us("two-shot", 1 << 20, 8, FIG))
    assert model.describe()["expected_error_pct"] is None and "unknown" in model.describe()["error_basis"]
    with pytest.raises(UsageError, match="needs the topology's \\[floor\\]"):
        model.graph_us(1024, 8, "one-shot", None)


def _read(reader, *args):
    """Run a table reader; its problems as "file: key: problem" lines."""
    problems = Problems("box.toml")
    value = reader(*args, problems)
    return value, problems.errors


@pytest.mark.parametrize(
    "table, problem",
    [
        ({"all_reduce_us": [[1, 2.0]]}, "impls.k.source: missing (allowed: a string)"),
        ({"model": "guess", "source": "s"}, "impls.k.model: 'guess' is not a model basis (allowed: published, floor)"),
        ({"all_reduce_us": [[1, -2.0]], "source": "s"}, "impls.k.all_reduce_us: [[1, -2.0]] is not a list of"),
        ({"all_reduce_us": [[1, 2.0]], "source": "s", "expected_error_pct": 20}, "impls.k.error_basis: missing"),
        ({"all_reduce_us": [[1, 2.0]], "source": "s", "timed": "sometimes"}, "(allowed: graph, eager)"),
        ({"model": "floor", "source": "s", "overhead": 1}, "impls.k.overhead: unknown key"),
        ({"model": "floor", "source": "s", "algorithm": "ring"}, "impls.k.algorithm: 'ring' is not an all-reduce"),
        ({"model": "floor", "source": "s", "max_bytes": 0}, "impls.k.max_bytes: 0 is below 1"),
    ],
)
def test_kernel_tables_name_the_file_and_key(table, problem):
    model, errors = _read(kernel_model_from_table, "k", table)
    assert model is None and len(errors) == 1 and errors[0].startswith("box.toml: ") and problem in errors[0]


def test_kernel_tables_report_every_problem_at_once():
    model, errors = _read(kernel_model_from_table, "k", {"model": "floor", "timed": "x", "overhead_us": -1})
    assert model is None and [line.split(": ")[1] for line in errors] == [
        "impls.k.source",
        "impls.k.timed",
        "impls.k.overhead_us",
    ]
    model, errors = _read(kernel_model_from_table, "k", {"all_reduce_us": [[8192, 9.2]], "source": "s"})
    assert errors == [] and model.basis == "published" and model.points == ((8192, 9.2),)


def test_floor_tables_need_every_figure_and_their_sources():
    good = {"pair_write_gbps": 56, "all_pairs_gbps": 24, "write_latency_us": 0.4, "sync_us": 2, "sources": ["x"]}
    figures, errors = _read(floor_from_table, good)
    assert errors == [] and figures.all_pairs_gbps == 24.0 and figures.evidence == "published"
    for change, line in [
        ({"sources": []}, "box.toml: floor.sources: empty"),
        ({"sync_us": "fast"}, "box.toml: floor.sync_us: expected a number >= 0, got 'fast'"),
        ({"all_pairs_gbps": 0}, "box.toml: floor: floor all_pairs_gbps must be > 0"),
        ({"pair_write_gbps": None}, "box.toml: floor.pair_write_gbps: expected a number"),
    ]:
        figures, errors = _read(floor_from_table, {**good, **change})
        assert figures is None and len(errors) == 1 and errors[0].startswith(line), (change, errors)
