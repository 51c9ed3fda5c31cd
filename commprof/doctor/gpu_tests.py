"""The GPU tests behind checks 1, 5 and 9: an all-GPU NCCL init + all-reduce (with its INFO log and a link
reading under load), then one two-rank all-reduce per GPU pair, disjoint pairs in parallel, each in its own
process tree with a time limit, and an NCCL_P2P_DISABLE=1 control for every pair that fails.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from commprof.doctor.facts import Source
from commprof.doctor.nccl_probe import run_probe
from commprof.nccl_log.parse import parse_nccl_log
from commprof.nccl_vocab import DUMP_VARIABLES

ALL_GPUS_TIMEOUT_S = 90
PAIR_TIMEOUT_S = 45
LOAD_SECONDS = 0.5
# The pair tests force P2P on every path: testing P2P is the point, whatever NCCL's default level.
PAIR_ENV = {"NCCL_P2P_LEVEL": "SYS"}
CONTROL_ENV = {"NCCL_P2P_DISABLE": "1"}
# What NCCL detected and the graphs it searched, dumped by the all-GPU init test (bundle key -> file NCCL writes).
_TOPO_DUMP, _GRAPH_DUMP = DUMP_VARIABLES
DUMPS = {"nccl_topo": (_TOPO_DUMP, "nccl_topo.xml"), "nccl_graphs": (_GRAPH_DUMP, "nccl_graphs.xml")}


def run_gpu_tests(topology: dict[str, Any], quick: bool, workdir: Path) -> tuple[dict[str, Any], Source]:
    """(tests for Facts.tests, the all-GPU NCCL INFO log as a Source)."""
    gpus = [g["index"] for g in topology["gpus"]]
    log_path = workdir / "nccl_init.log"
    dumps = {variable: str(workdir / file) for variable, file in DUMPS.values()}
    whole = run_probe(gpus, dumps, ALL_GPUS_TIMEOUT_S, log_path, load_seconds=LOAD_SECONDS)
    log = Source(
        "nccl_init",
        f"NCCL_DEBUG=INFO all-reduce on GPUs {','.join(map(str, gpus))}",
        log_path.read_text(errors="replace") if log_path.exists() else None,
        "" if log_path.exists() else "no log written",
    )
    tests: dict[str, Any] = {
        "all_gpus": {k: v for k, v in whole.items() if k != "link_load"},
        "link_load": whole.get("link_load") or {},
    }
    if len(gpus) < 2:
        tests["pairs_skipped"] = "one GPU: no pairs"
        return tests, log
    levels = {tuple(p["gpus"]): p.get("level") for p in topology["pairs"]}
    everything = not quick or whole["status"] != "ok"
    pairs = list(levels) if everything else representative_pairs(levels)
    tests["pairs_scope"] = "" if everything else f" (one per path type of {len(levels)}; --all-pairs tests every pair)"
    tests["pairs"] = run_pairs(pairs, PAIR_ENV, workdir, "pair")
    failed = [t for t in tests["pairs"] if t["status"] != "ok"]
    controls = run_pairs([tuple(t["gpus"]) for t in failed], CONTROL_ENV, workdir, "control")
    for test, control in zip(failed, controls):
        test["control"] = control
    return tests, log


def nccl_dumps(workdir: Path) -> dict[str, Source]:
    """NCCL's own topology and graphs as the all-GPU init test dumped them, or why they are missing."""
    out = {}
    for name, (variable, file) in DUMPS.items():
        path = workdir / file
        text = path.read_text(errors="replace") if path.is_file() else None
        out[name] = Source(name, f"{variable} of the all-GPU init test", text, "" if text else "NCCL wrote no dump")
    return out


def representative_pairs(levels: dict[tuple[int, int], str | None]) -> list[tuple[int, int]]:
    """One pair per path level (PIX, NODE, SYS, ...), GPU-disjoint where possible so they run at once."""
    chosen: dict[str | None, tuple[int, int]] = {}
    for level in dict.fromkeys(level for _, level in sorted(levels.items())):
        candidates = [pair for pair, lv in sorted(levels.items()) if lv == level]
        used = {g for pair in chosen.values() for g in pair}
        chosen[level] = next((p for p in candidates if not set(p) & used), candidates[0])
    return list(chosen.values())


def rounds(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Group pairs into rounds of GPU-disjoint pairs, which can run at the same time."""
    out: list[list[tuple[int, int]]] = []
    for pair in pairs:
        for group in out:
            if not any(set(pair) & set(other) for other in group):
                group.append(pair)
                break
        else:
            out.append([pair])
    return out


def run_pairs(pairs: list[tuple[int, int]], env: dict[str, str], workdir: Path, tag: str) -> list[dict[str, Any]]:
    results: dict[tuple[int, int], dict[str, Any]] = {}
    for group in rounds(pairs):
        with ThreadPoolExecutor(max_workers=len(group)) as pool:
            done = pool.map(
                lambda p: run_probe(list(p), env, PAIR_TIMEOUT_S, workdir / f"{tag}-{p[0]}-{p[1]}.log"), group
            )
            results.update(zip(group, done))
    out = []
    for pair in pairs:
        result = results[pair]
        log = Path(result["log"])
        if log.exists():
            result["transports"] = sorted(parse_nccl_log(log.read_text(errors="replace")).transports)
        out.append(result)
    return out
