"""The sweep's `nccl_graph` axis: NCCL's own graph against each generated candidate and given files."""

from __future__ import annotations

from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.nccl_graph.candidates import possible_names
from commprof.sweep import format_points_table, parse_sweep
from commprof.sweep.planning.gate import refusals
from commprof.sweep.planning.graph_axis import graph_path

HEAD = 'name = "graphs"\n[run]\nmodel = "kimi-k2.5"\ntokens = [1]\n'


def test_auto_and_generated_expand_to_one_point_per_candidate():
    spec = parse_sweep(HEAD + '[axes]\nnccl_graph = ["auto", "generated"]\n')
    # "auto" is NCCL's own search: the baseline itself.
    assert spec.points[0].is_baseline
    graphs = [p.env["NCCL_GRAPH_FILE"] for p in spec.points[1:]]
    assert graphs == [f"generated:{name}" for name in possible_names()]
    assert "ring-2ch-same-hop" in possible_names() and "ring-16ch-mirrored-phb" in possible_names()
    assert spec.points[1].label == "graph=generated:ring-2ch-same-hop"


def test_a_path_and_one_candidate_in_points_and_rules(tmp_path):
    text = (
        HEAD
        + '[axes]\nnccl_graph = ["auto", "/etc/graphs/hand.xml"]\n'
        + '[[points]]\nnccl_graph = "generated:ring-4ch-same-phb"\nlabel = "four"\n'
        + '[[exclude]]\nnccl_graph = "/etc/graphs/hand.xml"\nNCCL_PROTO = "LL"\nreason = "no"\n'
    )
    spec = parse_sweep(text)
    envs = [p.env for p in spec.points]
    assert envs == [{}, {"NCCL_GRAPH_FILE": "/etc/graphs/hand.xml"}, {"NCCL_GRAPH_FILE": "generated:ring-4ch-same-phb"}]
    assert graph_path(envs[2], tmp_path) == tmp_path / "nccl-graphs" / "ring-4ch-same-phb.xml"
    assert graph_path(envs[1], tmp_path) == Path("/etc/graphs/hand.xml")
    assert graph_path({}, tmp_path) is None


@pytest.mark.parametrize(
    "body, problem",
    [
        ('[axes]\nnccl_graph = ["generated:ring-3ch-same-hop"]\n', "names no candidate"),
        ('[[points]]\nnccl_graph = "generated"\n', "a point runs one graph"),
        ("[axes]\nnccl_graph = [4]\n", "expected a string"),
        ("[axes]\nnccl_graph = []\n", "empty list"),
        ('[axes]\nNCCL_GRAPH_FILE = ["a\\nb"]\n', "not a file path"),
    ],
)
def test_bad_values_are_named(body, problem):
    with pytest.raises(UsageError, match=problem):
        parse_sweep(HEAD + body)


def test_on_gloo_every_graph_point_is_unsupported_with_the_reason():
    spec = parse_sweep(HEAD + '[axes]\nnccl_graph = ["auto", "generated"]\n')
    refused = refusals(spec.points, "gloo", None)
    assert set(refused) == {p.point_id for p in spec.points[1:]}
    assert all(
        reason == "NCCL_GRAPH_FILE has no effect on the gloo backend (NCCL does not run here)"
        for reason in refused.values()
    )
    assert refusals(spec.points, "nccl", None) == {}
    table = format_points_table(spec, refused=refused, backend="gloo")
    assert "16 will be recorded unsupported" in table and "x p001" in table and "  p000" in table


@pytest.mark.processes
def test_on_real_gloo_ranks_graph_points_are_recorded_unsupported_never_timed(gloo_sweep):
    """A graph point of a real 2-rank gloo sweep (tests/shared_runs.py)."""
    import json

    run = Path(gloo_sweep["run"])
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    graph = [r for r in records if r["point"]["env"].get("NCCL_GRAPH_FILE") == "generated:ring-2ch-same-hop"]
    assert graph and {r["status"] for r in graph} == {"unsupported"} and all(r["step_us"] is None for r in graph)
    assert graph[0]["message"] == "NCCL_GRAPH_FILE has no effect on the gloo backend (NCCL does not run here)"
    assert not (run / "points" / graph[0]["point_id"]).exists()  # never timed
    assert "nccl_graphs" not in json.loads((run / "meta.json").read_text())  # nothing written for gloo
