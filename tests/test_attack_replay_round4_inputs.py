"""The fourth attack run's hostile inputs, replayed through the entry point the attacker used (run as `python -m` runs
it) and checked by tests/attack_replay.py: doctor bundles, graph files given to the simulator, numbers past the
range of their unit and labels holding control characters."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.attack_replay import REPO, Attack, attack_params, check_attack, gloo_run, sweep_file

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


def _bundle_case(
    command: str, status: int = 0, error: str = "", limit_s: float | None = None, name: str = "b", **files
):
    """`commprof doctor --from B`, `commprof nccl-graph --from-bundle B --out G` or `commprof simulate --from-bundle
    B --sweep S --out G` of a bundle holding `files`."""

    def case(tmp):
        bundle = _bundle(tmp, name, **files)
        if command == "doctor":
            return Attack(["commprof", "doctor", "--from", str(bundle)], status, error, [bundle], limit_s)
        if command == "simulate":
            sweep = sweep_file(tmp, "")
            argv = [
                "commprof",
                "simulate",
                "--from-bundle",
                str(bundle),
                "--sweep",
                str(sweep),
                "--out",
                str(tmp / "g"),
            ]
            return Attack(argv, status, error, [bundle, tmp / "g"], limit_s)
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
_SMI_MILLION = "".join(f"GPU 00000000:{i >> 8 & 0xFF:02X}:{i & 0x1F:02X}.0\n" for i in range(10**6))
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


def _graph_file(change: tuple[str, str], limit_s: float | None = None):
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
        sweep = sweep_file(tmp, f"model = 'kimi-k2.5'\ntp = 8\n[[points]]\nenv = {{ NCCL_GRAPH_FILE = '{graph}' }}\n")
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
        run, out = gloo_run(tmp), tmp / "out"
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
    traces, run, out = _kineto(tmp, {}, dur=1e308), gloo_run(tmp), tmp / "out"
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
    run, out = gloo_run(tmp), tmp / "out"
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
        for command in ("doctor", "nccl-graph", "simulate")
    },
    **{
        f"bundle-smi-million-gpus-{command}": _bundle_case(
            command, 2, r"nvidia_smi_full\.log.*: \d+ GPUs, more than the 256", 30, nvidia_smi_full=_SMI_MILLION
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
    "graph-nchannels-99999999999": _graph_file(('nchannels="2"', 'nchannels="99999999999"'), limit_s=5),
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
}


STARTS_PROCESSES: set[str] = set()  # none: the bounded cases too run in the test's process


@pytest.mark.parametrize("case", attack_params(CASES, STARTS_PROCESSES))
def test_the_attack_gives_one_line_and_leaves_everything_outside_as_it_was(case, tmp_path):
    check_attack(CASES[case], tmp_path)
