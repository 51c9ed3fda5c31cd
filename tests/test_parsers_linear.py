"""Parsers stay linear in their input: the worst shapes a file at the read cap (512 MiB) can take, at sizes four
times apart, take about four times as long, never sixteen (a quadratic parser of such a file would take days)."""

import time

from commprof.nccl_log.parse import parse_nccl_log


def _seconds(parse, text: str, repeats: int = 3) -> float:
    """The parse's best processor time: a busy machine's other work, which stretches wall time, does not count."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        parse(text)
        best = min(best, time.process_time() - started)
    return best


def _ring_log(ranks: int) -> str:
    """Every rank on its own host printing its ring hop: the shape that made rings and hosts quadratic."""
    return "".join(
        f"host{r}:{1000 + r}:{1000 + r} [0] NCCL INFO Ring 00 : {(r - 1) % ranks} -> {r} -> {(r + 1) % ranks}\n"
        for r in range(ranks)
    )


def test_nccl_log_is_linear_in_the_number_of_ranks():
    small, large = _ring_log(5_000), _ring_log(20_000)
    summary = parse_nccl_log(large)
    assert summary.rings == [list(range(20_000))] and len(summary.hosts) == 20_000
    assert _seconds(parse_nccl_log, large) < 10 * _seconds(parse_nccl_log, small)


def test_nccl_log_is_linear_in_the_length_of_a_line():
    def line(chars: int) -> str:  # no separator the line grammar could stop at, then an NCCL line's tail
        return "a" * chars + " NCCL INFO x\n"

    assert _seconds(parse_nccl_log, line(1 << 20), 1) < 10 * _seconds(parse_nccl_log, line(1 << 18), 1) + 0.05
