"""Test inputs that are costly to make (every shipped scenario rendered, say), made once for a whole `make test` and
kept in pytest's cache folder until anything they could depend on changes.

The key is a digest of this checkout's path, the interpreter and every installed distribution's version, and the
bytes of every file under commprof/, sweeps/ and tests/: any edit there (a template, a preset, a fixture, a test
helper) makes a new build, and two clones never share one. pytest-xdist workers take a lock: the first builds,
the others wait and read. What was built is checked against its own listing (each file's size and modification
time) before it is handed out, so a test that wrote into it cannot pass a changed build on to the next run."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("commprof", "sweeps", "tests")
LISTING = "built.json"
KEPT = 2  # older builds kept beside a new one: one edited mid-run must not vanish from under a worker reading it


@functools.cache
def source_key() -> str:
    """The digest every build is keyed by (see the module's docstring), taken once per process."""
    digest = hashlib.sha256()
    digest.update(f"{REPO}\0{sys.version}\0{_installed()}\0".encode())
    for top in SOURCES:
        for folder, dirs, files in os.walk(REPO / top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(files):
                path = Path(folder, name)
                digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def _installed() -> str:
    return " ".join(sorted(f"{d.name}=={d.version}" for d in metadata.distributions()))


def _listing(root: Path) -> dict[str, list[int]]:
    """Every file under `root` (but the listing itself): its size and modification time."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != LISTING:
            stat = path.stat()
            found[str(path.relative_to(root))] = [stat.st_size, stat.st_mtime_ns]
    return found


def built_once(cache: Path, name: str, build: Callable[[Path], dict]) -> tuple[Path, dict]:
    """`build(folder)` run once for these sources into a folder under `cache`, which it fills, returning what the
    tests need to find their way in it (JSON: paths relative to the folder). Returns (the folder, that)."""
    cache.mkdir(parents=True, exist_ok=True)
    key = source_key()
    folder = cache / f"{name}-{key}"
    with open(cache / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the build is whole: the other workers wait here
        listing = folder / LISTING
        if listing.exists():
            kept = json.loads(listing.read_text())
            if kept["files"] == _listing(folder):
                return folder, kept["found"]
        shutil.rmtree(folder, ignore_errors=True)  # one a test changed, or a build that broke off
        for old in sorted(cache.glob(f"{name}-*"), key=lambda path: path.stat().st_mtime)[:-KEPT]:
            shutil.rmtree(old)  # the oldest, by age: a worker may still be reading a recent one
        folder.mkdir()
        found = build(folder)
        listing.write_text(json.dumps({"found": found, "files": _listing(folder)}))
        return folder, found
