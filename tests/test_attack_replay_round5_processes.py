"""The fifth attack run's cases whose process is under test: the exports a report writes are sourced in a clean bash
and zsh (`env -i`) and what they set is read back, and a run is read under the address-space limit of a shared login
node (`ulimit -v 3000000`), where every results.jsonl read reserved its 4 GiB limit and died."""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys

import pytest

from tests.attack_replay import REPO
from tests.report_fixtures import make_meta, make_records, write_run

pytestmark = pytest.mark.processes

# Values a shell would act on unquoted: zsh looks `=name` up as a command (and fails the whole file when none is
# found), and expands `~user` and `=name` after a ':' in an assignment's value; every shell expands $( ).
VALUES = {"COMMPROF_HCA": "=mlx5_0", "NCCL_BUFFSIZE": "a:=ls:~root", "COMMPROF_RUN": "$(touch PWNED)`touch PWNED`"}
SHELLS = [
    pytest.param(["bash", "--norc", "--noprofile", "-c"], id="bash"),
    pytest.param(
        ["zsh", "-f", "-c"],
        id="zsh",
        marks=pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)"),
    ),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The report of a crafted NCCL run whose winning points set VALUES and the variables NCCL_COMM_ID and
    NCCL_RAS_ADDR name the export refuses (the run itself is refused with them, so they are given to the export
    functions directly below)."""
    from commprof.cli import main

    root = tmp_path_factory.mktemp("exported")
    records = make_records("crafted")
    for record in records:
        if record["kind"] == "step" and record["status"] == "ok" and record.get("nccl"):
            record["point"]["env"] = {**record["point"]["env"], **VALUES}
    run = write_run(root / "runs", "crafted", records=records, meta=make_meta("crafted"))
    assert main(["report", str(run), "--out", str(root / "out")]) == 0
    return root / "out"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", ["recommend.env", "engine_flags.txt", "routing.txt"])
def test_each_export_sourced_in_a_clean_shell_sets_the_values_as_written(exported, tmp_path, shell, name):
    names = [*VALUES, "NCCL_ALGO", "NCCL_PROTO"]
    show = "; ".join(f'printf "%s=%s\\n" {n} "${{{n}-unset}}"' for n in names)
    done = subprocess.run(
        ["env", "-i", f"HOME={tmp_path}", "PATH=/usr/bin:/bin", *shell, f"source {exported / name}; {show}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert dict(line.split("=", 1) for line in done.stdout.splitlines()) == {
        **VALUES,
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "LL",
    }
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_variable_that_listens_or_dials_out_is_never_exported_live(tmp_path, shell):
    """The export functions themselves, handed NCCL_COMM_ID, NCCL_RAS_ADDR, NCCL_SOCKET_IFNAME and NCCL_DEBUG:
    each line is a comment, so a shell sourcing them sets none."""
    from commprof.report.exports.export_text import export_line
    from commprof.report.views.answers import export_line as page_line

    refused = {
        "NCCL_COMM_ID": "203.0.113.5:4444",
        "NCCL_RAS_ADDR": "0.0.0.0:28028",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "TRACE",
    }
    script = tmp_path / "recommend.env"
    script.write_text("\n".join(export_line(k, v) for k, v in refused.items()) + "\n")
    assert page_line(refused) == "export "
    show = "; ".join(f'printf "%s=%s\\n" {n} "${{{n}-unset}}"' for n in refused)
    done = subprocess.run(
        ["env", "-i", "PATH=/usr/bin:/bin", *shell, f"source {script}; {show}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0 and done.stdout.split() == [f"{n}=unset" for n in refused], done.stderr


def test_a_run_is_read_under_the_address_space_limit_of_a_login_node(tmp_path):
    """`commprof calibrate` of an imported run under RLIMIT_AS = 3,000,000 KiB (`ulimit -v 3000000`): every
    results.jsonl read reserved 4 GiB up front, and ended in MemoryError."""
    from commprof.cli import main

    log = REPO / "tests" / "fixtures" / "nccl-tests" / "h100x4_all_reduce_and_broadcast_mpi.txt"
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "imported")]) == 0
    (run,) = (tmp_path / "imported").iterdir()
    limit = 3_000_000 * 1024

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "commprof", "calibrate", str(run), "--out", str(tmp_path / "c.toml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=limited,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "c.toml").is_file()
