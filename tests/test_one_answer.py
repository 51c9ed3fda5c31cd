"""One answer, as the processes print it: `simulate`, `report` and the sweep end with the same answer lines, each
line the Decision's (the claim check, tests/claims_check.py, reads every verdict of every output); an observation
only ever withdraws; an engine asked for is the only one named."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.report.analysis.engine_dispatch import TABLES
from commprof.report.command import answer_lines
from tests import claims_check
from tests.test_decision import SWEEP, answer_env, sourced

# Simulates and renders reports (their figures not drawn: the answer is in the words), sources files.
pytestmark = [pytest.mark.processes, pytest.mark.usefixtures("figures_not_drawn")]

ASUS = Path(__file__).parent / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"


def decision_of(report: Path, index: int = 0) -> dict:
    return json.loads((report / "summary.json").read_text())["runs"][index]


def _report(run: Path, out: Path, capsys, *options: str) -> list[str]:
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(out), *options]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> dict[str, Path]:
    """The real ASUS 8 x RTX PRO 6000 bundle simulated with the kernels' sweep: its run folder."""
    root = tmp_path_factory.mktemp("bundle")
    (root / "sweep.toml").write_text(SWEEP)
    assert main(["simulate", "--from-bundle", str(ASUS), "--sweep", str(root / "sweep.toml"), "--out", str(root)]) == 0
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    claims_check.RUN_DIRS[json.loads((run / "meta.json").read_text())["run_id"]] = run
    return {"root": root, "run": run}


def test_simulate_report_and_sweep_end_with_the_same_answer_lines(bundle, tmp_path, capsys):
    run = bundle["run"]
    closing = answer_lines(run)  # what the sweep prints last
    capsys.readouterr()
    assert main(["simulate", "--from-bundle", str(ASUS), "--sweep", str(bundle["root"] / "sweep.toml"),
                 "--out", str(tmp_path / "again")]) == 0  # fmt: skip
    simulated = capsys.readouterr().out.splitlines()
    assert simulated[-len(closing) :] == closing
    reported = _report(run, tmp_path / "report", capsys)
    assert reported[-len(closing) - 1 : -1] == closing  # then the command that measures the plan
    assert reported[-1].startswith("  measure it: torchrun --nproc-per-node 8 -m commprof.allreduce_sweep")
    assert closing[0] == decision_of(tmp_path / "report")["headline"]["text"]
    assert "&lt;NA&gt;" not in (tmp_path / "report" / "index.html").read_text()  # no pandas missing value shown
    assert claims_check.problems(tmp_path / "report", "\n".join(reported)) == []


def beyond(decision: dict) -> set[str]:
    """The subjects the Decision puts beyond error."""
    return {c["subject"] for c in decision["claims"] if c["verdict"] == "beyond error"}


@pytest.fixture(scope="module")
def unobserved(bundle, tmp_path_factory) -> tuple[list[str], Path]:
    """The bundle's run reported without an observation, once for the module: what the terminal said, the folder."""
    folder = tmp_path_factory.mktemp("unobserved") / "report"
    terminal = io.StringIO()
    with contextlib.redirect_stdout(terminal):
        assert main(["report", str(bundle["run"]), "--out", str(folder)]) == 0
    return terminal.getvalue().splitlines(), folder


@pytest.mark.parametrize("observed", ["25", "4=25", "1=0.5"])
def test_an_observation_only_withdraws(bundle, unobserved, tmp_path, capsys, observed):
    """Whatever the engine observed, no claim becomes "beyond error"; one the model does not explain withdraws every
    predicted claim and leaves no live line in any file."""
    _plain, plain_folder = unobserved
    seen = _report(bundle["run"], tmp_path / "seen", capsys, "--observed-step-ms", observed)
    before, after = decision_of(plain_folder), decision_of(tmp_path / "seen")
    assert beyond(after) <= beyond(before)
    assert claims_check.problems(tmp_path / "seen", "\n".join(seen)) == []
    if after["unconfirmed"]:
        assert after["nccl"]["file"] is None and sourced(tmp_path / "seen" / "routing.txt") == {}
        assert beyond(after) == set() and all(not s["applied"] for s in after["steps"])


def test_the_answer_table_names_the_baseline_where_a_band_s_switch_is_left_off(bundle, tmp_path, capsys):
    """A simulation leaves every engine switch off: a band another implementation won still runs on NCCL, and the
    first screen's table says so on that band's rows only."""
    _report(bundle["run"], tmp_path / "r", capsys)
    decision = decision_of(tmp_path / "r")
    off = [(r, t) for r in decision["routes"] if not r["live"] for t in r["tokens"]]
    claims = {c["id"]: c for c in decision["claims"]}
    assert off and all(
        r["impl"] == "flashinfer-pcie-ipc" and claims[r["claim"]]["verdict"] == "beyond error" for r, _ in off
    )
    page = (tmp_path / "r" / "index.html").read_text()
    card = page.split("The answer, per T: what runs each collective", 1)[1].split("</table>", 1)[0]
    assert card.count("(switch left off, NCCL runs)") == len(off)
    lines = [line for line in answer_lines(bundle["run"]) if "(switch left off, NCCL runs)" in line]
    assert [line.split(" all-reduce")[0].strip() for line in lines] == ["graph"]  # the band's one terminal line
    routing = (tmp_path / "r" / "routing.txt").read_text()
    assert routing.count("flashinfer-pcie-ipc {'tune': False} (switch left off, NCCL runs)") == 1


def test_an_engine_version_without_a_table_exits_2_naming_the_known_ones(bundle, tmp_path, capsys):
    assert main(["report", str(bundle["run"]), "--out", str(tmp_path / "r"), "--engine", "sglang==0.0.1"]) == 2
    err = capsys.readouterr().err
    assert "sglang==0.0.1" in err and all(f"{n}=={v}" in err for n, v in TABLES)
    assert not (tmp_path / "r").exists()


def test_simulate_s_table_gives_a_kernel_row_the_kernel_s_error(tmp_path, capsys):
    """A kernel's predicted step carries the kernel model's error (as its records and the page do), not NCCL's."""
    sweep = tmp_path / "decision.toml"
    sweep.write_text(SWEEP)
    capsys.readouterr()
    assert main(["simulate", "--topology", "pcie-gen5-switch-p2p", "--sweep", str(sweep), "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    kernel = next(r for r in records if (r.get("kernel_model") or {}).get("expected_error_pct") is not None)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"│ {kernel['point_id']} ")]
    assert rows and f"±{kernel['kernel_model']['expected_error_pct']:g} %" in rows[0], rows


def test_an_engine_asked_for_is_the_only_one_named(bundle, tmp_path, capsys):
    """`--engine vllm==0.33`: no SGLang switch in the Decision, routing.txt, engine_flags.txt or the terminal."""
    lines = _report(bundle["run"], tmp_path / "r", capsys, "--engine", "vllm==0.33")
    decision = decision_of(tmp_path / "r")
    assert decision["engines"]["settings"] and {s["engine"] for s in decision["engines"]["settings"]} == {"vLLM"}
    assert "SGLANG_" not in (tmp_path / "r" / "routing.txt").read_text()
    assert "export SGLANG_" not in (tmp_path / "r" / "engine_flags.txt").read_text()
    assert not any(line.startswith("  SGLang") for line in lines)
    assert sourced(tmp_path / "r" / "routing.txt") == answer_env(decision, tmp_path / "r")


def test_a_fused_kind_no_engine_can_switch_on_is_left_out_as_engine_work():
    from commprof.impls.registry import builtin_classes
    from commprof.records.schema import FUSED
    from commprof.report.analysis.decide_engines import engine_work
    from commprof.report.decision.types import Route

    flagless = next(n for n, c in builtin_classes().items() if c.fuses_rmsnorm and not c.engine_flags)
    won = Route(collective=FUSED, mode="graph", min_bytes=1, max_bytes=2, tokens=[1], impl=flagless, options={},
                point_id="p1", label="x", nccl_env={}, judged_against="p0", kept=False, live=False, claim="c",
                compared=flagless, reason="", at_bytes=2, time_us=1.0, baseline_us=2.0, floor_us=None,
                pct_of_floor=None, evidence="measured", boundary="")  # fmt: skip
    assert engine_work([won]) == [
        f"{flagless} takes fused all-reduce + RMSNorm sizes, but no engine setting runs it: engine work"
    ]
