"""The report's files: index.html (the page), summary.json, results.csv and, per run, recommend.env,
nccl_tuner.conf, engine_flags.txt and nccl-tests-style tables. The only module of the report that writes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from commprof.report.apply import apply_plan
from commprof.report.engine_hints import engine_hints, engine_hints_text
from commprof.report.exports import (
    NCCL_TESTS_TYPES,
    RunExports,
    nccl_tests_table,
    recommend_env_text,
    results_csv,
    tuner_conf_text,
)
from commprof.report.frame import ok_rows
from commprof.report.ops import op_sizes, op_table
from commprof.report.provenance import provenance
from commprof.report.ranking import UNFUSED_REFERENCE_IMPL
from commprof.report.run_analysis import RunAnalysis, costmodel_checks
from commprof.report.summary import check_summary, summary
from commprof.report.views.page import index_html, page_view
from commprof.report.words import recommend_notes


def write_run_exports(run: RunAnalysis, folder: Path, out_dir: Path) -> RunExports:
    """recommend.env, nccl_tuner.conf, engine_flags.txt and per-point nccl-tests tables for one run."""
    lines = provenance(run)
    plan = apply_plan(run)
    tuner_text = tuner_conf_text(plan, lines)
    env_text = recommend_env_text(plan, lines, recommend_notes(run))
    fused_measured = not run.steps.empty and bool(
        (run.steps["fused_rmsnorm"] & (run.steps["impl"] != UNFUSED_REFERENCE_IMPL)).any()
    )
    hints = engine_hints(run.fusion, fused_measured, plan.choice, run.evidence, run.alternatives)
    engine_text = engine_hints_text(hints, lines)
    files = {
        "recommend.env": write_text(folder / "recommend.env", env_text),
        "nccl_tuner.conf": write_text(folder / "nccl_tuner.conf", tuner_text),
        "engine_flags.txt": write_text(folder / "engine_flags.txt", engine_text),
    }
    for point_id, path in write_nccl_tests_tables(run, folder / "nccl-tests").items():
        files[f"nccl-tests/{point_id}"] = path
    return RunExports(
        folder=str(folder.relative_to(out_dir)) if folder != out_dir else ".",
        files={k: str(Path(v).relative_to(out_dir)) for k, v in files.items()},
        recommend_env=env_text,
        tuner_conf=tuner_text,
        engine_text=engine_text,
        hints=hints,
        plan=plan,
    )


def write_nccl_tests_tables(run: RunAnalysis, folder: Path) -> dict[str, Path]:
    """Per point, an all_reduce_perf-style table of its eager records' op sizes (every T), in place."""
    eager = ok_rows(run.all_steps, "eager")
    sizes = op_sizes(op_table(eager))
    if sizes.empty:
        return {}
    written = {}
    label = run.evidence.label
    firsts = {
        row["point_id"]: row
        for row in eager.drop_duplicates("point_id")[
            ["point_id", "label", "impl", "settings", "world_size", "dtype"]
        ].to_dict("records")
    }
    tokens_of = {pid: sorted(int(t) for t in set(ts)) for pid, ts in eager.groupby("point_id")["tokens"]}
    checked = eager.groupby("point_id")["check_ok"].count()
    failed = (eager["check_ok"] == False).groupby(eager["point_id"]).sum()  # noqa: E712 (None is not False)
    bad = {point_id: int(failed[point_id]) if checked[point_id] else None for point_id in checked.index}
    rows_of: dict[str, list] = {}
    for point_id, collective, size, time_us in zip(
        sizes["point_id"], sizes["collective"], sizes["bytes"], sizes["time_us"]
    ):
        rows_of.setdefault(point_id, []).append((collective, int(size), float(time_us)))
    for point_id, rows in sorted(rows_of.items()):
        first = firsts[point_id]
        header = [
            f'commprof replay of point {point_id} "{first["label"]}" (impl {first["impl"]}; '
            f"{first['settings']}), run {run.run_id}, {label}",
            f"nRanks {int(first['world_size'])}, eager mode, per-op median over each step's timed "
            f"iterations; sizes are the step's at T = {', '.join(map(str, tokens_of[point_id]))}",
            "Compare with: "
            + ", ".join(f"{c}_perf" for c in sorted({row[0] for row in rows}))
            + f" -b <size> -e <size> -d {NCCL_TESTS_TYPES.get(first['dtype'], first['dtype'])} (in-place columns)",
        ]
        text = nccl_tests_table(rows, int(first["world_size"]), str(first["dtype"]), header, bad[point_id])
        written[point_id] = write_text(folder / f"{point_id}.txt", text)
    return written


def write_report(runs: list[RunAnalysis], out_dir: Path) -> dict[str, Path]:
    """Write index.html, summary.json, results.csv and each run's exports into out_dir; return the main paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pages, summaries = [], []
    for run in runs:
        folder = out_dir if len(runs) == 1 else out_dir / _safe_name(run.name)
        exports = write_run_exports(run, folder, out_dir)
        summaries.append(summary(run, exports))
        pages.append(page_view(run, exports))
    checks = costmodel_checks(runs)
    frame = pd.concat([r.frame for r in runs], ignore_index=True)
    return {
        "index.html": write_text(out_dir / "index.html", index_html(runs, pages, checks)),
        "summary.json": write_json_file(
            out_dir / "summary.json", {"runs": summaries, "costmodel_checks": [check_summary(c) for c in checks]}
        ),
        "results.csv": write_text(out_dir / "results.csv", results_csv(frame)),
    }


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def json_ready(value: Any) -> Any:
    """NaN -> None, numpy scalars -> Python, recursively: summary.json must be strict JSON."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_text(path: Path, text: str) -> Path:
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_json_file(path: Path, data: Any) -> Path:
    return write_text(path, json.dumps(json_ready(data), indent=2, sort_keys=False, allow_nan=False) + "\n")
