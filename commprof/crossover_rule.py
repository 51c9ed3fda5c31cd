"""What makes a crossover: a sustained run of wins, at least SUSTAINED consecutive measured sizes, so one lucky
size does not move it. One rule for the search that finds it and the report that reads it back. Pure."""

from __future__ import annotations

SUSTAINED = 2  # consecutive wins that make a crossover


def sustained_runs(wins: dict[int, bool], length: int = SUSTAINED) -> list[tuple[int, int]]:
    """(first, last) size of each run of at least `length` consecutive wins, in size order."""
    runs, start, count, last = [], None, 0, None
    for size, won in sorted(wins.items()):
        if won:
            start = size if count == 0 else start
            count += 1
            last = size
        else:
            if count >= length:
                runs.append((start, last))
            count = 0
    if count >= length:
        runs.append((start, last))
    return runs


def sustained_start(wins: dict[int, bool], length: int = SUSTAINED) -> int | None:
    """The first size of the first sustained run of wins, or None."""
    runs = sustained_runs(wins, length)
    return runs[0][0] if runs else None
