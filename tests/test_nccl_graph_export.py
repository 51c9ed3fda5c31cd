"""A winning graph-file point in recommend.env: the file it ran with beside it, its traps, or a refusal."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from msgspec.structs import replace

from commprof.cli import main
from commprof.doctor.bundle import read_bundle
from commprof.nccl_graph.box import box_from_facts
from commprof.nccl_graph.candidates import build_candidates
from commprof.nccl_graph.export import graph_export
from commprof.nccl_graph.nccl_reader import read_graph_file
from commprof.records.meta_sections import MetaPlan
from commprof.records.run_meta import parse_meta
from tests.report_fixtures import make_meta, make_records, write_run

BUNDLE = Path(__file__).parent / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"
CANDIDATE = build_candidates(box_from_facts(read_bundle(BUNDLE)))[0]
META = parse_meta({"world_size": 8, "plan": {"tp": 8}, "versions": {"nccl": "2.28.9"}})


def _ran_with(path: Path, loaded=True) -> dict:
    return {"path": str(path), "sha256": CANDIDATE.sha256, "loaded": loaded, "why": "NCCL loaded every graph"}


def test_a_proven_graph_is_exported_with_its_traps(tmp_path):
    path = tmp_path / "g.xml"
    out = graph_export({"NCCL_GRAPH_FILE": "generated:x", "NCCL_PROTO": "LL"}, _ran_with(path), CANDIDATE.text, META)
    assert out.env == {"NCCL_PROTO": "LL", "NCCL_GRAPH_FILE": str(path)} and out.text == CANDIDATE.text
    text = " ".join(out.notes)
    assert "exactly GPUs [0, 1, 2, 3, 4, 5, 6, 7]" in text and "NCCL 2.28.9" in text and "re-measure" in text
    assert graph_export({"NCCL_PROTO": "LL"}, None, None, META).env == {"NCCL_PROTO": "LL"}


def test_refusals_leave_the_graph_out_and_say_why(tmp_path):
    env = {"NCCL_GRAPH_FILE": "generated:x"}
    path = tmp_path / "g.xml"
    cases = [
        (_ran_with(path, loaded=None), CANDIDATE.text, META, "no proof NCCL loaded"),
        (_ran_with(path), None, META, "gone or changed"),
        (_ran_with(path), CANDIDATE.text + " ", META, "gone or changed"),
        (_ran_with(path), CANDIDATE.text, replace(META, plan=MetaPlan(tp=4)), "TP groups of 4 GPUs"),
        (_ran_with(path), CANDIDATE.text, replace(META, plan=MetaPlan(tp=8, dp_attention=True)), "DP-attention"),
    ]
    for ran_with, text, meta, why in cases:
        out = graph_export(env, ran_with, text, meta)
        assert out.env == {} and out.text is None and why in out.notes[0], (why, out.notes)


@pytest.mark.processes
def test_report_exports_the_winning_graph_file_and_it_sources_and_reads(tmp_path):
    graph = tmp_path / "run-graphs" / "ring.xml"
    graph.parent.mkdir()
    graph.write_text(CANDIDATE.text)
    points = [
        {"label": "NCCL defaults", "impl": "nccl", "env": {}, "options": {}},
        {
            "label": "graph",
            "impl": "nccl",
            "env": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_GRAPH_FILE": "generated:ring-2ch-same-hop"},
            "options": {},
        },
    ]
    records = make_records("graph-run", points)
    for record in records:
        if record["point_id"] == "p001":
            record["nccl"] = {**(record.get("nccl") or {}), "graph_file": _ran_with(graph)}
    meta = make_meta("graph-run")
    run = write_run(tmp_path, "graph-run", records, meta)
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    env_file = out / "recommend.env"
    text = env_file.read_text()
    assert "export NCCL_GRAPH_FILE=generated" not in text  # the sweep's name for it is no path NCCL can open
    sourced = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f'source {env_file} && printf %s "$NCCL_GRAPH_FILE"'],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert sourced.stdout == str(graph), text
    assert read_graph_file(Path(sourced.stdout).read_text()).graphs[0].nchannels == CANDIDATE.channels
    assert (out / "nccl_graph.xml").read_text() == CANDIDATE.text
    assert "re-measure after any NCCL upgrade" in text
