"""The floor probe in a fresh process: the sweep's controllers and the doctor never initialize CUDA themselves
(their workers are forked), so the probe runs as `python -m commprof floor --quick` on the GPUs a run uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from commprof.floor.record import measured_floor, not_measured

PROBE_TIMEOUT_S = 120.0  # CUDA init and a Triton build on 8 GPUs take seconds; a hung peer copy must not stall a run


def probe_gpus_env(gpus: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that shows the probe the first `gpus` GPUs, those ranks 0..gpus-1 of a node use."""
    environ = dict(os.environ if environ is None else environ)
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(gpus)]
    environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:gpus])
    return environ


def measure_floor(gpus: int, out: Path, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Probe `gpus` GPUs in a fresh process, writing `out` (floor.json); the meta.json entry either way."""
    started = time.monotonic()
    cmd = [sys.executable, "-m", "commprof", "floor", "--quick", "--json", "--out", str(out)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=probe_gpus_env(gpus), errors="replace"
        )
    except subprocess.TimeoutExpired:
        return not_measured(f"the floor probe gave no answer within {timeout_s:.0f} s", _how_alone())
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return not_measured(
            f"the floor probe failed: {lines[-1] if lines else f'exit {proc.returncode}'}", _how_alone()
        )
    try:
        return measured_floor(json.loads(proc.stdout), seconds, out)
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return not_measured(f"the floor probe printed no usable result ({exc})", _how_alone())


def _how_alone() -> str:
    return "run `commprof floor` alone on the box to see the whole error, then pass `--floor floor.json`"
