"""Maintainer's check that commprof's engine facts still hold in a released wheel (not part of the test suite: it
reads wheels, downloading those it is not given).

    python tools/check_engine_facts.py [sglang==0.5.23 vllm==0.34 flashinfer-python==0.7.4 ...]
    python tools/check_engine_facts.py --wheels DIR ...          # wheels from a folder (no network needed)
    python tools/check_engine_facts.py --wheel path/to/some.whl --table vllm==0.34
    python tools/check_engine_facts.py --wheels DIR --record ... # after re-reading: record the bodies read

Every fact a table cites (commprof.report.analysis.engine_dispatch.TABLES and LIBRARIES; with no release named,
all of them) is looked up in its release's wheel: the file; the function or class holding it; the text that states
it; the order of calls in a dispatch function; a constant's value (its literal evaluated and compared with the
table's). And the whole body of every cited Python function or class is fingerprinted (a hash of its AST without
docstrings, so formatting and comments do not count) against the fingerprint recorded when it was last read
(tools/engine_fingerprints.json): a gate added anywhere in it shows as "changed" and asks for a re-read. Each fact
prints held, changed or missing; the exit status is 1 when any is not held, 2 when a wheel cannot be had.
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import operator
import re
import subprocess
import sys
import tempfile
import textwrap
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commprof.report.analysis.engine_dispatch import LIBRARIES, TABLES, parse_engine  # noqa: E402
from commprof.report.analysis.engine_facts import Cite  # noqa: E402

FINGERPRINTS = Path(__file__).with_name("engine_fingerprints.json")
_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
_OPS = {
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.LShift: operator.lshift,
    ast.Pow: operator.pow,
}
_WRAPPERS = ("EnvInt", "EnvBool", "EnvFloat", "EnvStr")  # SGLang's environ.py: the default is the first argument
# Bounds on what a wheel may hand the check: no cited constant is beyond 2^64, nested past a few levels or a range of
# more than 2^16 items (1 << (1 << 36) would take 8 GiB to hold, a 40,000-term product recurses past Python's
# stack), and no source file a fact cites is near 64 MiB (a 3 GiB one would be read whole).
MOST = 1 << 64
DEPTH = 64
ITEMS = 1 << 16
MEMBER_BYTES = 64 << 20
# What reading a hostile source may raise besides a clean refusal: each becomes a "changed" verdict, never a trace.
UNREADABLE = (ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError, MemoryError, SyntaxError)


class ToolError(Exception):
    """A wheel that cannot be had or read: said on one line, exit 2."""


@dataclass(frozen=True)
class Verdict:
    state: str  # "held", "changed" or "missing"
    fact: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.state:8} {self.fact}" + (f"  ({self.detail})" if self.detail else "")


# ---------------------------------------------------------------------------------------------- reading a source


def literal(node: ast.AST, names: dict | None = None, depth: int = 0):
    """A constant's value: literals, names already known (units, the module's own constants), arithmetic over
    numbers, containers, set / frozenset / tuple / list / range calls and SGLang's EnvInt(x)-style wrappers;
    ValueError otherwise, and for a number beyond MOST, a range past ITEMS or nesting past DEPTH."""
    if depth > DEPTH:
        raise ValueError(f"nested past {DEPTH} levels")
    names = {**_UNITS, **(names or {})} if depth == 0 else names

    def inner(child: ast.AST):
        return literal(child, names, depth + 1)

    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_number(inner(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _arithmetic(node.op, _number(inner(node.left)), _number(inner(node.right)))
    if isinstance(node, ast.Dict):
        return {inner(k): inner(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(inner(e) for e in node.elts)
    if isinstance(node, ast.Set):
        return frozenset(inner(e) for e in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [inner(a) for a in node.args]
        if node.func.id in _WRAPPERS and len(args) == 1:
            return args[0]
        if node.func.id in ("set", "frozenset") and len(args) <= 1:
            return frozenset(*args)
        if node.func.id in ("tuple", "list") and len(args) <= 1:
            return tuple(*args)
        if node.func.id == "range" and all(isinstance(a, int) for a in args):
            items = range(*args)
            if len(items) > ITEMS:
                raise ValueError(f"a range of more than {ITEMS} items")
            return tuple(items)
    raise ValueError(f"not a literal: {ast.dump(node)[:60]}")


def _number(value):
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"arithmetic on {type(value).__name__}")
    return value


def _arithmetic(op: ast.operator, left, right):
    """One bounded operation: no shift or power past 64, no result past MOST."""
    if isinstance(op, (ast.LShift, ast.Pow)) and not (isinstance(right, int) and 0 <= right <= 64):
        raise ValueError(f"a {type(op).__name__} by {str(right)[:40]}")
    if isinstance(op, ast.Pow) and abs(left) > MOST:
        raise ValueError(f"a power of a number beyond {MOST}")
    value = _OPS[type(op)](left, right)
    if abs(value) > MOST:
        raise ValueError(f"a number beyond {MOST}")
    return value


def _assignments(scope: ast.AST) -> list[tuple[int, str, ast.AST | None]]:
    """(line, name, value) of every plain or annotated assignment to a name inside `scope`, in source order."""
    found = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            found += [(node.lineno, t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append((node.lineno, node.target.id, node.value))
    return sorted(found, key=lambda item: item[0])


def module_names(tree: ast.Module) -> dict:
    """The module's top-level constants that evaluate as literals (MiB = 1024 * 1024, ...), for the others."""
    names: dict = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    try:
                        names[target.id] = literal(node.value, names)
                    except UNREADABLE:
                        pass
    return names


def scope_node(tree: ast.Module, function: str) -> ast.AST | None:
    """The first def or class named `function` in source order (nested ones too); the module for ""."""
    if not function:
        return tree
    matches = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == function
    ]
    return min(matches, key=lambda n: (n.lineno, n.col_offset), default=None)


def fingerprint(node: ast.AST) -> str:
    """A def's or class's whole body as a hash of its AST, docstrings left out: formatting and comments do not
    change it, any statement does."""
    node = copy.deepcopy(node)
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if (
            isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            inner.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(node, include_attributes=False).encode()).hexdigest()[:16]


def scope_text(source: str, function: str) -> str | None:
    """Non-Python files: the text of the (first) function named `function`, by indentation; the whole file for
    ""."""
    if not function:
        return source
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if re.search(rf"\b{re.escape(function)}\s*\(", line)), None)
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith(("}", ")")):
            break
        end += 1
    return "\n".join(lines[start : end + 1])


def _normal(value):
    """Lists as tuples, sets as frozensets: what a literal and our table compare as."""
    if isinstance(value, dict):
        return {_normal(k): _normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_normal(v) for v in value)
    return value


def _shown(value) -> str:
    if isinstance(value, frozenset):
        value = sorted(value, key=str)
    return str(value) if len(str(value)) <= 160 else str(value)[:157] + "..."


# ---------------------------------------------------------------------------------------------- one fact


def fact_key(cite: Cite) -> str:
    """The name a cited body's fingerprint is recorded under."""
    return f"{cite.file}::{cite.function}"


def fingerprinted(cite: Cite) -> bool:
    """Whether the check fingerprints this cite's scope: a Python function or class whose logic the fact is (a
    constant's value is compared instead)."""
    return bool(cite.function) and cite.file.endswith(".py") and not cite.constant


def describe(cite: Cite) -> str:
    return (
        str(cite)
        + (f" /{cite.pattern}/" if cite.pattern else "")
        + (f" order {list(cite.order)}" if cite.order else "")
        + (f" {cite.constant} == {_shown(cite.value)}" if cite.constant else "")
    )


def check_cite(files: dict[str, str], cite: Cite, recorded: dict[str, str] | None = None) -> Verdict:
    """One cited fact against the wheel's files (path -> text) and the fingerprints recorded for its release."""
    fact = describe(cite)
    source = files.get(cite.file)
    if source is None:
        return Verdict("missing", fact, f"no file {cite.file}")
    node = None
    if cite.file.endswith(".py"):
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            return Verdict("changed", fact, f"{cite.file} does not parse ({exc.msg}, line {exc.lineno})")
        except (RecursionError, MemoryError) as exc:
            return Verdict("changed", fact, f"{cite.file} does not parse ({type(exc).__name__})")
        node = scope_node(tree, cite.function)
        if node is None:
            return Verdict("missing", fact, f"no def or class {cite.function}")
        text = ast.get_source_segment(source, node) if cite.function else source
        text = textwrap.dedent(text or "")
    else:
        text = scope_text(source, cite.function)
        if text is None:
            return Verdict("missing", fact, f"no function {cite.function}")
    if cite.pattern and not re.search(cite.pattern, text):
        return Verdict("changed", fact, "the text stating it is gone")
    at = 0
    for step in cite.order:
        found = re.compile(step).search(text, at)
        if found is None:
            anywhere = re.search(step, text)
            return Verdict("changed", fact, f"{step!r} {'out of order' if anywhere else 'not found'}")
        at = found.end()
    if cite.constant:
        if node is None:
            return Verdict("changed", fact, f"{cite.file} is not Python: no constant to evaluate")
        assigned = [value for _, name, value in _assignments(node) if name == cite.constant]
        if not assigned:
            return Verdict("changed", fact, f"{cite.constant} is not assigned there")
        try:
            value = None if assigned[0] is None else literal(assigned[0], module_names(tree))
        except UNREADABLE as exc:
            return Verdict(
                "changed", fact, f"cannot read {cite.constant}'s value ({str(exc)[:200] or type(exc).__name__})"
            )
        if _normal(value) != _normal(cite.value):
            return Verdict("changed", fact, f"{cite.constant} is {_shown(value)}, the table has {_shown(cite.value)}")
    if fingerprinted(cite) and node is not None:
        try:
            now = fingerprint(node)
        except RecursionError:
            return Verdict("changed", fact, f"its body nests too deep to fingerprint: re-read {cite.file}")
        before = (recorded or {}).get(fact_key(cite))
        if before is None:
            return Verdict("changed", fact, f"no fingerprint recorded for its body ({now}): read it, then --record")
        if before != now:
            return Verdict(
                "changed", fact, f"its body differs from the one read ({before} -> {now}): re-read it, then --record"
            )
    return Verdict("held", fact)


# ---------------------------------------------------------------------------------------------- releases, wheels


@dataclass(frozen=True)
class Release:
    """The facts one table (engine) or library holds, and the wheel they were read on."""

    key: str  # "sglang==0.5.23", "vllm==0.34": the table's name, fingerprints are recorded under it
    package: str
    wheel_version: str
    cites: tuple[Cite, ...]


def release_of(spec: str) -> Release:
    """The table or library facts `spec` names ("vllm==0.34.0", "flashinfer-python==0.7.4")."""
    name, _, version = spec.partition("==")
    name = name.strip().lower()
    if name in ("sglang", "vllm"):
        table = TABLES.get(parse_engine(spec))
        if table is None:
            raise ToolError(
                f"{spec}: commprof has no table for it (known: {', '.join(f'{p}=={v}' for p, v in TABLES)})"
            )
        return Release(f"{table.package}=={table.version}", table.package, table.wheel, table.cites())
    facts = next((f for (p, v), f in LIBRARIES.items() if p == name and version.strip() in (v, "")), None)
    if facts is None:
        known = ", ".join(f"{p}=={v}" for p, v in LIBRARIES)
        raise ToolError(f"{spec}: commprof has no facts for it (known: {known})")
    return Release(f"{facts.package}=={facts.version}", facts.package, facts.version, facts.cites())


def every_release() -> list[str]:
    return [f"{p}=={v}" for p, v in TABLES] + [f"{p}=={v}" for p, v in LIBRARIES]


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_in(folder: Path, package: str, version: str) -> Path | None:
    """The wheel of `package` `version` in `folder` (named as pip names wheels), or None."""
    for path in sorted(folder.glob("*.whl")):
        dist, _, rest = path.name.partition("-")
        if _dist(dist) == _dist(package) and rest.split("-", 1)[0] == version:
            return path
    return None


def download(package: str, version: str, into: Path) -> Path:
    """`pip download --no-deps` of one release; ToolError in one line (pip's last) where pip cannot: no network, no
    release."""
    spec = f"{package}=={version}"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--retries", "1", "--timeout", "30"]
    done = subprocess.run([*command, spec, "-d", str(into)], capture_output=True, text=True)
    wheel = wheel_in(into, package, version)
    if done.returncode != 0 or wheel is None:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        why = re.sub(r"[\x00-\x1f\x7f]", " ", said[-1])[:300] if said else f"no wheel (exit status {done.returncode})"
        raise ToolError(f"{spec}: pip download failed: {why}; pass --wheels DIR holding its wheel")
    return wheel


def wheel_files(wheel: Path, names: set[str] | None = None) -> dict[str, str]:
    """Every text file of a wheel that a fact may cite (.py, .cuh, .cu, .h), or only those in `names`; ToolError for
    a file that is no wheel, or a cited member past MEMBER_BYTES."""
    files = {}
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                name = info.filename
                if not name.endswith((".py", ".cuh", ".cu", ".h")) or (names is not None and name not in names):
                    continue
                with archive.open(info) as member:
                    data = member.read(min(info.file_size, MEMBER_BYTES) + 1)  # the header may understate it
                if len(data) > MEMBER_BYTES:
                    raise ToolError(f"{wheel}: {name} holds more than the {MEMBER_BYTES} bytes a cited source file may")
                files[name] = data.decode("utf-8", "replace")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
        raise ToolError(f"{wheel}: not a readable wheel ({str(exc)[:200] or type(exc).__name__})") from None
    except zlib.error as exc:
        raise ToolError(f"{wheel}: not a readable wheel ({exc})") from None
    return files


def read_fingerprints(path: Path) -> dict[str, dict[str, str]]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ToolError(f"{path}: unreadable ({exc})") from None
    return data if isinstance(data, dict) else {}


def recorded_now(files: dict[str, str], cites: tuple[Cite, ...]) -> dict[str, str]:
    """The fingerprint of every fingerprinted cite's body found in the wheel."""
    found = {}
    for cite in cites:
        if not fingerprinted(cite) or cite.file not in files:
            continue
        try:
            node = scope_node(ast.parse(files[cite.file]), cite.function)
            if node is not None:
                found[fact_key(cite)] = fingerprint(node)
        except UNREADABLE:
            continue
    return dict(sorted(found.items()))


def check(files: dict[str, str], release: Release, fingerprints: dict[str, dict[str, str]]) -> list[Verdict]:
    recorded = fingerprints.get(release.key, {})
    return [check_cite(files, cite, recorded) for cite in release.cites]


# ---------------------------------------------------------------------------------------------- command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", help="package==version to check (none: every table and library)")
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to use before downloading")
    parser.add_argument("--wheel", type=Path, help="check this wheel instead of downloading one")
    parser.add_argument("--table", help="with --wheel: the table to check it against (vllm==0.34)")
    parser.add_argument(
        "--record", action="store_true", help="after re-reading them: record the cited bodies' fingerprints"
    )
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ToolError as exc:
        print(f"check_engine_facts: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.wheel and not args.table:
        raise ToolError("--wheel needs --table (the release it is checked against, e.g. vllm==0.34)")
    jobs: list[tuple[str, Path | None]] = [(spec, None) for spec in args.releases]
    if args.wheel:
        jobs.append((args.table, args.wheel))
    if not jobs:
        jobs = [(spec, None) for spec in every_release()]
    fingerprints = read_fingerprints(FINGERPRINTS)
    failed = 0
    for spec, given in jobs:
        release = release_of(spec)
        with tempfile.TemporaryDirectory() as tmp:
            wheel = given or (args.wheels and wheel_in(args.wheels, release.package, release.wheel_version))
            wheel = wheel or download(release.package, release.wheel_version, Path(tmp))
            files = wheel_files(wheel, {cite.file for cite in release.cites})
        if args.record:
            fingerprints[release.key] = recorded_now(files, release.cites)
        verdicts = check(files, release, fingerprints)
        held = sum(v.state == "held" for v in verdicts)
        print(f"== {release.key} ({wheel.name}): {held}/{len(verdicts)} held")
        for verdict in verdicts:
            print(verdict.line())
        failed += len(verdicts) - held
    if args.record:
        FINGERPRINTS.write_text(json.dumps(dict(sorted(fingerprints.items())), indent=1) + "\n")
        print(f"recorded the cited bodies' fingerprints in {FINGERPRINTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
