"""A bundle's errors name the flag that gave it: `--from-bundle` for simulate and nccl-graph, `--from` for doctor."""

from __future__ import annotations

from pathlib import Path

from commprof.cli import main


def test_bundle_errors_name_the_flag_given(tmp_path, capsys):
    missing, empty = tmp_path / "nope", tmp_path / "empty"
    empty.mkdir()
    sweep = str(Path(__file__).parent.parent / "sweeps" / "pcie8-verify.toml")
    assert main(["simulate", "--from-bundle", str(missing), "--sweep", sweep, "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip() == f"commprof: error: --from-bundle {missing}: not a directory"
    assert main(["nccl-graph", "--from-bundle", str(empty)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"commprof: error: --from-bundle {empty}: no bundle file found")
    assert main(["doctor", "--from", str(missing)]) == 2
    assert f"--from {missing}: not a directory" in capsys.readouterr().err
