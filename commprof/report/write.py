"""The report's files: index.html (the page), summary.json, results.csv and, per run, recommend.env,
nccl_tuner.conf, engine_flags.txt and nccl-tests-style tables. The only module of the report that writes.

A report is rendered into a new sibling folder and then swapped in for --out, so no file of an earlier render
survives and nothing already in --out (a symbolic link, say) is written through. Every path is built by
`inside`, which refuses a name that would lead out of the folder; files are created, never opened for
overwriting. --out must be new, empty, or an earlier report (its summary.json says so).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec
import pandas as pd

from commprof.errors import UsageError
from commprof.nccl_graph.export import EXPORTED_NAME
from commprof.report.analysis.compared import check_facts, costmodel_checks, incomparable
from commprof.report.analysis.decide import decide
from commprof.report.analysis.frame import ok_rows
from commprof.report.analysis.ops import op_sizes
from commprof.report.analysis.run_analysis import RunAnalysis
from commprof.report.decision.codec import FORMAT, decode, encode
from commprof.report.decision.types import RECOMMEND_ENV, TUNER_CONF, Decision, Report
from commprof.report.exports.confirm import confirm_text
from commprof.report.exports.decision_files import ROUTING_FILE, engine_flags_text, routing_text
from commprof.report.exports.engine_hints import ENGINE_FLAGS_FILE
from commprof.report.exports.files import (
    NCCL_TESTS_TYPES,
    csv_columns,
    nccl_tests_table,
    recommend_env_text,
    results_csv,
    tuner_conf_text,
)
from commprof.report.views.page import index_html, page_figures, page_view
from commprof.report.worker import Pending, Worker
from commprof.textfiles import RESULTS_BYTES, read_bytes

SUMMARY_FILE = "summary.json"
CONFIRM_FILE = "confirm.toml"
PAGE_FILE = "index.html"
RESULTS_CSV = "results.csv"


def run_texts(decision: Decision) -> dict[str, str]:
    """A run's exported files, name -> text, each rendered from its Decision alone."""
    texts = {
        RECOMMEND_ENV: recommend_env_text(decision),
        TUNER_CONF: tuner_conf_text(decision),
        ENGINE_FLAGS_FILE: engine_flags_text(decision),
        ROUTING_FILE: routing_text(decision),
    }
    if (confirm := confirm_text(decision)) is not None:
        texts[CONFIRM_FILE] = confirm
    if decision.nccl.graph_text is not None:
        texts[EXPORTED_NAME] = decision.nccl.graph_text
    return texts


def nccl_tests_tables(run: RunAnalysis) -> dict[str, tuple]:
    """Per point, nccl_tests_table's arguments for an all_reduce_perf-style table of its eager records' op sizes
    (every T)."""
    eager = ok_rows(run.all_steps, "eager")
    sizes = op_sizes(eager)
    if sizes.empty:
        return {}
    tables = {}
    label = run.evidence.label
    firsts = {
        row["point_id"]: row
        for row in eager.drop_duplicates("point_id")[
            ["point_id", "label", "impl", "settings", "world_size", "dtype"]
        ].to_dict("records")
    }
    token_sets: dict[str, set[int]] = {}
    for point_id, tokens in zip(eager["point_id"].tolist(), eager["tokens"].tolist()):  # no Series per point
        token_sets.setdefault(point_id, set()).add(int(tokens))
    tokens_of = {point_id: sorted(tokens) for point_id, tokens in token_sets.items()}
    checked = eager.groupby("point_id")["check_ok"].count()
    failed = (eager["check_ok"] == False).groupby(eager["point_id"]).sum()  # noqa: E712 (None is not False)
    bad = {point_id: int(failed[point_id]) if checked[point_id] else None for point_id in checked.index}
    rows_of: dict[str, list] = {}
    for point_id, collective, size, time_us in zip(
        *(sizes[column].tolist() for column in ("point_id", "collective", "bytes", "time_us"))
    ):
        rows_of.setdefault(point_id, []).append((collective, int(size), float(time_us)))
    for point_id, rows in sorted(rows_of.items()):
        first = firsts[point_id]
        if pd.isna(first["world_size"]):  # a record without its rank count: no bus bandwidth to compare
            continue
        header = [
            f'commprof replay of point {point_id} "{first["label"]}" (impl {first["impl"]}; '
            f"{first['settings']}), run {run.run_id}, {label}",
            f"nRanks {int(first['world_size'])}, eager mode, "
            + (
                "per-op predictions of the cost model (nothing was timed)"
                if run.evidence.simulated
                else "per-op median over each step's timed iterations"
            )
            + f"; sizes are the step's at T = {', '.join(map(str, tokens_of[point_id]))}",
            "Compare with: "
            + ", ".join(f"{c}_perf" for c in sorted({row[0] for row in rows}))
            + f" -b <size> -e <size> -d {NCCL_TESTS_TYPES.get(first['dtype'], first['dtype'])} (in-place columns)",
        ]
        tables[point_id] = (rows, int(first["world_size"]), str(first["dtype"]), header, bad[point_id])
    return tables


def write_nccl_tests_tables(tables: dict[str, tuple], folder: Path) -> dict[str, Path]:
    """Each point's table (nccl_tests_tables) as folder/<point id>.txt."""
    texts = {f"{point_id}.txt": nccl_tests_table(*args) for point_id, args in tables.items()}
    paths = write_texts(folder, texts)
    return {point_id: path for point_id, path in zip(tables, paths)}


def write_report(
    runs: list[RunAnalysis],
    out_dir: Path,
    decide_run: Callable[[RunAnalysis], Decision] = decide,
    files: Worker | None = None,
) -> tuple[dict[str, Path], Report]:
    """Decide each run (decide_run, once) and write index.html, summary.json, results.csv and each run's exports,
    then swap them in as out_dir; return the main paths (under out_dir) and the report (the Decisions). UsageError
    when out_dir cannot take a report. `files`: a worker forked before the records were read, which writes
    results.csv and the nccl-tests tables from what it is sent (None: they are written here)."""
    return _staged(
        out_dir, lambda staging, sent: _write_all(runs, decide_run, staging, files or Worker(fork=False), sent)
    )


def render_from_summary(path: Path, out_dir: Path) -> tuple[dict[str, Path], Report]:
    """Every output of a report rendered again from its summary.json alone (`commprof report --from-summary`):
    index.html, summary.json and each run's exported files (results.csv and the nccl-tests tables are the records'
    own: they are not in it). UsageError where the file is not a summary.json of this commprof."""
    data = read_bytes(path, "summary.json", RESULTS_BYTES)
    try:
        report = decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise UsageError(f"--from-summary {path}: not a summary.json of this commprof ({exc})") from None
    return _staged(out_dir, lambda staging, sent: (_render(report, staging), report))


def _staged(out_dir: Path, write: Callable[[Path, list[Pending]], tuple[dict[str, Path], Report]]):
    check_report_target(out_dir)
    blocking = next((p for p in out_dir.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise UsageError(f"--out {out_dir}: {blocking} is a file, not a folder")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.rendering-", dir=out_dir.parent))
        staging.chmod(0o777 & ~_umask())  # mkdtemp's folder is private: the report's follows the umask, as runs do
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot write there ({exc.strerror or exc})") from None
    sent: list[Pending] = []
    try:
        paths, report = write(staging, sent)
        swap_in(staging, out_dir)
    except OSError as exc:
        _settle(sent)
        shutil.rmtree(staging, ignore_errors=True)
        raise UsageError(f"--out {out_dir}: cannot write the report ({exc.strerror or exc})") from None
    except BaseException:
        _settle(sent)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {name: out_dir / path.relative_to(staging) for name, path in paths.items()}, report


def _settle(sent: list[Pending]) -> None:
    """Wait until the worker has done what it was sent (its outcome aside): nothing is written once this returns."""
    for pending in sent:
        with contextlib.suppress(Exception):
            pending.result()


def _write_all(
    runs: list[RunAnalysis],
    decide_run: Callable[[RunAnalysis], Decision],
    out_dir: Path,
    files: Worker,
    sent: list[Pending],
) -> tuple[dict[str, Path], Report]:
    taken: set[str] = set()
    folders = [out_dir if len(runs) == 1 else inside(out_dir, _unique(_safe_name(r.name), taken)) for r in runs]
    for folder in folders if len(runs) > 1 else ():
        folder.mkdir()  # here, before the worker writes into it too
    # The worker writes results.csv while this process decides; the nccl-tests tables (a file per point, slow to
    # create on some disks) are written by the worker too, while this process renders the Decisions.
    frame = runs[0].frame if len(runs) == 1 else pd.concat([r.frame for r in runs], ignore_index=True)
    sent.append(files.call(__name__, "write_results_csv", (csv_columns(frame), out_dir)))
    tables = [(nccl_tests_tables(run), inside(folder, "nccl-tests")) for run, folder in zip(runs, folders)]
    sent.extend(files.call(__name__, "write_nccl_tests_tables", each) for each in tables)
    decisions = []
    for run, folder, (table, _where) in zip(runs, folders, tables):
        decision = decide_run(run)
        where = str(folder.relative_to(out_dir)) if folder != out_dir else "."
        names = [*run_texts(decision), *(f"nccl-tests/{point_id}" for point_id in table)]
        paths = {name: _relative(where, name, table) for name in names}
        decisions.append(msgspec.structs.replace(decision, folder=where, files=paths))
    checks = costmodel_checks(runs)
    report = Report(
        format=FORMAT,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        runs=decisions,
        costmodel_checks=[check_facts(c) for c in checks],
        incomparable=incomparable(runs),
    )
    written = _render(report, out_dir)
    written[RESULTS_CSV], *_ = (pending.result() for pending in sent)  # the tables are written (or raised)
    return written, report


def _relative(folder: str, name: str, table: dict) -> str:
    if name.startswith("nccl-tests/"):
        name = f"{name}.txt"
    return name if folder == "." else f"{folder}/{name}"


def _render(report: Report, out_dir: Path) -> dict[str, Path]:
    """index.html, summary.json and each run's files, rendered from the report's Decisions alone."""
    figures = [page_figures(decision) for decision in report.runs]  # asked for first: a worker draws them
    pages = []
    for decision, drawn in zip(report.runs, figures):
        folder = out_dir if decision.folder == "." else inside(out_dir, decision.folder)
        texts = run_texts(decision)
        for name, text in texts.items():
            write_text(inside(folder, name), text)
        pages.append(page_view(decision, {**texts, CONFIRM_FILE: texts.get(CONFIRM_FILE, "")}, drawn))
    return {
        PAGE_FILE: write_text(inside(out_dir, PAGE_FILE), index_html(report, pages, report.generated)),
        SUMMARY_FILE: write_bytes(inside(out_dir, SUMMARY_FILE), encode(report)),
    }


def write_results_csv(frame: pd.DataFrame, out_dir: Path) -> Path:
    """results.csv: every record of every run (`frame`: csv_columns of their frame)."""
    return write_text(inside(out_dir, RESULTS_CSV), results_csv(frame))  # the CSV has no index column


def inside(folder: Path, name: str) -> Path:
    """folder / name, where name must be one plain file name: no separator, not "." or "..", no control character.

    Names come from run and point ids (checked on read) and fixed names; this is the one place that builds a
    report path, so a name that slipped through any check still cannot lead out of the report's folder.
    """
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    ):
        raise UsageError(f"refusing to write {name!r} in {folder}: not a plain file name")
    return folder / name


def check_report_target(out_dir: Path) -> None:
    """UsageError unless out_dir is new, an empty folder, or an earlier report (replaced as a whole)."""
    if out_dir.is_symlink():
        raise UsageError(f"--out {out_dir}: a symbolic link; give the folder it points to, or a new one")
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: not a folder")
    if any(out_dir.iterdir()) and not _is_report(out_dir):
        raise UsageError(
            f"--out {out_dir}: holds files that are not a commprof report; give a new or empty folder "
            "(a report replaces its folder as a whole)"
        )


def _is_report(folder: Path) -> bool:
    """An earlier render: its summary.json is a regular file of the report's shape."""
    path = folder / SUMMARY_FILE
    if path.is_symlink() or not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and isinstance(data.get("runs"), list) and "costmodel_checks" in data


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def swap_in(staging: Path, out_dir: Path) -> None:
    """Put the rendered folder in out_dir's place; an earlier report there is removed afterwards."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    if not any(out_dir.iterdir()):
        os.rmdir(out_dir)
        os.rename(staging, out_dir)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.replaced-", dir=out_dir.parent))
    os.rename(out_dir, old / "report")
    os.rename(staging, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def _unique(name: str, taken: set[str]) -> str:
    """name, or name-2, name-3, ...: two runs with one id never share a folder."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name}-{number}"
    taken.add(candidate)
    return candidate


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".") or "run"


def write_text(path: Path, text: str) -> Path:
    """Create `path` (and its folder) with `text`; never writes through an existing file or link."""
    return write_texts(path.parent, {path.name: text})[0]


def write_texts(folder: Path, texts: dict[str, str | bytes]) -> list[Path]:
    """Create each file of `texts` (name -> text) in `folder`, made if missing, opened once for them all (a
    point's nccl-tests table each: a thousand files); never writes through an existing file or link."""
    paths = [inside(folder, name) for name in texts]
    if not folder.is_dir():
        folder.mkdir(parents=True)
    where = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name, text in texts.items():
            data = memoryview(text if isinstance(text, bytes) else text.encode("utf-8"))
            handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666, dir_fd=where)
            try:
                while data:  # a regular file takes it all at once, unless a signal cuts the write short
                    data = data[os.write(handle, data) :]
            finally:
                os.close(handle)
    finally:
        os.close(where)
    return paths


def write_bytes(path: Path, data: bytes) -> Path:
    return write_texts(path.parent, {path.name: data})[0]
