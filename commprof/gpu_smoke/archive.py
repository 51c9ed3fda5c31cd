"""One archive of everything the smoke kept, at most ARCHIVE_LIMIT_BYTES, so a tool that returns few files
gets it all: the summaries and logs first, then records, report and doctor, the largest files (traces) last;
what would not fit is named, never silently dropped."""

from __future__ import annotations

import tarfile
import zlib
from pathlib import Path

from commprof.records.folder import atomic_file

ARCHIVE_LIMIT_BYTES = 16 << 20
MARGIN_BYTES = 512 << 10  # summary.json, tar headers and padding, gzip's framing
# Kept first, in this order (glob patterns under --out); everything else after, smallest first.
FIRST = ("summary.txt", "smoke.log", "logs/*", "*.toml", "*.json", "*.xml", "runs/*/results.jsonl", "runs/*/meta.json")


def _packed_size(path: Path) -> int:
    """About what `path` adds to a gzip'd tar: its deflated size and a header."""
    data = path.read_bytes()
    return len(zlib.compress(data, 6)) + 1024


def plan_archive(out: Path, exclude: set[str] = frozenset()) -> tuple[list[Path], list[str]]:
    """(files to pack in order, "path (N KiB)" of each left out to stay under the limit); `exclude`: names
    relative to `out` packed separately (summary.json, written after this plan)."""
    files = [
        p
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.is_symlink() and str(p.relative_to(out)) not in exclude
    ]  # a link is never followed: what it names is outside what the smoke wrote
    rank = {}
    for p in files:
        rel = p.relative_to(out)
        rank[p] = next(
            (i for i, pattern in enumerate(FIRST) if rel.match(pattern) and len(rel.parts) == len(Path(pattern).parts)),
            len(FIRST),
        )
    files.sort(key=lambda p: (rank[p], p.stat().st_size, str(p)))
    kept, left_out, total = [], [], MARGIN_BYTES
    for p in files:
        size = _packed_size(p)
        if total + size > ARCHIVE_LIMIT_BYTES:
            left_out.append(f"{p.relative_to(out)} ({p.stat().st_size >> 10} KiB)")
            continue
        kept.append(p)
        total += size
    return kept, left_out


def pack(out: Path, files: list[Path], archive: Path) -> int:
    """Write `files` (under `out`, named relative to its parent folder) into a .tgz, whole or not at all and never
    through a link (records.folder.atomic_file); its size in bytes."""
    with atomic_file(archive) as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
        for p in files:
            tar.add(p, arcname=str(Path(out.name) / p.relative_to(out)), recursive=False)
    return archive.stat().st_size
