"""The sweep files and topology presets travel with the package (commprof/shipped) and are found by name from any
folder, as a `pip install`ed commprof finds them."""

from pathlib import Path

from click.testing import CliRunner

from commprof.cli import cli
from commprof.shipped_files import SHIPPED, sweep_file, sweep_names

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_ships_the_checkouts_sweeps_and_presets():
    assert sweep_names() == sorted(p.stem for p in (ROOT / "sweeps").glob("*.toml"))
    shipped = sorted(p.name for p in (SHIPPED / "topologies").glob("*.toml"))
    assert shipped == sorted(p.name for p in (ROOT / "sweeps" / "topologies").glob("*.toml"))
    package_data = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    assert '"**/*.toml"' in package_data.splitlines()[1]  # the wheel carries commprof/shipped/**.toml


def test_a_sweep_is_named_or_a_path():
    assert sweep_file("pcie8-verify") == str(SHIPPED / "pcie8-verify.toml")
    assert sweep_file("pcie8-verify.toml") == str(SHIPPED / "pcie8-verify.toml")
    assert sweep_file("no-such-sweep") == "no-such-sweep"  # the loader says it is not found
    assert sweep_file(None) is None


def test_simulate_and_report_from_an_empty_folder(pcie8_simulated):
    """conftest's pcie8_simulated runs `simulate --topology pcie-gen5-switch-p2p --sweep pcie8-verify` and `report`
    from an empty folder."""
    (run,) = (pcie8_simulated.parent / "sim").iterdir()
    assert run.name.endswith("-pcie8-verify-sim-pcie-gen5-switch-p2p") and (pcie8_simulated / "index.html").is_file()


def test_help_lists_what_is_shipped():
    simulate = CliRunner().invoke(cli, ["simulate", "--help"]).output
    assert "pcie-gen5-switch-p2p" in simulate and "pcie8-verify" in simulate
