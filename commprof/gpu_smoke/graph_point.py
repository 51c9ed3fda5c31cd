"""The smoke's NCCL graph-file point: a generated candidate for this box, run in both modes, and NCCL's INFO log
proving it loaded the file (commprof.nccl_graph.load_check). On one GPU there is no candidate: a skip. Pure."""

from __future__ import annotations

from commprof.gpu_smoke.verdicts import FAIL, PASS, Verdict, capture_verdict, mode_verdict

GRAPH_LABEL = "generated NCCL graph"
GRAPH_TABLE = {"nccl_graph": "generated:ring-2ch-same-hop"}


def graph_verdicts(rows: list[dict], where: str) -> list[Verdict]:
    path = f"NCCL_GRAPH_FILE {GRAPH_TABLE['nccl_graph']} loaded and run, eager ({where})"
    eager = mode_verdict(path, rows, "eager", gated_ok=True)
    if eager.status != PASS:
        return [eager]
    checks = [(r.get("nccl") or {}).get("graph_file") for r in rows if r.get("mode") == "eager"]
    loaded = [c for c in checks if c and c.get("loaded") is True]
    if len(loaded) != len(checks):
        bad = next((c for c in checks if not c or c.get("loaded") is not True), None) or {}
        return [
            Verdict(path, FAIL, f"no proof NCCL loaded the file: {bad.get('why') or 'no graph_file in the record'}")
        ]
    proof = f"; NCCL loaded {loaded[0]['path']} (sha256 {loaded[0]['sha256'][:12]}): {loaded[0]['why']}"
    return [Verdict(path, PASS, eager.detail + proof), capture_verdict(f"capture verdict under {GRAPH_LABEL}", rows)]
