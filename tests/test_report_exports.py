"""Exports a user pastes: tuner rules (10 legal fields), recommend.env (sources in bash), nccl-tests tables."""

import os
import shutil
import subprocess

import pandas as pd
import pytest

from commprof.nccl_vocab import COLLECTIVES
from commprof.report.analysis import tuner_rules
from commprof.report.exports import files as ex
from tests.decisions import fused_hints_at, measured, with_plan


def inputs(rows):
    columns = ["collective", "bytes", "tokens", "point_id", "label", "algorithm", "protocol", "channels", "n_ranks"]
    return pd.DataFrame([dict(zip(columns, r)) for r in rows], columns=columns)


def plan(choice, env=None, rules=(), inputs=None, why="why"):
    return tuner_rules.ApplyPlan(
        choice, why, dict(env or {}), list(rules), inputs if inputs is not None else pd.DataFrame()
    )


def parse_rules(text):
    return [line.split(",") for line in text.splitlines() if line and not line.startswith("#")]


def test_tuner_rules_one_per_size_range_merging_equal_neighbours():
    rules = tuner_rules.tuner_rules(
        inputs(
            [
                ("allreduce", 14336, 1, "p1", "a", "ring", "ll", -1, 8),
                ("allreduce", 57344, 4, "p1", "a", "ring", "ll", -1, 8),
                ("allreduce", 114688, 8, "p2", "b", "ring", "ll128", -1, 8),
                ("allreduce", 229376, 16, "p3", "c", "tree", "simple", 4, 8),
            ]
        )
    )
    assert [(r.min_bytes, r.max_bytes, r.algorithm, r.protocol) for r in rules] == [
        (8192, 81095, "ring", "ll"),  # 14336 and 57344 merged; sqrt(57344 * 114688) = 81096
        (81096, 162192, "ring", "ll128"),
        (162193, 262143, "tree", "simple"),  # the power-of-two band of 229376, never -1 (prefill)
    ]
    assert rules[-1].channels == 4 and rules[0].n_ranks == 8
    assert all(r.max_bytes != -1 and r.max_bytes <= 4 * 229376 for r in rules)


def test_sizes_without_a_known_choice_get_no_rule_and_do_not_widen_others():
    rules = tuner_rules.tuner_rules(
        inputs(
            [
                ("allreduce", 1000, 1, "p1", "a", "ring", "ll", -1, 8),
                ("allreduce", 4000, 4, "p0", "defaults", None, None, -1, 8),
                ("allreduce", 16000, 8, "p1", "a", "ring", "ll", -1, 8),
            ]
        )
    )
    assert [(r.min_bytes, r.max_bytes) for r in rules] == [(512, 1999), (8000, 16383)]


def test_tuner_conf_has_ten_legal_fields_per_rule():
    table = inputs(
        [
            ("allreduce", 14336, 1, "p1", "a", "ring", "ll", -1, 8),
            ("allgather", 327680, 1, "p1", "a", "ring", "simple", -1, 8),
            ("allreduce", 57344, 4, "p2", "b", "tree", "ll128", 2, 8),
        ]
    )
    text = ex.tuner_conf_text(
        with_plan(plan(tuner_rules.TUNER_CONF, rules=tuner_rules.tuner_rules(table), inputs=table))
    )
    rules = parse_rules(text)
    assert len(rules) == 3
    for fields in rules:
        assert len(fields) == 10 == len(tuner_rules.TUNER_FIELDS)
        assert fields[0] in {c.tuner for c in COLLECTIVES}
        assert fields[3] in tuner_rules.TUNER_ALGORITHMS and fields[4] in tuner_rules.TUNER_PROTOCOLS
        numbers = [int(f) for f in fields[1:3] + fields[5:]]
        assert all(n >= -1 for n in numbers)
    assert "NCCL_ALGO / NCCL_PROTO in the environment override a tuner" in text


def test_an_all_gather_rule_holds_the_whole_buffer_nccl_hands_the_tuner_when_2_24_logs_one_ranks_piece():
    # Kimi-K2.5 at TP 8, T = 4: the logits all-gather gathers 8 x 4 x 20480 bf16; NCCL 2.27 logs one rank's
    # 4 x 20480 x 2 B, and hands the tuner nRanks x count x type size (src/enqueue.cc, getAlgoInfo).
    per_rank, whole = 4 * 20480 * 2, 8 * 4 * 20480 * 2
    logged = {"coll": "AllGather", "bytes": per_rank, "algo": "Ring", "proto": "Simple", "bytes_scope": "per_rank"}
    winner = {
        "tokens": 4,
        "hidden_size": 7168,
        "dtype": "bfloat16",
        "point_id": "p1",
        "label": "x",
        "world_size": 8,
        "env": {},
        "nccl": {"choices": [logged]},
    }
    rules = tuner_rules.tuner_rules(tuner_rules.rule_inputs(pd.DataFrame([winner])))
    (gather,) = [r for r in rules if r.collective == "allgather"]
    assert gather.min_bytes <= whole <= gather.max_bytes and not gather.min_bytes <= per_rank <= gather.max_bytes
    old = {**logged, "bytes": whole, "bytes_scope": "largest_buffer"}  # NCCL 2.23 logs nBytes itself
    (gather,) = tuner_rules.tuner_rules(tuner_rules.rule_inputs(pd.DataFrame([{**winner, "nccl": {"choices": [old]}}])))
    assert gather.min_bytes <= whole <= gather.max_bytes


def test_rule_inputs_prefer_what_nccl_ran_over_what_env_asked():
    winners = pd.DataFrame(
        [
            {
                "tokens": 4,
                "hidden_size": 7168,
                "dtype": "bfloat16",
                "point_id": "p1",
                "label": "x",
                "world_size": 8,
                "env": {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL", "NCCL_MIN_NCHANNELS": "4"},
                "nccl": {
                    "choices": [
                        {"coll": "AllReduce", "bytes": 57344, "algo": "Ring", "proto": "LL", "channels": 4},
                        {"coll": "AllGather", "bytes": 1310720, "algo": "Ring", "proto": "Simple", "channels": 4},
                    ]
                },
            }
        ]
    )
    rows = tuner_rules.rule_inputs(winners).set_index("collective")
    assert rows.loc["allreduce", "bytes"] == 4 * 7168 * 2
    assert rows.loc["allreduce", "algorithm"] == "ring"  # the log wins over NCCL_ALGO=Tree
    assert rows.loc["allreduce", "channels"] == 4  # channels set by the point, as NCCL ran them
    assert rows.loc["allgather", "protocol"] == "simple"
    winners.at[0, "nccl"] = None
    rows = tuner_rules.rule_inputs(winners).set_index("collective")
    assert rows.loc["allreduce", "algorithm"] == "tree" and rows.loc["allreduce", "channels"] == -1
    assert list(rows.index) == ["allreduce"]


@pytest.mark.processes
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_recommend_env_sources_in_bash(tmp_path):
    point = pd.Series(
        {
            "point_id": "p1",
            "label": "x",
            "impl": "nccl",
            "env": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "COMMPROF_WEIRD": "a b'c$HOME", "not a name": "x"},
        }
    )
    path = tmp_path / "recommend.env"
    path.write_text(ex.recommend_env_text(with_plan(plan(tuner_rules.RECOMMEND_ENV, env=point["env"]))))
    done = subprocess.run(
        ["bash", "-c", f"set -e; source {path}; env"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ.get("PATH", "")},
    )
    env = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert env["NCCL_ALGO"] == "Ring" and env["NCCL_PROTO"] == "LL"
    assert env["COMMPROF_WEIRD"] == "a b'c$HOME"  # quoted, not expanded
    assert "skipped 'not a name'" in path.read_text()


def test_recommend_env_when_defaults_win_exports_nothing(tmp_path):
    text = ex.recommend_env_text(with_plan(plan(None, why="nothing beat the baseline beyond noise")))
    assert "Nothing to export: nothing beat the baseline beyond noise" in text and "export " not in text


def test_a_proposed_answer_is_every_line_commented_with_why():
    """A simulation's (or an unconfirmed) answer: the file it would be, every line commented out, the reason said."""
    text = ex.recommend_env_text(with_plan(plan(tuner_rules.RECOMMEND_ENV, env={"NCCL_PROTO": "LL"}), live=False))
    assert "NOT TO APPLY YET" in text and "\n# export NCCL_PROTO=LL\n" in text
    assert not [line for line in text.splitlines() if not line.startswith("#")]


def test_exactly_one_file_applies_and_the_other_is_a_commented_alternative():
    rules = tuner_rules.tuner_rules(inputs([("allreduce", 14336, 1, "p1", "a", "ring", "ll", -1, 8)]))
    tuner = with_plan(plan(tuner_rules.TUNER_CONF, env={"NCCL_PROTO": "LL"}, rules=rules))
    env_text = ex.recommend_env_text(tuner)
    assert "ALTERNATIVE, not recommended" in env_text and "\n# export NCCL_PROTO=LL\n" in env_text
    assert not [line for line in env_text.splitlines() if line.startswith("export")]
    conf = ex.tuner_conf_text(tuner)
    assert "commprof recommends this file" in conf and len(parse_rules(conf)) == 1
    env_first = with_plan(plan(tuner_rules.RECOMMEND_ENV, env={"NCCL_PROTO": "LL"}, rules=rules))
    assert parse_rules(ex.tuner_conf_text(env_first)) == []  # the rules are there, commented out
    assert "ALTERNATIVE, not recommended" in ex.tuner_conf_text(env_first)
    assert "\nexport NCCL_PROTO=LL\n" in ex.recommend_env_text(env_first)


def test_nccl_tests_table_bandwidths():
    text = ex.nccl_tests_table(
        [("all_reduce", 57344, 40.0), ("all_gather", 1310720, 200.0)], 8, "bfloat16", ["header"], 0
    )
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    gather, reduce = rows  # sorted by collective name
    assert reduce[:5] == ["57344", "28672", "bfloat16", "sum", "-1"]
    algbw = 57344 / 40.0 / 1e3
    assert float(reduce[5]) == 40.0 and float(reduce[6]) == pytest.approx(algbw, abs=0.01)
    assert float(reduce[7]) == pytest.approx(algbw * 2 * 7 / 8, abs=0.01)
    assert gather[1] == str(1310720 // 2 // 8) and float(gather[7]) == pytest.approx(
        1310720 / 200 / 1e3 * 7 / 8, abs=0.01
    )
    assert reduce[8] == "0"
    assert text.rstrip().splitlines()[-1].startswith("# Avg bus bandwidth")


def test_engine_hints_follow_what_each_fused_kinds_claim_says():
    """The fused kinds' engine flags: where one beats its reference beyond error, the flags that turn it on; where
    it loses at every T, those that turn it off; inside error either way, nothing to change."""
    settings = " ".join(h.setting for h in fused_hints_at(60.0))
    assert "--flashinfer-allreduce-fusion-backend auto" in settings and 'fuse_allreduce_rms": true' in settings
    assert all(h.version for h in fused_hints_at(60.0))
    off = " ".join(h.setting for h in fused_hints_at(130.0))
    assert "--enforce-disable-flashinfer-allreduce-fusion" in off and "false" in off
    assert fused_hints_at(99.5) == []  # inside its error either way: nothing to change
    assert measured().engines.hints == []  # the synthetic run's fused kind is unregistered: no flag


def test_winners_within_noise_of_the_baseline_get_no_rule():
    choice = {"coll": "AllReduce", "bytes": 0, "algo": "Ring", "proto": "LL", "channels": 2}
    winners = pd.DataFrame(
        [
            {
                "tokens": t,
                "hidden_size": 7168,
                "dtype": "bfloat16",
                "point_id": pid,
                "label": pid,
                "world_size": 8,
                "env": {"NCCL_PROTO": "LL"},
                "nccl": {"choices": [{**choice, "bytes": t * 14336}]},
                "note": note,
            }
            for t, pid, note in (
                (1, "p001", None),
                (4, "p001", "within measurement noise of the baseline"),
                (8, "p001", None),
            )
        ]
    )
    inputs = tuner_rules.rule_inputs(winners).set_index("tokens")
    assert pd.isna(inputs.loc[4, "algorithm"]) and inputs.loc[1, "algorithm"] == "ring"
    rules = tuner_rules.tuner_rules(inputs.reset_index())
    assert len(rules) == 2 and rules[0].max_bytes < 4 * 14336 < rules[1].min_bytes  # T = 4's range stays NCCL's
    text = ex.tuner_conf_text(with_plan(plan(tuner_rules.TUNER_CONF, rules=rules, inputs=inputs.reset_index())))
    assert "(T=4): p001 p001 -> within measurement noise of the baseline: no rule" in text


def test_a_tp8_kimi_runs_tuner_file_holds_the_logits_all_gathers_whole_buffer(tmp_path):
    """SYNTHETIC measured TP 8 Kimi-K2.5 run whose fastest NCCL setting differs by size (Ring/LL small, Ring/Simple
    large): nccl_tuner.conf is the file to apply, and its all-gather rules are keyed on what NCCL hands the
    tuner, the gathered buffer (nRanks x the per-rank size NCCL 2.27 logs)."""
    import json

    from commprof.cli import main
    from tests.report_fixtures import base_points, write_run

    points = [p for p in base_points() if p["label"] in ("NCCL defaults", "Ring/LL", "Ring/Simple")]
    run_dir = write_run(tmp_path, "tuner-run", points=points)
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    decision = json.loads((tmp_path / "out" / "summary.json").read_text())["runs"][0]
    assert decision["nccl"]["file"] == "nccl_tuner.conf"
    gathers = [line.split(",") for line in decision["nccl"]["tuner"]["rules"] if line.startswith("allgather")]
    whole = [c["bytes"] for c in decision["routing"]["curves"] if c["collective"] == "all_gather"]
    assert gathers and whole
    for size in set(whole):  # 8 x T x vocab/8 x 2 B at each T: inside a rule
        assert any(int(low) <= size <= int(high) for _, low, high, *_ in gathers), size
    smallest_piece = min(whole) // 8  # what NCCL 2.27 logs at T = 1: keyed on it, the rule would miss the buffer
    assert not any(int(low) <= smallest_piece <= int(high) for _, low, high, *_ in gathers)
