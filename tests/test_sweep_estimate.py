"""The sweep's time estimate: every worker set a point forks pays the start-up, the estimate is given again from the
first point's measured start-up and steps, and an estimate made on gloo says it is gloo's."""

from dataclasses import replace

from rich.console import Console

from commprof.sweep.planning.config import parse_sweep
from commprof.sweep.planning.dryrun import ASSUMED, point_seconds, size_lines, worker_sets
from commprof.sweep.running.console import SweepConsole

SPEC = parse_sweep(
    'name = "e"\n[run]\nmodel = "llama-3.1-70b"\ntokens = [1, 4]\niterations = 9\nwarmup = 1\n', "e.toml"
)


def test_each_worker_set_a_point_forks_pays_the_start_up():
    assert worker_sets("nccl", nccl_debug=True, profile=False) == 2  # the timed set and NCCL's logging probe
    assert worker_sets("nccl", nccl_debug=False, profile=True) == 2
    assert worker_sets("gloo", nccl_debug=True, profile=False) == 1
    one, two = (point_seconds(SPEC, replace(ASSUMED, worker_sets=n), 9, 1) for n in (1, 2))
    assert two - one == ASSUMED.overhead_s
    assert (
        "per point: 2 x 3.00 s start-up (worker sets)"
        in size_lines(SPEC, replace(ASSUMED, worker_sets=2), 1, "nccl")[1]
    )


def test_an_estimate_made_on_gloo_says_so():
    (_, per_point) = size_lines(SPEC, ASSUMED, 1, "gloo")
    assert "on gloo: CPU ranks, not what this sweep takes on GPUs" in per_point
    assert "on gloo" not in size_lines(SPEC, ASSUMED, 1, "nccl")[1]


def record(tokens: int, mode: str, step_us: float = 2000.0, duration_s: float = 4.0) -> dict:
    return {"kind": "step", "tokens": tokens, "mode": mode, "status": "ok", "step_us": {"median": step_us}} | {
        "duration_s": duration_s
    }


def test_the_first_measured_point_gives_the_estimate_again_from_its_own_start_up(tmp_path, capsys):
    estimates = []

    def estimate(cost=ASSUMED):
        estimates.append(cost)
        return size_lines(SPEC, replace(cost, worker_sets=2), 1, "gloo")

    console = SweepConsole(enabled=True, estimate=estimate, steps=(9, 1))
    console.console = Console(stderr=True, width=400, force_terminal=False)
    console.start(3, tmp_path)
    crashed = record(4, "eager") | {"status": "crashed", "step_us": None}
    console.point_measured([record(1, "eager", duration_s=1.0), crashed])  # no time at T = 4: no cost from it
    console.point_measured([record(1, "eager"), record(4, "eager")])
    console.point_measured([record(1, "eager", duration_s=100.0), record(4, "eager", duration_s=100.0)])  # once only
    console.stop()
    err = capsys.readouterr().err
    assert [cost.basis.startswith("measured on this launch") for cost in estimates] == [False, True]
    measured = estimates[1]
    assert measured.overhead_s == 4.0 - (2.0 + 2.0) * 10 / 1000.0  # its duration less its timed steps
    assert "after the first point: 1 point will run" in err and "per point: 2 x 3.96 s start-up" in err
