"""meta.json has one constructor: every writer's meta.json has the common fields, and a bad one is never written."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.records.files import META_FILE
from commprof.records.run_meta import (
    REQUIRED,
    VERSION_KEYS,
    launch_facts,
    meta_view,
    read_meta,
    run_meta,
    updated_meta,
)

FIXTURE = Path(__file__).parent / "fixtures" / "report" / "cpu-smoke-gloo"


def _meta(**fields):
    return run_meta(
        **{**launch_facts(["commprof", "x"], measuring=False), "run_id": "r1", "source": "measured", **fields}
    )


def test_fields_in_declared_order_and_every_version_named():
    meta = _meta(world_size=2, backend="gloo", versions={"python": "3.12", "extra": "1"})
    assert list(meta)[:2] == ["run_id", "created"]
    assert list(meta["versions"]) == [*VERSION_KEYS, "extra"] and meta["versions"]["torch"] is None


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"colour": "red"}, TypeError),  # a key RunMeta does not declare
        ({"world_size": 0}, ValueError),  # a value the reader refuses
        ({"plan": {"tokens": "4"}}, ValueError),
    ],
)
def test_a_meta_the_reader_would_refuse_is_not_built(fields, error):
    with pytest.raises(error):
        _meta(**fields)


def test_a_missing_common_field_or_unknown_source_is_refused():
    facts = launch_facts(["x"], measuring=False)
    del facts["cwd"]
    with pytest.raises(TypeError, match="cwd"):
        run_meta(**facts, run_id="r", source="measured")
    with pytest.raises(ValueError, match="source"):
        _meta(source="guessed")


def test_update_keeps_an_older_writers_keys_and_checks_the_new_one(tmp_path):
    old = read_meta(FIXTURE)  # written before the constructor: no source
    assert "source" not in old
    updated = updated_meta(old, kernel_builds=[{"cache_dir": "/c"}])
    assert updated["kernel_builds"] == [{"cache_dir": "/c"}] and updated["doctor"] == old["doctor"]
    with pytest.raises(TypeError):
        updated_meta(old, colour="red")
    with pytest.raises(ValueError):
        updated_meta(old, kernel_builds="all")


def test_simulate_and_import_write_the_common_fields(tmp_path):
    log = Path(__file__).parent / "fixtures" / "nccl-tests" / "rtx4090x2_x4_kalavai.txt"
    assert main(["import-nccl-tests", str(log), "--out", str(tmp_path / "imp")]) == 0
    sweep = Path(__file__).parents[1] / "sweeps" / "cpu-smoke.toml"
    assert main(["simulate", "--topology", "pcie-4gpu", "--sweep", str(sweep), "--out", str(tmp_path / "sim")]) == 0
    metas = {}
    for folder in ("imp", "sim"):
        (run_dir,) = (tmp_path / folder).iterdir()
        metas[folder] = json.loads((run_dir / META_FILE).read_text())
        assert all(name in metas[folder] for name in REQUIRED) and read_meta(run_dir) == metas[folder]
    assert (metas["imp"]["source"], metas["sim"]["source"]) == ("nccl-tests", "simulated")
    assert set(metas["imp"]["versions"]) == set(VERSION_KEYS) == set(metas["sim"]["versions"])


def test_view_reads_every_field_with_none_for_what_the_file_does_not_say():
    meta = _meta(world_size=2, gpus=[{"index": 0, "name": "B"}, {"index": 1, "name": "A"}], versions={"nccl": "2.27"})
    view = meta_view(meta)
    assert (view.run_id, view.world_size, view.gpu_names, view.nccl) == ("r1", 2, ["A", "B"], "2.27")
    assert view.named_versions == {k: v for k, v in meta["versions"].items() if v} and view.floor is None
    empty = meta_view({})
    assert (empty.gpu_list, empty.probed_gpus, empty.failed_checks, empty.imported_files) == ([], [], [], [])
    assert meta_view({"topology": {"gpus": 8}}).probed_gpus == []  # a simulation's preset counts its GPUs


def _meta_receiver(node: ast.expr) -> bool:
    """The expression is meta.json as a dict: `meta`, `x.meta`, `read_meta(...)` or `(meta or {})`."""
    if isinstance(node, ast.BoolOp):
        return _meta_receiver(node.values[0])
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id in ("read_meta", "_run_meta")
    return (isinstance(node, ast.Name) and node.id == "meta") or (
        isinstance(node, ast.Attribute) and node.attr == "meta"
    )


def _string_key_reads(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            receiver, key = node.value, node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            receiver, key = (
                node.func.value,
                node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None,
            )
        else:
            continue
        if isinstance(key, str) and _meta_receiver(receiver):
            lines.append(node.lineno)
    return lines


def test_only_its_module_reads_meta_json_by_string_key():
    package = Path(__file__).parents[1] / "commprof"
    found = [
        f"{path.relative_to(package)}:{line}"
        for path in sorted(package.rglob("*.py"))
        if path != package / "records" / "run_meta.py"
        for line in _string_key_reads(ast.parse(path.read_text()))
    ]
    assert found == [], "read meta.json through records.run_meta.meta_view's attributes"
    assert _string_key_reads(ast.parse("a = run.meta.get('x'); b = (meta or {})['y']; c = read_meta(d).get('z')")) == [
        1,
        1,
        1,
    ]
