"""Maintainer's check that commprof's engine facts still hold in a released wheel (not part of the test suite: it
downloads wheels).

    python tools/check_engine_facts.py vllm==0.34.0 [sglang==0.5.23 flashinfer-python==0.7.4 ...]
    python tools/check_engine_facts.py --wheel path/to/some.whl --table vllm==0.34

For each release, `pip download --no-deps` fetches the wheel, and every fact the matching table cites
(commprof.report.analysis.engine_dispatch.TABLES and LIBRARIES) is looked up in it: the file, the function or class
holding the fact, the text that states it, the order of calls in a dispatch function, and a constant the table
mirrors (its literal evaluated and compared). Each fact prints as held, changed or missing; the exit status is 1
when any is not held.
"""

from __future__ import annotations

import argparse
import ast
import operator
import re
import subprocess
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commprof.report.analysis import engine_sglang, engine_vllm  # noqa: E402
from commprof.report.analysis.engine_dispatch import LIBRARIES, TABLES, parse_engine  # noqa: E402
from commprof.report.analysis.engine_facts import Cite  # noqa: E402

# The constants a table mirrors, by name: the check compares the wheel's literal with these values.
MIRRORED = {
    "CUSTOM_ALL_REDUCE_MAX_SIZES": engine_vllm.CUSTOM_ALL_REDUCE_MAX_SIZES,
    "SYMM_MEM_ALL_REDUCE_MAX_SIZES": engine_vllm.SYMM_MEM_ALL_REDUCE_MAX_SIZES,
    "FI_MNNVL_ALLREDUCE_MAX_SIZE_MB": engine_vllm.FI_MNNVL_ALLREDUCE_MAX_SIZE_MB,
    "FI_ALLREDUCE_FUSION_MAX_SIZE_MB": engine_vllm.FI_ALLREDUCE_FUSION_MAX_SIZE_MB,
    "NCCL_SYMM_MEM_ALL_REDUCE_CONFIG": {
        "min_world_size": 4,
        "custom_ar_preferred_ranges": engine_vllm.NCCL_SYMM_RANGES,
        "always_use_above_world_size": 8,
    },
    "_SUPPORTED_WORLD_SIZES": None,  # several files: compared per file below
    "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES": engine_sglang.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES,
}
WORLD_SIZES = {
    "flashinfer_pcie_ipc_all_reduce.py": engine_vllm.PCIE_IPC_WORLD_SIZES,
    "custom_all_reduce.py": engine_vllm.CUSTOM_AR_WORLD_SIZES,
}
_NAMES = {"MiB": 1 << 20, "KiB": 1 << 10}
_OPS = {ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv, ast.Add: operator.add, ast.LShift: operator.lshift}
# Bounds on what a wheel may hand the check: no mirrored constant is beyond 2^64 or nested past a few levels
# (1 << (1 << 36) would take 8 GiB to hold, a 40,000-term product recurses past Python's stack), and no source file
# a fact cites is near 64 MiB (a 3 GiB one would be read whole).
MOST = 1 << 64
DEPTH = 64
MEMBER_BYTES = 64 << 20


class Refused(Exception):
    """A wheel, release or download the check cannot use: one line, exit 2."""


@dataclass(frozen=True)
class Verdict:
    state: str  # "held", "changed" or "missing"
    fact: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.state:8} {self.fact}" + (f"  ({self.detail})" if self.detail else "")


def literal(node: ast.AST, depth: int = 0):
    """A constant's value: literals, MiB / KiB and * // + << over numbers; anything else, a number beyond MOST or
    nesting past DEPTH raises ValueError."""
    if depth > DEPTH:
        raise ValueError(f"nested past {DEPTH} levels")
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = literal(node.left, depth + 1), literal(node.right, depth + 1)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            raise ValueError(f"{type(node.op).__name__} of {type(left).__name__} and {type(right).__name__}")
        if isinstance(node.op, ast.LShift) and not (isinstance(right, int) and 0 <= right <= 64):
            raise ValueError(f"a shift by {str(right)[:40]}")
        try:
            value = _OPS[type(node.op)](left, right)
        except (ZeroDivisionError, TypeError, OverflowError) as exc:
            raise ValueError(str(exc)) from None
        if abs(value) > MOST:
            raise ValueError(f"a number beyond {MOST}")
        return value
    if isinstance(node, ast.Dict):
        return {literal(k, depth + 1): literal(v, depth + 1) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(literal(e, depth + 1) for e in node.elts)
    raise ValueError(type(node).__name__)


def scope_text(source: str, function: str) -> str | None:
    """The text of the (first) def or class named `function`, by indentation; the whole file for ""."""
    if not function:
        return source
    lines = source.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if re.match(rf"\s*(async\s+def|def|class)\s+{re.escape(function)}\b", line)),
        None,
    )
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith((")", "]")):
            break
        end += 1
    return "\n".join(lines[start:end])


def constant_value(text: str, name: str):
    """The literal assigned to `name` in `text` (the first assignment), or raises LookupError."""
    tree = ast.parse(_dedent(text))
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            return literal(node.value)
    raise LookupError(name)


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text)


def _normal(value):
    """Lists as tuples: what a literal and our table compare as."""
    if isinstance(value, dict):
        return {_normal(k): _normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    return value


def check_cite(files: dict[str, str], cite: Cite) -> Verdict:
    """One cited fact against the wheel's files (path -> text)."""
    fact = (
        str(cite)
        + (f" /{cite.pattern}/" if cite.pattern else "")
        + (f" order {list(cite.order)}" if cite.order else "")
    )
    source = files.get(cite.file)
    if source is None:
        return Verdict("missing", fact, f"no file {cite.file}")
    text = scope_text(source, cite.function)
    if text is None:
        return Verdict("missing", fact, f"no def or class {cite.function}")
    if cite.pattern and not re.search(cite.pattern, text):
        return Verdict("changed", fact, "the text stating it is gone")
    at = 0
    for step in cite.order:
        found = re.compile(step).search(text, at)
        if found is None:
            anywhere = re.search(step, text)
            return Verdict("changed", fact, f"{step!r} {'out of order' if anywhere else 'not found'}")
        at = found.end()
    mirrored = _mirrored_name(cite)
    if mirrored:
        expected = MIRRORED[mirrored]
        if expected is None:
            expected = next((v for k, v in WORLD_SIZES.items() if cite.file.endswith(k)), None)
        try:
            value = constant_value(text, mirrored)
        except (LookupError, ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
            return Verdict("changed", fact, f"cannot read {mirrored}'s value ({str(exc)[:200] or type(exc).__name__})")
        if expected is not None and _normal(value) != _normal(expected):
            return Verdict("changed", fact, f"{mirrored} is {value}, the table has {expected}")
    return Verdict("held", fact)


def _mirrored_name(cite: Cite) -> str | None:
    match = re.fullmatch(r"\\b(\w+)\\b\\s\*\(:\[\^=\]\*\)\?=", cite.pattern)
    return match.group(1) if match and match.group(1) in MIRRORED else None


def wheel_files(wheel: Path, names: set[str] | None = None) -> dict[str, str]:
    """Every text file of a wheel that a fact may cite (.py, .cuh, .cu, .h), or only those in `names`; Refused for
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
                    raise Refused(f"{wheel}: {name} holds more than the {MEMBER_BYTES} bytes a cited source file may")
                files[name] = data.decode("utf-8", "replace")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
        raise Refused(f"{wheel}: not a readable wheel ({str(exc)[:200] or type(exc).__name__})") from None
    except zlib.error as exc:
        raise Refused(f"{wheel}: not a readable wheel ({exc})") from None
    return files


def download(spec: str, into: Path) -> Path:
    """`pip download --no-deps` of `spec`; Refused in one line (pip's last) where it fails: no network, no release."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--retries", "1", "--timeout", "30"]
    done = subprocess.run([*command, spec, "-d", str(into)], capture_output=True, text=True)
    if done.returncode != 0:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        why = re.sub(r"[\x00-\x1f\x7f]", " ", said[-1])[:300] if said else f"exit status {done.returncode}"
        raise Refused(f"{spec}: pip download failed: {why}")
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise Refused(f"{spec}: pip downloaded no wheel into {into}")
    return wheels[0]


def facts_for(spec: str):
    """The cites of the table (engine) or library facts (FlashInfer) that `spec` names."""
    name, _, version = spec.partition("==")
    name = name.strip().lower()
    if name in ("sglang", "vllm"):
        key = parse_engine(spec)
        table = TABLES.get(key)
        if table is None:
            raise Refused(f"{spec}: commprof has no table for it (known: {sorted(TABLES)})")
        return table.cites()
    facts = next((f for (p, v), f in LIBRARIES.items() if p == name and version.startswith(v)), None)
    if facts is None:
        raise Refused(f"{spec}: commprof has no facts for it (known: {sorted(LIBRARIES)})")
    return facts.cites()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", help="package==version to download and check")
    parser.add_argument("--wheel", type=Path, help="check this wheel instead of downloading one")
    parser.add_argument("--table", help="with --wheel: the table to check it against (vllm==0.34)")
    args = parser.parse_args(argv)
    jobs: list[tuple[str, Path | None]] = [(spec, None) for spec in args.releases]
    if args.wheel:
        jobs.append((args.table or "", args.wheel))
    if not jobs:
        parser.error("name a release (vllm==0.34.0) or --wheel with --table")
    failed = 0
    for spec, wheel in jobs:
        try:
            cites = facts_for(spec)
            with tempfile.TemporaryDirectory() as tmp:
                path = wheel or download(spec, Path(tmp))
                verdicts = [check_cite(wheel_files(path, {c.file for c in cites}), cite) for cite in cites]
        except Refused as exc:
            print(f"check_engine_facts: error: {exc}", file=sys.stderr)
            return 2
        print(f"== {spec} ({path.name}): {sum(v.state == 'held' for v in verdicts)}/{len(verdicts)} held")
        for verdict in verdicts:
            print(verdict.line())
        failed += sum(v.state != "held" for v in verdicts)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
