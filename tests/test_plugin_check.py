"""A plug-in whose import exits, aborts or hangs is refused in one line; the controller lives on."""

import sys

import pytest

from commprof.errors import UsageError
from commprof.impls.plugin_check import check_plugin_import

PLUGIN = "tests.plugins.exits_at_import:Anything"
pytestmark = pytest.mark.processes  # each check imports the plug-in in a forked child


@pytest.mark.parametrize(
    "how,match",
    [
        ("exit", r"importing it called sys.exit\(3\)"),
        ("abort", "importing it killed it with signal SIGABRT"),
        ("_exit", r"importing it ended the process \(exit code 0\)"),
    ],
)
def test_an_import_that_ends_the_process_is_a_usage_error(monkeypatch, how, match):
    monkeypatch.setenv("COMMPROF_TEST_EXIT", how)
    with pytest.raises(UsageError, match=f"implementation '{PLUGIN}': {match}"):
        check_plugin_import(PLUGIN)
    assert "tests.plugins.exits_at_import" not in sys.modules  # only the child imported it


def test_an_import_that_hangs_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("COMMPROF_TEST_EXIT", "hang")
    with pytest.raises(UsageError, match="did not finish within 1 s"):
        check_plugin_import(PLUGIN, limit_s=1)


def test_a_plugin_that_imports_cleanly_passes_and_interface_problems_still_show():
    check_plugin_import("tests.plugins.faulty:Hang")
    with pytest.raises(UsageError, match="is not a subclass"):
        check_plugin_import("tests.plugins.faulty:NotAnImpl")


@pytest.mark.parametrize("how", ["exit", "abort"])
def test_the_sweep_says_so_in_one_line(how, monkeypatch, capsys):
    """In-process, as `python -m commprof.allreduce_sweep --impl PLUGIN --dry-run` runs it (a world of one)."""
    from commprof.allreduce_sweep import main as sweep_main

    monkeypatch.setenv("COMMPROF_TEST_EXIT", how)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)  # restored afterwards: the command sets its own
    assert sweep_main(["--impl", PLUGIN, "--dry-run", "--no-doctor"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "importing it" in err, err
    assert PLUGIN in err
