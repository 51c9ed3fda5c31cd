"""`--dry-run`'s quick probe: the baseline point measured on this launch with a few steps per T, so the estimate
comes from this machine's own start-up and step cost, not from an assumption about some other box."""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import replace
from pathlib import Path

from commprof.replay.forkserver import ForkServer
from commprof.sweep.planning.dryrun import ASSUMED, StepCost, probe_cost
from commprof.sweep.planning.gate import launch_context, refusal
from commprof.sweep.planning.interleave import report_baseline
from commprof.sweep.planning.points import baseline
from commprof.sweep.planning.spec import SweepPoint, SweepSpec
from commprof.sweep.running.measure import SweepRun, all_gather_json, measure_point
from commprof.sweep.running.runner import SweepOptions, controller_context, controllers, launch_tp

PROBE_ITERATIONS = 3
PROBE_WARMUP = 1


def probe_point(spec: SweepSpec, backend: str, world_size: int) -> SweepPoint:
    """The point the probe measures: the sweep's baseline (`[report] baseline`, measured again in its confirmation),
    unless this launch refuses it; then p000, the backend's own all-reduce."""
    point = report_baseline(spec)
    dtype = spec.dtype or spec.model_shape.dtype
    context = launch_context(backend, world_size, dtype, spec.tokens, spec.model_shape.hidden_size)
    return point if refusal(point, backend, context) is None else baseline()


def probe_step_cost(spec: SweepSpec, backend: str, server: ForkServer, share_gpus: bool = False) -> StepCost:
    """Measure the sweep's baseline on every rank of this launch, its workers forked by `server` (collective:
    every rank calls it); rank 0's verdict.

    Nothing is written outside a temporary folder; a probe that fails falls back to ASSUMED and says why.
    """

    tp = launch_tp(spec, int(os.environ.get("WORLD_SIZE", "1")))
    model = spec.model_shape.to_dict()
    quick = replace(spec, iterations=PROBE_ITERATIONS, warmup=PROBE_WARMUP)
    with controllers(spec.point_timeout_s), tempfile.TemporaryDirectory(prefix="commprof-probe-") as tmp:
        session = all_gather_json(secrets.token_hex(4), int(os.environ.get("WORLD_SIZE", "1")))[0]
        options = SweepOptions(out=Path(tmp), nccl_debug=False, share_gpus=share_gpus)
        ctx = controller_context(backend, Path(tmp), "dry-run", session, options)
        point = probe_point(spec, backend, int(os.environ.get("WORLD_SIZE", "1")))
        records = measure_point(SweepRun(ctx, server, quick, model, tp), point)
    if not ctx.is_writer:
        return ASSUMED
    return probe_cost(records, PROBE_ITERATIONS, PROBE_WARMUP)
