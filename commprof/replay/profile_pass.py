"""The sweep's untimed profiling pass: a Kineto trace of a few whole steps per rank (`--profile`).

It runs in its own worker after the point's timed run, so the profiler's overhead never reaches a timed
number; `commprof trace` and Perfetto read the files as they read an engine's traces.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from commprof.replay.harness import StepReplay
from commprof.replay.step_counts import PROFILED_STEPS


def trace_path(profile_dir: str | Path, tokens: int, rank: int) -> Path:
    """Where rank `rank`'s trace of T = `tokens` goes: one folder per T, one file per rank."""
    return Path(profile_dir) / f"T{tokens}" / f"rank{rank}.json.gz"


def profile_steps(replay: StepReplay, path: Path, steps: int = PROFILED_STEPS) -> None:
    """Replay `steps` eager steps under the profiler, each marked ProfilerStep#N, shapes recorded."""
    activities = [ProfilerActivity.CPU]
    if replay.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    path.parent.mkdir(parents=True, exist_ok=True)
    with profile(
        activities=activities,
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(1 + steps):
            replay.refill()
            replay.run_ops()
            if replay.device.type == "cuda":
                torch.cuda.synchronize(replay.device)
            prof.step()
