"""How the ranks of one replay reach one verdict: their payloads through the rendezvous store, and every rank's
check of a step combined into the worst. Pure but for the store."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from commprof.replay.replay_tensors import Verification


def gather_via_store(
    store: dist.Store, key: str, rank: int, world_size: int, payload: Any, timeout: timedelta | None = None
) -> list[Any]:
    """Every rank's JSON payload under `key`, by rank, through the rendezvous store.

    The store keeps working when a communicator does not (a failed capture, a rank that gave up), so ranks
    agree through it on whether the next collective may run at all.
    """
    store.set(f"{key}/{rank}", json.dumps(payload))
    keys = [f"{key}/{r}" for r in range(world_size)]
    if timeout is None:
        store.wait(keys)
    else:
        store.wait(keys, timeout)
    return [json.loads(store.get(k)) for k in keys]


def agree_ranks(outcomes: list[dict[str, Any]]) -> tuple[str, str | None, Verification | None]:
    """One verdict from every rank's (status, message, check): the first failing rank (by rank) decides a
    failure; checks combine to the worst (most bad ops, largest error, earliest bad op). Pure."""
    for rank, outcome in enumerate(outcomes):
        if outcome["status"] != "ok":
            prefix = f"rank {rank}: " if len(outcomes) > 1 else ""
            return outcome["status"], prefix + (outcome["message"] or ""), None
    checks = [o["check"] for o in outcomes]
    bad_ranks = [rank for rank, c in enumerate(checks) if not c["ok"]]
    firsts = [(c["first_bad_op"], c["first_bad_site"]) for c in checks if c["first_bad_op"] is not None]
    first = min(firsts) if firsts else (None, None)
    combined = Verification(
        ok=not bad_ranks,
        max_abs_err=max(c["max_abs_err"] for c in checks),
        tolerance=max(c["tolerance"] for c in checks),
        bad_ops=max(c["bad_ops"] for c in checks),
        first_bad_op=first[0],
        first_bad_site=first[1],
        bad_ranks=tuple(bad_ranks),
        non_finite=max(c.get("non_finite", 0) for c in checks),
    )
    return "ok", None, combined


def wrong_status(mode: str) -> str:
    """The status of a step whose outputs differ from the exact result: "replay_wrong" under graph replay."""
    return "replay_wrong" if mode == "graph" else "wrong"


def worse_check(first: Verification, last: Verification) -> tuple[Verification, str | None]:
    """The check a mode reports (the first step's unless only the last timed step was wrong) and what is wrong in
    words, or None when both were right."""
    if not first.ok:
        return first, first.describe()
    if not last.ok:
        return last, "the last timed step (the first was right): " + last.describe()
    return first, None
