"""Entry point: print the environment, decide whether this machine can run the GPU paths, run them, print one
verdict per path last, and keep everything in one archive (summary.json also beside it).

argparse, not click: the answer must come even from a bare python3 that lacks some of commprof's packages.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

from commprof.errors import UsageError
from commprof.gpu_smoke import verdicts
from commprof.gpu_smoke.archive import ARCHIVE_LIMIT_BYTES, pack, plan_archive
from commprof.gpu_smoke.budget import BUDGET_S, EXTENDED_BUDGET_S
from commprof.gpu_smoke.environment import FAIL, RUN, SKIP, decide, probe_environment
from commprof.gpu_smoke.verdicts import Verdict, exit_code, format_verdicts, summary
from commprof.records.folder import write_atomic

# The files the smoke writes in --out itself (and summary.json beside the archive): an archive never takes a name.
OWN_FILES = ("summary.txt", "smoke.log", "summary.json")
# The first verdict, on the machine itself: no GPU anywhere is a skip, unusable GPUs a failure.
MACHINE_VERDICT = {RUN: verdicts.PASS, SKIP: verdicts.SKIP, FAIL: verdicts.FAIL}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m commprof.gpu_smoke",
        description="Exercise every GPU path on this machine's GPUs and print one verdict per path "
        "(exit 1 if one fails, 0 when there is no GPU).",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="Folder for the records, the rendered report, the logs and summary.json [a new temporary folder; "
        "none without a GPU unless --archive is given].",
    )
    p.add_argument(
        "--archive",
        type=Path,
        default=None,
        help=f"Also pack everything under --out into this .tgz (at most {ARCHIVE_LIMIT_BYTES >> 20} MiB; what would "
        "not fit is listed in summary.json) and write summary.json beside it.",
    )
    p.add_argument("--extended", action="store_true", help="After the first step, the ~4-minute second one.")
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help=f"Seconds in all [{BUDGET_S}; {EXTENDED_BUDGET_S} with --extended].",
    )
    return p


def smoke(out: Path | None, archive: Path | None, extended: bool, budget: int | None, echo=print) -> int:
    """The whole smoke; its exit status."""
    started = time.monotonic()
    transcript: list[str] = []

    def say(text: str) -> None:
        transcript.append(text)
        echo(text)

    env = probe_environment()
    say("gpu-smoke: environment\n" + "\n".join(f"  {line}" for line in env.lines()))
    decision, line = decide(env)
    if decision == SKIP and out is None and archive is None:  # nothing ran, nothing asked for: make no folder
        say(f"gpu-smoke: {line}")
        return 0
    out = out or Path(tempfile.mkdtemp(prefix="commprof-gpu-smoke-"))
    out.mkdir(parents=True, exist_ok=True)
    say(f"gpu-smoke: {line}\ngpu-smoke: writing to {out}")
    found = [Verdict("CUDA and the needed packages usable here", MACHINE_VERDICT[decision], line)]
    if decision == RUN:
        budget_s = budget or (EXTENDED_BUDGET_S if extended else BUDGET_S)
        left = budget_s - (time.monotonic() - started)
        try:
            from commprof.gpu_smoke.run import gpu_paths  # after the environment: it needs every module above

            found += gpu_paths(out, len(env.gpus), left, say, exclusive=env.exclusive, extended=extended)
        except Exception as exc:  # a bug in the smoke itself must not lose what its steps wrote
            where = traceback.format_exc().strip().splitlines()
            found.append(
                Verdict("the smoke itself", verdicts.FAIL, f"{type(exc).__name__}: {exc}\n" + "\n".join(where[-6:]))
            )
    text = format_verdicts(found)
    write_atomic(out / "summary.txt", (text + "\n").encode())
    write_atomic(out / "smoke.log", ("\n".join(transcript) + "\n" + text + "\n").encode())
    result = summary(env.to_dict(), found, time.monotonic() - started)
    if archive is not None:
        inside = (
            [str(archive.resolve().relative_to(out.resolve()))]
            if archive.resolve().is_relative_to(out.resolve())
            else []
        )
        kept, left_out = plan_archive(out, exclude={"summary.json", *inside, *(f"{i}.partial" for i in inside)})
        result["archive"] = {"path": str(archive), "files": len(kept) + 1, "left_out": left_out}
    write_atomic(out / "summary.json", (json.dumps(result, indent=1) + "\n").encode())
    if archive is not None:
        archive.parent.mkdir(parents=True, exist_ok=True)
        size = pack(out, [out / "summary.json", *kept], archive)
        write_atomic(archive.parent / "summary.json", (json.dumps(result, indent=1) + "\n").encode())
        dropped = f"; left out (over {ARCHIVE_LIMIT_BYTES >> 20} MiB): {len(left_out)} file(s)" if left_out else ""
        say(f"gpu-smoke: {archive} ({size / 2**20:.1f} MiB, {len(kept) + 1} files{dropped}), summary.json beside it")
    kept_text = (
        "records, report, logs and summary.json" if decision == RUN else "summary.txt, smoke.log and summary.json"
    )
    say(f"gpu-smoke: {kept_text} in {out}")
    echo("\n" + text)  # the verdicts end the output
    return exit_code(found)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.budget is not None and args.budget < 60:
        print("python -m commprof.gpu_smoke: error: --budget must be at least 60 seconds", file=sys.stderr)
        return 2
    if problem := output_problem(args.out, args.archive) or foreign_summary(args.out, args.archive):
        print(f"python -m commprof.gpu_smoke: error: {problem}", file=sys.stderr)
        return 2
    try:
        return smoke(args.out, args.archive, args.extended, args.budget, echo=lambda text: print(text, flush=True))
    except (UsageError, OSError) as exc:  # --out or the archive could not be written: read-only, full, a link
        what = exc if isinstance(exc, UsageError) else f"{exc.filename or '--out'}: cannot be written ({exc.strerror})"
        print(f"python -m commprof.gpu_smoke: error: {what}", file=sys.stderr)
        return 2


def output_problem(out: Path | None, archive: Path | None) -> str | None:
    """Why --out or --archive cannot be written as asked, before any work: a file named as the folder, a folder
    named as the archive, an archive taking the name of a file the smoke writes."""
    if out is not None and out.exists() and not out.is_dir():
        return f"--out {out}: a file, not a folder; name a folder (it is made where missing)"
    if archive is None:
        return None
    if archive.is_dir():
        return f"--archive {archive}: a folder; name the .tgz to write, e.g. {archive / 'gpu-smoke.tgz'}"
    own = [archive.parent / "summary.json"] + ([out / name for name in OWN_FILES] if out is not None else [])
    if archive.name == "summary.json" or any(archive.resolve() == path.resolve() for path in own):
        return f"--archive {archive}: the smoke writes a summary of that name; name the archive something else"
    return None


def foreign_summary(out: Path | None, archive: Path | None) -> str | None:
    """Why the smoke would overwrite a summary.json it did not write (a report's), or None: checked before any work;
    an earlier smoke's summary.json (its "verdicts" and "exit_code") may be replaced."""
    for folder in (out, archive.parent if archive is not None else None):
        path = folder / "summary.json" if folder is not None else None
        if path is None or not path.exists():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError):
            data = None
        if not (isinstance(data, dict) and "verdicts" in data and "exit_code" in data):
            return f"{path} exists and is not a gpu-smoke summary: choose another --out / --archive folder"
    return None


if __name__ == "__main__":
    sys.exit(main())
