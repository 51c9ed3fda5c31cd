"""What a run records about the box's floor (meta.json "floor"), and where each floor comes from.

Four origins, each saying so: measured at the start of the run, read from a floor.json `commprof floor --out`
wrote (its path and when it was measured), a topology preset's published figures (with their sources), or not
measured, with why and how to get one. Never figures without a source. Pure, except load_floor_file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commprof.errors import UsageError
from commprof.floor.model import FloorFigures
from commprof.records.vocab import FLOOR_STATUSES
from commprof.textfiles import read_json

MEASURED, FILE, PRESET, NOT_MEASURED = FLOOR_STATUSES
MEASURE_HOW = (
    "run the sweep on the GPU box with NCCL ranks (it measures the floor first), or run "
    "`commprof floor --out floor.json` there and pass `--floor floor.json`"
)


def measured_floor(result: dict[str, Any], seconds: float, file: Path | None = None) -> dict[str, Any]:
    """The entry of a floor measured just now (the `commprof floor --json` result)."""
    figures = dict(result["figures"])
    figures["source"] = f"measured at the start of this run in {seconds:.1f} s: {figures['source']}"
    return _entry(MEASURED, figures, result, file)


def file_floor(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """The entry of a floor read from a floor.json (validated by load_floor_file)."""
    figures = dict(result["figures"])
    figures["source"] = f"{path}: {figures['source']}"
    return _entry(FILE, figures, result, path)


def preset_floor(name: str, figures: FloorFigures) -> dict[str, Any]:
    """The entry of a topology preset's published figures (a simulation's floor)."""
    table = figures.to_dict()
    table["source"] = f"topology preset {name}: {figures.source}"
    return {"status": PRESET, "figures": table}


def not_measured(why: str, how: str = MEASURE_HOW) -> dict[str, Any]:
    """The entry of a run without a floor: why, and how to get one."""
    return {"status": NOT_MEASURED, "figures": None, "why": why, "how": how}


def _entry(status: str, figures: dict, result: dict, file: Path | None) -> dict[str, Any]:
    probe = result.get("probe") or {}
    return {
        "status": status,
        "figures": figures,
        "ranks": result.get("ranks"),
        "gpus": probe.get("gpus"),
        "not_measured": probe.get("not_measured") or [],
        "table": result.get("floor"),
        "file": str(file) if file else None,
    }


def load_floor_file(path: Path, gpus: int | None = None) -> dict[str, Any]:
    """A floor.json `commprof floor --out` wrote (measured on `gpus` GPUs, where given); UsageError in one line
    otherwise."""
    where = f"--floor {path}"
    data = read_json(path, "floor file")
    if not isinstance(data, dict) or not isinstance(data.get("figures"), dict):
        raise UsageError(f"{where}: not a floor.json (no figures; write one with `commprof floor --out floor.json`)")
    try:
        figures = FloorFigures(**{k: data["figures"][k] for k in FloorFigures.__dataclass_fields__})
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: its figures are not usable ({exc})") from None
    if figures.evidence != MEASURED:
        raise UsageError(f"{where}: its figures are {figures.evidence}, not measured by `commprof floor`")
    probe = data.get("probe")
    probed = probe.get("gpus") if isinstance(probe, dict) else None
    if not isinstance(probed, list) or not probed:
        raise UsageError(f"{where}: it does not say which GPUs were probed (probe.gpus)")
    if gpus is not None:
        check_floor_gpus(path, data, gpus)
    return data


def entry_problem(entry: dict[str, Any]) -> str | None:
    """Why a floor entry as meta.json (or a bundle's floor.json) records it cannot be used, or None."""
    if entry.get("figures") is not None:
        if not isinstance(entry["figures"], dict):
            return "figures: not an object"
        try:
            FloorFigures(**{k: entry["figures"][k] for k in FloorFigures.__dataclass_fields__})
        except (KeyError, TypeError, ValueError) as exc:
            return f"its figures are not usable ({exc})"
    ranks = entry.get("ranks")
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= 1 << 20):
        return f"ranks {ranks!r} is not a number of GPUs"
    gaps = entry.get("not_measured")
    if gaps is not None and (not isinstance(gaps, list) or not all(isinstance(g, str) for g in gaps)):
        return "not_measured: not a list of strings"
    return None


def check_floor_gpus(path: Path, data: dict[str, Any], gpus: int) -> None:
    """UsageError unless the floor.json was measured on as many GPUs as this run uses per node."""
    probed = data["probe"]["gpus"]
    if len(probed) != gpus:
        raise UsageError(
            f"--floor {path}: measured on {len(probed)} GPUs, this run uses {gpus} per node: measure those with "
            f"CUDA_VISIBLE_DEVICES=<its {gpus} GPUs> commprof floor --out floor.json"
        )
