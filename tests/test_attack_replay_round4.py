"""The fourth attack run, replayed case by case through the entry point the attacker used, each in a process of its
own: the exit code, exactly one error line, no traceback, every file and link outside the folder it was given left
as it was, the process inside its time limit and under 2 GB of memory. Exports are sourced in every POSIX shell
the way they say they are sourced."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.report_fixtures import make_meta, make_records, write_run

REPO = Path(__file__).resolve().parents[1]
PEAK_BYTES = 2 * 2**30
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


@dataclass
class Attack:
    """One case as the attacker ran it: `python -m <argv>`, and what it must do."""

    argv: list[str]
    status: int = 2
    error: str = ""  # a regular expression the one error line matches
    given: list[Path] = field(default_factory=list)  # the folders it may write in
    limit_s: float = 60.0
    after: Callable[[], None] | None = None  # what else must hold afterwards
    absent: str = ""  # a regular expression nothing printed matches (an unbounded number, a raw label)


@dataclass
class Ran:
    status: int
    err: str
    out: str
    seconds: float
    peak_bytes: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replay(argv: list[str], cwd: Path, limit_s: float) -> Ran:
    """`python -m argv` in `cwd` as one rank of a one-rank launch; its exit, output, wall time and peak memory
    (the child's own ru_maxrss, read by wait4). Killed and failed at `limit_s`."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd.parent / "home"),  # matplotlib's and torch's caches
        "PYTHONPATH": str(REPO),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
    }
    out, err = cwd / ".stdout", cwd / ".stderr"
    start = time.monotonic()
    with open(out, "wb") as o, open(err, "wb") as e:
        child = subprocess.Popen([sys.executable, "-m", *argv], cwd=cwd, env=env, stdout=o, stderr=e)
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > limit_s:
            os.kill(child.pid, signal.SIGKILL)
            os.wait4(child.pid, 0)
            pytest.fail(f"{argv} ran past its {limit_s} s limit: {err.read_text()[-2000:]}")
        time.sleep(0.05)
    seconds = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    texts = out.read_text(errors="replace"), err.read_text(errors="replace")
    out.unlink()
    err.unlink()
    return Ran(code, texts[1], texts[0], seconds, usage.ru_maxrss * 1024)


def tree(root: Path, skip: list[Path]) -> dict[str, str]:
    """Every path under `root` outside `skip`, with what it is (a link's target, a file's digest)."""
    seen = {}
    for path in sorted(root.rglob("*")):
        if any(path == s or s in path.parents for s in skip):
            continue
        if path.is_symlink():
            seen[str(path)] = "-> " + str(path.readlink())
        elif path.is_file():
            seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            seen[str(path)] = "folder"
    return seen


# ------------------------------------------------------------------------------------------------ the cases


def _sweep_file(tmp: Path, body: str) -> Path:
    path = tmp / "evil.toml"
    path.write_text('name = "evil"\n[run]\ntokens = [1]\n' + body)
    return path


def _sweep_names_a_file(name: str):
    def case(tmp):
        path = _sweep_file(tmp, f"[[points]]\nenv = {{ {name} = '{tmp}/outside/victim' }}\n")
        argv = ["commprof.allreduce_sweep", "--sweep", str(path), "--dry-run", "--no-doctor"]
        return Attack(argv, error=rf"evil\.toml: points\[0\]\.env\.{name}: {name} names a file")

    return case


def _sweep_axis_names_a_file(tmp):
    path = _sweep_file(tmp, "[axes.env]\nNCCL_CONF_FILE = ['/srv/evil/nccl.conf']\n")
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


GLOO_RUN = REPO / "tests" / "fixtures" / "report" / "cpu-smoke-gloo"


def _gloo_run(tmp: Path, plan: str | None = None, drop: str = "") -> Path:
    """A copy of a real 2-rank gloo run (stage 0 of 5 points, stage 1 "confirm" of 2), `drop`'s records left out
    as an interrupted run leaves them, plan.jsonl replaced by `plan`."""
    run = tmp / "runs" / "X"
    shutil.copytree(GLOO_RUN, run)
    if drop:
        lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
        (run / "results.jsonl").write_text("".join(line for line in lines if f'"{drop}"' not in line))
    if plan is not None:
        (run / "plan.jsonl").write_text(plan)
    return run


_STAGES = '{"line":"stages","stages":[{"stage":1,"name":"confirm","unit":"points"}]}\n'
_STAGE0 = '{"line":"points","stage":0,"point_ids":["p000","p001","p002","p003","p004"],"per_point":%s}\n'
_STAGE1 = '{"line":"points","stage":1,"point_ids":["s1-p000","s1-p001"],"per_point":4}\n'


def _plan_case(plan: str, error: str, drop: str = "s1-p001", status: int = 2):
    def case(tmp):
        run = _gloo_run(tmp, plan, drop)
        out = tmp / "out"

        return Attack(["commprof", "report", str(run), "--out", str(out)], status, error, [out, run])

    return case


def _stage_name_escape(tmp):
    """A stage named with an OSC title escape, in a run interrupted in that stage: the warning names it clean."""
    run = _gloo_run(tmp, _STAGES.replace("confirm", "\\u001b]0;pwned\\u0007confirm") + _STAGE0 % 4 + _STAGE1, "s1-p001")
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
    run, out = _gloo_run(tmp), tmp / "out"
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


BUNDLE = REPO / "tests" / "fixtures" / "doctor" / "asus-esc8000a-8x-rtxpro6000"


def _bundle(tmp: Path, name: str = "b", **files: str | bytes) -> Path:
    """A copy of a real 8-GPU bundle with `files` (bundle file name -> content) written over it."""
    bundle = tmp / name
    shutil.copytree(BUNDLE, bundle)
    for filename, content in files.items():
        path = bundle / (filename if "." in filename else f"{filename}.log")  # the name the fixture's file has
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return bundle


def _topo(change: Callable[[str], str]) -> str:
    return change((BUNDLE / "nvidia_topo.log").read_text())


def _nvml(indices: list) -> str:
    gpus = [{"index": i, "pci_bus_id": f"00000000:{n:02x}:00.0", "name": "GPU"} for n, i in enumerate(indices)]
    return json.dumps({"topology": {"gpus": gpus, "pairs": []}})


def _bundle_case(command: str, status: int = 0, error: str = "", limit_s: float = 60.0, name: str = "b", **files):
    """`commprof doctor --from B` or `commprof nccl-graph --from-bundle B --out G` of a bundle holding `files`."""

    def case(tmp):
        bundle = _bundle(tmp, name, **files)
        if command == "doctor":
            return Attack(["commprof", "doctor", "--from", str(bundle)], status, error, [bundle], limit_s)
        argv = ["commprof", "nccl-graph", "--from-bundle", str(bundle), "--out", str(tmp / "g")]
        return Attack(argv, status, error, [bundle, tmp / "g"], limit_s)

    return case


_DIGITS = _topo(lambda t: t.replace("\nGPU7\t", "\nGPU" + "7" * 5000 + "\t", 1))
_NUMA = _topo(lambda t: t.replace("\t1\t\tN/A", "\t\u00b2\t\tN/A"))
_TOPO_1000 = (
    "\t".join(["", *(f"GPU{i}" for i in range(1000)), "CPU Affinity", "NUMA Affinity"])
    + "\n"
    + "".join(
        "\t".join([f"GPU{i}", *("X" if i == j else "SYS" for j in range(1000)), "0-1", "0"]) + "\n" for i in range(1000)
    )
)
_NESTED = '<graphs version="1">' + "<x>" * 5000 + "</x>" * 5000 + "</graphs>\n"
_COMMENTS = "<!-- c -->\n" * 1000 + '<graphs version="1"></graphs>\n'
_NVML_BAD = r"nvml\.json: topology\.gpus"


def _dmesg_of_newlines(tmp):
    """A 128 MiB dmesg.log of newlines (the attack's was 500 MiB under the 512 MiB cap): its end is read, bounded."""
    bundle = _bundle(tmp)
    with open(bundle / "dmesg.log", "wb") as handle:
        handle.truncate(0)
        for _ in range(128):
            handle.write(b"\n" * (1 << 20))
    return Attack(["commprof", "doctor", "--from", str(bundle)], 0, "", [bundle], 30)


def _graph_file(change: tuple[str, str], limit_s: float = 20.0):
    """`commprof simulate` of a sweep whose point names an NCCL_GRAPH_FILE with `change` (old, new) made to a
    candidate commprof writes for the bundle's box: refused before anything is simulated or written."""

    def case(tmp):
        from commprof.doctor.bundle import read_bundle
        from commprof.nccl_graph.box import box_from_facts
        from commprof.nccl_graph.candidates import build_candidates

        candidate = build_candidates(box_from_facts(read_bundle(BUNDLE)))[0]
        assert change[0] in candidate.text
        graph = tmp / "evil.xml"
        graph.write_text(candidate.text.replace(*change))
        sweep = _sweep_file(tmp, f"model = 'kimi-k2.5'\ntp = 8\n[[points]]\nenv = {{ NCCL_GRAPH_FILE = '{graph}' }}\n")
        out = tmp / "sim"
        argv = ["commprof", "simulate", "--topology", "pcie-gen5-switch-p2p", "--sweep", str(sweep), "--out", str(out)]
        field = change[1].split("=")[0]
        error = rf"NCCL_GRAPH_FILE=.*evil\.xml: NCCL would refuse it \(graph 0: {field}="

        def nothing_written():
            assert not out.exists() or list(out.iterdir()) == []

        return Attack(argv, 2, error, [out], limit_s, nothing_written)

    return case


def _observed_ms(value: str, error: str):
    def case(tmp):
        run, out = _gloo_run(tmp), tmp / "out"
        return Attack(["commprof", "report", str(run), "--observed-step-ms", value, "--out", str(out)], 2, error, [out])

    return case


def _kineto(tmp: Path, kernel_args: dict, dur: float = 50.0) -> Path:
    """A one-rank Kineto trace of four NCCL all-reduce kernels with `kernel_args` and duration `dur` µs."""
    traces = tmp / "traces"
    traces.mkdir()
    events = []
    for step in range(4):
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)",
                "pid": 0,
                "tid": 7,
                "ts": step * 1000 + 20,
                "dur": dur,
                "args": {"correlation": step, **kernel_args},
            }
        )
    trace = {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"}}
    (traces / "rank0.json").write_text(json.dumps(trace))
    return traces


def _observed_dur_1e308(tmp):
    traces, run, out = _kineto(tmp, {}, dur=1e308), _gloo_run(tmp), tmp / "out"
    argv = ["commprof", "report", str(run), "--observed", str(traces), "--out", str(out)]
    return Attack(argv, 2, r"rank0\.json: event .* has a duration of 1e\+308 µs", [out])


def _message_size_1e19(tmp):
    args = {"Collective name": "allreduce", "dtype": "BFloat16", "In msg nelems": 10**19, "Out msg nelems": 10**19}
    return Attack(["commprof", "trace", str(_kineto(tmp, args))], 0, "", absent=r"[0-9]{7,} [KMGT]i?B")


def _inspector_time_1e308(tmp):
    dumps = tmp / "inspector"
    shutil.copytree(REPO / "tests" / "fixtures" / "nccl_inspector" / "json-after", dumps)
    for path in dumps.iterdir():
        path.write_text(re.sub(r'"coll_exec_time_us":[0-9.]+', '"coll_exec_time_us":1e308', path.read_text(), count=3))
    return Attack(["commprof", "trace", str(dumps)], 0, "", absent=r"[0-9]{12,}|\binf\b")


def _label_controls(tmp):
    """A run whose baseline is labelled with NUL, ESC and BEL: the report, its page and its figures print it clean."""
    run, out = _gloo_run(tmp), tmp / "out"
    lines = (run / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        if record["point_id"] == "p000":
            record["point"]["label"] = "de\x00fa\x1b]0;x\x07ults\x07"
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def page_clean():
        for path in out.rglob("*"):
            if path.is_file() and path.suffix in (".html", ".svg", ".txt", ".env", ".csv", ".json"):
                assert not re.search("[\x00\x07\x1b]", path.read_text(errors="replace")), path

    return Attack(["commprof", "report", str(run), "--out", str(out)], 0, "", [out], after=page_clean)


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
    # 5. hostile doctor bundles, read by doctor --from and nccl-graph --from-bundle
    **{
        f"bundle-topo-5000-digit-gpu-row-{command}": _bundle_case(
            command, 2, r"row GPU7+\.\.\. \(5000 digits\)", nvidia_topo=_DIGITS
        )
        for command in ("doctor", "nccl-graph")
    },
    **{
        f"bundle-numa-superscript-{command}": _bundle_case(command, nvidia_topo=_NUMA)
        for command in ("doctor", "nccl-graph")
    },
    **{
        f"bundle-topo-1000-gpus-{command}": _bundle_case(
            command, 2, r"topo -m: 1000 GPUs and NICs, more than", 20, nvidia_topo=_TOPO_1000
        )
        for command in ("doctor", "nccl-graph")
    },
    "bundle-folder-named-with-comment-end": _bundle_case("nccl-graph", name="x-->y"),
    "bundle-nccl-graphs-5000-nested": _bundle_case("nccl-graph", **{"nccl_graphs.log": _NESTED}),
    "bundle-nccl-graphs-1000-comments": _bundle_case("nccl-graph", **{"nccl_graphs.log": _COMMENTS}),
    **{
        f"bundle-nvml-{what}-{command}": _bundle_case(command, 2, _NVML_BAD + error, 20, **{"nvml.json": _nvml(ids)})
        for what, ids, error in (
            ("duplicate-index", [0, 0, 0], r"\[1\]\.index: 0 given twice"),
            ("index-1e30", [0, 10**30], r"\[1\]\.index: 1000000000000000000000000000000 is not"),
            ("1000-gpus", list(range(1000)), r": not a list of at most 256"),
        )
        for command in ("doctor", "nccl-graph")
    },
    "bundle-dmesg-128mib-of-newlines": _dmesg_of_newlines,
    # 6. graph files NCCL would refuse, given to the simulator
    "graph-nchannels-99999999999": _graph_file(('nchannels="2"', 'nchannels="99999999999"'), limit_s=10),
    "graph-nchannels-0": _graph_file(('nchannels="2"', 'nchannels="0"')),
    "graph-nchannels-minus-3": _graph_file(('nchannels="2"', 'nchannels="-3"')),
    **{f"graph-speedintra-{v}": _graph_file(('speedintra="31.5"', f'speedintra="{v}"')) for v in ("nan", "-5", "inf")},
    # 7. numbers past the range of their unit, and labels holding control characters
    "observed-step-ms-1e308": _observed_ms("1e308", r"--observed-step-ms: '1e308' must be a number .* at most"),
    "observed-step-ms-T-twice": _observed_ms("4=5,4=6", r"--observed-step-ms: T = 4 given twice"),
    "observed-trace-dur-1e308": _observed_dur_1e308,
    "trace-message-size-1e19": _message_size_1e19,
    "inspector-exec-time-1e308": _inspector_time_1e308,
    "label-nul-esc-bel": _label_controls,
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


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_attack_gives_one_line_and_leaves_everything_outside_as_it_was(case, tmp_path):
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_text("export KEEP=1\n")
    attack = CASES[case](tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    skip = [*attack.given, cwd, tmp_path / "home"]
    before = tree(tmp_path, skip)
    ran = replay(attack.argv, cwd, attack.limit_s)
    assert tree(tmp_path, skip) == before
    assert list(cwd.iterdir()) == []
    assert "Traceback" not in ran.err and ran.status == attack.status, ran.err[-3000:]
    assert ran.peak_bytes < PEAK_BYTES, ran.peak_bytes
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", ran.err + ran.out), "a control character was printed"
    errors = [line for line in ran.err.splitlines() if "error" in line]
    if attack.status:
        assert len(errors) == 1 and re.search(attack.error, errors[0]), ran.err[-3000:]
    else:
        assert errors == [], ran.err[-3000:]
    if attack.absent:
        assert not re.search(attack.absent, ran.out + ran.err), (ran.out + ran.err)[-3000:]
    if attack.after is not None:
        attack.after()


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
    for name in ["NCCL_GRAPH_FILE", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_ALGO", "TORCH_NCCL_AVOID_RECORD_STREAMS"]:
        assert export_name_problem(name) is None, name
