"""A worker's TrialRequest for tests: one rank, one timed step, no rendezvous; a test sets what it is about."""

from __future__ import annotations

from typing import Any

from commprof.replay.trial import TrialRequest

_ONE_RANK: dict[str, Any] = {
    "run_id": "r",
    "point": {},
    "model": {},
    "tp": 1,
    "tokens": [1],
    "phase": "decode",
    "dtype": "bfloat16",
    "iterations": 1,
    "warmup": 0,
    "backend": "gloo",
    "rank": 0,
    "world_size": 1,
    "device_index": 0,
    "store_host": "",
    "store_port": 0,
    "store_prefix": "",
    "result_path": "",
    "timeout_s": 1.0,
}


def trial_request(**fields: Any) -> TrialRequest:
    """The request of one rank, `fields` replacing any of its values."""
    return TrialRequest(**(_ONE_RANK | fields))
