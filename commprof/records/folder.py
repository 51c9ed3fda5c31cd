"""Writing inside run folders without following links: a folder the user copied or was given may hold symlinks
planted where commprof's own files belong (writer.lock -> ~/.bashrc), and following one would write outside it.

Every file commprof creates in a run folder is opened with O_NOFOLLOW, every folder it makes there is made and
then opened with O_NOFOLLOW, and a resumed folder holding any symbolic link is refused in one line naming it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from commprof.errors import UsageError

# Checking a folder the user hands over walks at most this many entries (a run of thousands of points has fewer).
MAX_ENTRIES = 1_000_000


def refused_link(path: Path | str) -> UsageError:
    return UsageError(
        f"{path}: a symbolic link where commprof's own file or folder belongs; refusing to follow it "
        "(remove the link, or resume a copy made without it)"
    )


def open_nofollow(path: Path | str, flags: int, mode: int = 0o644) -> int:
    """os.open(path, flags) that never follows a link at `path` itself; UsageError naming it when one is there."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise refused_link(path) from None
        raise


def write_nofollow(path: Path | str, data: bytes, append: bool = False, sync: bool = False) -> None:
    """Write `data` to `path` (created, truncated or appended to), never through a link; fsync where asked."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = open_nofollow(path, flags)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: Path | str) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` whole or not at all: written as `path`.partial (never through a link),
    then renamed over `path`. UsageError in one line where `path` or its .partial is a link or a folder, or where
    it cannot be written (read-only, full); nothing is left behind then."""
    path = Path(path)
    if os.path.islink(path):
        raise refused_link(path)
    if path.is_dir():
        raise UsageError(f"{path}: a folder where a file is to be written; name a file")
    partial = path.with_name(path.name + ".partial")
    written = False
    try:
        with os.fdopen(open_nofollow(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as handle:
            yield handle
        os.replace(partial, path)  # replaces `path` itself, never what a link there (planted since) points to
        written = True
    except OSError as exc:
        raise UsageError(f"{path}: cannot be written ({exc.strerror or exc})") from None
    finally:
        if not written and os.path.lexists(partial) and not os.path.islink(partial):
            with contextlib.suppress(OSError):
                partial.unlink()


def write_atomic(path: Path | str, data: bytes) -> None:
    """`data` as the file `path`, whole or not at all, never through a link (atomic_file)."""
    with atomic_file(path) as handle:
        handle.write(data)


def make_folders(root: Path, *parts: str) -> Path:
    """root/parts[0]/parts[1]/..., each made where missing and refused where it is a link or not a folder.

    `root` itself is the folder the user gave (or a new one), followed as given.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    path = Path(root)
    try:
        for part in parts:
            path = path / part
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
                    raise refused_link(path) from None
                if exc.errno == errno.ENOTDIR:
                    raise UsageError(f"{path}: a file where commprof's own folder belongs") from None
                raise
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return path


def refuse_links(folder: Path) -> None:
    """UsageError naming the first symbolic link anywhere inside `folder` (a run folder about to be written)."""
    seen = 0
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            seen += 1
            if os.path.islink(os.path.join(top, name)):
                raise refused_link(Path(top) / name)
        if seen > MAX_ENTRIES:
            raise UsageError(f"{folder}: more than {MAX_ENTRIES} entries; not a commprof run folder")
