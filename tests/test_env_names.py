"""Names that cannot run code: one allow-list of the variables commprof may set, applied where a sweep file is
read, where a record is read and where an export line is written; sourcing an export runs nothing."""

import json
import subprocess

import pytest

from commprof.env_names import export_name_problem, is_export_name
from commprof.errors import UsageError
from commprof.records.files import read_records
from commprof.report.exports.export_text import export_line
from commprof.report.views.answers import export_line as page_export_line
from commprof.sweep.planning.config import parse_sweep
from tests.report_fixtures import make_records

# Each runs code when a shell sources `export NAME=...` (or the next command starts), or loads a library.
HOSTILE = [
    "PROMPT_COMMAND",
    "PS1",
    "PS4",
    "BASH_ENV",
    "ENV",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PATH",
    "IFS",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "SHELLOPTS",
    "CUDA_INJECTION64_PATH",
    "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN",
    "VLLM_PLUGINS",
    "A\nB",
    "1X",
    "",
]
ALLOWED = [
    "NCCL_ALGO",
    "NCCL_P2P_LEVEL",
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
    "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC",
    "COMMPROF_TEST_KNOB",
    "OMP_NUM_THREADS",
    "TORCH_NCCL_AVOID_RECORD_STREAMS",
    "CUDA_DEVICE_MAX_CONNECTIONS",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_names_a_shell_or_loader_acts_on_are_refused(name):
    assert export_name_problem(name) and not is_export_name(name)


@pytest.mark.parametrize("name", ALLOWED)
def test_the_variables_commprof_tunes_are_allowed(name):
    assert export_name_problem(name) is None


@pytest.mark.parametrize("name", ["PROMPT_COMMAND", "LD_PRELOAD", "BASH_ENV", "NCCL_NET_PLUGIN"])
@pytest.mark.parametrize("where", ["[axes.env]\n{name} = ['x']\n", "[[points]]\nenv = {{ {name} = 'x' }}\n"])
def test_a_sweep_file_naming_one_is_refused_before_anything_runs(name, where):
    with pytest.raises(UsageError) as refused:
        parse_sweep('name = "x"\n' + where.format(name=name), "evil.toml")
    assert "evil.toml: " in str(refused.value) and name in str(refused.value)


def test_a_record_naming_one_is_refused_naming_file_and_line(tmp_path):
    records = make_records("run")
    records[1]["point"] = {**records[1]["point"], "env": {"PROMPT_COMMAND": "touch PWNED"}}
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(UsageError, match=r"results.jsonl:2: not a usable record: point.env: PROMPT_COMMAND is not"):
        read_records(path)


@pytest.mark.processes
def test_sourcing_every_export_line_in_a_clean_shell_runs_nothing(tmp_path):
    pwned = tmp_path / "PWNED"
    lines = [export_line(name, f"touch {pwned}") for name in HOSTILE]
    lines += [export_line("NCCL_ALGO", f"$(touch {pwned})`touch {pwned}`")]
    lines += [page_export_line({"PROMPT_COMMAND": f"touch {pwned}", "NCCL_PROTO": "LL"})]
    script = tmp_path / "recommend.env"
    script.write_text("\n".join(lines) + "\n")
    shell = subprocess.run(
        ["bash", "--norc", "--noprofile", "-i", "-c", f'source {script}; echo "$NCCL_ALGO"; true'],
        capture_output=True,
        text=True,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        timeout=30,
    )
    assert shell.returncode == 0, shell.stderr
    assert not pwned.exists()
    assert f"$(touch {pwned})" in shell.stdout  # the allowed one is set, quoted, not run
    assert page_export_line({"PROMPT_COMMAND": "x", "NCCL_PROTO": "LL"}) == "export NCCL_PROTO=LL"
