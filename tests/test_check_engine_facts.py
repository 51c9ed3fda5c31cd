"""The maintainer's fact check (tools/check_engine_facts.py) on a tiny fake wheel: each fact prints held, changed or
missing for the right reason. No download."""

import importlib.util
import sys
import zipfile
from pathlib import Path

from commprof.report.analysis.engine_facts import Cite
from commprof.report.analysis.engine_vllm import CUSTOM_ALL_REDUCE_MAX_SIZES

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "check_engine_facts.py"
spec = importlib.util.spec_from_file_location("check_engine_facts", SCRIPT)
tool = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = tool
spec.loader.exec_module(tool)

SOURCE = """MiB = 1024 * 1024
CUSTOM_ALL_REDUCE_MAX_SIZES = {"9.0": {2: 64 * MiB, 8: MiB // 2}}


class Comm:
    def all_reduce(self, x):
        if self.fi.should_use(x):
            return 1
        if self.ca.should_custom_ar(x):
            return 2
        return self.nccl.all_reduce(x)
"""


def fake_wheel(tmp_path):
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake/comm.py", SOURCE)
        archive.writestr("fake/kernels.cuh", "__global__ void ce_add_kernel(int* a) {}\n")
    return tool.wheel_files(wheel)


def test_each_fact_is_held_changed_or_missing(tmp_path):
    files = fake_wheel(tmp_path)
    f = "fake/comm.py"
    verdicts = {
        "held": Cite(f, "all_reduce", r"should_custom_ar", order=(r"fi\.should_use", r"ca\.should_custom_ar")),
        "kernel": Cite("fake/kernels.cuh", "", r"__global__ void ce_add_kernel\("),
        "order": Cite(f, "all_reduce", order=(r"ca\.should_custom_ar", r"fi\.should_use")),
        "text": Cite(f, "all_reduce", r"symm_mem"),
        "file": Cite("fake/other.py", "f"),
        "function": Cite(f, "reduce_scatter"),
        "outside": Cite(f, "Comm", r"CUSTOM_ALL_REDUCE_MAX_SIZES"),  # a module constant is not in the class
        "constant": Cite(f, "", r"\bCUSTOM_ALL_REDUCE_MAX_SIZES\b\s*(:[^=]*)?="),
    }
    got = {name: tool.check_cite(files, cite) for name, cite in verdicts.items()}
    assert got["held"].state == got["kernel"].state == "held"
    assert got["order"].state == "changed" and "out of order" in got["order"].detail
    assert got["text"].state == got["outside"].state == "changed"
    assert got["file"].state == got["function"].state == "missing"
    # The wheel's constant (8: 512 KiB) against the table commprof holds (8: 256 KiB): changed, with both values.
    assert got["constant"].state == "changed" and str(CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"][8]) in got["constant"].detail
    assert got["held"].line().startswith("held")


def test_every_table_and_library_has_facts_the_script_can_read():
    for release in ("sglang==0.5.23", "vllm==0.33.0", "vllm==0.34.0", "flashinfer-python==0.7.4"):
        cites = tool.facts_for(release)
        assert cites and all(isinstance(c, Cite) and c.file for c in cites)
