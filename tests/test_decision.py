"""One answer: every shipped scenario rendered as a user would, then the page, summary.json and every exported
file read back the way they are used (each file sourced in a clean shell, the tuner file's live lines, the page's
answer table), and all of them must name the same implementation, options, NCCL environment and size bands."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.evidence import VERDICTS
from commprof.records.files import META_FILE, RESULTS_FILE
from commprof.report.analysis.words import break_even_text
from tests.conftest import GLOO_RUN, TESTS
from tests.report_fixtures import measured_twin
from tests.test_crossover_stage import kernel_times, search_records
from tests.test_report_evidence import gloo_run_with

PRESETS = sorted(p.stem for p in (TESTS.parent / "sweeps" / "topologies").glob("*.toml"))
NCCL_TESTS_LOG = TESTS / "fixtures" / "nccl-tests" / "rtx4090x8_sys_noP2P_charlie0129.txt"
# The field report's step with the axes that decide it (P2P level, a protocol) and every PCIe kernel, plus the
# crossover search: pcie8-verify.toml without its slower NCCL stages.
SWEEP = """
name = "decision"
[run]
model = "kimi-k2.5"
tokens = [1, 4, 8, 16]
phase = "verify"
dtype = "bfloat16"
interconnect = "pcie"
iterations = 20
warmup = 5
[axes]
NCCL_PROTO = ["default", "LL"]
NCCL_P2P_LEVEL = ["default", "SYS"]
[[points]]
impl = "flashinfer-pcie-ipc"
options = { tune = false }
[[points]]
impl = "b12x"
[[points]]
impl = "flashinfer-fused"
options = { use_oneshot = true }
[[points]]
impl = "nccl+rmsnorm"
[[stages]]
kind = "crossover"
name = "crossover"
impls = ["flashinfer-pcie-ipc", "b12x"]
modes = ["graph"]
step_bytes = 4096
max_rounds = 8
[report]
compute_ms = 5.0
accept_lengths = [1.3, 1.5, 2.0]
"""


def _one(folder: Path) -> Path:
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return run


def _simulate(root: Path, preset: str, calibration: Path | None = None) -> Path:
    sweep = root / "decision.toml"
    if not sweep.exists():
        sweep.write_text(SWEEP)
    out = root / f"sim-{preset}{'-cal' if calibration else ''}"
    args = ["simulate", "--topology", preset, "--sweep", str(sweep), "--out", str(out)]
    assert main(args + (["--calibration", str(calibration)] if calibration else [])) == 0
    return _one(out)


def _twin(root: Path, simulated: Path, name: str = "measured-twin", sys_factor: float = 1.0) -> Path:
    """SYNTHETIC: a measured run of the same sweep on NCCL (the model's times x a per-setting factor; points with
    NCCL_P2P_LEVEL=SYS x `sys_factor`, as on a box whose GPU pairs are SYS), its crossover searches included."""
    run = root / name
    run.mkdir()
    records = [json.loads(line) for line in (simulated / RESULTS_FILE).read_text().splitlines() if line]
    steps = [r for r in records if r["kind"] == "step"]
    twin = measured_twin(steps, name, bias=1.0, spread=0.01)
    for record in twin:
        if record["point"]["env"].get("NCCL_P2P_LEVEL") == "SYS" and record.get("step_us"):
            record["step_us"] = {
                k: v * sys_factor if k != "n" and k != "cv" else v for k, v in record["step_us"].items()
            }
            if record.get("op_us"):
                for key in ("min", "median", "mean", "p90", "max"):
                    record["op_us"][key] = [v * sys_factor for v in record["op_us"][key]]
    for record in records:
        if record["kind"] == "crossover":
            twin.append({**record, "source": "measured", "run_id": name, "calibration": None, "model_error": None})
    (run / RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in twin))
    meta = json.loads((simulated / META_FILE).read_text())
    for key in ("simulated", "source", "calibration", "model_error"):
        meta.pop(key, None)
    meta.update(run_id=name, gpus=[{"name": "RTX PRO 6000", "compute_capability": "12.0"}] * 8)
    (run / META_FILE).write_text(json.dumps(meta))
    return run


def _gloo_crossover(root: Path) -> Path:
    """The real gloo run with a gloo crossover search appended (what a crossover stage on CPU ranks writes)."""
    run = root / "gloo-crossover"
    shutil.copytree(GLOO_RUN, run)
    meta = json.loads((run / META_FILE).read_text())
    _search, searched = search_records(
        kernel_times(8192), backend="gloo", impl="tests.plugins.one_shot:OneShotGloo", mode="eager"
    )
    with open(run / RESULTS_FILE, "a", encoding="utf-8") as handle:
        for record in searched:
            handle.write(json.dumps({**record, "run_id": meta["run_id"]}) + "\n")
    return run


SIM_DIRS: dict[str, Path] = {}  # each scenario's first run folder, filled by conftest's `scenarios`
UNCONFIRMED = "observed step the model does not explain"
INCOMPLETE = "incomplete gloo run"
REPORT_OPTIONS = {UNCONFIRMED: ["--observed-step-ms", "25"]}


def rendered_scenarios(root: Path) -> dict[str, dict[str, str]]:
    """Every shipped scenario, rendered in `root` (conftest's `scenarios`, once for a whole `make test`): the report
    folder and the first run folder of each, by name, as paths relative to `root` (or absolute, outside it)."""
    runs: dict[str, list[Path]] = {f"simulated {p}": [_simulate(root, p)] for p in PRESETS}
    imported = root / "imported"
    assert main(["import-nccl-tests", str(NCCL_TESTS_LOG), "--out", str(imported)]) == 0
    runs["nccl-tests import"] = [_one(imported)]
    calibration = root / "calibration.toml"
    assert main(["calibrate", str(_one(imported)), "--out", str(calibration)]) == 0
    runs["calibrated simulation (SYS pairs)"] = [_simulate(root, "pcie-dual-socket-shm", calibration)]
    gen5 = runs["simulated pcie-gen5-switch-p2p"][0]
    runs["measured on NCCL (synthetic twin)"] = [_twin(root, gen5)]
    runs["measured on a SYS-pair box (synthetic)"] = [_twin(root, gen5, "measured-sys", sys_factor=0.6)]
    runs["gloo"] = [GLOO_RUN]
    runs["gloo crossover"] = [_gloo_crossover(root)]
    runs["two runs compared"] = [GLOO_RUN, runs["gloo crossover"][0]]
    # The box contradicts the model (the engine's 25 ms step), and a run whose last stage never ran: no answer.
    runs[UNCONFIRMED] = runs["calibrated simulation (SYS pairs)"]
    # Stage 1 never ran; OMP_NUM_THREADS=2 made 3x faster, a gain beyond noise that an unfinished run may not act on.
    (root / "incomplete").mkdir()
    runs[INCOMPLETE] = [gloo_run_with(root / "incomplete", lambda r: not r["point_id"].startswith("s1-"), 3.0)]
    reports = {}
    for index, (name, dirs) in enumerate(runs.items()):
        out = root / f"report-{index}"
        assert main(["report", *map(str, dirs), "--out", str(out), *REPORT_OPTIONS.get(name, [])]) == 0, name
        reports[name] = out

    def kept(path: Path) -> str:
        return str(path.relative_to(root) if root in path.parents else path)

    return {
        "reports": {name: kept(out) for name, out in reports.items()},
        "runs": {name: kept(dirs[0]) for name, dirs in runs.items()},
    }


def sourced(path: Path) -> dict[str, str]:
    """The variables a child process sees after `source FILE` in a clean bash (env -i), beyond a clean bash's."""
    probe = "import json, os; print(json.dumps(dict(os.environ)))"
    script = 'source "$1" >/dev/null || exit 3; exec "$2" -c "$3"'
    clean = 'exec "$2" -c "$3"'

    def run(body: str) -> dict[str, str]:
        done = subprocess.run(
            ["env", "-i", "bash", "-c", body, "_", str(path), sys.executable, probe],
            capture_output=True,
            text=True,
            cwd=path.parent,
            timeout=30,
        )
        assert done.returncode == 0, (path.name, done.stderr)
        return json.loads(done.stdout)

    base = run(clean)
    return {k: v for k, v in run(script).items() if base.get(k) != v and k != "_"}


def answer_env(decision: dict, folder: Path) -> dict[str, str]:
    """What sourcing the answer sets, from summary.json's decision alone: its NCCL file (where NCCL is what the
    engines run) and its live engine switches."""
    nccl = decision["nccl"]
    env: dict[str, str] = {}
    if decision["backend"] == "nccl" and nccl["file"] == "recommend.env":
        env.update(nccl["env"])
    elif decision["backend"] == "nccl" and nccl["file"] == "nccl_tuner.conf":
        env["NCCL_TUNER_CONFIG_FILE"] = str(folder.resolve() / "nccl_tuner.conf")
    return env | {k: v for s in decision["engine"] if s["live"] for k, v in s["variables"].items()}


def live_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def page_answers(page: Path) -> list[dict]:
    return [json.loads(html.unescape(k)) for k in re.findall(r'data-answer="([^"]*)"', page.read_text())]


def run_folders(report: Path, summary: dict) -> list[tuple[dict, Path]]:
    runs = summary["runs"]
    if len(runs) == 1:
        return [(runs[0], report)]
    return [(run, report / Path(run["files"]["recommend.env"]).parent) for run in runs]


@pytest.mark.processes
@pytest.mark.parametrize(
    "name",
    [f"simulated {p}" for p in PRESETS]
    + [
        "nccl-tests import",
        "calibrated simulation (SYS pairs)",
        "measured on NCCL (synthetic twin)",
        "measured on a SYS-pair box (synthetic)",
        "gloo",
        "gloo crossover",
        "two runs compared",
        UNCONFIRMED,
        INCOMPLETE,
    ],
)
def test_the_page_summary_and_every_file_give_the_one_answer(scenarios, name):
    report = scenarios[name]
    summary = json.loads((report / "summary.json").read_text())
    answers = page_answers(report / "index.html")
    for run, folder in run_folders(report, summary):
        decision = run["decision"]
        nccl, engine = decision["nccl"], decision["engine"]
        # recommend.env exports exactly the NCCL environment the decision sets (when it is the file to apply).
        assert sourced(folder / "recommend.env") == (nccl["env"] if nccl["file"] == "recommend.env" else {})
        assert live_lines(folder / "nccl_tuner.conf") == nccl["tuner_rules"]
        # routing.txt sets exactly the answer's NCCL file and live engine variables; engine_flags.txt sets the same.
        engine_env = {k: v for s in engine if s["live"] for k, v in s["variables"].items()}
        answer = answer_env(decision, folder)
        assert sourced(folder / "routing.txt") == answer
        flags = sourced(folder / "engine_flags.txt")
        assert {k: flags.get(k) for k in answer} == answer
        assert {k: flags.get(k) for k in sourced(folder / "recommend.env")} == sourced(folder / "recommend.env")
        for variable in set(flags) - set(engine_env) - set(nccl["env"]):
            assert not variable.startswith(("SGLANG_", "NCCL_")) and "PCIE" not in variable, (name, variable)
        # Every route is judged against the NCCL environment the answer sets.
        for route in decision["routes"]:
            assert route["nccl_env"] == nccl["env"] and route["judged_against"] == str(nccl["point_id"])
        # summary.json's routing bands are the decision's.
        bands = [(b["collective"], b["mode"], b["min_bytes"], b["max_bytes"]) for b in run["routing"]]
        assert bands == [(r["collective"], r["mode"], r["min_bytes"], r["max_bytes"]) for r in decision["routes"]]
        # The page's answer table says what summary.json says, per T, mode and collective.
        keys = ("tokens", "mode", "collective", "impl", "options", "nccl_env", "band")
        mine = [{k: row[k] for k in keys} for row in decision["per_tokens"]]
        assert all(row in answers for row in mine), name
        # One error per source: every NCCL figure of a simulation quotes the run's expected error (its
        # calibration's held-out error or the prior's), never a record's in-sample fit.
        if run["evidence"]["level"] == "simulated":
            band = f"±{run['evidence']['expected_error_pct']:.0f} %"
            assert band in run["evidence"]["label"]
            for routed in run["routing"]:
                assert routed["evidence"]["baseline_label"] == f"simulated (expected error {band})", name
            for found in run["crossovers"]:
                assert found["evidence"].endswith(f"/ {band}, implementation / baseline)") or not found["sizes"]
        # The fused kinds' per-T verdicts are the decision's fused bands.
        fused_wins = {
            (r["impl"], t)
            for r in decision["routes"]
            if r["collective"] == "all_reduce+rmsnorm" and r["mode"] == run["mode"] and not r["kept"]
            for t in r["tokens"]
        }
        for row in run["fusion"]:
            assert (row["beyond_uncertainty"] is True) == ((row["impl"], row["tokens"]) in fused_wins), name
        # Integral TP and T.
        assert run["tp"] is None or isinstance(run["tp"], int)
        assert all(isinstance(row["tokens"], int) for row in run["headline"])
    if len(summary["runs"]) == 1:
        assert len(answers) == len(summary["runs"][0]["decision"]["per_tokens"])
        page_names_only_the_answer(report / "index.html", summary["runs"][0])
    else:
        comparison_names_each_runs_answer(report / "index.html", summary["runs"])


def answer_point(run: dict, tokens: int) -> str:
    """The decision's point at T in the run's headline mode, read from its routes: the point of the all-reduce band
    another implementation takes at T, else the point whose NCCL environment the answer sets."""
    decision = run["decision"]
    for route in decision["routes"]:
        if route["collective"] == "all_reduce" and route["mode"] == run["mode"] and not route["kept"]:
            if tokens in route["tokens"]:
                return route["point_id"]
    return decision["nccl"]["point_id"]


def live_answer_point(run: dict, tokens: int) -> str:
    """The point the answer's files run at T: answer_point where an engine setting they set live runs its band (a
    switch left commented out sets nothing), else the point whose NCCL environment the answer sets."""
    decision = run["decision"]
    point = answer_point(run, tokens)
    for route in decision["routes"]:
        if route["point_id"] == point and not route["kept"] and tokens in route["tokens"]:
            live = any(
                s["live"] and s["impl"] == route["impl"] and s["min_bytes"] <= route["max_bytes"]
                for s in decision["engine"]
                if route["min_bytes"] <= s["max_bytes"]
            )
            return point if live else decision["nccl"]["point_id"]
    return point


class _Rows(HTMLParser):
    """Every table row of a page as its cells' visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None and self.rows:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def page_rows(page: Path) -> list[list[str]]:
    parser = _Rows()
    parser.feed(page.read_text())
    return parser.rows


def page_text(page: Path) -> str:
    return " ".join(
        html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"(?s)<(svg|style|script).*?</\1>", "", page.read_text()))).split()
    )


ANSWER_CELL = re.compile(r"^the answer at this T(?: \((keeps the baseline|= \(a\))\))? (\S+)(?: \(T = 1: \S+\))?$")


def page_names_only_the_answer(page: Path, run: dict) -> None:
    """Every table that names a point per T beside the baseline names the point the decision's files run there (or
    says it keeps the baseline), never a fastest point the decision did not choose nor a switch they leave commented
    out; table 1 marks (b) only where the decision routes to it."""
    named = 0
    tokens = None
    for row in page_rows(page):
        if row and row[0].isdigit():
            tokens = int(row[0])
        for k, cell in enumerate(row):
            assert not re.match(r"^(best|fastest at this T) [ps]\S*\d\b", cell), (cell, row)
            found = ANSWER_CELL.match(cell)
            if found:
                at = next(int(c) for c in row[:2] if c.isdigit())
                assert found.group(2) == live_answer_point(run, at), (row, live_answer_point(run, at))
                if found.group(1) == "keeps the baseline":
                    assert found.group(2) == run["baseline_point_id"]
                named += 1
            if cell.startswith("fastest at this T: (b) "):  # table 1: (b) only where the decision runs it
                assert row[k + 1].split()[0] == answer_point(run, tokens), row
            if "(nccl_tuner.conf's rule)" in cell:  # only where that file holds the decision's rules
                assert run["decision"]["nccl"]["tuner_rules"], row
    assert named or not run["headline"], "no table names the answer"


SINGLE = [f"simulated {p}" for p in PRESETS] + [
    "nccl-tests import",
    "calibrated simulation (SYS pairs)",
    "measured on NCCL (synthetic twin)",
    "measured on a SYS-pair box (synthetic)",
    "gloo",
    "gloo crossover",
    UNCONFIRMED,
    INCOMPLETE,
]


@pytest.mark.parametrize("name", SINGLE)
def test_every_card_gives_the_answer_or_says_why_there_is_none(scenarios, name):
    """The speculative card gives only its own break-even, never above T; a run that may not answer says why and
    what would decide it, with no before/after; nothing predicted is called measured; a gloo run's engine section
    says it measured gloo, not NCCL."""
    report = scenarios[name]
    (run,) = json.loads((report / "summary.json").read_text())["runs"]
    text = page_text(report / "index.html")
    assert "With the fastest point at each T" not in text
    card = text.split("Does speculative decoding pay", 1)[-1].split("1 · Per T", 1)[0]
    for accept, at in re.findall(r"[Pp]ays above accept length ([0-9.]+) at T = (\d+)", card):
        assert float(accept) <= int(at), card
    # Each row's break-even is judged by the rule that colours its tokens/s cells: green exactly above it.
    raw = (report / "index.html").read_text()
    raw = raw.split("Does speculative decoding pay", 1)[-1].split("1 · Per T", 1)[0]
    row = r'<tr><td class="num">(\d+)</td><td class="num wrap"><b>([^<]*)</b></td>((?:<td class="num [a-z]*">[^<]*</td>)*)'
    for at, even, cells in re.findall(row, raw):
        verdicts = re.findall(r'<td class="num ([a-z]*)">', cells)
        if re.fullmatch(r"[0-9.]+", even):
            assert float(even) <= int(at)
            for accept, verdict in zip(run["accepts"], verdicts):
                if accept <= int(at) and abs(accept - float(even)) > 0.01:
                    assert (verdict == "pays") == (accept > float(even)), (at, even, accept, verdict)
        elif even.startswith("never pays"):
            assert "pays" not in verdicts
    if run["decision"]["unconfirmed"] or (run["recommended"] or {}).get("withheld"):
        faster = text.split("How much faster is my verify step?", 1)[1].split("What do I set?", 1)[0]
        assert "no answer" in faster.lower() and "What decides it" in faster and "→" not in faster, faster
        assert "faster verify step with (a)" not in faster
    if run["evidence"]["level"] == "simulated":
        assert "largest size measured" not in text
        for table in (report / "nccl-tests").glob("*.txt"):
            assert "timed" not in table.read_text().split("\n# Compare", 1)[0].replace("nothing was timed", "")
        assert all("predicted" in b["boundary"] for b in run["routing"] if b["boundary"].startswith("the largest"))
    # Section 8: each engine switch of the answer, set or not.
    engines = text.split("8 · How to apply it", 1)[-1].split("SGLang and vLLM", 1)[-1]
    for setting in run["decision"]["engine"]:
        switch = " ".join(f"{k}={v}" for k, v in setting["variables"].items())
        status = "set" if setting["live"] else "commented out"
        assert f"{setting['engine']} {switch} {status}" in engines, (setting, engines[:400])
    assert not run["decision"]["engine"] or "Nothing engine-specific" not in engines
    if run["evidence"].get("backend") == "gloo":
        for entry in run["decision"]["engine_paths"]:
            assert "This run measured gloo" in entry["basis"] and "NCCL never ran" in entry["basis"], entry
        assert not run["decision"]["engine_paths"] or "This run measured gloo on CPU ranks" in text


def comparison_names_each_runs_answer(page: Path, runs: list[dict]) -> None:
    """The side-by-side table names each run's answer per T (the decision's point, or that it keeps the baseline)."""
    rows = [r for r in page_rows(page) if len(r) == 7 and r[1].isdigit() and "(" in r[0]]
    expected = [(run, int(h["tokens"])) for run in runs for h in run["headline"]]
    assert len(rows) == len(expected)
    for row, (run, tokens) in zip(rows, expected):
        point = answer_point(run, tokens)
        assert row[6].split(":")[0] == point and (row[5] == "keeps the baseline") == (point == run["baseline_point_id"])


@pytest.mark.processes
def test_on_sm120_the_sglang_switch_is_live_only_with_its_cap_and_fusion_never(scenarios):
    report = scenarios["measured on NCCL (synthetic twin)"]
    decision = json.loads((report / "summary.json").read_text())["runs"][0]["decision"]
    (sglang,) = [s for s in decision["engine"] if s["engine"] == "SGLang"]
    hidden = 7168
    routed = next(r for r in decision["routes"] if r["impl"] == sglang["impl"] and r["mode"] == "graph")
    assert sglang["live"] and sglang["variables"] == {
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1",
        "SGLANG_PCIE_IPC_MAX_NUMEL": str(max(routed["tokens"]) * hidden),
    }
    env = sourced(report / "engine_flags.txt")
    assert env["SGLANG_PCIE_IPC_MAX_NUMEL"] == sglang["variables"]["SGLANG_PCIE_IPC_MAX_NUMEL"]
    assert sourced(report / "routing.txt") == answer_env(decision, report)
    # vLLM's switch has no cap: it is left off unless the kernel won at every size vLLM would send it.
    (vllm,) = [s for s in decision["engine"] if s["engine"] == "vLLM"]
    assert not vllm["live"] and "no size cap" in vllm["why"]
    args = subprocess.run(
        [
            "env",
            "-i",
            "bash",
            "-c",
            'source "$1" >/dev/null; printf "%s\\n" "${COMMPROF_SGLANG_ARGS[@]}"',
            "_",
            str(report / "engine_flags.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert "--flashinfer-allreduce-fusion-backend" not in args


@pytest.mark.processes
def test_a_simulation_sets_no_engine_switch_and_says_predicted(scenarios):
    report = scenarios["simulated pcie-gen5-switch-p2p"]
    assert sourced(report / "routing.txt") == {} and sourced(report / "engine_flags.txt") == {}
    decision = json.loads((report / "summary.json").read_text())["runs"][0]["decision"]
    assert decision["engine"] and not any(s["live"] for s in decision["engine"])
    assert all("not tested" in s["why"] or "no size cap" in s["why"] for s in decision["engine"])


def test_a_crossover_run_has_integral_tp_and_tokens_and_compares_with_a_plain_run(scenarios):
    summary = json.loads((scenarios["two runs compared"] / "summary.json").read_text())
    for run in summary["runs"]:
        assert run["tp"] == 2 and isinstance(run["tp"], int)
        assert all(isinstance(row["tokens"], int) for row in run["headline"])
    assert "not comparable" not in (scenarios["two runs compared"] / "index.html").read_text()


def test_the_engine_section_lists_each_op_groups_path_today_and_with_the_answer(scenarios):
    report = scenarios["simulated pcie-gen5-switch-p2p"]
    decision = json.loads((report / "summary.json").read_text())["runs"][0]["decision"]
    by_engine = {e["engine"]: e for e in decision["engine_paths"]}
    assert set(by_engine) == {"SGLang 0.5.23", "vLLM 0.33"}
    for entry in by_engine.values():
        assert [r["tokens"] for r in entry["rows"]] == [1, 4, 8, 16]
        assert all(r["today"] == "NCCL" and r["with_answer_source"] for r in entry["rows"])
        assert not entry["live"]  # a simulation: the switches are shown as they would act, and left off
    sglang = [r["with_answer"] for r in by_engine["SGLang 0.5.23"]["rows"]]
    assert sglang == ["FlashInfer PCIe IPC", "NCCL", "NCCL", "NCCL"]  # its cap keeps T >= 4 on NCCL
    vllm = [r["with_answer"] for r in by_engine["vLLM 0.33"]["rows"]]
    assert vllm == ["FlashInfer PCIe IPC"] * 4  # no cap: why its switch is left off
    assert any("flashinfer-allreduce-fusion-backend" in f for f in by_engine["SGLang 0.5.23"]["fails_here"])
    page = (report / "index.html").read_text()
    assert "What your engine runs, op by op" in page and "pcie_ipc_ar.py: should_pcie_ipc_ar" in page


@pytest.mark.parametrize("name", ["simulated pcie-gen5-switch-p2p", "measured on a SYS-pair box (synthetic)", "gloo"])
def test_the_sweeps_closing_lines_say_the_decision(scenarios, name):
    from commprof.report.command import answer_lines

    lines = answer_lines(SIM_DIRS[name])
    decision = json.loads((scenarios[name] / "summary.json").read_text())["runs"][0]["decision"]
    env = " ".join(f"{k}={v}" for k, v in sorted(decision["nccl"]["env"].items())) or "the defaults"
    assert f"environment: {env}" in lines[0]
    for route in decision["routes"]:
        if route["collective"] == "all_reduce" and route["tokens"]:
            what = ("NCCL" if route["impl"] == "nccl" else route["impl"]) if route["kept"] else route["impl"]
            tokens = ", ".join(map(str, route["tokens"]))
            assert any(f"{route['mode']} all-reduce, T = {tokens} " in line and what in line for line in lines)
    for setting in decision["engine"]:
        assert any(line.startswith(f"  {setting['engine']}: ") for line in lines)


SPEC_SETTING = re.compile(r"(\S+)(?: \(T = 1: (\S+)\))?$")


@pytest.mark.parametrize("name", [*SINGLE, "two runs compared"])
def test_every_break_even_for_the_same_settings_agrees_across_page_summary_and_card(scenarios, name):
    """One answer: a break-even is stated for the settings (the point at T = 1, the point at the verify T), and the
    projection table, the speculative card and summary.json give the same one for the same settings. The rows
    labelled the answer use only what its files set live (a switch left commented out sets nothing)."""
    report = scenarios[name]
    runs = json.loads((report / "summary.json").read_text())["runs"]
    raw = (report / "index.html").read_text()
    sections = re.findall(r'(?s)<section id="[^"]*-spec">(.*?)</section>', raw)
    cards = [c.split("1 · Per T", 1)[0] for c in raw.split("Does speculative decoding pay")[1:]]
    assert len(sections) == len(runs) and len(cards) == len(runs), name
    for run, section, card in zip(runs, sections, cards):
        stated: dict[tuple, set[str]] = {}
        by_setting: dict[str, str] = {}
        for row in run["projection"]:
            point, tokens = row["point_id"], int(row["tokens"])
            decode = row.get("decode_point_id", point)
            if row["setting"] == "answer":
                assert (decode, point) == (live_answer_point(run, 1), live_answer_point(run, tokens)), (name, row)
            else:
                assert decode == point, (name, row)
                by_setting[row["setting"]] = point
            text = break_even_text(
                row["break_even_ratio"], bool(row["within_uncertainty"]), tokens, bool(row.get("withdrawn"))
            )
            stated.setdefault((decode, point, tokens), set()).add(text)
        parser = _Rows()
        parser.feed(section)
        table = [r for r in parser.rows if len(r) > 5 and r[1].isdigit()]
        assert len(table) == len(run["projection"]), name
        for row in table:
            found = SPEC_SETTING.search(row[0])
            point = found.group(1)
            stated.setdefault((found.group(2) or point, point, int(row[1])), set()).add(row[5])
        parser = _Rows()
        parser.feed(card)
        shown = [r for r in parser.rows if len(r) > 1 and r[0].isdigit()]
        if shown:
            point = by_setting["recommended" if "With (a), the settings to export" in card else "baseline"]
            for row in shown:
                stated.setdefault((point, point, int(row[0])), set()).add(row[1])
        disagree = {key: texts for key, texts in stated.items() if len(texts) > 1}
        assert not disagree, (name, disagree)


@pytest.mark.parametrize("name", ["simulated pcie-gen5-switch-p2p", "measured on a SYS-pair box (synthetic)"])
def test_every_verdict_says_each_reason_once(scenarios, name):
    """routing.txt, the page and summary.json render each band's verdict with each reason once, in words."""
    report = scenarios[name]
    decision = json.loads((report / "summary.json").read_text())["runs"][0]["decision"]
    kept = [r["reason"] for r in decision["routes"] if r["reason"].startswith("baseline kept")]
    assert kept, name
    assert all(r["verdict"] in VERDICTS for r in decision["routes"])
    for verdict in kept:
        reasons = verdict.split(": ", 1)[1].split("; ")
        assert len(reasons) == len(set(reasons)), verdict
        assert verdict.count("not judged") <= 1 and "implementation is not" not in verdict, verdict
        assert verdict in (report / "routing.txt").read_text()


def test_a_gloo_run_names_its_baseline_gloo_everywhere(scenarios):
    """On CPU ranks NCCL never ran: routing.txt, the closing lines and the page name the baseline gloo, and the
    page's NCCL-environment cell says NCCL did not run."""
    from commprof.report.analysis.decision import Decision, Route
    from commprof.report.exports.decision_files import decision_lines, routing_text
    from commprof.report.views.page import answer_rows

    routing = (scenarios["gloo"] / "routing.txt").read_text()
    assert "NCCL keeps every size" not in routing and "gloo keeps every size" in routing
    # The fixture run predates per-op records (no bands): the renderers are read on the gloo run's decision shape.
    band = dict(collective="all_reduce", mode="eager", min_bytes=14336, max_bytes=57344, tokens=(1, 4), options={})
    route = Route(**band, impl="gloo", point_id="s1-p000", nccl_env={}, judged_against="s1-p000",
                  margin_pct=None, rule="", errors={}, verdict="not judged",
                  reason="baseline: no other implementation ran at this size", kept=True)  # fmt: skip
    decision = Decision("r", "measured on gloo", None, None, "", {}, "s1-p000", (), (route,), (), (), backend="gloo")
    assert ": gloo: not judged: baseline" in routing_text(decision, []) and ": NCCL" not in routing_text(decision, [])
    assert decision_lines(decision)[1].endswith("(14336-57344 B): gloo: not judged")
    assert answer_rows(decision)[0]["env"] == "NCCL did not run (gloo backend)"
