"""Entry point: decide whether this machine can run the GPU paths, run them, print and keep the verdicts."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import click

from commprof.gpu_smoke import verdicts
from commprof.gpu_smoke.environment import FAIL, RUN, SKIP, decide, probe_environment
from commprof.gpu_smoke.run import BUDGET_S, gpu_paths
from commprof.gpu_smoke.verdicts import Verdict, exit_code, format_verdicts, summary

# The first verdict, on the machine itself: no GPU anywhere is a skip, unusable GPUs a failure.
MACHINE_VERDICT = {RUN: verdicts.PASS, SKIP: verdicts.SKIP, FAIL: verdicts.FAIL}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the records, the rendered report, the logs and summary.json [a new temporary folder; "
    "none without a GPU].",
)
@click.option("--budget", type=click.IntRange(min=60), default=BUDGET_S, show_default=True, help="Seconds in all.")
def smoke(out: Path | None, budget: int) -> int:
    """Exercise every GPU path on this machine's GPUs and print one verdict per path (exit 1 if one fails)."""
    started = time.monotonic()
    env = probe_environment()
    decision, line = decide(env)
    if decision == SKIP and out is None:  # nothing ran, and no folder was asked for: make none
        click.echo(f"gpu-smoke: {line}")
        return 0
    out = out or Path(tempfile.mkdtemp(prefix="commprof-gpu-smoke-"))
    out.mkdir(parents=True, exist_ok=True)
    click.echo(f"gpu-smoke: {line}\ngpu-smoke: writing to {out}")
    found = [Verdict("CUDA and the needed packages usable here", MACHINE_VERDICT[decision], line)]
    if decision == RUN:
        found += gpu_paths(out, len(env.gpus), budget - (time.monotonic() - started), echo=click.echo)
    text = format_verdicts(found)
    click.echo("\n" + text)
    (out / "summary.txt").write_text(text + "\n")
    (out / "summary.json").write_text(
        json.dumps(summary(env.to_dict(), found, time.monotonic() - started), indent=1) + "\n"
    )
    kept = "records, report, logs and summary.json" if decision == RUN else "summary.txt and summary.json"
    click.echo(f"gpu-smoke: {kept} in {out}")
    return exit_code(found)


def main(argv: list[str] | None = None) -> int:
    try:
        return smoke.main(args=argv, prog_name="python -m commprof.gpu_smoke", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
