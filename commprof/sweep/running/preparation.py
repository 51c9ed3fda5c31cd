"""Before the first point: every setting whose implementation has a preparation (AllReduceImpl.preparation:
FlashInfer's tuning, b12x's compilation) prepared once, in a worker set of its own on every rank and under a limit of
its own, never a point's; what it leaves in the setting's folder (prepared/<setting>/, AllReduceImpl.state_dir) is
what the setting's points load. A preparation that fails makes the setting's points unsupported with its error,
without starting their workers; one whose library is not installed (points.preparation), or whose implementation
the workers' gate refuses here, is left to the points' own gate."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from commprof.records.folder import make_folders
from commprof.sweep.planning.points import sweep_impls
from commprof.sweep.planning.spec import SweepPoint
from commprof.sweep.running.measure import SweepRun, agree, all_gather_json, point_env, run_point, trial_request
from commprof.sweep.running.prebuild import BUILD_TIMEOUT_S, build_refusal, preparation_key, preparation_of

PREPARE_TIMEOUT_S = BUILD_TIMEOUT_S  # a cold CuTe compile or a tuning run takes minutes


def prepare_settings(run: SweepRun, note: Callable[[str], None]) -> dict[str, str]:
    """Prepare every setting of the sweep that has a preparation, on every controller (collective); returns
    preparation key -> error of those that failed."""
    ctx = run.ctx
    say = note if ctx.is_writer else lambda text: None
    failed: dict[str, str] = {}
    for impl, options in sweep_impls(run.spec):
        point = SweepPoint("p000", f"{impl} (preparation)", impl, {}, dict(options))
        what = preparation_of(point, ctx.backend)
        if what is None or build_refusal(point, ctx.backend, ctx.build_failures):
            continue
        key = preparation_key(impl, options)
        folder = make_folders(ctx.run_dir, *key.split("/"))
        request = replace(
            trial_request(run, point, folder),
            prepare_only=True,
            timeout_s=PREPARE_TIMEOUT_S,
            store_prefix=f"commprof/{ctx.run_id}/{ctx.session}/{key}",
            modes=["eager"],
        )
        say(f"preparing {impl} before its points: {what} ...")
        started = time.monotonic()
        outcome = run_point(ctx, run.server, request, point_env(ctx, point, None, ""), folder)
        entry = outcome.entries[0] if outcome.entries else {"status": "error", "message": "no result"}
        mine = {"status": outcome.status, "message": outcome.message}
        status, message = agree(all_gather_json(mine, ctx.world_size))
        if status == "ok" and entry.get("status") == "unsupported":
            say(f"  {impl}: not prepared: {entry.get('message')}")  # its points say so themselves
        elif status != "ok" or entry.get("status") != "ok":
            failed[key] = str(message if status != "ok" else entry.get("message"))[:2000]
            say(f"  {impl}: preparation failed: {failed[key].splitlines()[0] if failed[key] else ''}")
        else:
            say(f"  {impl}: prepared in {time.monotonic() - started:.0f} s ({entry.get('message')})")
    return failed
