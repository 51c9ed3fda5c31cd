"""The `nccl_graph` key of a sweep file: which graph NCCL runs with, swept like any other NCCL setting.

`"auto"` leaves NCCL_GRAPH_FILE unset (NCCL's own search); `"generated"` is every candidate commprof.nccl_graph
writes for the box the sweep runs on, one point each (`"generated:<name>"` one of them); any other string is a
graph file's path. Generated candidates are written into the run folder when the run starts, so a point's
variable names the candidate, and the file it ran with is recorded with its sha256. Pure.
"""

from __future__ import annotations

from pathlib import Path

from commprof.nccl_graph.candidates import GENERATED_PREFIX, possible_names

GRAPH_AXIS = "nccl_graph"
GRAPH_VARIABLE = "NCCL_GRAPH_FILE"
AUTO, GENERATED = "auto", "generated"
GRAPHS_FOLDER = "nccl-graphs"  # inside the run folder: the candidates written for this box


def graph_values(raw: object, key: str, problems, single: bool) -> list[tuple[str, object]]:
    """(key, NCCL_GRAPH_FILE value or "default") per value of a `nccl_graph` entry; problems recorded."""
    values = raw if isinstance(raw, list) else [raw]
    if single and isinstance(raw, list):
        problems.error(key, "a point takes one value per key (put several in [axes])")
        return []
    if isinstance(raw, list) and not raw:
        problems.error(key, "empty list (give at least one value, or leave the key out)")
    allowed = f'"{AUTO}", "{GENERATED}", "{GENERATED_PREFIX}<name>" or a graph file\'s path'
    out: list[tuple[str, object]] = []
    for i, value in enumerate(values):
        where = f"{key}[{i}]" if isinstance(raw, list) else key
        if not isinstance(value, str) or not value.strip():
            problems.error(where, f"expected a string, got {value!r} (allowed: {allowed})")
        elif value == AUTO:
            out.append((where, "default"))
        elif value == GENERATED:
            if single:
                problems.error(
                    where, f'a point runs one graph: name it "{GENERATED_PREFIX}<name>" (allowed: {allowed})'
                )
                continue
            out += [(where, GENERATED_PREFIX + name) for name in possible_names()]
        elif value.startswith(GENERATED_PREFIX):
            if value.removeprefix(GENERATED_PREFIX) not in possible_names():
                problems.error(where, f"{value!r} names no candidate (allowed: {', '.join(possible_names()[:4])}, ...)")
                continue
            out.append((where, value))
        else:
            out.append((where, value))
    return out


def generated_name(env: dict[str, str]) -> str | None:
    """The candidate a point runs ("ring-4ch-same-hop"), None when it runs NCCL's search or a given file."""
    value = env.get(GRAPH_VARIABLE, "")
    return value.removeprefix(GENERATED_PREFIX) if value.startswith(GENERATED_PREFIX) else None


def graph_path(env: dict[str, str], run_dir: Path) -> Path | None:
    """The file NCCL_GRAPH_FILE points NCCL at for this point, None when it is unset."""
    value = env.get(GRAPH_VARIABLE)
    if value is None:
        return None
    name = generated_name(env)
    return run_dir / GRAPHS_FOLDER / f"{name}.xml" if name else Path(value).expanduser().resolve()
