"""Names that cannot run code: one allow-list of the variables commprof may set, applied where a sweep file is
read, where a record is read and where an export line is written; sourcing an export runs nothing."""

import json
import re
import subprocess

import pytest

from commprof.env_names import ENGINE_SWITCHES, NCCL_TUNING, TUNING_VARIABLES, export_name_problem, is_export_name
from commprof.errors import UsageError
from commprof.impls.registry import engine_flag_table, engine_switch_table
from commprof.nccl_tuning import ENV_CHECKS
from commprof.records.files import read_records
from commprof.report.analysis.engine_dispatch import TABLES
from commprof.report.exports.export_text import export_line
from commprof.report.views.answers import export_line as page_export_line
from commprof.sweep.planning.config import parse_sweep
from commprof.torch_env import FROZEN_AT_TORCH_LOAD
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
    # a process that listens or dials out, names its peers or fills a disk
    "NCCL_COMM_ID",
    "NCCL_RAS_ADDR",
    "NCCL_SOCKET_IFNAME",
    "NCCL_HOSTID",
    "NCCL_DEBUG",
    "NCCL_IB_HCA",
    "VLLM_HOST_IP",
    "VLLM_PORT",
    "SGLANG_HOST_IP",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "COMMPROF_SGLANG_ARGS",  # the engine's command line engine_flags.txt collects
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
    "NCCL_GRAPH_FILE",
    "CUDA_DEVICE_MAX_CONNECTIONS",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_names_a_shell_or_loader_acts_on_are_refused(name):
    assert export_name_problem(name) and not is_export_name(name)


@pytest.mark.parametrize("name", ALLOWED)
def test_the_variables_commprof_tunes_are_allowed(name):
    assert export_name_problem(name) is None


def test_every_nccl_variable_allowed_has_its_value_checked():
    """The NCCL tuning variables are the ones a sweep checks the values of: one can join neither list alone."""
    assert NCCL_TUNING == set(ENV_CHECKS)


def test_every_engine_switch_commprof_writes_is_allowed():
    """The engine switches and size caps the implementations route with, and those the engine versions' dispatch
    tables read, are on the list (else the answer's own lines would be skipped)."""
    named = set()
    for switches in engine_switch_table().values():
        for switch in switches:
            named |= {part.split("=")[0] for part in switch.switch.split()} | {switch.size_variable} - {None}
    for flags in engine_flag_table().values():
        named |= {f.setting.split("=")[0] for f in flags if re.match(r"[A-Z_]+=", f.setting)}
    for table in TABLES.values():
        named |= {s for s in [*(r.switch for r in table.rules), *(d.switch for d in table.defaults)] if s.isupper()}
    assert named and named <= ENGINE_SWITCHES, named - ENGINE_SWITCHES
    assert {*FROZEN_AT_TORCH_LOAD} <= TUNING_VARIABLES


@pytest.mark.parametrize("name", ["PROMPT_COMMAND", "LD_PRELOAD", "BASH_ENV", "NCCL_NET_PLUGIN", "NCCL_COMM_ID"])
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


def test_engine_flags_words_are_written_as_bash_and_zsh_read_them_literally():
    """engine_flags.txt's flag words and sourced files go through shell_value, as every exported value does: zsh
    expands a bare word starting with "=" (a command's path), which shlex.quote leaves bare."""
    from commprof.report.decision.types import EngineHint
    from commprof.report.exports.engine_hints import script_lines

    hint = EngineHint(engine="SGLang", setting="--some-flag =ls auto", version="SGLang 0.5.23", why="test")
    assert script_lines(hint) == ["COMMPROF_SGLANG_ARGS+=('--some-flag' '=ls' auto)"]
