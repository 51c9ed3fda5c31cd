"""The maintainer's fact check (tools/check_engine_facts.py) on tiny wheels built here: each fact prints held,
changed or missing for the right reason, values are compared, a gate planted anywhere in a cited body is caught by
its fingerprint, wheels come from a folder, and a wheel that cannot be had is one line. No network."""

import ast
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from commprof.report.analysis.engine_dispatch import LIBRARIES, TABLES
from commprof.report.analysis.engine_facts import Cite, LibraryFacts

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "check_engine_facts.py"
spec = importlib.util.spec_from_file_location("check_engine_facts", SCRIPT)
tool = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = tool
spec.loader.exec_module(tool)

SOURCE = '''MiB = 1024 * 1024
MAX_SIZES = {"9.0": {2: 64 * MiB, 8: MiB // 2}}
ENABLED = EnvBool(False)
ARCHS = frozenset({"KimiK25ForConditionalGeneration", "DeepseekV3ForCausalLM"})


class Comm:
    _SUPPORTED_WORLD_SIZES = [2, 4, 8]

    def all_reduce(self, x):
        """Route one all-reduce."""
        if self.fi.should_use(x):
            return 1
        if self.ca.should_custom_ar(x):
            return 2
        return self.nccl.all_reduce(x)
'''
# What a new release might change: a gate in the dispatch (the cited text still there), and two values.
PLANTED = (
    SOURCE.replace(
        "        if self.fi.should_use(x):",
        "        if x.dtype == 'fp8':\n            return 3\n        if self.fi.should_use(x):",
    )
    .replace("8: MiB // 2", "8: MiB // 4")
    .replace('"KimiK25ForConditionalGeneration", ', "")
)
# Formatting, comments and docstrings are not the body: the fingerprint stays.
REFORMATTED = SOURCE.replace('"""Route one all-reduce."""', '"""Route it."""  # comment').replace(
    "return 2", "return (2)"
)
F = "fake/comm.py"
FACTS = (
    Cite(F, "all_reduce", r"should_custom_ar", order=(r"fi\.should_use", r"ca\.should_custom_ar")),
    Cite(F, "", constant="MAX_SIZES", value={"9.0": {2: 64 << 20, 8: 1 << 19}}),
    Cite(F, "", constant="ENABLED", value=False),
    Cite(F, "", constant="ARCHS", value=frozenset({"DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"})),
    Cite(F, "Comm", constant="_SUPPORTED_WORLD_SIZES", value=(2, 4, 8)),
    Cite("fake/kernels.cuh", "", r"__global__ void\s+ce_add_kernel\("),
)


def wheel(folder: Path, source: str, version: str = "1.0") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"fake-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(F, source)
        archive.writestr("fake/kernels.cuh", "__global__ void\nce_add_kernel(int* a) {}\n")
    return path


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A library "fake==1.0" whose facts the tool checks, with its own fingerprint file."""
    monkeypatch.setitem(LIBRARIES, ("fake", "1.0"), LibraryFacts("fake", "1.0", FACTS))
    monkeypatch.setattr(tool, "FINGERPRINTS", tmp_path / "fingerprints.json")
    return tmp_path


def test_each_fact_is_held_changed_or_missing(tmp_path):
    files = tool.wheel_files(wheel(tmp_path, SOURCE))
    cases = {
        "held": FACTS[0],
        "kernel": FACTS[5],
        "order": Cite(F, "all_reduce", order=(r"ca\.should_custom_ar", r"fi\.should_use")),
        "text": Cite(F, "all_reduce", r"symm_mem"),
        "file": Cite("fake/other.py", "f"),
        "function": Cite(F, "reduce_scatter"),
        "outside": Cite(F, "Comm", r"MAX_SIZES"),  # a module constant is not in the class
        "value": Cite(F, "", constant="MAX_SIZES", value={"9.0": {2: 64 << 20, 8: 1 << 18}}),
        "unassigned": Cite(F, "Comm", constant="MAX_SIZES", value=None),
    }
    recorded = {tool.fact_key(FACTS[0]): tool.fingerprint(tool.scope_node(ast.parse(SOURCE), "all_reduce"))}
    got = {name: tool.check_cite(files, cite, recorded) for name, cite in cases.items()}
    assert got["held"].state == got["kernel"].state == "held"
    assert got["order"].state == "changed" and "out of order" in got["order"].detail
    assert got["text"].state == got["outside"].state == "changed"
    assert got["file"].state == got["function"].state == "missing"
    assert got["value"].state == "changed" and "the table has" in got["value"].detail  # both values said
    assert got["unassigned"].state == "changed" and "not assigned" in got["unassigned"].detail
    assert all(tool.check_cite(files, cite, recorded).state == "held" for cite in FACTS[1:5])


def test_a_planted_gate_and_planted_values_are_caught(fake, capsys):
    good = wheel(fake / "wheels", SOURCE)
    assert tool.main(["--wheels", str(good.parent), "--record", "fake==1.0"]) == 0
    assert json.loads(tool.FINGERPRINTS.read_text())["fake==1.0"]  # the bodies read, recorded
    assert tool.main(["--wheels", str(good.parent), "fake==1.0"]) == 0
    assert tool.main(["--wheel", str(wheel(fake / "reformatted", REFORMATTED)), "--table", "fake==1.0"]) == 0
    capsys.readouterr()
    assert tool.main(["--wheel", str(wheel(fake / "planted", PLANTED)), "--table", "fake==1.0"]) == 1
    lines = capsys.readouterr().out.splitlines()
    changed = [line for line in lines if line.startswith("changed")]
    assert len(changed) == 3, lines
    assert any("all_reduce" in line and "its body differs" in line for line in changed)  # the cited text held
    assert any("MAX_SIZES is" in line for line in changed)
    assert any("ARCHS is" in line for line in changed)


def test_without_network_a_missing_wheel_is_one_line(fake, monkeypatch, capsys):
    def offline(args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "ERROR: No matching distribution found for fake==1.0\n")

    monkeypatch.setattr(tool.subprocess, "run", offline)
    assert tool.main(["--wheels", str(fake), "fake==1.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("check_engine_facts: error: fake==1.0: pip download failed")
    assert "--wheels" in err
    assert tool.main(["nosuch==1.0"]) == 2 and "no facts for it" in capsys.readouterr().err


def test_every_cited_body_has_a_recorded_fingerprint():
    recorded = json.loads(tool.FINGERPRINTS.read_text())
    for release in tool.every_release():
        facts = tool.release_of(release)
        keys = {tool.fact_key(c) for c in facts.cites if tool.fingerprinted(c)}
        assert keys <= set(recorded.get(facts.key, {})), (release, sorted(keys - set(recorded.get(facts.key, {}))))
    assert {tool.release_of(r).key for r in tool.every_release()} == set(recorded)
    assert len(TABLES) + len(LIBRARIES) == len(recorded)
