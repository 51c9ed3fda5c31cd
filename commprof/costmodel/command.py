"""`commprof import-nccl-tests` and what `calibrate` and `simulate` share: the I/O edges of the cost model."""

from __future__ import annotations

import hashlib
import sys
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from commprof.costmodel.nccl_tests import gpu_name, parse_text, run_records
from commprof.env_names import is_export_name
from commprof.errors import UsageError
from commprof.records import point_ids
from commprof.records.files import (
    RESULTS_FILE,
    append_records,
    new_run_dir,
    whole_or_removed,
)
from commprof.records.run_meta import RunMeta, launch_facts, run_meta, write_meta
from commprof.records.schema import Source
from commprof.terminal import one_line, plain_console
from commprof.textfiles import LOG_BYTES, read_text
from commprof.units import format_bytes

# The imported runs the import's table lists; meta.json lists them all.
SHOWN_RUNS = 100


def console_for(err: bool = False) -> Console:
    """The commands' console: plain text, no colour or escapes."""
    return plain_console(stderr=err)


def file_run_meta(
    run_id: str, source: Source, world_size: int | None, backend: str | None, nccl: str | None = None, **sections
) -> RunMeta:
    """meta.json for a run this module or `simulate` writes from files (no GPU, no process group); `nccl`: the
    NCCL version the files name."""
    facts = launch_facts(["commprof", *sys.argv[1:]], measuring=False)
    facts["versions"]["nccl"] = nccl
    return run_meta(**{**facts, **sections}, run_id=run_id, source=source, world_size=world_size, backend=backend)


# ---------------------------------------------------------------------------------------------- import


@click.command("import-nccl-tests")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder that receives the new run folder.",
)
@click.option(
    "--ranks",
    type=click.IntRange(1, 4096),
    default=None,
    help="The rank count of runs whose log does not state it (no '# nThread ... nGpus' or 'Using devices' lines).",
)
def import_nccl_tests(logs: tuple[Path, ...], out: Path, ranks: int | None) -> None:
    """Turn nccl-tests (*_perf) logs, text or -J JSON, into one run folder of "nccl-tests" records."""
    parsed = []
    for log in logs:
        text = read_text(log, "nccl-tests log", LOG_BYTES, errors="replace")
        parsed.append((log, text, _recordable_env(_with_ranks(parse_text(text, str(log)), ranks))))
    err = console_for(err=True)
    for _, _, log in parsed:
        for warning in log.warnings:
            err.print(f"warning: {warning}")

    run_dir = new_run_dir(out, "nccl-tests")
    with whole_or_removed(run_dir):  # a full disk or a refusal leaves no half-written run
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        records, imported, point = [], [], 0
        for path, text, log in parsed:
            records.extend(run_records(log, run_dir.name, point, now))
            imported.append(
                {
                    "file": str(path),
                    "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                    "warnings": log.warnings,
                    "nccl_versions": log.nccl_versions,
                    "gpus": log.gpu_names,
                    "runs": [
                        dict(run.summary(), point_id=point_ids.point_id(point + i)) for i, run in enumerate(log.runs)
                    ],
                }
            )
            point += len(log.runs)
        append_records(run_dir / RESULTS_FILE, records)
        ranks = {run["ranks"] for item in imported for run in item["runs"]}
        # What the logs state about the software and the GPUs (None / empty where they do not say).
        versions = sorted({v for _, _, log in parsed for v in log.nccl_versions})
        # One entry per GPU, as a sweep's meta.json has: the first run that lists its devices.
        devices = next((run.devices for _, _, log in parsed for run in log.runs if run.devices), [])
        # The nodes the logs' rank lines name ("on <host>"); unknown where a log names none or the runs differ.
        nodes = {run["nodes"] for item in imported for run in item["runs"]}
        meta = file_run_meta(
            run_dir.name,
            "nccl-tests",
            ranks.pop() if len(ranks) == 1 else None,
            None,
            nnodes=nodes.pop() if len(nodes) == 1 else None,
            nccl=", ".join(versions) or None,
            imported=imported,
            gpus=[{"name": gpu_name(d)} for d in devices],
        )
        write_meta(run_dir, meta)

    table = Table(title="imported nccl-tests runs (source: nccl-tests)")
    for column in ("point", "file:line", "collective", "ranks", "nodes", "rows", "sizes", "graph", "avg busbw GB/s"):
        table.add_column(column)
    runs = [
        (item, run, summary)
        for (_, _, log), item in zip(parsed, imported)
        for run, summary in zip(log.runs, item["runs"])
    ]
    for item, run, summary in runs[:SHOWN_RUNS]:  # a log of 20,000 one-row tables took a minute to draw in full
        sizes = f"{format_bytes(run.rows[0].bytes)}-{format_bytes(run.rows[-1].bytes)}"
        table.add_row(
            summary["point_id"],
            f"{Path(item['file']).name}:{run.line}",
            run.collective,
            str(run.ranks or "?"),
            str(run.nodes or "?"),
            str(len(run.rows)),
            sizes,
            "yes" if run.graph else "no",
            "" if run.avg_busbw_gbps is None else f"{run.avg_busbw_gbps:g}",
        )
    if len(runs) > SHOWN_RUNS:
        table.caption = f"the first {SHOWN_RUNS} of {len(runs)} runs; meta.json's imported lists every one"
    console = console_for()
    console.print(table)
    console.print(f"wrote {run_dir} ({len(records)} records)")


def _recordable_env(log):
    """The log with each run's stated settings cut to those a record may hold (commprof.env_names): the tuning
    variables calibrate reads, or knows it cannot model. Another (a plug-in's path, a socket, NCCL_DEBUG) would
    make report and calibrate refuse the run; each is left out with a warning naming it."""
    for run in log.runs:
        dropped = sorted(name for name in run.env if not is_export_name(name))
        if dropped:
            run.env = {k: v for k, v in run.env.items() if k not in dropped}
            log.warnings.append(
                f"{log.path}:{run.line}: {', '.join(one_line(n)[:80] for n in dropped[:8])}"
                f"{f' and {len(dropped) - 8} more' if len(dropped) > 8 else ''} left out of the records: not a "
                "tuning variable calibrate reads (commprof/env_names.py); intra-node timings are fitted without it"
            )
    return log


def _with_ranks(log, ranks: int | None):
    """The log with --ranks supplied to its runs that state no rank count; a run that states another is refused."""
    if ranks is None:
        return log
    for run in log.runs:
        if run.ranks is None:
            run.ranks = ranks
            log.warnings[:] = [w for w in log.warnings if not w.startswith(f"{log.path}:{run.line}: GPU count")]
            log.warnings.append(f"{log.path}:{run.line}: rank count {ranks} from --ranks (the log does not state it)")
        elif run.ranks != ranks:
            raise UsageError(f"{log.path}:{run.line}: the log states {run.ranks} ranks, --ranks says {ranks}")
    return log
