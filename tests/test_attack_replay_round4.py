"""The fourth attack run, replayed case by case through the entry point the attacker used (run as `python -m` runs it)
and checked by tests/attack_replay.py: names that point at files, plan.jsonl and traces of another shape, the
GPU smoke's output. Exports are sourced in every POSIX shell the way they say they are sourced. Bundles, graph files
and unbounded numbers are in test_attack_replay_round4_inputs.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.attack_replay import Attack, attack_params, check_attack, gloo_run, sweep_file
from tests.report_fixtures import make_meta, make_records, write_run

# NCCL (param.cc, debug.cc, topo.cc, search.cc), torch's flight recorder, FlashInfer 0.7.4 and vLLM: each names a
# file the library reads, writes or loads settings and plug-ins from.
FILE_NAMES = [
    "NCCL_CONF_FILE",
    "NCCL_DEBUG_FILE",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_TOPO_FILE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "FLASHINFER_WORKSPACE_BASE",
    "FLASHINFER_JIT_DIR",
    "FLASHINFER_NVCC",
    "VLLM_CONFIG_ROOT",
]


# ------------------------------------------------------------------------------------------------ the cases


def _sweep_names_a_file(name: str):
    def case(tmp):
        path = sweep_file(tmp, f"[[points]]\nenv = {{ {name} = '{tmp}/outside/victim' }}\n")
        argv = ["commprof.allreduce_sweep", "--sweep", str(path), "--dry-run", "--no-doctor"]
        return Attack(argv, error=rf"evil\.toml: points\[0\]\.env\.{name}: {name} names a file")

    return case


def _sweep_axis_names_a_file(tmp):
    path = sweep_file(tmp, "[axes.env]\nNCCL_CONF_FILE = ['/srv/evil/nccl.conf']\n")
    argv = ["commprof.allreduce_sweep", "--sweep", str(path), "--dry-run", "--no-doctor"]
    return Attack(argv, error=r"evil\.toml: .*NCCL_CONF_FILE names a file")


def _winner_names_a_file(name: str):
    """A crafted run whose winning point holds `name`: the run is refused whole, so nothing is exported for it."""

    def case(tmp):
        records = make_records("crafted")
        for record in records:
            if record["kind"] == "step" and record["status"] == "ok" and record.get("nccl"):
                record["point"]["env"] = {**record["point"]["env"], name: "/srv/evil/nccl.conf"}
        run = write_run(tmp / "runs", "crafted", records=records, meta=make_meta("crafted"))
        out = tmp / "out"

        def nothing_exported():
            assert not any(f"{name}=" in p.read_text() for p in out.rglob("*") if p.is_file())

        error = rf"results\.jsonl:\d+: not a usable record: point\.env: {name} names a file"
        return Attack(
            ["commprof", "report", str(run), "--out", str(out)], error=error, given=[out], after=nothing_exported
        )

    return case


_STAGES = '{"line":"stages","stages":[{"stage":1,"name":"confirm","unit":"points"}]}\n'
_STAGE0 = '{"line":"points","stage":0,"point_ids":["p000","p001","p002","p003","p004"],"per_point":%s}\n'
_STAGE1 = '{"line":"points","stage":1,"point_ids":["s1-p000","s1-p001"],"per_point":4}\n'


def _plan_case(plan: str, error: str, drop: str = "s1-p001", status: int = 2):
    def case(tmp):
        run = gloo_run(tmp, plan, drop)
        out = tmp / "out"

        return Attack(["commprof", "report", str(run), "--out", str(out)], status, error, [out, run])

    return case


def _stage_name_escape(tmp):
    """A stage named with an OSC title escape, in a run interrupted in that stage: the warning names it clean."""
    run = gloo_run(tmp, _STAGES.replace("confirm", "\\u001b]0;pwned\\u0007confirm") + _STAGE0 % 4 + _STAGE1, "s1-p001")
    out = tmp / "out"
    return Attack(["commprof", "report", str(run), "--out", str(out)], 0, "", [out, run])


def _observed_object_args(tmp):
    """`report --observed` of a Kineto trace whose args hold objects where ids, names and counts belong."""
    traces = tmp / "traces"
    traces.mkdir()
    events = []
    for step in range(4):
        t = step * 1000
        events += [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t + 10,
                "dur": 5,
                "args": {"correlation": {"x": step}},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)",
                "pid": 0,
                "tid": 7,
                "ts": t + 20,
                "dur": 50,
                "args": {
                    "correlation": {"x": step},
                    "Collective name": {"a": 1},
                    "dtype": [{}],
                    "In msg nelems": {"n": 1},
                    "Group size": [2],
                },
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": {"object": 1},
                "pid": {"p": 1},
                "tid": [],
                "ts": t,
                "dur": 1,
                "args": {},
            },
        ]
    trace = {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"}}
    (traces / "rank0.json").write_text(json.dumps(trace))
    run, out = gloo_run(tmp), tmp / "out"
    return Attack(["commprof", "report", str(run), "--observed", str(traces), "--out", str(out)], 0, "", [out, run])


def _smoke(tmp: Path, error: str, plant: Callable[[Path, Path], None] = lambda out, archive: None, **paths):
    """`python -m commprof.gpu_smoke --out O --archive A/gs.tgz` (on this GPU-less box: the machine's skip verdict,
    summary.txt, smoke.log and summary.json written, then packed), after `plant(out, archive)`."""
    out, archive = paths.get("out", tmp / "o"), paths.get("archive", tmp / "a" / "gs.tgz")
    plant(out, archive)
    given = [p for p in (out, archive.parent) if tmp in p.parents] if "out" not in paths else [archive.parent]
    argv = ["commprof.gpu_smoke", "--out", str(out), "--archive", str(archive)]

    def nothing_partial():
        left = [str(p) for p in tmp.rglob("*.partial") if not p.is_symlink()]
        assert left == [] and not archive.is_symlink(), left

    return Attack(argv, 2, error, given, after=nothing_partial)


def _link(path: Path, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


CASES: dict[str, Callable[[Path], Attack]] = {
    # 1. variables that name a file NCCL, torch, FlashInfer or an engine reads, writes or loads
    **{f"sweep-env-names-a-file-{n}": _sweep_names_a_file(n) for n in FILE_NAMES},
    "sweep-axis-env-NCCL_CONF_FILE": _sweep_axis_names_a_file,
    "winner-sets-NCCL_CONF_FILE": _winner_names_a_file("NCCL_CONF_FILE"),
    "winner-sets-TORCH_NCCL_DEBUG_INFO_TEMP_FILE": _winner_names_a_file("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
    # 3. plan.jsonl and Kineto traces of another shape than their writers'
    "plan-per-point-0": _plan_case(
        _STAGES + _STAGE0 % 4 + _STAGE1.replace(":4", ":0"), r"plan\.jsonl:3: .*per_point 0"
    ),
    "plan-per-point-0-last": _plan_case(_STAGES + _STAGE0 % 0, r"plan\.jsonl:2: .*per_point 0"),
    "plan-per-point-infinity": _plan_case(_STAGES + _STAGE0 % "Infinity" + _STAGE1, r"plan\.jsonl:2: .*Infinity"),
    "plan-per-point-1e400": _plan_case(_STAGES + _STAGE0 % "1e400" + _STAGE1, r"plan\.jsonl:2: .*per_point"),
    "plan-stage-name-escape": _stage_name_escape,
    "observed-trace-object-args": _observed_object_args,
    # 4. the GPU smoke's output, the one command run as root on air-gapped boxes
    "smoke-archive-names-a-folder": lambda tmp: _smoke(
        tmp, r"--archive .*adir: a folder", lambda o, a: a.mkdir(parents=True), archive=tmp / "a" / "adir"
    ),
    "smoke-planted-partial-link": lambda tmp: _smoke(
        tmp,
        r"gs\.tgz\.partial: a symbolic link",
        lambda o, a: _link(a.with_name("gs.tgz.partial"), tmp / "outside" / "victim"),
    ),
    "smoke-planted-summary-txt-link": lambda tmp: _smoke(
        tmp, r"o/summary\.txt: a symbolic link", lambda o, a: _link(o / "summary.txt", tmp / "outside" / "victim")
    ),
    "smoke-archive-named-summary-json": lambda tmp: _smoke(
        tmp, r"--archive .*summary\.json: the smoke writes a summary", archive=tmp / "a" / "summary.json"
    ),
    "smoke-archive-is-out-summary-txt": lambda tmp: _smoke(
        tmp, r"--archive .*summary\.txt: the smoke writes", archive=tmp / "o" / "summary.txt"
    ),
    "smoke-out-names-a-file": lambda tmp: _smoke(
        tmp, r"--out .*victim: a file, not a folder", out=tmp / "outside" / "victim"
    ),
    "smoke-out-not-writable": lambda tmp: _smoke(
        tmp, r"commprof-smoke.*(cannot be written|not permitted)", out=Path("/sys/commprof-smoke")
    ),
}


# None starts a process: the smoke's question to torch about CUDA (a child importing torch, before it writes) is
# answered here as on a box without one, the answer the cases are written for; the child itself is make gpu-smoke's
# test's (test_gpu_smoke.py).
STARTS_PROCESSES: set[str] = set()
NO_CUDA = {"version": "2.13.0+cpu", "cuda": None, "available": False, "error": "RuntimeError: no CUDA here (a test)"}


@pytest.mark.parametrize("case", attack_params(CASES, STARTS_PROCESSES))
def test_the_attack_gives_one_line_and_leaves_everything_outside_as_it_was(case, tmp_path, monkeypatch):
    from commprof.gpu_smoke import environment

    monkeypatch.setattr(environment, "probe_torch", lambda: NO_CUDA)
    check_attack(CASES[case], tmp_path)


# ------------------------------------------------------------------------------------------------ sourcing


def _report_folder(folder: Path, algo: str) -> Path:
    """engine_flags.txt as the report writes it (sourcing recommend.env, exporting its nccl_tuner.conf), with the
    files beside it."""
    from commprof.report.exports.engine_hints import EngineHint, engine_hints_text

    hints = [
        EngineHint("SGLang and vLLM", "source recommend.env", "any version", "why"),
        EngineHint("SGLang and vLLM", "export NCCL_TUNER_CONFIG_FILE=nccl_tuner.conf", "any version", "why"),
    ]
    folder.mkdir()
    (folder / "engine_flags.txt").write_text(engine_hints_text(hints, ["from a test"]))
    (folder / "recommend.env").write_text(f"export NCCL_ALGO={algo}\n")
    (folder / "nccl_tuner.conf").write_text("")
    return folder


SHELLS = {"bash": "bash", "zsh": "zsh", "dash": "dash", "sh": "sh"}


@pytest.mark.processes  # a shell per case
@pytest.mark.parametrize("shell", SHELLS)
def test_engine_flags_sourced_from_another_report_folder_applies_its_own_run_or_refuses(shell, tmp_path):
    """Report A's engine_flags.txt sourced from report B's folder: bash and zsh apply A's recommend.env and name
    A's nccl_tuner.conf; a shell that cannot find the file's own folder (dash, POSIX sh) refuses in one line and
    sets nothing."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here (apt-get install -y {shell})")
    a = _report_folder(tmp_path / "A", "A")
    b = _report_folder(tmp_path / "B", "B")
    dot = "source" if shell in ("bash", "zsh") else "."
    shell_run = subprocess.run(
        ["env", "-i", shell, "-c", f'{dot} ../A/engine_flags.txt; echo "rc=$? $NCCL_ALGO $NCCL_TUNER_CONFIG_FILE"'],
        cwd=b,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "Traceback" not in shell_run.stderr
    if shell in ("bash", "zsh"):
        assert shell_run.stdout.split() == ["rc=0", "A", "../A/nccl_tuner.conf"], shell_run
        assert Path(b, shell_run.stdout.split()[2]).resolve() == (a / "nccl_tuner.conf").resolve()
        assert shell_run.stderr == ""
    else:
        assert shell_run.stdout.split() == ["rc=2"], shell_run
        assert shell_run.stderr.count("\n") == 1 and "source it in bash or zsh" in shell_run.stderr


@pytest.mark.processes  # a shell per file
def test_recommend_env_and_routing_txt_set_the_same_in_every_shell(tmp_path):
    """The files a user sources that name no other file: `export NAME='value'` lines, the same in every shell."""
    from commprof.report.exports.export_text import export_line

    path = tmp_path / "recommend.env"
    path.write_text("\n".join([export_line("NCCL_ALGO", "allreduce:tree"), export_line("NCCL_PROTO", "LL")]) + "\n")
    seen = set()
    for shell in [s for s in SHELLS if shutil.which(s)]:
        dot = "source" if shell in ("bash", "zsh") else "."
        done = subprocess.run(
            ["env", "-i", shell, "-c", f'{dot} {path}; echo "$NCCL_ALGO|$NCCL_PROTO"'],
            capture_output=True,
            text=True,
            timeout=30,
        )
        seen.add(done.stdout)
    assert seen == {"allreduce:tree|LL\n"}


def test_names_that_point_at_files_are_refused_wherever_the_allow_list_is_read():
    from commprof.env_names import export_name_problem
    from commprof.report.exports.export_text import export_line

    for name in [*FILE_NAMES, "VLLM_CACHE_ROOT", "FLASHINFER_LOGDEST", "NCCL_TUNER_CONFIG_FILE", "SGLANG_X_PATH"]:
        assert "names a file" in (export_name_problem(name) or ""), name
        assert export_line(name, "/srv/evil").startswith("# skipped"), name
    for name in ["NCCL_GRAPH_FILE", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_ALGO", "SGLANG_PCIE_IPC_MAX_NUMEL"]:
        assert export_name_problem(name) is None, name


def _listing(tmp: Path, per_axis: int, monkeypatch) -> tuple[float, list[int]]:
    """`--dry-run --max-points N` of a per_axis x per_axis sweep, run here on one rank with a probe that measures
    nothing: its processor seconds and the lines of each block it printed."""
    from commprof.sweep import command
    from commprof.sweep.planning.dryrun import StepCost
    from commprof.sweep.running import probe

    values = ", ".join(f'"v{i}"' for i in range(per_axis))
    sweep = tmp / f"big-{per_axis}.toml"
    sweep.write_text(
        f'name = "big"\n[run]\ntokens = [1]\n[axes.env]\nCOMMPROF_A = [{values}]\nCOMMPROF_B = [{values}]\n'
    )
    monkeypatch.setattr(probe, "probe_step_cost", lambda *args: StepCost(0.5, {1: 19.4}, "measured (test)"))
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    blocks: list[int] = []
    monkeypatch.setattr(command, "echo", lambda text, err=False: blocks.append(text.count("\n") + 1))
    argv = ["--sweep", str(sweep), "--dry-run", "--no-doctor", "--max-points", str(per_axis**2 + 1)]
    started = time.process_time()
    assert command.main(argv) == 0
    return time.process_time() - started, blocks


def test_the_dry_run_listing_is_linear_in_its_points_and_printed_in_blocks(tmp_path, monkeypatch):
    """The attack's `--dry-run --max-points 1000001` of a 1000 x 1000 sweep, at sizes four times apart: every point
    listed, in blocks of at most 10,000 lines (the listing is never one string), in about four times the processor
    time, never sixteen (it once held the million-line listing whole: 1.1 GB and 41 s)."""
    seconds = {}
    for per_axis in (100, 200):
        cost, blocks = min(_listing(tmp_path, per_axis, monkeypatch) for _ in range(2))
        assert sum(blocks) == per_axis**2 + 9 and max(blocks) <= 10_000, blocks
        seconds[per_axis] = cost
    assert seconds[200] < 10 * seconds[100], seconds
