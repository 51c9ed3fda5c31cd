"""One answer, read the way a user reads it: the terminal lines of `simulate`, `report` and the sweep, the page's
verify-step card, routing.txt and recommend.env as text, and every file sourced in a clean shell, each turned into
claims (T, mode, band, what runs, verdict, percent, error) that must equal the Decision in summary.json; an
observation only ever withdraws; a planted contradiction fails the check."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.evidence import VERDICTS
from commprof.report.analysis.engine_dispatch import TABLES
from commprof.report.command import answer_lines
from tests.test_decision import (
    SINGLE,
    SWEEP,
    UNCONFIRMED,
    answer_env,
    run_folders,
    sourced,
)

pytestmark = pytest.mark.processes  # simulates and renders reports

ASUS = Path(__file__).parent / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"
ENV_LINE = re.compile(r"^the answer \((.*)\): environment: (.*?)(?:, via (\S+))?$")
STEP_LINE = re.compile(
    r"^  verify step T = (\d+): [\d.]+ -> [\d.]+ ms \((\S+) % less(?:, its error ±(\d+) %)?\): ([a-z ]+?)(: withdrawn)?$"
)
ROUTE_LINE = re.compile(
    r"^  (eager|graph) all-reduce, T = ([\d, ]+) \((\d+)-(\d+) B\): (\S+)(?: \(switch left off, \S+ runs\))?"
    r"(?: \(\S+ % less time\))?: (.+)$"
)
ROUTING_TXT = re.compile(r"^#   (\S+) (eager|graph) (\d+)-(\d+) B(?: \(T = [\d, ]+\))?: .*?: ([a-z ]+): ")


def decision_of(report: Path, index: int = 0) -> dict:
    return json.loads((report / "summary.json").read_text())["runs"][index]["decision"]


def expected_terminal(decision: dict) -> dict:
    """What the terminal must say, from summary.json's Decision alone."""
    env = " ".join(f"{k}={v}" for k, v in sorted(decision["nccl"]["env"].items())) or "the defaults"
    return {
        "env": (decision["evidence"], env, decision["nccl"]["file"]),
        "steps": [
            (s["tokens"], s["verdict"], s["reason"].startswith("withdrawn"), round(s["gain_pct"], 1))
            for s in decision["steps"]
        ],
        "routes": [
            (r["mode"], tuple(r["tokens"]), r["min_bytes"], r["max_bytes"], r["verdict"])
            for r in decision["routes"]
            if r["collective"] == "all_reduce" and r["tokens"]
        ],
    }


def terminal_claims(lines: list[str]) -> dict:
    """The answer lines as claims: the environment and its file, each verify step's verdict and percent, each
    all-reduce band's verdict."""
    claims: dict = {"env": None, "steps": [], "routes": []}
    for line in lines:
        if found := ENV_LINE.match(line):
            claims["env"] = found.groups()
        elif found := STEP_LINE.match(line):
            t, gain, _error, verdict, withdrawn = found.groups()
            claims["steps"].append((int(t), verdict, bool(withdrawn), round(float(gain), 1)))
        elif found := ROUTE_LINE.match(line):
            mode, tokens, low, high, _what, verdict = found.groups()
            tokens = tuple(int(t) for t in tokens.split(", "))
            claims["routes"].append((mode, tokens, int(low), int(high), verdict))
    return claims


def assert_terminal_says(lines: list[str], decision: dict) -> None:
    claims = terminal_claims(lines)
    assert claims == expected_terminal(decision), (claims, lines)
    assert all(verdict in VERDICTS for _t, verdict, *_ in claims["steps"])


def assert_files_say(folder: Path, decision: dict) -> None:
    """routing.txt's bands and verdicts, the variables it and engine_flags.txt set when sourced, and the point
    recommend.env quotes figures for: all the Decision's."""
    routing = (folder / "routing.txt").read_text()
    bands = [found.groups() for line in routing.splitlines() if (found := ROUTING_TXT.match(line))]
    assert bands == [
        (r["collective"], r["mode"], str(r["min_bytes"]), str(r["max_bytes"]), r["verdict"]) for r in decision["routes"]
    ], routing
    answer = answer_env(decision, folder)
    flags = sourced(folder / "engine_flags.txt")
    assert sourced(folder / "routing.txt") == answer == {k: flags.get(k) for k in answer}
    exports = decision["nccl"]["file"] == "recommend.env"
    for line in (folder / "recommend.env").read_text().splitlines() if exports else []:
        if "summed over T" in line and "%" in line:  # a figure: only ever the exported point's
            named = re.search(r"Point (\S+)", line) or re.search(r"(\S+)'s predicted", line)
            assert named and named.group(1) == decision["nccl"]["point_id"], line


FASTER_ROW = re.compile(
    r'<tr( class="noise")?><td class="num">(\d+)</td><td class="num">[^<]*</td><td class="num">(<b>)?([^<]*)(?:</b>)?'
    r'</td><td class="num">([^<]*)</td>'
)


def assert_page_says(page: str, decision: dict) -> None:
    """The verify-step card: a gain is bold and unmarked only where the Decision judged it beyond its error, and
    the headline's "faster" range is made of those gains alone."""
    card = page.split("How much faster is my verify step?", 1)[1].split("What do I set?", 1)[0]
    steps = {s["tokens"]: s for s in decision["steps"]}
    for noise, tokens, bold, _after, change in FASTER_ROW.findall(card):
        step = steps[int(tokens)]
        beyond = step["verdict"] == "beyond error" and not decision["unconfirmed"]
        assert bool(bold) == beyond and bool(noise) != beyond or change == "—", (tokens, change, step)
        if change != "—" and not beyond and step["error_pct"] is not None:
            assert "±" in change, change  # a percent inside its error says so
    headline = re.search(r'<p class="big[^"]*">([^<]*)</p>', card).group(1)
    if claimed := re.search(r"(\d+)(?:–(\d+))? % faster verify step", headline):
        gains = [s["gain_pct"] for s in decision["steps"] if s["verdict"] == "beyond error"]
        assert gains and claimed.group(1) == f"{min(gains):.0f}", (headline, gains)


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
    assert reported[-len(closing) :] == closing
    decision = decision_of(tmp_path / "report")
    assert "&lt;NA&gt;" not in (tmp_path / "report" / "index.html").read_text()  # no pandas missing value shown
    assert_terminal_says(closing, decision)
    assert_files_say(tmp_path / "report", decision)
    assert_page_says((tmp_path / "report" / "index.html").read_text(), decision)


def beyond_count(decision: dict) -> int:
    routes = [r for r in decision["routes"] if r["verdict"] == "beyond error"]
    steps = [s for s in decision["steps"] if s["verdict"] == "beyond error"]
    answer = decision["answer"]
    return (
        len(routes)
        + len(steps)
        + (answer is not None and answer["verdict"] == "beyond error" and bool(decision["nccl"]["env"]))
    )


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
    """Whatever the engine observed, no verdict becomes "beyond error"; one the model does not explain leaves no
    live line in any file and every terminal and page claim still equals the Decision."""
    plain, plain_folder = unobserved
    seen = _report(bundle["run"], tmp_path / "seen", capsys, "--observed-step-ms", observed)
    before, after = decision_of(plain_folder), decision_of(tmp_path / "seen")
    assert beyond_count(after) <= beyond_count(before)
    for lines, folder, decision in ((plain, plain_folder, before), (seen, tmp_path / "seen", after)):
        assert_terminal_says(lines, decision)
        assert_files_say(folder, decision)
        assert_page_says((folder / "index.html").read_text(), decision)
    if after["unconfirmed"]:
        assert after["nccl"]["file"] is None and sourced(tmp_path / "seen" / "routing.txt") == {}
        assert all(s["verdict"] == "not judged" for s in after["steps"])


def test_the_calibrated_sys_box_gains_no_beyond_from_its_observation(scenarios):
    assert beyond_count(decision_of(scenarios[UNCONFIRMED])) <= beyond_count(
        decision_of(scenarios["calibrated simulation (SYS pairs)"])
    )


@pytest.mark.parametrize("name", [*SINGLE, "two runs compared"])
def test_every_scenario_s_files_and_page_say_its_decision(scenarios, name):
    summary = json.loads((scenarios[name] / "summary.json").read_text())
    cards = (scenarios[name] / "index.html").read_text().split("How much faster is my verify step?")[1:]
    for index, (run, folder) in enumerate(run_folders(scenarios[name], summary)):
        decision = run["decision"]
        assert_files_say(folder, decision)
        if index < len(cards) and decision["steps"]:
            assert_page_says("How much faster is my verify step?" + cards[index], decision)
    if len(summary["runs"]) > 1:
        assert_comparison_says((scenarios[name] / "index.html").read_text(), summary["runs"])


COMPARE_ROW = re.compile(
    r'<tr><td>([^<]*)</td><td class="num">(\d+)</td>(?:<td class="num">[^<]*</td>){3}<td>([^<]*)</td>'
)


def assert_comparison_says(page: str, runs: list[dict]) -> None:
    """Runs side by side: each row's verdict is its run's Decision, in the Decision's words (a band's or the NCCL
    environment's verdict and reason), never the page's own."""
    import html

    section = page.split('<section id="compare">', 1)[1].split("</section>", 1)[0]
    rows = COMPARE_ROW.findall(section)
    assert rows
    for name, _tokens, cell in rows:
        decisions = [run["decision"] for run in runs if html.unescape(name).startswith(f"{run['name']} (")]
        cell = html.unescape(cell)
        said = {f"{r['verdict']}: {r['reason']}" for d in decisions for r in d["routes"]}
        said |= {f"{d['answer']['verdict']}: {d['answer']['reason']}" for d in decisions}
        assert decisions, name
        assert cell == "keeps the baseline" or cell in said, (name, cell)


def test_runs_side_by_side_say_each_run_s_decision(scenarios, bundle, tmp_path, capsys):
    """The comparison's verdict column is each run's Decision at that T, where the answer moves off the baseline too."""
    _report(bundle["run"], tmp_path / "r", capsys, str(_sim_dir("simulated pcie-gen5-switch-p2p")))
    page = (tmp_path / "r" / "index.html").read_text()
    assert_comparison_says(page, json.loads((tmp_path / "r" / "summary.json").read_text())["runs"])
    section = page.split('<section id="compare">', 1)[1].split("</section>", 1)[0]
    assert any(cell != "keeps the baseline" for *_, cell in COMPARE_ROW.findall(section))


def test_the_answer_table_names_the_baseline_where_a_band_s_switch_is_left_off(bundle, tmp_path, capsys):
    """A simulation leaves every engine switch off: a band another implementation won still runs on NCCL, and the
    first screen's table says so on that band's rows only."""
    _report(bundle["run"], tmp_path / "r", capsys)
    rows = decision_of(tmp_path / "r")["per_tokens"]
    off = [row for row in rows if not row["live"]]
    assert off and all(row["impl"] == "flashinfer-pcie-ipc" and row["verdict"] == "beyond error" for row in off)
    page = (tmp_path / "r" / "index.html").read_text()
    card = page.split("The answer, per T: what runs each collective", 1)[1].split("</table>", 1)[0]
    assert card.count("(switch left off, NCCL runs)") == len(off)
    lines = [line for line in answer_lines(bundle["run"]) if "(switch left off, NCCL runs)" in line]
    assert [line.split(" all-reduce")[0].strip() for line in lines] == ["graph"]  # the band's one terminal line
    routing = (tmp_path / "r" / "routing.txt").read_text()
    assert routing.count("flashinfer-pcie-ipc {'tune': False} (switch left off, NCCL runs)") == 1


def test_a_planted_contradiction_fails_the_check(scenarios, tmp_path, monkeypatch, capsys):
    """One file or one view editing a verdict: the claims no longer equal the Decision."""
    report = tmp_path / "edited"
    shutil.copytree(scenarios["simulated pcie-gen5-switch-p2p"], report)
    decision = decision_of(report)
    routing = report / "routing.txt"
    routing.write_text(routing.read_text().replace(": inside error: ", ": beyond error: ", 1))
    with pytest.raises(AssertionError):
        assert_files_say(report, decision)
    from commprof.report.views import verify_answers

    monkeypatch.setattr(verify_answers, "_faster_verdict", lambda *args: ("99 % faster verify step with (a)", False))
    page = tmp_path / "page"
    run = _sim_dir("simulated pcie-gen5-switch-p2p")
    _report(run, page, capsys)
    with pytest.raises(AssertionError):
        assert_page_says((page / "index.html").read_text(), decision_of(page))
    lines = answer_lines(run)
    with pytest.raises(AssertionError):
        assert_terminal_says([line.replace("inside error", "beyond error") for line in lines], decision_of(page))


def _sim_dir(name: str) -> Path:
    from tests.test_decision import SIM_DIRS

    return SIM_DIRS[name]


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


def test_an_engine_asked_for_is_the_only_one_named(scenarios, tmp_path, capsys):
    """`--engine vllm==0.33`: no SGLang switch in the Decision, routing.txt, engine_flags.txt or the terminal."""
    lines = _report(_sim_dir("simulated pcie-gen5-switch-p2p"), tmp_path / "r", capsys, "--engine", "vllm==0.33")
    decision = decision_of(tmp_path / "r")
    assert decision["engine"] and {s["engine"] for s in decision["engine"]} == {"vLLM"}
    assert "SGLANG_" not in (tmp_path / "r" / "routing.txt").read_text()
    assert "export SGLANG_" not in (tmp_path / "r" / "engine_flags.txt").read_text()
    assert not any(line.startswith("  SGLang") for line in lines)
    assert_files_say(tmp_path / "r", decision)


def test_a_fused_kind_no_engine_can_switch_on_is_left_out_as_engine_work():
    from commprof.impls.registry import builtin_classes
    from commprof.records.schema import FUSED
    from commprof.report.analysis.answer_routes import Route
    from commprof.report.analysis.decision import engine_work

    flagless = next(n for n, c in builtin_classes().items() if c.fuses_rmsnorm and not c.engine_flags)
    band = dict(collective=FUSED, mode="graph", min_bytes=1, max_bytes=2, tokens=(1,), options={}, point_id="p1")
    won = Route(**band, impl=flagless, nccl_env={}, judged_against="p0", margin_pct=10.0, rule="", errors={},
                verdict="beyond error", reason="beyond noise", kept=False)  # fmt: skip
    assert engine_work((won,)) == [
        f"{flagless} takes fused all-reduce + RMSNorm sizes, but no engine setting runs it: engine work"
    ]
