"""The expected error of a simulation, with its source: what "within model error" is judged by.

With a calibration: the largest error over the bands of decode / verify sizes it was judged on
(`commprof calibrate` records it as fit.expected_error_pct). Without one, the prior (NCCL's own tuning model): its median absolute error on real
nccl-tests logs over the sizes of a decode / verify step's collectives (8 KB-1 MB), computed with the calibration
code and recorded in prior_error.toml with each log's sha256. Recompute that record (tests/test_model_error.py
does, and fails when it drifts):

    python -m commprof.costmodel.model_error tests/fixtures/nccl-tests/rtx4090x*.txt > commprof/costmodel/prior_error.toml
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path
from statistics import median

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from commprof.costmodel import calibrate as fitting
from commprof.costmodel.nccl_tests import parse_text, run_records
from commprof.costmodel.topology import link_for, load_topology
from commprof.evidence import ModelError, calibration_error

PRIOR = "nccl-prior"  # the records' calibration name of the uncalibrated model
RECORD = Path(__file__).with_name("prior_error.toml")
# The preset of the box the real logs come from (8 x RTX 4090, dual socket, no P2P: NCCL moves data through SHM).
LOGS_TOPOLOGY = "pcie-dual-socket-shm"
SIZE_RANGE = fitting.HOLDOUT_RANGE  # the sizes of a decode / verify step's all-reduces and all-gathers


def measure(logs: dict[str, str]) -> list[dict]:
    """Per run of each log (file name -> text): the prior's median absolute % error, in SIZE_RANGE and over every
    size, with the log's sha256 and the run's rank count."""
    topology = load_topology(LOGS_TOPOLOGY)
    link = link_for(topology, {})
    prior = topology.prior(link)
    rows = []
    for name, text in sorted(logs.items()):
        records = run_records(parse_text(text, name), "prior-error", 0, "")
        samples, _ = fitting.samples_from_records(records, fitting.nccl_constraints(topology, link))
        for group in sorted({s.group for s in samples}):
            members = [s for s in samples if s.group == group]
            inside = [s for s in members if SIZE_RANGE[0] <= s.bytes <= SIZE_RANGE[1]]
            if not inside:
                continue
            rows.append(
                {
                    "file": name,
                    "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                    "run": group,
                    "ranks": members[0].ranks,
                    "samples": len(inside),
                    "median_abs_pct": round(median(fitting.abs_pct_errors(prior, inside)), 1),
                    "all_sizes_median_abs_pct": round(median(fitting.abs_pct_errors(prior, members)), 1),
                }
            )
    return rows


def to_toml(rows: list[dict]) -> str:
    lines = [
        "# The cost model's prior (NCCL's uncalibrated tuning model, topology preset "
        f"{LOGS_TOPOLOGY}) against real nccl-tests logs:",
        f"# median absolute % error over sizes {SIZE_RANGE[0] >> 10} KB-{SIZE_RANGE[1] >> 20} MB (median_abs_pct)"
        " and over every size.",
        "# Written by: python -m commprof.costmodel.model_error LOG... (see commprof/costmodel/model_error.py).",
        f'topology = "{LOGS_TOPOLOGY}"',
    ]
    for row in rows:
        lines.append("")
        lines.append("[[runs]]")
        for key, value in row.items():
            lines.append(f"{key} = {value!r}" if not isinstance(value, str) else f'{key} = "{value}"')
    return "\n".join(lines) + "\n"


def recorded() -> list[dict]:
    """The record shipped with commprof (prior_error.toml)."""
    return tomllib.loads(RECORD.read_text(encoding="utf-8")).get("runs", [])


def prior_error(world_size: int | None, rows: list[dict] | None = None, all_sizes: bool = False) -> ModelError:
    """The prior's expected error for a simulation at `world_size` ranks: the median error of the real logs' runs
    at that rank count, else the largest of every run (the prior is no better elsewhere), with its source.
    `all_sizes`: over every size the logs hold, not only 8 KB-1 MB (the figure for ops outside those sizes)."""
    rows = recorded() if rows is None else rows
    if not rows:
        return ModelError(None, "no real log recorded to measure the uncalibrated model against")
    key = "all_sizes_median_abs_pct" if all_sizes else "median_abs_pct"
    same = [r for r in rows if r["ranks"] == world_size]
    chosen = same or [max(rows, key=lambda r: r[key])]
    pct = float(median(r[key] for r in chosen))
    files = ", ".join(sorted({r["file"] for r in chosen}))
    where = f"{len(chosen)} run(s) at {world_size} ranks" if same else f"the worst run, no log at {world_size} ranks"
    sizes = "every size" if all_sizes else f"{SIZE_RANGE[0] >> 10} KB-{SIZE_RANGE[1] >> 20} MB"
    return ModelError(
        pct,
        f"NCCL's uncalibrated model, median error over {sizes} on real "
        f"nccl-tests logs ({files}; {where}, box preset {LOGS_TOPOLOGY})",
    )


def expected_error(
    calibrations: Iterable[str], fit: dict | None, world_size: int | None, prior: ModelError | None = None
) -> ModelError:
    """The expected error of a simulation's NCCL predictions, whose records name `calibrations` (PRIOR or a file,
    whose fit is `fit`): the largest of theirs, since a verdict over its points must hold for each (unknown
    wins). `prior`: the prior's own error on this box where the topology has one (a box read from its bundle),
    else the logs'. A kernel set against NCCL is judged by both models' errors (commprof.evidence.Evidence.beats)."""
    prior = prior or prior_error(world_size)
    errors = [prior if name == PRIOR else calibration_error(name, fit) for name in sorted(set(calibrations))] or [prior]
    unknown = [e for e in errors if e.pct is None]
    if unknown:
        return unknown[0]
    worst = max(errors, key=lambda e: e.pct)
    if len(errors) == 1:
        return worst
    boxes = next((e.boxes for e in errors if e.boxes), None)
    return ModelError(worst.pct, f"{worst.basis}; the largest of {len(errors)} used", boxes)


def outside_calibration(records: Iterable[dict]) -> tuple[int, list[int], str, float | None]:
    """What a calibrated simulation priced outside the calibration's judged sizes, over its step records: the ops,
    their distinct sizes, the judged sizes ("" : none were priced so) and the largest step error covering them
    (None when none, or when one is unknown: see covering_outside)."""
    ops, sizes, judged, worst, unknown = 0, set(), "", None, False
    for record in records:
        if record.get("mode") == "graph":  # the same ops as its eager record
            continue
        nccl = record.get("nccl") if isinstance(record.get("nccl"), dict) else {}
        note = nccl.get("outside_calibration")
        if not isinstance(note, dict):
            continue
        ops += int(note.get("ops") or 0)
        sizes.update(s for s in note.get("sizes") or () if isinstance(s, int))
        judged = judged or str(note.get("judged") or "")
        pct = nccl.get("expected_error_pct")
        if isinstance(pct, (int, float)) and not isinstance(pct, bool):
            worst = max(worst or 0.0, float(pct))
        else:
            unknown = True
    return ops, sorted(sizes), judged, None if unknown else worst


def covering_outside(error: ModelError, prior: ModelError, records: list[dict]) -> ModelError:
    """The run's expected error covering its steps': where ops were priced outside the calibration's judged sizes
    (by the prior, with its error), the largest of the calibration's and those steps' (each the time-weighted
    mean of its ops' errors), saying how many ops and which sizes; unknown if either is."""
    ops, sizes, judged, worst = outside_calibration(records)
    if not ops:
        return error
    pct = None if error.pct is None or worst is None else max(error.pct, worst)
    where = f" ({judged})" if judged else ""
    shown = ", ".join(str(s) for s in sizes[:6]) + (", ..." if len(sizes) > 6 else "")
    return ModelError(
        pct,
        f"{error.basis}; {ops} op(s) of its steps outside the calibrated sizes{where}, at {shown} B, are priced by NCCL's "
        f"uncalibrated model with its error ({prior.band}: {prior.basis}), each step's error weighing its ops' by "
        "their predicted time",
        error.boxes,
    )


def main(argv: list[str]) -> int:
    logs = {Path(p).name: Path(p).read_text(encoding="utf-8", errors="replace") for p in argv}
    sys.stdout.write(to_toml(measure(logs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
