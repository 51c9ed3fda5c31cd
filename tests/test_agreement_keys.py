"""The ranks' agreement through the store: each replay's keys are its own, so a crossover round (every size at
T = 1, the implementation and the baseline side by side) never reads an earlier replay's verdict; on real gloo
workers, as the sweep forks them per round."""

import json
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from commprof.replay.trial import worker_main
from tests.distributed import _gloo_context, free_port
from tests.trial_requests import trial_request

SIZES = [1024, 2048, 4096, 8192]


def _round(tmp_path, port: int, number: int) -> list[list[dict]]:
    """One crossover round in two fresh gloo workers; each rank's entries."""
    ctx = _gloo_context()
    requests = [
        trial_request(
            run_id="agree",
            point={"impl": "tests.plugins.faulty:WrongAndLateOnRank1"},
            tp=2,
            dtype="float32",
            iterations=2,
            warmup=1,
            rank=rank,
            world_size=2,
            store_host="127.0.0.1",
            store_port=port,
            store_prefix=f"point/eager/r{number}",
            result_path=str(tmp_path / f"r{number}.rank{rank}.jsonl"),
            timeout_s=20,
            modes=["eager"],
            crossover={"baseline": {"impl": "default"}, "sizes": SIZES, "mode": "eager", "rounds": 2, "warmup": 1},
        )
        for rank in range(2)
    ]
    procs = [ctx.Process(target=worker_main, args=(request,)) for request in requests]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=90)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    return [[json.loads(line) for line in open(r.result_path)] for r in requests]


@pytest.mark.processes
def test_a_rank_turning_wrong_and_late_is_caught_at_every_later_size_over_two_rounds(tmp_path):
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True, timeout=timedelta(seconds=60))
    for number in (1, 2):
        started = time.monotonic()
        ranks = _round(tmp_path, port, number)
        assert [e["status"] for e in ranks[0]] == [e["status"] for e in ranks[1]]
        statuses = {e["bytes"]: e["status"] for e in ranks[0]}
        assert statuses == {1024: "ok", 2048: "wrong", 4096: "wrong", 8192: "wrong"}, ranks[0]
        assert all("rank(s) 1" in e["message"] for e in ranks[0][1:])
        assert time.monotonic() - started < 60  # no agreement waited out its timeout
    assert master.num_keys() > 0
