"""meta.json has one typed structure, one reader and one constructor: every writer's meta.json has the common
fields, a bad one is never written, every section is a typed structure read by attribute, and no module outside
the reader reads a section by key or describes the file a second time."""

from __future__ import annotations

import ast
import functools
import json
import types
import typing
from pathlib import Path

import msgspec
import pytest

from commprof.cli import main
from commprof.records.files import META_FILE
from commprof.records.meta_sections import MetaCalibration, MetaSection
from commprof.records.meta_topology import BoxFact
from commprof.records.run_meta import (
    REQUIRED,
    VERSION_KEYS,
    RunMeta,
    launch_facts,
    meta_data,
    parse_meta,
    read_meta,
    run_meta,
    updated_meta,
)

PACKAGE = Path(__file__).parents[1] / "commprof"
FIXTURE = Path(__file__).parent / "fixtures" / "report" / "cpu-smoke-gloo"
# The reader: the structure's modules, the one place a section's own keys are read.
SCHEMA = {PACKAGE / "records" / name for name in ("run_meta.py", "meta_sections.py", "meta_topology.py")}
# Fields recorded as their owner writes them, whose keys meta.json does not fix: calibration.toml's [fit] (typed by
# the cost model's calibration_file.FitTable), and the value of a bundle's fact (a string, number or flag).
OPEN_FIELDS = {(MetaCalibration, "fit"), (BoxFact, "value")}


def _meta(**fields):
    return run_meta(
        **{**launch_facts(["commprof", "x"], measuring=False), "run_id": "r1", "source": "measured", **fields}
    )


def test_fields_in_declared_order_and_every_version_named():
    meta = _meta(world_size=2, backend="gloo", versions={"python": "3.12", "extra": "1"})
    assert list(meta_data(meta))[:2] == ["run_id", "created"]
    assert list(meta.versions) == [*VERSION_KEYS, "extra"] and meta.versions["torch"] is None


@pytest.mark.parametrize(
    "fields, error, named",
    [
        ({"colour": "red"}, TypeError, "colour"),  # a field RunMeta does not declare
        ({"plan": {"model": "m", "colour": "red"}}, TypeError, "plan.colour"),  # a key its section does not
        ({"topology": {"gpus": [{"index": 0, "pcie": {"lanes": 16}}]}}, TypeError, "topology.gpus[0].pcie.lanes"),
        ({"world_size": 0}, ValueError, "world_size"),  # a value the reader refuses
        ({"plan": {"tokens": "4"}}, ValueError, "plan"),
    ],
)
def test_a_meta_the_reader_would_refuse_or_not_read_back_is_not_built(fields, error, named):
    with pytest.raises(error, match=named.replace("[", r"\[").replace("]", r"\]")):
        _meta(**fields)


def test_a_missing_common_field_or_unknown_source_is_refused():
    facts = launch_facts(["x"], measuring=False)
    del facts["cwd"]
    with pytest.raises(TypeError, match="cwd"):
        run_meta(**facts, run_id="r", source="measured")
    with pytest.raises(ValueError, match="source"):
        _meta(source="guessed")


def test_update_keeps_an_older_writers_fields_and_checks_the_new_one():
    old = read_meta(FIXTURE)  # written before the constructor: no source
    assert old.source is None
    updated = updated_meta(old, kernel_builds=[{"cache_dir": "/c"}])
    assert updated.kernel_builds[0].cache_dir == "/c" and updated.doctor == old.doctor and updated.plan == old.plan
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
        assert all(name in metas[folder] for name in REQUIRED) and meta_data(read_meta(run_dir)) == metas[folder]
    assert (metas["imp"]["source"], metas["sim"]["source"]) == ("nccl-tests", "simulated")
    assert set(metas["imp"]["versions"]) == set(VERSION_KEYS) == set(metas["sim"]["versions"])


def test_every_field_reads_as_none_where_the_file_does_not_say_it():
    meta = _meta(world_size=2, gpus=[{"index": 0, "name": "B"}, {"index": 1, "name": "A"}], versions={"nccl": "2.27"})
    assert (meta.run_id, meta.world_size, meta.gpu_names, meta.nccl) == ("r1", 2, ["A", "B"], "2.27")
    assert meta.named_versions == {k: v for k, v in meta.versions.items() if v} and meta.floor is None
    empty = RunMeta()
    assert (empty.probed_gpus, empty.failed_checks, empty.imported_files, empty.imported_runs) == ([], [], [], {})
    assert parse_meta({"topology": {"gpus": 8}}).probed_gpus == []  # a simulation's preset counts its GPUs


# ------------------------------------------------------------------- one typed structure, read by attribute only


def _bare(hint):
    """The annotation without Annotated and None: a type, or a union of several."""
    if typing.get_origin(hint) is typing.Annotated:
        return _bare(hint.__origin__)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        options = [_bare(option) for option in typing.get_args(hint) if option is not type(None)]
        return options[0] if len(options) == 1 else options
    return hint


def _sections(hint) -> list[type]:
    """The structures (sections) `hint` is, holds or is a union of."""
    hint = _bare(hint)
    if isinstance(hint, list):
        return [s for option in hint for s in _sections(option)]
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return [hint]
    return [s for arg in typing.get_args(hint) for s in _sections(arg)]


def _open_fields(struct: type, seen: set) -> list[str]:
    """Fields under `struct` typed Any (or holding Any) that OPEN_FIELDS does not name, "Struct.field"."""
    if struct in seen:
        return []
    seen.add(struct)
    found = []
    for name, hint in typing.get_type_hints(struct, include_extras=True).items():
        if (struct, name) not in OPEN_FIELDS and "typing.Any" in repr(hint):
            found.append(f"{struct.__name__}.{name}")
        found += [f for section in _sections(hint) for f in _open_fields(section, seen)]
    return found


def test_every_section_is_a_typed_structure():
    """No section is a dict of anything: each is a msgspec structure (which has no .get), every field typed."""
    assert _open_fields(RunMeta, set()) == []
    sections = {s for name, hint in typing.get_type_hints(RunMeta).items() for s in _sections(hint)}
    assert all(issubclass(s, MetaSection) for s in sections) and len(sections) >= 12


@functools.cache
def _hints(struct: type) -> dict[str, object]:
    return typing.get_type_hints(struct, include_extras=True)


@functools.cache
def _modules() -> dict[Path, ast.Module]:
    """Every module of the package but the reader's, parsed once for the tests below."""
    return {path: ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py")) if path not in SCHEMA}


def _resolve(node: ast.expr, names: dict[str, object]) -> object | None:
    """The schema's type of the expression (RunMeta, a section, a list or map of them), or None: not meta.json."""
    if isinstance(node, ast.BoolOp):
        return _resolve(node.values[0], names)
    if isinstance(node, ast.IfExp):
        return _resolve(node.body, names) or _resolve(node.orelse, names)
    if isinstance(node, ast.Call):
        called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        return RunMeta if called in ("read_meta", "parse_meta", "run_meta", "updated_meta", "_run_meta") else None
    if isinstance(node, ast.Name):
        return names.get(node.id, RunMeta if node.id == "meta" else None)
    if isinstance(node, ast.Subscript):
        held = _bare(_resolve(node.value, names))
        return typing.get_args(held)[-1] if typing.get_origin(held) in (list, dict) else None
    if isinstance(node, ast.Attribute):
        owner = _bare(_resolve(node.value, names))
        if isinstance(owner, type) and issubclass(owner, msgspec.Struct):
            return _hints(owner).get(node.attr)
        return RunMeta if node.attr == "meta" else None
    return None


def _is_section(hint: object) -> bool:
    bare = _bare(hint)
    options = bare if isinstance(bare, list) else [bare]
    return any(isinstance(o, type) and issubclass(o, msgspec.Struct) for o in options)


def _scopes(tree: ast.AST) -> list[ast.AST]:
    """The module's top-level functions and methods (each with the functions inside it), and its other
    statements: each node in one scope, so a name bound in one function is not taken for another's."""
    body = getattr(tree, "body", [tree])
    methods = [s for c in body if isinstance(c, ast.ClassDef) for s in c.body]
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    defs = [s for s in [*body, *methods] if isinstance(s, functions)]
    rest = [s for s in body if not isinstance(s, (*functions, ast.ClassDef))]
    rest += [s for s in methods if not isinstance(s, functions)]
    return [*defs, ast.Module(body=rest, type_ignores=[])]


def _key_reads(tree: ast.AST) -> list[int]:
    """Lines that read a meta.json section by key (`.get`, `["key"]`) or ask whether it is a dict, following names
    bound to sections (`topology = run.meta.topology`, `for gpu in meta.gpus or []`)."""
    lines = []
    for scope in _scopes(tree):
        names: dict[str, object] = {}
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if (bound := _resolve(node.value, names)) is not None:
                    names[node.targets[0].id] = bound
            elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
                held = _bare(_resolve(node.iter, names))
                if typing.get_origin(held) is list:
                    names[node.target.id] = typing.get_args(held)[0]
        for node in ast.walk(scope):
            receiver = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                receiver = node.func.value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                receiver = node.value if isinstance(node.slice.value, str) else None
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" and len(node.args) == 2:
                receiver = node.args[0] if getattr(node.args[1], "id", "") == "dict" else None
            if receiver is not None and _is_section(_resolve(receiver, names)):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_no_module_reads_a_meta_json_section_by_key_outside_the_reader():
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path, tree in _modules().items()
        if "meta" in path.read_text()  # every way to meta.json is named so: meta, run.meta, read_meta(...)
        for line in _key_reads(tree)
    ]
    assert found == [], "read meta.json's sections by attribute (records.run_meta.RunMeta)"


@pytest.mark.parametrize(
    "source",
    [
        "a = run.meta.topology.get('gpus')",
        "x = read_meta(d).plan['tp']",
        "def f(run):\n    topology = run.meta.topology or {}\n    return topology.get('host')",
        "def f(meta):\n    for gpu in meta.gpus or []:\n        gpu.get('name')",
        "ok = isinstance(meta.calibration, dict)",
        "first = meta.get('run_id')",
        "def f(meta):\n    floor = meta.floor if meta is not None else None\n    return floor['why']",
    ],
)
def test_key_reads_finds_a_planted_one(source):
    assert _key_reads(ast.parse(source)) == [len(source.splitlines())]


def test_key_reads_leaves_maps_and_other_dicts_alone():
    source = "a = meta.versions.get('nccl'); b = (meta.env or {}).get('X'); c = record.get('nccl'); d = meta.doctor"
    assert _key_reads(ast.parse(source)) == []


def _described_fields(tree: ast.AST) -> list[tuple[str, set[str]]]:
    """Each class of a module and the field names it declares (annotated names in its body)."""
    return [
        (node.name, {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)})
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    ]


def test_one_structure_describes_meta_json():
    """No other class anywhere names a handful of meta.json's own fields (a second typed view of the file), and no
    module but the reader opens the file."""
    common = {"run_id", "source", "backend", "env", "gpus", "world_size", "shared_gpus", "simulated"}
    own = set(RunMeta.__struct_fields__) - common  # created, command, cwd, hostname, versions, doctor, ...
    seconds = [
        f"{path.relative_to(PACKAGE)}:{name}"
        for path, tree in _modules().items()
        for name, fields in _described_fields(tree)
        if len(fields & own) >= 5
    ]
    schema = dict(_described_fields(ast.parse((PACKAGE / "records" / "run_meta.py").read_text())))
    assert seconds == [] and len(schema["RunMeta"] & own) >= 5  # the one that does is found
    readers = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path, tree in _modules().items()
        if "META_FILE" in path.read_text()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) in ("read_json", "read_text", "loads", "load")
        and any(isinstance(name, ast.Name) and name.id == "META_FILE" for name in ast.walk(node))
    ]
    assert readers == [], "read meta.json through records.run_meta.read_meta"
